"""Is the graph right about the real model? Switch a feature off in the model and compare the decision's change with
what the graph predicts (Ameisen et al. 2025, §"Validating" by intervention; circuit-tracer's
``ReplacementModel.feature_intervention``).

- **In the model** (``switch_off``), as circuit-tracer 0.5's ``feature_intervention`` at its defaults: the model's
  own feed-forwards compute every layer; at the feature's layer the feed-forward's output loses the feature's write
  on the layer's live input, so what the transcoder misses there stays in (the error kept); each head's softmax
  pattern is held at the real run's (``freeze_attention=True``), its values live; LayerNorms live. Two other
  protocols for comparison: ``attention="live"`` lets the patterns move; ``downstream="replacement"`` makes every
  feed-forward its transcoder on the live input plus the real run's error there, frozen, so every later feature is
  chosen again by its TopK (BertScope's first protocol).
- **In the graph**: the total effect of the feature on the target through every path, each feature's activation
  moving one for one with its input (active features sit on the ReLU's linear side):
  ``total = A[target, F] (I − D A[F, F])⁻¹`` with D the inverse activations; switching the feature off changes the
  target by ``−total[f]`` (first order; the model's answer includes what the graph linearises away).

``agreement`` runs it for the strongest nodes of a graph (by influence) and for as many random active features.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.hooked_pass import model_inputs
from bertscope.core.models import LoadedModel
from bertscope.core.passes import mlm_logits
from bertscope.errors import BertScopeError
from bertscope.features.transcoder import Transcoder
from bertscope.graphs.build import AttributionGraph
from bertscope.graphs.frozen import norm_scale, ratio
from bertscope.graphs.influence import node_influence

BLOCK_BYTES = 32 * 2**20  # the adjacency's rows read in float64 at a time


def total_effects(graph: AttributionGraph) -> np.ndarray:
    """[F] each feature's total effect on the target's value per its whole activation (signed), through every path
    of the graph: ``A_TF (I − D A_FF)⁻¹``, summed as its series. A feature reads only earlier layers' writes, so
    ``D A_FF`` is nilpotent and the series ends after as many terms as the features' layers: a product of the row
    with the adjacency per layer, read in blocks of ``BLOCK_BYTES`` (no F × F copy, no O(F³) solve)."""
    f = graph.n_features
    acts = np.array([n.activation for n in graph.nodes[:f]], np.float64)
    term = graph.adjacency[-1, :f].astype(np.float64)  # [F] the direct effects
    total = term.copy()
    rows = max(1, BLOCK_BYTES // (8 * max(f, 1)))
    for _ in range(len({n.layer for n in graph.nodes[:f]})):
        scaled = term / acts  # [F] each target feature's activation moves with its input
        term = np.zeros(f)
        for start in range(0, f, rows):
            stop = min(start + rows, f)
            term += scaled[start:stop] @ graph.adjacency[start:stop, :f].astype(np.float64)
        if not term.any():
            break
        total += term
    return total


def predicted_change(effects: np.ndarray, index: int, scale: float = 0.0) -> float:
    """The graph's change of the target's value when feature ``index``'s activation is multiplied by ``scale``
    (0: switched off), from its ``total_effects``: first order, (scale − 1) × total."""
    return float((scale - 1.0) * effects[index])


@dataclass(frozen=True)
class Intervention:
    node: str
    predicted: float  # the graph's change of the target's value
    measured: float  # the model's

    @property
    def agrees(self) -> bool:
        return bool(np.sign(self.predicted) == np.sign(self.measured))


def _decision_value(graph: AttributionGraph, lm: LoadedModel, logits: torch.Tensor) -> float:
    target = graph.target
    vocab = lm.tokenizer if target["kind"] == "token" else None
    row = logits[0, target["position"]] if target["kind"] == "token" else logits[0]
    row = row.double()
    index = vocab.convert_tokens_to_ids(target["token"]) if vocab is not None else lm.task.labels.index(target["label"])  # type: ignore[union-attr]
    if target["kind"] == "class" and len(row) == 1:
        return float(row[0])
    contrast = target["contrast"]
    if contrast is None:
        return float(row[index] - row.mean())
    other = vocab.convert_tokens_to_ids(contrast) if vocab is not None else lm.task.labels.index(contrast)  # type: ignore[union-attr]
    return float(row[index] - row[other])


DOWNSTREAM = ("model", "replacement")  # what computes the layers after a switched-off feature
ATTENTION = ("frozen", "live")
NORMS = ("live", "frozen")
NORM_POINTS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out")  # what the scales are read from


def _feed(lm: LoadedModel, text: str) -> dict[str, torch.Tensor]:
    return model_inputs(lm, lm.tokenizer(text, return_tensors="pt", truncation=True, max_length=lm.max_length))


def transcoder_write(tc: Transcoder, mid: torch.Tensor, carries: torch.Tensor,
                     clamp: Sequence[tuple[int, int]] = (), scale: float = 0.0) -> torch.Tensor:
    """What ``tc`` writes for its feed-forward input ``mid`` [1, P, d] (TopK chosen on it), its features at the
    positions that ``carries`` ([P] bool, ``ordinary``; none elsewhere, as in the graph), each (position, feature)
    of ``clamp`` at ``scale`` times its activation: [1, P, d] float32."""
    values, indices = tc.encode_topk(mid[0].float())  # [P, k]
    values = values * carries[:, None]
    for position, feature in clamp:
        values[position][indices[position] == feature] *= scale
    return tc.reconstruct_topk(mid[0].float(), values, indices)[None]


def ordinary(lm: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    """[P] the positions that carry features (not [CLS], [SEP] or padding: the graph has none there)."""
    special = [i for i in (lm.tokenizer.cls_token_id, lm.tokenizer.sep_token_id, lm.tokenizer.pad_token_id)
               if i is not None]
    return ~torch.isin(ids, torch.tensor(special, device=ids.device))


def real_patterns(lm: LoadedModel, text: str) -> dict[str, torch.Tensor]:
    """{``blocks.{l}.attn.hook_pattern``: [1, H, P, P]} of the real run on ``text``: what frozen attention holds."""
    return lm.run_with_cache(_feed(lm, text), [f"blocks.{ly}.attn.hook_pattern" for ly in range(lm.num_layers)])[1]


def _frozen_attention(cache: Mapping[str, torch.Tensor], layers) -> dict:
    """Hooks that hold each head's softmax pattern at the real run's while its values stay live: each head's
    context is the frozen pattern times the live values (circuit-tracer's ``freeze_attention``)."""
    values: dict[int, torch.Tensor] = {}
    hooks = {}
    for ly in layers:
        pattern = cache[f"blocks.{ly}.attn.hook_pattern"]  # [1, H, P, P]

        def keep(v, _, ly=ly):  # [1, P, H, d_h]
            values[ly] = v

        def context(z, _, ly=ly, pattern=pattern):
            return torch.einsum("bhqk,bkhd->bqhd", pattern.to(z.dtype), values.pop(ly)).to(z.dtype)

        hooks[f"blocks.{ly}.attn.hook_v"] = keep
        hooks[f"blocks.{ly}.attn.hook_z"] = context
    return hooks


def _frozen_norms(lm: LoadedModel, cache: Mapping[str, torch.Tensor]) -> tuple[dict, dict]:
    """Hooks that hold every LayerNorm's scale at the real run's, as the graph does, the centring live: BERT's two a
    block, (y − mean(y)) / σ_real · γ + β with y the live residual sum, and the masked-LM head's transform, its GELU
    also held as its ratio to its input (``graphs.frozen``). ``cache``: the real run's ``NORM_POINTS`` of every
    layer and the last ``hook_resid_post``. A classifier's pooler stays live (no hook point there). Returns (the
    hooks to run first at their points, those to run last: reading the feed-forward's output as written)."""
    seen: dict[str, torch.Tensor] = {}

    def held(y: torch.Tensor, norm, s: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        y = y.float()
        return ((y - y.mean(-1, keepdim=True)) / s * norm.weight.float() + norm.bias.float()).to(dtype)

    def keep(name: str):
        def fn(x, _):
            seen[name] = x
        return fn

    first: dict = {}
    for ly, block in enumerate(lm.model.bert.encoder.layer):
        n1, n2 = block.attention.output.LayerNorm, block.output.LayerNorm
        s1 = norm_scale((cache[f"blocks.{ly}.hook_resid_pre"] + cache[f"blocks.{ly}.hook_attn_out"]).float(), n1.eps)
        s2 = norm_scale((cache[f"blocks.{ly}.hook_resid_mid"] + cache[f"blocks.{ly}.hook_mlp_out"]).float(), n2.eps)
        first[f"blocks.{ly}.hook_resid_pre"] = keep("pre")
        first[f"blocks.{ly}.hook_attn_out"] = keep("attn")
        first[f"blocks.{ly}.hook_resid_mid"] = [
            lambda x, _, n1=n1, s1=s1: held(seen["pre"] + seen["attn"], n1, s1, x.dtype), keep("mid")]
        first[f"blocks.{ly}.hook_resid_post"] = [
            lambda x, _, n2=n2, s2=s2: held(seen["mid"] + seen["mlp"], n2, s2, x.dtype), keep("last")]
    if lm.task is None:  # the masked-LM head: dense, GELU (held as its ratio), LayerNorm (held)
        transform = lm.model.cls.predictions.transform
        u = transform.dense(cache[f"blocks.{lm.num_layers - 1}.hook_resid_post"]).float()  # [1, P, d]
        held_gelu = ratio(transform.transform_act_fn, u)  # [1, P, d]
        s3 = norm_scale(u * held_gelu, transform.LayerNorm.eps)
        first["unembed.hook_in"] = lambda x, _: held(transform.dense(seen["last"]).float() * held_gelu,
                                                     transform.LayerNorm, s3, x.dtype)
    last = {f"blocks.{ly}.hook_mlp_out": keep("mlp") for ly in range(lm.num_layers)}
    return first, last


def _join(hooks: Mapping, more: Mapping) -> dict:
    """``hooks`` with ``more``'s functions run after its own at a point both name."""
    out = dict(hooks)
    for name, fn in more.items():
        mine = out.get(name)
        out[name] = fn if mine is None else [*(mine if isinstance(mine, list) else [mine]),
                                             *(fn if isinstance(fn, list) else [fn])]
    return out


@torch.no_grad()
def switch_off(lm: LoadedModel, graph: AttributionGraph, transcoders: Mapping[int, Transcoder],
               off: list[tuple[int, int, int]], downstream: str = "model", attention: str = "frozen",
               patterns: Mapping[str, torch.Tensor] | None = None, scale: float = 0.0, norms: str = "live") -> float:
    """The decision's value in the model with the features ``off`` [(layer, position, feature)] clamped to 0 (or
    each activation times ``scale``: 0.9 takes a tenth of it away, 2 doubles it: steering).

    ``downstream``: ``"model"`` (circuit-tracer's ``feature_intervention``): every feed-forward is the model's own,
    and a layer with a feature switched off writes its output less that feature's write on the layer's live input
    (what the transcoder misses stays in); ``"replacement"``: every feed-forward is its transcoder on the live input
    plus the real run's error at that position, frozen, so later features are chosen again by their TopK.
    ``attention``: ``"frozen"`` (circuit-tracer's default) holds each head's pattern at the real run's, values live;
    ``"live"`` lets the patterns move; ``patterns``: ``real_patterns`` of the text when already read (``agreement``
    reads them once). ``norms``: ``"live"`` (the model's, circuit-tracer's) or ``"frozen"``: every LayerNorm's scale
    and the masked-LM head's GELU held at the real run's, as the graph holds them (``_frozen_norms``): where the
    model then agrees with the graph and does not live, the scales' response is what the graph leaves out (on
    bundled-mlm mostly the head's own LayerNorm: ``benchmarks/graph_gap.py``). Nothing off: the real model's value."""
    if downstream not in DOWNSTREAM or attention not in ATTENTION or norms not in NORMS:
        raise BertScopeError(f"downstream is one of {', '.join(DOWNSTREAM)}, attention one of "
                             f"{', '.join(ATTENTION)} and norms one of {', '.join(NORMS)}, not {downstream!r}, "
                             f"{attention!r} and {norms!r}.")
    missing = sorted({layer for layer, _, _ in off} - set(transcoders))
    if missing:
        raise BertScopeError(f"No transcoder for layer {missing[0]}: a feature is switched off in its transcoder.")
    feed = _feed(lm, graph.text)
    carries = ordinary(lm, feed["input_ids"][0])  # [P]

    def written(layer: int, mid: torch.Tensor, clamp: list[tuple[int, int]]) -> torch.Tensor:  # [1, P, d]
        return transcoder_write(transcoders[layer], mid, carries, clamp, scale)

    replaced = list(transcoders) if downstream == "replacement" else sorted({layer for layer, _, _ in off})
    names = [f"blocks.{ly}.{p}" for ly in transcoders for p in ("hook_resid_mid", "hook_mlp_out")
             if downstream == "replacement"]
    if attention == "frozen" and patterns is None:
        names += [f"blocks.{ly}.attn.hook_pattern" for ly in range(lm.num_layers)]
    if norms == "frozen":
        names += [f"blocks.{ly}.{p}" for ly in range(lm.num_layers) for p in NORM_POINTS
                  if f"blocks.{ly}.{p}" not in names] + [f"blocks.{lm.num_layers - 1}.hook_resid_post"]
    cache = dict(lm.run_with_cache(feed, names)[1]) if names else {}
    cache.update(patterns or {})
    errors = {ly: cache[f"blocks.{ly}.hook_mlp_out"].float() - written(ly, cache[f"blocks.{ly}.hook_resid_mid"], [])
              for ly in replaced if downstream == "replacement"}
    seen: dict[int, torch.Tensor] = {}
    hooks = _frozen_attention(cache, range(lm.num_layers)) if attention == "frozen" else {}
    for ly in replaced:
        clamp = [(p, f) for layer, p, f in off if layer == ly]

        def read(x, _, ly=ly):
            seen[ly] = x

        def write(y, _, ly=ly, clamp=clamp):
            mid = seen.pop(ly)
            if ly in errors:
                return (written(ly, mid, clamp) + errors[ly]).to(y.dtype)
            return (y.float() + written(ly, mid, clamp) - written(ly, mid, [])).to(y.dtype)  # less the feature's write

        hooks[f"blocks.{ly}.hook_resid_mid"] = read
        hooks[f"blocks.{ly}.hook_mlp_out"] = write
    if norms == "frozen":
        first, last = _frozen_norms(lm, cache)
        hooks = _join(_join(first, hooks), last)  # the scales held before anything reads a point, the write kept
    return _decision_value(graph, lm, mlm_logits(lm.run(feed, hooks=hooks)))  # a classifier: its logits


def agreement(lm: LoadedModel, graph: AttributionGraph, transcoders: Mapping[int, Transcoder], top: int = 5,
              seed: int = 0, downstream: str = "model", attention: str = "frozen",
              effects: np.ndarray | None = None, norms: str = "live") -> tuple[list[Intervention], list[Intervention]]:
    """(the ``top`` features of the graph by influence, as many random active features), each switched off alone in
    the model (``switch_off``'s ``downstream``, ``attention`` and ``norms``) beside the graph's prediction; ``effects``: the
    graph's ``total_effects`` when already solved (one solve of the features' system, the slow part of a big graph)."""
    if graph.n_features == 0:
        raise BertScopeError("The graph has no active features to switch off.")
    effects = total_effects(graph) if effects is None else effects
    if len(effects) != graph.n_features:
        raise BertScopeError(f"effects holds {len(effects)} values for a graph of {graph.n_features} features.")
    influence = node_influence(graph.adjacency)[:graph.n_features]
    strongest = np.argsort(-influence, kind="stable")[:top]
    rest = np.setdiff1d(np.arange(graph.n_features), strongest)
    drawn = np.random.default_rng(seed).choice(rest, min(top, len(rest)), replace=False)
    patterns = real_patterns(lm, graph.text) if attention == "frozen" else None  # read once for every switch-off
    base = switch_off(lm, graph, transcoders, [], downstream, attention, patterns, norms=norms)

    def run(rows) -> list[Intervention]:
        out = []
        for r in rows:
            node = graph.nodes[int(r)]
            measured = switch_off(lm, graph, transcoders, [(node.layer, node.position, node.feature)],  # type: ignore[list-item]
                                  downstream, attention, patterns, norms=norms) - base
            out.append(Intervention(node.id, predicted_change(effects, r), measured))
        return out

    return run(strongest), run(drawn)
