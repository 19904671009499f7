"""Texts to padded batches on the host, planned by bytes: every text tokenised once, rows grouped in
length order while one batch's outputs fit a byte budget (BERT-large's attentions at 512 tokens are
400 MB a sentence), so every stream over a corpus is bounded by one batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from tokenizers import Encoding

from bertscope.core.hooked_pass import check_text
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import to_device


class Tokenized(NamedTuple):
    """Texts tokenised once: the fast tokenizer's own ``Encoding`` of each row (cut to the model's
    maximum) and each row's length before the cut. Batches are padded from these, so a stream
    sorted by length tokenises every text once, not once to sort and again per batch."""

    encodings: list[Encoding]  # per row, special tokens included, not padded
    original: list[int]  # tokens before truncation, special tokens included


def tokenize(lm: LoadedModel, texts: list[str], pairs: list[str | None]) -> Tokenized:
    """Every text (and its pair) tokenised in one call; only rows over the model's maximum are
    tokenised again, cut (rare), so transformers never warns about a length it will not see."""
    has_pairs = any(p is not None for p in pairs)
    if has_pairs and any(p is None for p in pairs):
        raise BertScopeError("Give a second text for every sentence of a batch, or for none.")
    second = list(pairs) if has_pairs else None
    if not texts:
        return Tokenized([], [])
    options = dict(add_special_tokens=True, return_attention_mask=False, return_token_type_ids=False, verbose=False)
    encodings = list(lm.tokenizer(list(texts), second, truncation=False, **options).encodings)
    original = [len(e.ids) for e in encodings]
    long = [i for i, n in enumerate(original) if n > lm.max_length]
    if long:
        cut = lm.tokenizer([texts[i] for i in long], [second[i] for i in long] if second else None,
                           truncation=True, max_length=lm.max_length, **options).encodings
        for i, e in zip(long, cut):
            encodings[i] = e
    return Tokenized(encodings, original)


class Padded(NamedTuple):
    """One padded batch on the host: the model's inputs and what locating words needs."""

    feed: dict[str, torch.Tensor]  # input_ids, attention_mask, token_type_ids: [batch, token] int64
    special: np.ndarray  # [batch, token] bool: special tokens and padding
    word_ids: list[list[int | None]]  # per row, padded positions None
    sequence_ids: list[list[int | None]]
    offsets: list[list[tuple[int, int]]]  # (0, 0) for special and pad tokens
    original: list[int]  # tokens before truncation


def pad(lm: LoadedModel, tokenized: Tokenized, rows: Sequence[int]) -> Padded:
    """Rows ``rows`` of ``tokenized`` padded to the longest of them, on the tokenizer's padding side."""
    tok = lm.tokenizer
    chosen = [tokenized.encodings[i] for i in rows]
    n, width = len(chosen), max(len(e.ids) for e in chosen)
    ids = np.full((n, width), tok.pad_token_id if tok.pad_token_id is not None else 0, np.int64)  # [batch, token]
    types = np.full((n, width), getattr(tok, "pad_token_type_id", 0) or 0, np.int64)  # [batch, token]
    mask = np.zeros((n, width), np.int64)  # [batch, token]
    special = np.ones((n, width), bool)  # [batch, token]
    left = getattr(tok, "padding_side", "right") == "left"
    word_ids: list[list[int | None]] = []
    sequence_ids: list[list[int | None]] = []
    offsets: list[list[tuple[int, int]]] = []
    store: list[list[Any]]  # each of the three, padded with its filler
    values: list[Any]
    filler: Any
    for r, e in enumerate(chosen):
        k = len(e.ids)
        gap = width - k
        at = slice(gap, width) if left else slice(0, k)
        ids[r, at], types[r, at], mask[r, at], special[r, at] = e.ids, e.type_ids, 1, e.special_tokens_mask
        for store, values, filler in ((word_ids, e.word_ids, None), (sequence_ids, e.sequence_ids, None),
                                      (offsets, e.offsets, (0, 0))):
            store.append([filler] * gap + values if left else values + [filler] * gap)
    feed = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
            "token_type_ids": torch.from_numpy(types)}
    return Padded(feed, special, word_ids, sequence_ids, offsets, [tokenized.original[i] for i in rows])


def row_feed(lm: LoadedModel, tokenized: Tokenized, row: int) -> dict[str, torch.Tensor]:
    """Row ``row`` of ``tokenized`` alone as the model's inputs ([1, token] each), on its device."""
    return {k: to_device(v, lm.device) for k, v in pad(lm, tokenized, [row]).feed.items()
            if k in lm.tokenizer.model_input_names}


DEFAULT_BATCH_BYTES = 512 * 2**20  # outputs of one batch (attentions dominate at 512 tokens)


def output_bytes(lm: LoadedModel, tokens: int, with_attentions: bool, with_hidden_states: bool,
                 with_logits: bool) -> int:
    """Bytes of float32 outputs for one padded row of ``tokens`` tokens."""
    size = 0
    if with_attentions:
        size += lm.num_layers * lm.num_heads * tokens * tokens * 4  # [layer, head, q, k]
    if with_hidden_states:
        size += (lm.num_layers + 1) * tokens * lm.hidden_size * 4  # [layer + 1, token, dim]
    if with_logits and "mlm" in lm.outputs:
        size += tokens * lm.vocab_size * 4  # [token, vocab]
    return size


def plan_batches(lengths: Sequence[int], row_bytes: Callable[[int], int], batch_size: int, max_batch_bytes: int
                 ) -> list[list[int]]:
    """Indices grouped in length order; a batch grows while its padded outputs fit the budget
    (``row_bytes(length)`` per row) and it has fewer than ``batch_size`` rows. A single row
    over the budget still runs, alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    row_bytes = functools.cache(row_bytes)  # a few distinct lengths among many rows
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:  # ascending, so the newest row sets the padded length
        if current and (len(current) >= batch_size or (len(current) + 1) * row_bytes(lengths[i]) > max_batch_bytes):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def plan_rows(lm: LoadedModel, texts: Sequence[str], text_pairs: Sequence[str | None] | None, batch_size: int,
          sort_by_length: bool, max_batch_bytes: int, row_bytes: Callable[[int], int],
          plan: Sequence[Sequence[int]] | None = None,
          ) -> tuple[list[str], list[str | None], Tokenized, list[list[int]]]:
    """(texts, pairs, every row tokenised once, batches of row indices): ``plan``'s batches when
    given (a caller that planned a corpus once and hands out its batches: the Ray engine)."""
    texts = [check_text(t, f"sentence {i + 1}") for i, t in enumerate(texts)]
    pairs: list[str | None] = list(text_pairs) if text_pairs is not None else [None] * len(texts)
    if len(pairs) != len(texts):
        raise BertScopeError(f"{len(texts)} sentences but {len(pairs)} second texts.")
    if batch_size < 1:
        raise BertScopeError("The batch size must be at least 1.")
    tokenized = tokenize(lm, texts, pairs)
    if plan is not None:
        return texts, pairs, tokenized, [list(map(int, batch)) for batch in plan]
    if not sort_by_length:
        chunks = [list(range(s, min(s + batch_size, len(texts)))) for s in range(0, len(texts), batch_size)]
        return texts, pairs, tokenized, chunks
    lengths = [len(e.ids) for e in tokenized.encodings]
    return texts, pairs, tokenized, plan_batches(lengths, row_bytes, batch_size, max_batch_bytes)


def corpus_plan(lm: LoadedModel, texts: Sequence[str], batch_size: int, with_attentions: bool,
                with_hidden_states: bool, max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> list[list[int]]:
    """The batches ``device_batches`` runs over ``texts`` (sorted by length, bounded by rows and
    bytes): planned once for a corpus whose batches are then run elsewhere (one Ray actor each)."""
    row = lambda n: output_bytes(lm, n, with_attentions, with_hidden_states, False)  # noqa: E731
    return plan_rows(lm, texts, None, batch_size, True, max_batch_bytes, row)[3]
