"""Delete tokens, read p(y): the passes a deletion test of an attribution needs (ERASER's "erasure"), as rows of one
batch. Concept erasure, which removes a concept from the states, is ``analysis.erasure``.

A removal variant of one input is a ``keep`` row ([token] bool). Removing a token (DeYoung et
al. 2020, ERASER: deletion without shifting positions) is one of:

- ``attention``: the token stays in place but no query may attend to it, in any layer (its
  attention-mask entry is 0); positions are unchanged, so this equals running the shortened
  sequence with the original position ids (checked in the tests);
- ``mask``: the token's id becomes the tokenizer's mask token.

p(y) is the masked-LM head's probability of token ``target_id`` at ``position``, read from the
last hidden state at that position only; for a fine-tuned classifier, its head's probability of
the label (``class_probabilities``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.hooked_pass import turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import rows_within_budget, wide
from bertscope.errors import BertScopeError
from bertscope.mlm.logit_lens import mlm_head
from bertscope.runtime.devices import to_device

Removal = Literal["attention", "mask"]
REMOVALS = ("attention", "mask")


def removal_feed(lm: LoadedModel, input_ids: np.ndarray, token_type_ids: np.ndarray, keep: np.ndarray,
                 removal: Removal) -> dict:
    """The model's inputs for ``keep`` ([variant, token] bool) variants of one input."""
    if removal not in REMOVALS:
        raise BertScopeError(f"Unknown removal {removal!r}: use attention (the attention mask) or mask ([MASK]).")
    n = len(keep)
    ids = torch.from_numpy(np.broadcast_to(input_ids.astype(np.int64), keep.shape).copy())  # [variant, token]
    kept = torch.from_numpy(keep)
    if removal == "attention":
        mask = kept.long()
    else:
        ids[~kept] = lm.tokenizer.mask_token_id
        mask = torch.ones_like(ids)
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in lm.tokenizer.model_input_names:
        feed["token_type_ids"] = torch.from_numpy(token_type_ids.astype(np.int64)[None]).expand(n, -1).contiguous()
    return {k: to_device(v, lm.device) for k, v in feed.items()}


def target_probabilities(lm: LoadedModel, input_ids: np.ndarray, token_type_ids: np.ndarray, keep: np.ndarray,
                         position: int, target_id: int, removal: Removal = "attention",
                         max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> np.ndarray:
    """[variant] p(target | the input with the tokens ``keep`` leaves out removed), float64."""
    keep = np.asarray(keep, bool)
    if keep.ndim != 2 or keep.shape[1] != len(input_ids):
        raise BertScopeError("Removal variants must be [variant, token] rows of the input's length.")
    if not keep[:, position].all():
        raise BertScopeError("The position whose prediction is read cannot be removed.")
    head = mlm_head(lm)
    per_batch = rows_within_budget(lm, len(input_ids), max_batch_bytes)
    out = np.empty(len(keep))
    for start in range(0, len(keep), per_batch):
        rows = keep[start:start + per_batch]
        feed = removal_feed(lm, input_ids, token_type_ids, rows, removal)
        with turn(lm), torch.inference_mode():  # the encoder's pass, then the head at one position
            hidden = lm.run(feed, encoder_only=True).last_hidden_state[:, position]  # [variant, dim]
            logits = wide(head(hidden))  # [variant, vocab]
            p = torch.softmax(logits, dim=-1)[:, target_id]
        out[start:start + len(rows)] = p.double().cpu().numpy()
    return out


def class_probabilities(lm: LoadedModel, input_ids: np.ndarray, token_type_ids: np.ndarray, keep: np.ndarray,
                        position: int, label: int, removal: Removal = "attention",
                        max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> np.ndarray:
    """[variant] p(label | the input with the tokens ``keep`` leaves out removed) under a sequence
    classifier's head (softmax, or the label's sigmoid for a multi-label head), float64.
    ``position``: the token the head reads ([CLS]), never removed."""
    from bertscope.attribution.class_items import class_probabilities as scores
    from bertscope.attribution.class_items import require_classifier

    require_classifier(lm)
    keep = np.asarray(keep, bool)
    if keep.ndim != 2 or keep.shape[1] != len(input_ids):
        raise BertScopeError("Removal variants must be [variant, token] rows of the input's length.")
    if not keep[:, position].all():
        raise BertScopeError("The token the classifier reads cannot be removed.")
    per_batch = rows_within_budget(lm, len(input_ids), max_batch_bytes)
    out = np.empty(len(keep))
    for start in range(0, len(keep), per_batch):
        rows = keep[start:start + per_batch]
        feed = removal_feed(lm, input_ids, token_type_ids, rows, removal)
        with torch.inference_mode():
            p = scores(lm, lm.run(feed).logits)[:, label]  # [variant]
        out[start:start + len(rows)] = p.double().cpu().numpy()
    return out
