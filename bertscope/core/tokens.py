"""Token strings a person can read, the same way for every tokenizer family.

WordPiece marks a piece that continues a word with ``##``; byte-level BPE (RoBERTa: ``Ġ``)
and SentencePiece (XLM-R, ALBERT: ``▁``) mark the *start* of a word instead and may spell
bytes oddly (``Ã©`` for ``é``). We show every family like WordPiece: a word's first piece
as plain text and each following piece of the same word as ``##piece``. Special tokens
([CLS], <s>, ...) are shown as they are, and so is a piece with no text of its own (a lone
SentencePiece ``▁`` word boundary, which XLM-R emits e.g. before CJK characters).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

CONTINUATION = "##"


@lru_cache(maxsize=200_000)
def _piece_text(tokenizer: Any, piece: str) -> str:
    """One piece as text (bytes decoded, markers dropped); memoised per tokenizer and piece."""
    return tokenizer.convert_tokens_to_string([piece]).strip() or piece


def readable_tokens(
    tokenizer: Any,
    input_ids: Sequence[int],
    word_ids: Sequence[int | None],
    special_mask: Sequence[bool],
) -> list[str]:
    raw = tokenizer.convert_ids_to_tokens(list(input_ids))
    specials = set(tokenizer.all_special_tokens)  # e.g. a [MASK] put in place of a word piece
    shown: list[str] = []
    for i, piece in enumerate(raw):
        if special_mask[i] or piece in specials:
            shown.append(piece)
            continue
        if piece.startswith(CONTINUATION):  # WordPiece already says it
            shown.append(piece)
            continue
        text = _piece_text(tokenizer, piece)
        continues = i > 0 and word_ids[i] is not None and word_ids[i] == word_ids[i - 1]
        continues = continues and not special_mask[i - 1]
        shown.append(CONTINUATION + text if continues else text)
    return shown


def tokens_in_span(offsets: Sequence[tuple[int, int]], sequence_ids: Sequence[int | None],
                   start: int, end: int) -> list[int]:
    """Positions of the first text's tokens whose characters overlap [start, end) (empty
    spans, i.e. special tokens, never count): how a word is found in WordPiece, BPE and
    SentencePiece alike."""
    return [i for i, (s, e) in enumerate(offsets) if sequence_ids[i] == 0 and s < end and e > start and e > s]
