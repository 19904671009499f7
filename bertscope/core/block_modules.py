"""The weights of each encoder block, read from the modules the hook-point table names
(``core.hook_points``): what norm-based attention, ALTI and the query/key view multiply by.

Families: those of the hook points (BERT, RoBERTa/XLM-R, ELECTRA, CamemBERT, ERNIE, data2vec-text,
ALBERT — one shared layer, repeated —, DistilBERT, DeBERTa-v2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertscope.core.hook_points import hook_point
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError

POST_LAYERNORM = frozenset({"bert", "roberta", "xlm-roberta", "electra", "camembert", "ernie", "data2vec-text",
                            "albert", "distilbert"})


@dataclass(frozen=True)
class BlockParts:
    """The modules of one attention block that the measures read."""

    value: Any  # nn.Linear: x -> x W_V + b_V, all heads side by side
    output: Any  # nn.Linear: concatenated heads -> hidden (W_O, b_O)
    norm: Any  # nn.LayerNorm over (attention output + residual)
    query: Any = None  # nn.Linear: x -> x W_Q + b_Q, all heads side by side
    key: Any = None  # nn.Linear: x -> x W_K + b_K


def block_parts(lm: LoadedModel) -> list[BlockParts]:
    """One entry per layer, in order (ALBERT's shared layer repeats). Only for post-LayerNorm
    blocks whose attention is softmax(q·k) alone (DeBERTa adds relative-position terms)."""
    if lm.model_type not in POST_LAYERNORM:
        raise BertScopeError(
            f"This measure reads BERT-style post-LayerNorm blocks; {lm.model_type} is not one "
            "of them (BERT, RoBERTa, XLM-R, ELECTRA, ALBERT, DistilBERT): use rollout, flow, grad or ig.")

    def module(layer: int, suffix: str) -> Any:
        return hook_point(lm.model, f"blocks.{layer}.{suffix}").module

    return [BlockParts(module(l, "attn.hook_v"), module(l, "attn.hook_z"), module(l, "hook_resid_mid"),
                       module(l, "attn.hook_q"), module(l, "attn.hook_k")) for l in range(lm.num_layers)]
