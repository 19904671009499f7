"""Value Zeroing (Mohebbi, Zuidema, Chrupała & Alishahi 2023, "Quantifying Context Mixing in
Transformers", EACL; §3): how much token i's output of a layer depends on token j, measured by
removing j's value vectors and watching i's output change.

For layer l and token j the block runs again on its original input with j's value vector set to
zero in every head (nobody, j included, reads j's value; j's residual stays); C[i, j] is the
cosine distance between token i's original output of the block and the modified one, and each
row is divided by its sum. The per-layer matrices compose by matrix product across layers (the
paper's "Value Zeroing + rollout", with no added residual: it is inside each block's measure).

The block is the model's own module, called on the layer's original input (read at the hook
points ``embed`` and ``blocks.{l}.hook_resid_post``) through ``core.hooked_pass.run_block``, with
``blocks.{l}.attn.hook_v`` zeroing token j's value in variant j: a layer's T variants run as rows
of batches sized by bytes, not T passes of the whole model. Families: those of
``core.block_modules.block_parts`` (BERT, RoBERTa/XLM-R, ELECTRA, ALBERT, DistilBERT). Checked against a loop over tokens in ``tests/attribution/test_faithfulness.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from bertscope.attribution.blocks import compose
from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.block_modules import block_parts
from bertscope.core.hook_points import EMBED
from bertscope.core.hooked_pass import run_block
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.passes import inspection_feed, rows_within_budget, wide


def layer_inputs(lm: LoadedModel, ins: Inspection) -> torch.Tensor:
    """[hidden state, token, dim] every hidden state of one pass (0 = the embeddings, l + 1 =
    layer l's output), read at the hook points patching uses: layer l's input is state l."""
    names = [EMBED] + [f"blocks.{layer}.hook_resid_post" for layer in range(lm.num_layers)]
    _, cache = lm.run_with_cache(inspection_feed(lm, ins), names, encoder_only=True)
    return torch.stack([cache[name][0] for name in names])


def _unit(x: torch.Tensor) -> torch.Tensor:
    """[..., dim] each vector divided by its norm: 1 − cos(a, b) = ‖â − b̂‖² / 2, which keeps its
    digits when a and b are close (1 − cos itself cancels to float32's 6e-8 steps)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def _zero_own_value(rows: torch.Tensor):
    """A hook on ``attn.hook_v``: variant r (a row of the batch) has token rows[r]'s value vector
    set to zero, in every head."""

    def hook(v: torch.Tensor, point) -> torch.Tensor:  # v [variant, token, head, d_head]
        out = v.clone()
        out[torch.arange(len(rows), device=out.device), rows] = 0
        return out

    return hook


def value_zeroing(lm: LoadedModel, ins: Inspection, max_batch_bytes: int = DEFAULT_BATCH_BYTES,
                  progress: Callable[[int, int], None] | None = None, up_to: int | None = None) -> np.ndarray:
    """[layer, query, key] each layer's Value Zeroing matrix (rows sum to 1), float32; layers 0 to
    ``up_to`` (default: all)."""
    block_parts(lm)  # refuses families whose blocks are not BERT's
    states = layer_inputs(lm, ins)  # [state, token, dim]
    n = states.shape[1]
    per_batch = rows_within_budget(lm, n, max_batch_bytes)
    count = lm.num_layers if up_to is None else up_to + 1
    out = torch.empty(count, n, n, device=lm.device, dtype=wide(states[:1, :1, :1]).dtype)  # [layer, query, key]
    for layer in range(count):
        x = states[layer]  # [token, dim]
        original = _unit(wide(states[layer + 1]))  # [token, dim]
        for start in range(0, n, per_batch):
            zeroed = torch.arange(start, min(n, start + per_batch), device=lm.device)  # [variant] the token zeroed
            y = run_block(lm, layer, x.expand(len(zeroed), -1, -1).contiguous(),
                          hooks={f"blocks.{layer}.attn.hook_v": _zero_own_value(zeroed)})
            y = _unit(wide(y))  # [variant, token, dim]
            distance = 0.5 * (y - original[None]).square().sum(-1)  # [variant, query] 1 - cos, without cancelling
            out[layer, :, start:start + len(zeroed)] = distance.T
        if progress:
            progress(layer + 1, count)
    out = out.clamp_min(0)
    out = out / out.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return out.cpu().numpy().astype(np.float32)


def value_zeroing_composed(lm: LoadedModel, ins: Inspection, max_batch_bytes: int = DEFAULT_BATCH_BYTES,
                           progress: Callable[[int, int], None] | None = None, up_to: int | None = None
                           ) -> np.ndarray:
    """[layer, query, key] Value Zeroing composed through the layers (rollout without residual)."""
    return compose(value_zeroing(lm, ins, max_batch_bytes, progress, up_to))
