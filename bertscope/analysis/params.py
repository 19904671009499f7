"""Exact parameter counts by component, from a config alone (no weights are read).

    >>> from bertscope.analysis.params import count_parameters
    >>> b = count_parameters("bert-base-uncased")        # works offline: the config ships with us
    >>> b.total, b.group_totals()["embeddings"]
    (109482240, 23837184)

The model is instantiated on PyTorch's ``meta`` device, so a 175B-parameter config costs no
memory. Each parameter is then put in a group (embeddings, encoder, pooler, mlm_head,
nsp_head, rtd_head: ELECTRA's replaced-token detection head) and a component (token / position / segment embeddings, Q, K, V, attention output,
FFN in/out, LayerNorms, ...). Tied parameters are counted once, under the module that owns
them (the MLM decoder weight is BERT's token embedding matrix), and listed in ``tied``.

Every component's formula is written from the parameter shapes themselves, with the config's
names for the dimensions (V vocabulary, H hidden, I intermediate, P positions, T segment
types, E embedding size), so a formula can never disagree with the number beside it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.families import Family, family_of, has_record
from bertscope.sources.configs import model_config

HEAD_CHOICES = ("none", "mlm", "pretraining")
GROUP_ORDER = ("embeddings", "encoder", "pooler", "mlm_head", "nsp_head", "rtd_head", "other")

# (component, pattern on an embedding parameter's name); first match wins
_EMBEDDING_COMPONENTS = [
    ("token", r"(word|tok)_embeddings\."),
    ("position", r"position_embeddings\."),
    ("segment", r"token_type_embeddings\."),
    ("LayerNorm", r"(LayerNorm|layer_norm|\.norm)\."),
    ("projection", r"embeddings_project\."),
]
_ANY_LAYER = r"(?:^|\.)layers?\.(\d+)\."  # a family without a record: blocks by their index alone


@dataclass(frozen=True)
class Component:
    group: str  # embeddings | encoder | pooler | mlm_head | nsp_head | rtd_head | other
    layer: int | None  # encoder layer index (ALBERT: index within its shared group)
    name: str  # Q, K, V, FFN in, token, transform, ...
    count: int
    formula: str  # e.g. "V×H = 30522×768"
    parameters: tuple[str, ...]  # the parameter names it sums


@dataclass
class ParamBreakdown:
    model: str
    model_type: str
    head: str  # none | mlm | pretraining
    architecture: str
    config: dict[str, Any]
    components: list[Component]
    tied: list[tuple[str, str]]  # (parameter not counted again, the one it shares storage with)
    dims: dict[str, int]  # layers, heads, hidden, vocab, positions, whatever a family calls them
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(c.count for c in self.components)

    def group_totals(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for c in self.components:
            totals[c.group] += c.count
        return {g: totals[g] for g in GROUP_ORDER if g in totals}

    def layer_totals(self) -> dict[int, int]:
        totals: dict[int, int] = defaultdict(int)
        for c in self.components:
            if c.group == "encoder" and c.layer is not None:
                totals[c.layer] += c.count
        return dict(sorted(totals.items()))

    def to_json(self) -> dict[str, Any]:
        groups: dict[str, dict[str, int]] = {}
        for g, total in self.group_totals().items():
            parts: dict[str, int] = defaultdict(int)
            for c in self.components:
                if c.group == g:
                    key = c.name if c.layer is None else f"layer {c.layer}: {c.name}"
                    parts[key] += c.count
            groups[g] = {"total": total, **parts}
        return {
            "model": self.model,
            "model_type": self.model_type,
            "architecture": self.architecture,
            "head": self.head,
            "total": self.total,
            "groups": groups,
            "tied": [list(t) for t in self.tied],
            "notes": self.notes,
        }


def _symbols(config: Any) -> dict[int, str]:
    """Dimension sizes -> the config's letter for them (the first letter listed wins a tie)."""
    named = [
        ("H", "hidden_size"), ("V", "vocab_size"), ("I", "intermediate_size"),
        ("P", "max_position_embeddings"), ("E", "embedding_size"), ("T", "type_vocab_size"),
    ]
    symbols: dict[int, str] = {}
    for letter, attribute in named:
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 2 and value not in symbols:
            symbols[value] = letter
    return symbols


def _formula(shapes: list[tuple[int, ...]], symbols: dict[int, str]) -> str:
    symbolic = " + ".join("×".join(symbols.get(d, str(d)) for d in s) for s in shapes)
    numeric = " + ".join("×".join(str(d) for d in s) for s in shapes)
    return symbolic if symbolic == numeric else f"{symbolic} = {numeric}"


def _layer_components(family: Family) -> dict[str, str]:
    """{module path inside a block: component} from the family record."""
    named = {family.qkv: "QKV"} if family.qkv else {family.query: "Q", family.key: "K", family.value: "V"}
    named.update({family.out_proj: "attention output", family.attn_norm: "attention LayerNorm",
                  family.mlp_in: "FFN in", family.mlp_out: "FFN out", family.mlp_norm: "FFN LayerNorm"})
    return named


def _classify(name: str, base_prefix: str, family: Family | None) -> tuple[str, int | None, str]:
    """(group, layer, component) of one parameter name; ``family`` None for a type without a record."""
    if not name.startswith(base_prefix) and base_prefix:
        if "seq_relationship" in name:
            return "nsp_head", None, "classifier"
        if name.startswith("discriminator_predictions."):  # ELECTRA: real or replaced, per token (no vocabulary)
            return "rtd_head", None, "dense" if ".dense." in name else "classifier"
        if re.search(r"(decoder|vocab_projector)\.weight$", name):
            return "mlm_head", None, "decoder weight"
        if re.search(r"(decoder|vocab_projector)\.bias$", name) or re.fullmatch(
            r"(cls\.predictions|predictions|lm_head|generator_lm_head)\.bias", name
        ):
            return "mlm_head", None, "decoder bias"
        return "mlm_head", None, "transform"
    local = name[len(base_prefix):]
    if local.startswith("embeddings."):
        for component, pattern in _EMBEDDING_COMPONENTS:
            if re.search(pattern, local):
                return "embeddings", None, component
        return "embeddings", None, local.split(".")[-2]
    if local.startswith("pooler."):
        return "pooler", None, "dense"
    match = re.search(family.layer_pattern if family else _ANY_LAYER, local)
    if match is not None:
        module = local[match.end():].rsplit(".", 1)[0]
        components = _layer_components(family) if family else {}
        return "encoder", int(match.group(1)), components.get(module, module.split(".")[-1])
    roots = {family.blocks.split(".")[0], "encoder"} if family and family.blocks else {"encoder", "transformer"}
    if family and family.final_norm and local.startswith(family.final_norm + "."):
        return "encoder", None, "final LayerNorm"
    if local.split(".")[0] in roots:
        if "embedding_hidden_mapping_in" in local:
            return "encoder", None, "embedding projection (E→H)"
        return "encoder", None, local.split(".")[-2]  # e.g. DeBERTa's rel_embeddings
    return "other", None, local


@lru_cache(maxsize=64)
def _count_cached(name: str, head: str, config_json: str) -> ParamBreakdown:
    """Keyed by the config's content, so an edited local config is never served stale."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining

    data = json.loads(config_json)
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    classes = {"none": AutoModel, "mlm": AutoModelForMaskedLM, "pretraining": AutoModelForPreTraining}
    try:
        with torch.device("meta"):
            model = classes[head].from_config(config)
    except ValueError as err:
        raise BertScopeError(f"{name} ({config.model_type}) has no {head} head class.") from err
    base_prefix = model.base_model_prefix + "." if head != "none" else ""
    symbols = _symbols(config)

    owner: dict[int, str] = {}
    tied: list[tuple[str, str]] = []
    for pname, p in model.named_parameters(remove_duplicate=False):
        if id(p) in owner:
            tied.append((pname, owner[id(p)]))
        else:
            owner[id(p)] = pname

    family = family_of(config.model_type) if has_record(config.model_type) else None
    grouped: dict[tuple[str, int | None, str], list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
    for pname, p in model.named_parameters():  # each shared tensor once, under its owner
        grouped[_classify(pname, base_prefix, family)].append((pname, tuple(p.shape)))
    components = [
        Component(
            group=g, layer=layer, name=cname,
            count=sum(_numel(shape) for _, shape in params),
            formula=_formula([shape for _, shape in params], symbols),
            parameters=tuple(n for n, _ in params),
        )
        for (g, layer, cname), params in grouped.items()
    ]
    components.sort(key=lambda c: (GROUP_ORDER.index(c.group), -1 if c.layer is None else c.layer))
    notes = []
    if family is not None and family.shared_layers:
        groups = getattr(config, "num_hidden_groups", 1)
        notes.append(
            f"ALBERT shares its layer weights: {config.num_hidden_layers} layers run "
            f"{groups} group(s) of {getattr(config, 'inner_group_num', 1)} layer(s), counted once."
        )
    for dropped, kept in tied:
        notes.append(f"{dropped} is tied to {kept} and counted once, there.")
    return ParamBreakdown(
        model=name, model_type=config.model_type, head=head,
        architecture=type(model).__name__, config=config.to_dict(),
        components=components, tied=tied, notes=notes,
        dims={
            "layers": int(config.num_hidden_layers), "heads": int(config.num_attention_heads),
            "hidden": int(config.hidden_size), "vocab": int(config.vocab_size),
            "positions": int(getattr(config, "max_position_embeddings", 512) or 512),
        },
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def count_parameters(name: str, head: str = "none") -> ParamBreakdown:
    """Counts for ``name`` (preset, hub id, local folder, bundled) with ``head`` none|mlm|pretraining.

    Args:
        name: a preset, a hub id, a local folder or a bundled model (its config is read, never its weights).
        head: "none", "mlm" or "pretraining".

    Returns:
        A ``ParamBreakdown``: every component's count and formula, the groups' totals, the tied parameters and
        the model's dimensions.
    """
    if head not in HEAD_CHOICES:
        raise BertScopeError(f"Unknown head {head!r}: use one of {', '.join(HEAD_CHOICES)}.")
    config = model_config(name.strip())
    return _count_cached(name.strip(), head, config.to_json_string(use_diff=False))


MATMUL_COMPONENTS = ("Q", "K", "V", "QKV", "attention output", "FFN in", "FFN out")
BYTES_PER_WEIGHT = {"fp32": 4, "fp16": 2, "int8": 1}


def weight_bytes(total: int) -> dict[str, int]:
    """Bytes to hold ``total`` weights in each precision."""
    return {dtype: total * size for dtype, size in BYTES_PER_WEIGHT.items()}


def inspect_activation_bytes(b: ParamBreakdown, length: int, batch: int = 1) -> dict[str, int]:
    """fp32 bytes of what one inspection pass hands out: hidden states, attentions, logits.

    hidden states (L+1)·n·H, attentions L·A·n², MLM logits n·V (when a head is counted),
    each times the batch size and 4 bytes.
    """
    d = b.dims
    L, H, A, V = d["layers"], d["hidden"], d["heads"], d["vocab"]
    out = {
        "hidden_states": batch * (L + 1) * length * H * 4,
        "attentions": batch * L * A * length * length * 4,
    }
    if b.head != "none":
        out["mlm_logits"] = batch * length * V * 4
    return out


def flops_per_token(b: ParamBreakdown, length: int) -> dict[str, int]:
    """Forward FLOPs per token at sequence length ``length`` (Kaplan et al. 2020, Table 1).

    linear: 2 x the matmul parameters of one layer (Q, K, V, attention output, FFN in/out),
    times the layers run (ALBERT runs its shared layer num_hidden_layers times);
    attention: 2 x 2 x n x H per layer, for QK^T and the weighted sum of V.
    """
    layers, hidden = b.dims["layers"], b.dims["hidden"]
    first = min((x.layer for x in b.components if x.layer is not None), default=None)
    per_layer = sum(
        x.count for x in b.components if x.layer == first and x.name in MATMUL_COMPONENTS
    )
    return {"linear": 2 * per_layer * layers, "attention": 4 * length * hidden * layers}
