"""The modules of each encoder block, found in the loaded model (nothing re-implemented): what
norm-based attention, ALTI, value zeroing and the interventions hook into.

Families: BERT's blocks (BERT, RoBERTa/XLM-R, ELECTRA, CamemBERT, ERNIE), ALBERT's (one shared
layer called once per layer) and DistilBERT's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError

BERT_BLOCKS = frozenset({"bert", "roberta", "xlm-roberta", "electra", "camembert", "ernie", "data2vec-text"})


@dataclass(frozen=True)
class BlockParts:
    """The modules of one attention block that the measures read."""

    value: Any  # nn.Linear: x -> x W_V + b_V, all heads side by side
    output: Any  # nn.Linear: concatenated heads -> hidden (W_O, b_O)
    norm: Any  # nn.LayerNorm over (attention output + residual)
    query: Any = None  # nn.Linear: x -> x W_Q + b_Q, all heads side by side
    key: Any = None  # nn.Linear: x -> x W_K + b_K


def block_parts(lm: LoadedModel) -> list[BlockParts]:
    """One entry per layer, in order (ALBERT's shared layer repeats)."""
    base = lm.model.base_model
    kind = lm.model_type
    if kind in BERT_BLOCKS:
        return [BlockParts(layer.attention.self.value, layer.attention.output.dense, layer.attention.output.LayerNorm,
                           layer.attention.self.query, layer.attention.self.key) for layer in base.encoder.layer]
    if kind == "albert":
        cfg = lm.config
        if cfg.inner_group_num != 1:
            raise BertScopeError("ALBERT with several layers per group is not supported here (released ALBERTs have one).")
        groups = base.encoder.albert_layer_groups
        per_group = cfg.num_hidden_layers // cfg.num_hidden_groups
        parts = []
        for i in range(cfg.num_hidden_layers):
            att = groups[i // per_group].albert_layers[0].attention
            parts.append(BlockParts(att.value, att.dense, att.LayerNorm, att.query, att.key))
        return parts
    if kind == "distilbert":
        return [BlockParts(block.attention.v_lin, block.attention.out_lin, block.sa_layer_norm, block.attention.q_lin,
                           block.attention.k_lin) for block in base.transformer.layer]
    raise BertScopeError(
        f"This measure reads BERT-style post-LayerNorm blocks; {lm.model_type} is not one "
        "of them (BERT, RoBERTa, XLM-R, ELECTRA, ALBERT, DistilBERT): use rollout, flow, grad or ig."
    )


def state_producers(lm: LoadedModel) -> list[Any]:
    """The module whose output is each hidden state, ``[embeddings, block 0, …]`` (ALBERT: the
    embedding projection, then its one shared layer)."""
    base = lm.model.base_model
    kind = lm.model_type
    if kind == "albert":
        if lm.config.num_hidden_groups != 1 or lm.config.inner_group_num != 1:
            raise BertScopeError("Interventions read ALBERT with one shared layer group (as released).")
        shared = base.encoder.albert_layer_groups[0].albert_layers[0]
        return [base.encoder.embedding_hidden_mapping_in, *([shared] * lm.num_layers)]
    if kind == "distilbert":
        return [base.embeddings, *base.transformer.layer]
    block_parts(lm)  # refuses families whose blocks are not BERT's
    # ELECTRA with a smaller embedding projects it up to the hidden size: that is hidden state 0
    first = getattr(base, "embeddings_project", None) or base.embeddings
    return [first, *base.encoder.layer]
