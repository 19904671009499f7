"""The items of a faithfulness test: real sentences with one content word-piece masked, and the
model's own top prediction there as the decision to explain.

From the Brown corpus, sentences spread over every document (so over all 15 genres), at most 64
tokens each; in each, one word-piece of a content word (universal tag NOUN, VERB, ADJ or ADV, the
corpus's own annotation) is masked, word and piece chosen with a seed; a sentence needs at least
``MIN_BROWN_CANDIDATES`` tokens to remove besides the mask (a rank correlation needs three). From a file of
sentences: a line with the tokenizer's mask keeps that mask; otherwise a content word is found
with a lexicon read off Brown (each word's most frequent universal tag).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from bertscope.core.forward import inspect, inspect_ids
from bertscope.core.hooked_pass import check_text
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.word_pieces import word_pieces
from bertscope.corpora.brown import read_brown
from bertscope.corpora.brown_tasks import sample_sentences
from bertscope.errors import BertScopeError
from bertscope.mlm.fill_mask import ACCEPTED_MASKS, require_mlm

CONTENT_TAGS = ("NOUN", "VERB", "ADJ", "ADV")
MAX_ITEM_TOKENS = 64
MAX_ITEMS = 5_000
MIN_BROWN_CANDIDATES = 3


@dataclass(frozen=True, eq=False)
class Item:
    """One sentence with one masked piece, and the model's decision there."""

    text: str
    word: str  # the word whose piece is masked
    tag: str  # its universal tag ("" when the file put the mask)
    masked_piece: str  # the piece the mask replaced ("" when the file put the mask)
    inspection: Inspection  # the masked input (ids, tokens, special tokens), no outputs kept
    mask_position: int
    target_id: int  # the model's top-1 at the mask
    target: str
    p_full: float  # its probability there
    source: str = ""  # "Brown cn12 (adventure)", "line 3"
    # "token": a masked-token prediction (``mask_position`` is the mask, ``target_id`` a vocabulary
    # id); "class": a classifier's predicted class (``mask_position`` is the token its head reads,
    # [CLS]; ``target_id`` the label's index; ``attribution.class_items``)
    decision: str = "token"
    pair: str | None = None  # a class item's second segment

    @property
    def input_ids(self) -> np.ndarray:
        return self.inspection.input_ids

    @property
    def masked_text(self) -> str:
        """The sentence with the masked piece written as the tokenizer's mask (what the Masked page
        takes); a class item's text (and its pair after " | ")."""
        if self.decision == "class":
            return self.text if self.pair is None else f"{self.text} | {self.pair}"
        if not self.masked_piece:
            return self.text
        start, end = self.inspection.offsets[self.mask_position]
        return self.text[:start] + self.inspection.tokens[self.mask_position] + self.text[end:]

    def candidates(self) -> np.ndarray:
        """Token positions that may be removed: all but the special tokens and the mask itself (a
        class item: all but the special tokens)."""
        special = self.inspection.special_mask
        return np.array([i for i in range(len(special)) if not special[i] and i != self.mask_position], int)


def _decided(lm: LoadedModel, template: Inspection, ids: list[int], position: int, text: str, word: str, tag: str,
             piece: str, source: str) -> Item:
    r = inspect_ids(lm, template, ids, with_attentions=False, with_hidden_states=False, logit_positions=[position])
    logits = r.logits_at(position).astype(np.float64)
    best = int(np.argmax(logits))
    p = float(np.exp(logits[best] - np.logaddexp.reduce(logits)))
    lean = replace(template, input_ids=r.input_ids, tokens=r.tokens, raw_tokens=r.raw_tokens)
    return Item(text, word, tag, piece, lean, position, best, lm.tokenizer.convert_ids_to_tokens(best), p, source)


def _pieces_of(template: Inspection, spans) -> list[list[int]]:
    """[word] the positions of the (non-special) pieces inside each word of ``spans`` (characters
    [start, end)), placed as ``core.word_pieces`` places them, none reaching past the word."""
    found = word_pieces(spans, template.offsets, ~np.asarray(template.special_mask, bool))
    return [[i for i in pieces if template.offsets[i][1] <= end] for pieces, (_, end) in zip(found, spans)]


def brown_items(lm: LoadedModel, n: int = 200, seed: int = 0, folder=None) -> list[Item]:
    """``n`` items from Brown sentences spread over every document.

    Args:
        lm: a masked LM.
        n: items.
        seed: the choice of sentences and masked words.
        folder: the Brown corpus's folder (default: where it is installed).

    Returns:
        An ``Item`` a sentence: its text, the masked content word and the model's prediction there.
    """
    require_mlm(lm)
    if not 1 <= n <= MAX_ITEMS:
        raise BertScopeError(f"Give between 1 and {MAX_ITEMS:,} sentences (N = {n}).")
    corpus = read_brown(folder)
    rng = np.random.default_rng(seed)
    pool = sample_sentences(corpus.documents, min(3 * n, 57_000), seed)
    order = rng.permutation(len(pool))
    found: list[tuple[int, Item]] = []  # (place in the sample, item): visited in a random order
    for index in order.tolist():
        if len(found) >= n:
            break
        document, sentence = corpus.documents[pool[index][0]], pool[index][1]
        text, spans = sentence.text, sentence.offsets
        template = inspect(lm, text, with_logits=False, with_attentions=False, with_hidden_states=False)
        if template.n_tokens > MAX_ITEM_TOKENS or template.truncated:
            continue
        if template.n_tokens - int(np.sum(template.special_mask)) - 1 < MIN_BROWN_CANDIDATES:
            continue
        words = [(w, pieces) for w, (tag, pieces) in enumerate(zip(sentence.universal, _pieces_of(template, spans)))
                 if tag in CONTENT_TAGS and pieces]
        if not words:
            continue
        w, pieces = words[int(rng.integers(len(words)))]
        position = pieces[int(rng.integers(len(pieces)))]
        ids = template.input_ids.tolist()
        piece = template.tokens[position]
        ids[position] = lm.tokenizer.mask_token_id
        found.append((index, _decided(lm, template, ids, position, text, sentence.tokens[w], sentence.universal[w],
                                      piece, f"Brown {document.id} ({document.genre})")))
    items = [item for _, item in sorted(found, key=lambda pair: pair[0])]  # in corpus order
    if len(items) < n:
        raise BertScopeError(f"Only {len(items)} Brown sentences of at most {MAX_ITEM_TOKENS} tokens with a content "
                             f"word were found for {n}: ask for fewer.")
    return items


def brown_lexicon(folder=None) -> dict[str, str]:
    """Each lower-cased Brown word's most frequent universal tag."""
    counts: dict[str, Counter] = {}
    for sentence in read_brown(folder).sentences:
        for token, tag in zip(sentence.tokens, sentence.universal):
            counts.setdefault(token.lower(), Counter())[tag] += 1
    return {word: c.most_common(1)[0][0] for word, c in counts.items()}


def text_items(lm: LoadedModel, lines: Sequence[str], seed: int = 0, lexicon: dict[str, str] | None = None
               ) -> tuple[list[Item], int]:
    """(items, lines skipped) from sentences: a line's own mask, else a content word (``lexicon``:
    word -> universal tag, by default Brown's; needed only for lines without a mask).

    Args:
        lm: a masked LM.
        lines: the sentences.
        seed: the choice of masked words.
        lexicon: word -> universal tag (default Brown's).

    Returns:
        (an ``Item`` a usable line, how many lines were skipped).
    """
    require_mlm(lm)
    lines = [line.strip() for line in lines if line.strip()]
    if not lines:
        raise BertScopeError("The file has no sentences.")
    if len(lines) > MAX_ITEMS:
        raise BertScopeError(f"At most {MAX_ITEMS:,} sentences at once; the file has {len(lines):,}.")
    rng = np.random.default_rng(seed)
    items, skipped = [], 0
    for number, line in enumerate(lines, 1):
        text = check_text(line, f"line {number}")
        for spelling in ACCEPTED_MASKS:
            text = text.replace(spelling, lm.tokenizer.mask_token)
        template = inspect(lm, text, with_logits=False, with_attentions=False, with_hidden_states=False)
        if template.n_tokens > MAX_ITEM_TOKENS or template.truncated:
            skipped += 1
            continue
        ids = template.input_ids.tolist()
        if lm.tokenizer.mask_token_id in ids:
            position = ids.index(lm.tokenizer.mask_token_id)
            if template.n_tokens - int(np.sum(template.special_mask)) < 2:  # the mask alone
                skipped += 1
                continue
            items.append(_decided(lm, template, ids, position, text, lm.tokenizer.mask_token, "", "", f"line {number}"))
            continue
        if lexicon is None:
            try:
                lexicon = brown_lexicon()
            except BertScopeError as err:
                raise BertScopeError(f"Line {number} has no mask, and content words are found with Brown's "
                                     f"tags: {err}") from None
        words = []
        spelled = _words(text)
        for (word, _), pieces in zip(spelled, _pieces_of(template, [span for _, span in spelled])):
            if lexicon.get(word.lower()) in CONTENT_TAGS and pieces:
                words.append((word, lexicon[word.lower()], pieces))
        if not words:
            skipped += 1
            continue
        word, tag, pieces = words[int(rng.integers(len(words)))]
        position = pieces[int(rng.integers(len(pieces)))]
        piece = template.tokens[position]
        ids[position] = lm.tokenizer.mask_token_id
        if template.n_tokens - int(np.sum(template.special_mask)) < 2:
            skipped += 1
            continue
        items.append(_decided(lm, template, ids, position, text, word, tag, piece, f"line {number}"))
    if not items:
        raise BertScopeError(f"No line has a content word (noun, verb, adjective, adverb) or a mask within "
                             f"{MAX_ITEM_TOKENS} tokens, with another word beside it: nothing to test.")
    return items, skipped


def _words(text: str) -> list[tuple[str, tuple[int, int]]]:
    """Alphabetic words of ``text`` with their character spans."""
    import re

    return [(m.group(), m.span()) for m in re.finditer(r"[^\W\d_]+(?:['’-][^\W\d_]+)*", text)]
