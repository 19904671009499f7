"""Batches of texts for any pass over many texts (interventions, attribution, features, training
scores): texts tokenised once, padded in length order, inputs on the model's
device, batches bounded by bytes like every other stream (``core.forward``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES, Padded, pad, plan_batches, tokenize
from bertscope.core.hooked_pass import check_text
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.runtime.devices import to_device


def pass_bytes(lm: LoadedModel, tokens: int) -> int:
    """What one row of a pass without returned outputs holds at once, about: a layer's activations
    (the feed-forward's 4x width) and one layer's attention scores."""
    return tokens * lm.hidden_size * 4 * 8 + lm.num_heads * tokens * tokens * 4


def batches(lm: LoadedModel, texts: Sequence[str], batch_size: int = 32,
            max_batch_bytes: int = DEFAULT_BATCH_BYTES, pairs: Sequence[str | None] | None = None
            ) -> Iterator[tuple[list[int], Padded, dict[str, torch.Tensor]]]:
    """(rows of ``texts``, the padded batch, its inputs on the device), shortest first; each text
    with its second segment ``pairs[i]`` when given."""
    texts = [check_text(t, f"sentence {i + 1}") for i, t in enumerate(texts)]
    if pairs is not None:
        pairs = [None if p is None else check_text(p, f"pair {i + 1}") for i, p in enumerate(pairs)]
    tokenized = tokenize(lm, texts, list(pairs) if pairs is not None else [None] * len(texts))
    lengths = [len(e.ids) for e in tokenized.encodings]
    for rows in plan_batches(lengths, lambda n: pass_bytes(lm, n), batch_size, max_batch_bytes):
        padded = pad(lm, tokenized, rows)
        feed = {k: to_device(v, lm.device) for k, v in padded.feed.items() if k in lm.tokenizer.model_input_names}
        yield rows, padded, feed


def repeat_feed(feed: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """One input's feed ([1, token] each) as ``rows`` identical rows."""
    return {k: v.expand(rows, -1).contiguous() for k, v in feed.items()}


def rows_within_budget(lm: LoadedModel, tokens: int, max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> int:
    return max(1, max_batch_bytes // max(1, pass_bytes(lm, tokens)))


def mlm_logits(out: Any) -> torch.Tensor:
    """The masked-LM logits of a ``*ForMaskedLM`` (``logits``) or ``*ForPreTraining`` output (``prediction_logits``):
    [batch, token, vocab]."""
    logits = getattr(out, "prediction_logits", None)
    return cast(torch.Tensor, out.logits if logits is None else logits)


def wide(t: torch.Tensor) -> torch.Tensor:
    """Half-precision values widened to float32 for a loss or a difference; float32 and float64 as
    they are."""
    return t.float() if t.element_size() < 4 else t


def inspection_feed(lm: LoadedModel, ins: Inspection) -> dict[str, torch.Tensor]:
    """The model's inputs for one inspected text ([1, token] each, on the device): its ids, a full
    attention mask and, for tokenizers that have them, its segments."""
    ids = torch.from_numpy(ins.input_ids[None].astype(np.int64))  # [1, token]
    feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "token_type_ids" in lm.tokenizer.model_input_names:
        feed["token_type_ids"] = torch.from_numpy(ins.token_type_ids[None].astype(np.int64))
    return {k: to_device(v, lm.device) for k, v in feed.items()}
