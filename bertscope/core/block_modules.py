"""The weights of each encoder block, read from the modules the hook-point table names
(``core.hook_points``): what norm-based attention and ALTI multiply by. They read BERT's
post-LayerNorm block whose attention score is q·k alone: the families whose record says so
(``runtime.families``: ``layernorm="post"``, ``scores="absolute"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertscope.core.hook_points import hook_point, model_family
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class BlockParts:
    """The modules of one attention block that the measures read."""

    value: Any  # nn.Linear: x -> x W_V + b_V, all heads side by side
    output: Any  # nn.Linear: concatenated heads -> hidden (W_O, b_O)
    norm: Any  # nn.LayerNorm over (attention output + residual)
    query: Any = None  # nn.Linear: x -> x W_Q + b_Q, all heads side by side
    key: Any = None  # nn.Linear: x -> x W_K + b_K


def reads_blocks(lm: LoadedModel) -> bool:
    """Whether the block-weight measures (norm-based attention, ALTI) apply to this model."""
    family = model_family(lm.model)
    return family.post_layernorm and family.scores == "absolute"


def block_parts(lm: LoadedModel) -> list[BlockParts]:
    """One entry per layer, in order (ALBERT's shared layer repeats). Only for post-LayerNorm
    blocks whose attention is softmax(q·k) alone (DeBERTa adds relative-position terms)."""
    if not reads_blocks(lm):
        family = model_family(lm.model)
        why = "pre-LayerNorm" if not family.post_layernorm else f"{family.scores} positions in its attention scores"
        raise BertScopeError(f"This measure reads BERT-style post-LayerNorm blocks whose scores are q·k alone; "
                             f"{family.name} has {why}: use rollout, flow, grad or ig.")

    def module(layer: int, suffix: str) -> Any:
        return hook_point(lm.model, f"blocks.{layer}.{suffix}").module

    return [BlockParts(module(layer, "attn.hook_v"), module(layer, "attn.hook_z"), module(layer, "hook_resid_mid"),
                       module(layer, "attn.hook_q"), module(layer, "attn.hook_k")) for layer in range(lm.num_layers)]
