"""The attribution graph of one decision of an encoder (Ameisen et al. 2025's method, for BERT): nodes are the input
positions' embeddings, the transcoders' active features at (layer, position), an error node per (layer, position)
(what the transcoder misses there) and the target; an edge is a source's direct effect on a target node's input in
the frozen linear replacement pass (``graphs.frozen``): a row per target node, computed by carrying its input's
direction down the transposed pass, dotted with each source's write.

    graph = attribution_graph(lm, "The bank of the [MASK] was muddy.", transcoders, target="river")
    graph.value, graph.replacement_score, graph.completeness_score
    graph.to_json(keep=0.8)                       # the pruned graph: nodes, edges, scores

How an encoder differs from circuit-tracer's decoders, and what is done about it:

- attention is bidirectional: a feature at any position reaches the target at [MASK] through any later layer; the
  rows carry every position (no causal mask) and a feature node's input may come from later positions;
- BERT is post-LayerNorm: every write passes through the LayerNorms after it, each frozen at its real scale with
  its centring live (circuit-tracer's decoders are pre-LayerNorm: one frozen norm before each read);
- the embeddings: an embedding node is the embedding layer's output at a position (token, position and segment
  embeddings, normalised), the value of hidden state 0 (circuit-tracer's token node is the token's row of W_E);
- the decision: a token at [MASK] (the masked-LM head, its GELU frozen as a ratio), or a class at [CLS] (the
  pooler's tanh frozen so); its value is logit[target] − logit[contrast], or minus the mean logit (circuit-tracer's
  demeaned logit) when no contrast is given; a one-label head: its logit;
- [CLS] and [SEP]: the transcoders never saw them (trained on word pieces), so their feed-forwards are error nodes.

Identities held by the tests (float64): the pass with the real values gives the real decision; each node's input
equals the sum of its incoming edges plus its bias (the biases' share, computed by the same pass with every source
at zero); the target's value equals the sum of its edges plus its bias.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from bertscope.core.hooked_pass import model_inputs
from bertscope.core.models import LoadedModel
from bertscope.core.passes import mlm_logits
from bertscope.errors import BertScopeError
from bertscope.features.transcoder import Transcoder
from bertscope.graphs.frozen import FrozenModel, check_graph_model, check_head, class_head, freeze, mlm_head
from bertscope.graphs.influence import graph_scores, prune_graph

MAX_GRAPH_BYTES = 512 * 2**20  # the adjacency matrix at most (the backward's working tensors: half of it)
ROWS_AT_ONCE = 128  # target rows carried down the pass together, at most
LIVE_TENSORS = 6  # [rows, P, d] tensors a backward holds at its widest, counted with one a layer (L in all): the gy2
# of each layer below the rows' own (L - 1), the seed, the g before the attention's step, gmid (with a skip path), the
# step's input and its three products (L + 6; a target row has no seed and a gy2 at every layer: L + 6 again)
CHUNK = 4096  # features whose direct effects on the target are ranked at once (the budget's ranking)


@dataclass(frozen=True)
class Node:
    id: str
    kind: str  # "feature", "error", "embedding", "target"
    layer: int | None
    position: int | None
    feature: int | None
    activation: float | None  # a feature's activation; the target's value

    def to_json(self, influence: float) -> dict:
        return {"id": self.id, "kind": self.kind, "layer": self.layer, "position": self.position,
                "feature": self.feature, "activation": self.activation, "influence": influence}


@dataclass
class AttributionGraph:
    """One decision's graph: nodes in circuit-tracer's order (features by layer, position, feature; errors
    layer-major; embeddings; the target), ``adjacency`` [N, N] rows = targets, columns = sources."""

    model: str
    text: str
    tokens: list[str]
    target: dict  # kind, position, token or label, contrast
    value: float  # the decision's value in the real model
    nodes: list[Node]
    adjacency: np.ndarray  # [N, N] float32 (float64 when built in float64)
    inputs: np.ndarray  # [N] each node's input in the replacement pass (feature: pre-activation; target: value)
    bias: np.ndarray  # [N] the biases' share of each input
    n_features: int
    n_errors: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    dropped_features: int = 0  # active features past the byte budget, merged into their error nodes
    head: str = "frozen"  # how the head was read (``frozen.HEADS``)

    @property
    def scores(self) -> tuple[float, float]:
        return graph_scores(self.adjacency, self.n_features, self.n_errors)

    @property
    def replacement_score(self) -> float:
        return self.scores[0]

    @property
    def completeness_score(self) -> float:
        return self.scores[1]

    def to_json(self, keep: float = 0.8, edge_keep: float = 0.98) -> dict:
        """The graph pruned to the nodes carrying ``keep`` of the influence (circuit-tracer's ``prune_graph``)."""
        if not 0 < keep <= 1 or not 0 < edge_keep <= 1:
            raise BertScopeError(f"--keep {keep}: give a share of the influence between 0 and 1 (0.8 keeps the nodes "
                                 "that carry 80 %).")
        pruned = prune_graph(self.adjacency, self.n_features, self.n_errors, keep, edge_keep)
        kept = np.flatnonzero(pruned.node_mask)
        rows, cols = np.nonzero(pruned.edge_mask)
        replacement, completeness = self.scores
        return {"model": self.model, "text": self.text, "tokens": self.tokens, "target": self.target,
                "logit": self.value, "keep": keep, "head": self.head,
                "nodes": [self.nodes[i].to_json(float(pruned.influence[i])) for i in kept],
                "edges": [{"source": self.nodes[c].id, "target": self.nodes[r].id, "weight": float(self.adjacency[r, c])}
                          for r, c in zip(rows, cols)],
                "replacement_score": replacement, "completeness_score": completeness,
                "unpruned": {"nodes": len(self.nodes), "features": self.n_features, "edges": int((self.adjacency != 0).sum())},
                "dropped_features": self.dropped_features, "seconds": self.seconds, "notes": self.notes}


@dataclass
class _Active:
    layer: np.ndarray  # [F]
    position: np.ndarray
    feature: np.ndarray
    value: np.ndarray  # [F] activation


def check_decision(lm: LoadedModel, text: str, target: str | None = None, contrast: str | None = None) -> None:
    """One line when ``attribution_graph`` could not explain the decision asked for (a model with neither head, no
    [MASK] in the text, a target or contrast the vocabulary or the classes lack, a contrast for a one-score head),
    read from the tokenizer before any pass; only a word the vocabulary lacks runs the model once, for the top
    predictions its message names. What a page calls before it charges a graph's cost."""
    if not text or not text.strip():
        raise BertScopeError("The text is empty: type a sentence (with [MASK] for a masked LM).")
    ids = lm.tokenizer(text, truncation=True, max_length=lm.max_length)["input_ids"]
    if len(ids) <= lm.tokenizer.num_special_tokens_to_add(pair=False):  # only characters the tokenizer drops
        raise BertScopeError("The text has nothing the model reads (only spaces or characters the tokenizer drops): "
                             "type a sentence.")
    _decision(lm, text, target, contrast, ids, lambda p: _plain_logits(lm, text)[p], resolve=False)


def _plain_logits(lm: LoadedModel, text: str) -> np.ndarray:
    """[P, V] the masked-LM logits ([labels] a classifier's) of one plain forward pass."""
    enc = lm.tokenizer(text, return_tensors="pt", truncation=True, max_length=lm.max_length)
    with torch.no_grad():
        out = lm.run(model_inputs(lm, enc))
    return mlm_logits(out)[0].float().cpu().numpy()


def _decision(lm: LoadedModel, text: str, target: str | None, contrast: str | None, ids: list[int], logits_at: Callable,
              resolve: bool = True) -> tuple[str, int, int, int | None, list[str]]:
    """(kind, position, target id, contrast id, notes) of the decision asked for; ``logits_at(position)`` is read
    only for the model's own choice (``resolve``: with no target given) and for a message's top predictions."""
    from bertscope.attribution.gradients import token_id

    notes: list[str] = []
    if lm.task is not None:
        if lm.task.kind != "sequence-classification":
            raise BertScopeError(f"{lm.name} is a {lm.task.kind.replace('-', ' ')} model: attribution graphs explain a "
                                 "masked token or a sequence classifier's class.")
        labels = list(lm.task.labels)
        for name, what in ((target, "target"), (contrast, "contrast")):
            if name is not None and name not in labels:
                raise BertScopeError(f"No class {name!r} (--{what}): {lm.name}'s classes are {', '.join(labels)}.")
        if contrast is not None and len(labels) == 1:
            raise BertScopeError(f"{lm.name} has one output (a score): its decision has no contrast to give.")
        chosen = (labels.index(target) if target is not None else
                  int(np.argmax(logits_at(0))) if resolve else -1)
        return "class", 0, chosen, None if contrast is None else labels.index(contrast), notes
    if "mlm" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has neither a masked-LM head nor a classifier: an attribution graph explains "
                             "one decision (try bundled-mlm or bundled-sentiment).")
    masks = [i for i, t in enumerate(ids) if t == lm.tokenizer.mask_token_id]
    if not masks:
        raise BertScopeError(f"No {lm.tokenizer.mask_token} in the text: put one where the prediction to explain is.")
    if len(masks) > 1:
        notes.append(f"{len(masks)} masks: the first (token {masks[0]}) is explained.")
    position = masks[0]

    def vocabulary_id(word: str, what: str) -> int:
        try:
            return token_id(lm, word)
        except BertScopeError as err:
            top = [lm.tokenizer.convert_ids_to_tokens(int(i)) for i in np.argsort(-logits_at(position))[:5]]
            raise BertScopeError(f"{str(err).rstrip('.')} (--{what}); the model's top predictions here: "
                                 f"{', '.join(top)}.") from None

    target_id = (vocabulary_id(target, "target") if target is not None else
                 int(np.argmax(logits_at(position))) if resolve else -1)
    return "token", position, target_id, None if contrast is None else vocabulary_id(contrast, "contrast"), notes


def attribution_graph(lm: LoadedModel, text: str, transcoders: Mapping[int, Transcoder], target: str | None = None,
                      contrast: str | None = None, dtype: torch.dtype = torch.float32,
                      max_bytes: int = MAX_GRAPH_BYTES,
                      progress: Callable[[int, int], None] | None = None, head: str = "frozen") -> AttributionGraph:
    """The attribution graph of the decision on ``text`` (the module docstring).

    Args:
        lm: a BERT masked LM (the first [MASK] explained) or sequence classifier.
        text: the input.
        transcoders: {layer: Transcoder} for every layer (``features.transcoder.load_transcoder``).
        target: the token (masked LM) or class to explain; default the model's own top choice.
        contrast: a second token or class: the value is logit[target] − logit[contrast].
        dtype: float32, or float64 for exact identities.
        max_bytes: the adjacency matrix's budget: past it the least influential features are merged into their
            (layer, position)'s error node, and the graph says how many; the backward pass's working tensors are
            held to half of it (``rows_at_once``).
        progress: called with (rows done, rows).
        head: ``"frozen"`` (the head's nonlinearity and norm held: every sum exact) or ``"linear"`` (the head to
            first order at the real run: the target's edges move as the real head's value does; a constant in the
            target's bias), ``frozen.mlm_head``.

    Returns:
        An ``AttributionGraph``.
    """
    started = time.perf_counter()
    check_head(head)
    if max_bytes < 1:
        raise BertScopeError(f"The adjacency's budget is a number of bytes above 0; got {max_bytes:,}.")
    _check_inputs(lm, text, transcoders)
    ids, real_logits, cache = _real_run(lm, text)
    kind, position, target_id, contrast_id, notes = _decision(
        lm, text, target, contrast, ids, lambda p: real_logits if lm.task is not None else real_logits[p])
    final = cache[f"blocks.{lm.num_layers - 1}.hook_resid_post"][0]
    reader = (mlm_head(lm, final, position, target_id, contrast_id, dtype, head) if kind == "token"
              else class_head(lm, final, target_id, contrast_id, dtype, head))
    frozen = freeze(lm, cache, dict(transcoders), reader, dtype)
    special = np.isin(ids, [i for i in (lm.tokenizer.cls_token_id, lm.tokenizer.sep_token_id,
                                        lm.tokenizer.pad_token_id) if i is not None])
    active, writes, errors = _sources(frozen, cache, transcoders, special, dtype)
    embed = cache["embed"][0].detach().to("cpu", dtype)  # [P, d]
    mids, value = frozen.forward(embed[None], [w[None] for w in writes])
    assert value is not None  # the whole pass
    real_value = _real_value(real_logits, kind, position, target_id, contrast_id, lm)
    if abs(float(value[0]) - real_value) > 1e-3 * max(1.0, abs(real_value)):
        notes.append(f"The frozen pass gives {float(value[0]):.5f} where the model gives {real_value:.5f}.")
    tcs = [transcoders[ly] for ly in range(lm.num_layers)]
    sub, errors, dropped = _within_budget(frozen, active, errors, tcs, max_bytes, notes, dtype)
    batch = rows_at_once(len(tcs), frozen.n_pos, frozen.d, dtype, max_bytes // 2)
    adjacency = _adjacency(frozen, sub, errors, embed, tcs, dtype, progress, batch)
    inputs, bias = _node_inputs(frozen, sub, tcs, embed, mids, value, dtype, len(adjacency))
    nodes = _nodes(sub, lm.num_layers, frozen.n_pos, lm.tokenizer.convert_ids_to_tokens(ids), float(value[0]))
    target_info = {"kind": kind, "position": position,
                   ("token" if kind == "token" else "label"): _name(lm, kind, target_id),
                   "contrast": None if contrast_id is None else _name(lm, kind, contrast_id)}
    return AttributionGraph(lm.name, text, lm.tokenizer.convert_ids_to_tokens(ids), target_info, real_value, nodes,
                            adjacency, inputs, bias, len(sub.value), lm.num_layers * frozen.n_pos,
                            time.perf_counter() - started, notes, dropped, head)


def _check_inputs(lm: LoadedModel, text: str, transcoders: Mapping[int, Transcoder]) -> None:
    """One line when the model, its transcoders or the text cannot make a graph."""
    check_graph_model(lm)
    missing = sorted(set(range(lm.num_layers)) - set(transcoders))
    if missing:
        raise BertScopeError(f"No transcoder for layer{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                             f"of {lm.name}: train them with `bertscope train-transcoders {lm.name} --out FOLDER`.")
    for tc in transcoders.values():
        tc.check_for(lm)
    if not text or not text.strip():
        raise BertScopeError("The text is empty: type a sentence (with [MASK] for a masked LM).")


def _real_run(lm: LoadedModel, text: str) -> tuple[list[int], np.ndarray, dict]:
    """(the ids, the real logits [P, V] or [label], the cache of every point the frozen pass reads)."""
    enc = lm.tokenizer(text, return_tensors="pt", truncation=True, max_length=lm.max_length)
    names = [f"blocks.{ly}.{p}" for ly in range(lm.num_layers)
             for p in ("attn.hook_pattern", "hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out")]
    feed = model_inputs(lm, enc)
    out, cache = lm.run_with_cache(feed, [*names, "embed", f"blocks.{lm.num_layers - 1}.hook_resid_post"])
    return enc["input_ids"][0].tolist(), mlm_logits(out)[0].float().cpu().numpy(), cache  # a classifier: its logits


def _within_budget(frozen: FrozenModel, active: _Active, errors: list[torch.Tensor], tcs: list[Transcoder],
                   max_bytes: int, notes: list[str], dtype: torch.dtype) -> tuple[_Active, list[torch.Tensor], int]:
    """The features the adjacency matrix's budget holds (the most influential first), the error nodes with the
    others merged in, and how many were merged (said in ``notes``)."""
    n_feat, fixed = len(active.value), len(tcs) * frozen.n_pos + frozen.n_pos + 1  # errors, embeddings, target
    budget_nodes = int(np.sqrt(max_bytes / (8 if dtype == torch.float64 else 4)))  # the adjacency's bytes an edge
    keep_features = n_feat if n_feat + fixed <= budget_nodes else max(0, budget_nodes - fixed)
    order = _feature_order(frozen, active, tcs, keep_features, dtype)
    chosen = np.sort(order[:keep_features])  # the features kept, in (layer, position, feature) order
    dropped = n_feat - len(chosen)
    if dropped:
        notes.append(f"{dropped:,} of {n_feat:,} active features past the {max_bytes / 2**20:.0f} MiB budget are "
                     "merged into their error nodes (lower the tokens or raise the budget to keep them).")
        errors = _merge(errors, active, np.setdiff1d(np.arange(n_feat), chosen), tcs, dtype)
    sub = _Active(active.layer[chosen], active.position[chosen], active.feature[chosen], active.value[chosen])
    return sub, errors, dropped


def rows_at_once(n_layers: int, n_pos: int, d: int, dtype: torch.dtype, work_bytes: int) -> int:
    """The target rows one backward pass carries: ``ROWS_AT_ONCE``, fewer where their working tensors (each
    [rows, P, d]: ``n_layers + LIVE_TENSORS`` at the pass's widest) would pass ``work_bytes``; at least one.

    >>> rows_at_once(6, 32, 384, torch.float32, 256 * 2**20)  # bundled-mlm, 32 word pieces
    128
    >>> rows_at_once(12, 512, 768, torch.float32, 256 * 2**20)  # BERT-base at 512 word pieces
    9
    """
    per_row = (n_layers + LIVE_TENSORS) * n_pos * d * torch.empty((), dtype=dtype).element_size()
    return int(max(1, min(ROWS_AT_ONCE, work_bytes // per_row)))


def _adjacency(frozen: FrozenModel, sub: _Active, errors: list[torch.Tensor], embed: torch.Tensor,
               tcs: list[Transcoder], dtype: torch.dtype, progress: Callable[[int, int], None] | None,
               batch: int = ROWS_AT_ONCE) -> np.ndarray:
    """[N, N] the direct effects: a row per feature and the target (the rest, error and embedding nodes, have no
    inputs), one layer's features at a time, ``batch`` rows a backward pass, written in place."""
    n_feat = len(sub.value)
    n = n_feat + len(tcs) * frozen.n_pos + frozen.n_pos + 1
    adjacency = np.zeros((n, n), np.float64 if dtype == torch.float64 else np.float32)
    sub_writes = _writes_by_position(sub, tcs, dtype)
    assert (np.diff(sub.layer) >= 0).all()  # features in (layer, position, feature) order, as _sources gives them
    bounds = np.searchsorted(sub.layer, np.arange(len(tcs) + 1))  # each layer's features: rows bounds[l]:bounds[l+1]
    batches = [range(start, min(start + batch, int(bounds[ly + 1])))
               for ly in range(len(tcs)) for start in range(int(bounds[ly]), int(bounds[ly + 1]), batch)]
    done = 0
    for rows in [*batches, range(n_feat, n_feat + 1)]:  # then the target's row (the last)
        at = slice(rows.start, rows.stop) if rows.start < n_feat else slice(n - 1, n)
        _rows(frozen, rows, sub, errors, embed, tcs, sub_writes, dtype, adjacency[at])
        done += len(rows)
        if progress:
            progress(done, n_feat + 1)
    return adjacency


def _node_inputs(frozen: FrozenModel, sub: _Active, tcs: list[Transcoder], embed: torch.Tensor, mids: list[torch.Tensor],
                 value: torch.Tensor, dtype: torch.dtype, n: int) -> tuple[np.ndarray, np.ndarray]:
    """([N] each node's input in the frozen pass: a feature's pre-activation, the target's value; [N] the part of it
    that is bias: the same pass from zero embeddings with the transcoders writing b_dec alone)."""
    b_dec = [tc.b_dec.detach().to(dtype).expand(frozen.n_pos, -1)[None] for tc in tcs]
    bias_mids, bias_value = frozen.forward(torch.zeros_like(embed)[None], b_dec)  # [1, P, d] zeros
    assert bias_value is not None
    inputs, bias = np.zeros(n), np.zeros(n)
    for r in range(len(sub.value)):
        ly, p, f = int(sub.layer[r]), int(sub.position[r]), int(sub.feature[r])
        w_enc, b_enc = tcs[ly].W_enc[:, f].detach().to(dtype), float(tcs[ly].b_enc[f].detach())
        inputs[r] = float(mids[ly][0, p] @ w_enc) + b_enc
        bias[r] = float(bias_mids[ly][0, p] @ w_enc) + b_enc
    inputs[-1], bias[-1] = float(value[0]), float(bias_value[0])
    return inputs, bias


def _name(lm: LoadedModel, kind: str, index: int) -> str:
    return lm.tokenizer.convert_ids_to_tokens(index) if kind == "token" else lm.task.labels[index]  # type: ignore[union-attr]


def _real_value(logits: np.ndarray, kind: str, position: int, target: int, contrast: int | None,
                lm: LoadedModel) -> float:
    row = logits[position] if kind == "token" else logits
    if kind == "class" and len(row) == 1:
        return float(row[0])
    return float(row[target] - (row[contrast] if contrast is not None else row.mean()))


@torch.no_grad()
def _sources(frozen: FrozenModel, cache: dict, transcoders: Mapping[int, Transcoder], special: np.ndarray,
             dtype: torch.dtype) -> tuple[_Active, list[torch.Tensor], list[torch.Tensor]]:
    """(the active features at ordinary positions, each layer's write [P, d] less its skip path, each layer's error
    [P, d])."""
    layers, positions, features, values, writes, errors = [], [], [], [], [], []
    ordinary = torch.from_numpy(~special)
    for ly in range(len(frozen.layers)):
        tc = transcoders[ly]
        mid = cache[f"blocks.{ly}.hook_resid_mid"][0].float().cpu()
        mlp = cache[f"blocks.{ly}.hook_mlp_out"][0].to("cpu", dtype)
        vals, idx = tc.encode_topk(mid.to(tc.W_enc.device))  # [P, k]
        vals, idx = vals.cpu() * ordinary[:, None], idx.cpu()  # no features at [CLS], [SEP]
        p, j = torch.nonzero(vals > 0, as_tuple=True)
        order = np.lexsort((idx[p, j].numpy(), p.numpy()))
        p, j = p[order], j[order]
        layers.append(np.full(len(p), ly))
        positions.append(p.numpy())
        features.append(idx[p, j].cpu().numpy())
        values.append(vals[p, j].numpy())
        sparse = torch.zeros(mid.shape[0], tc.d_sae, dtype=dtype)
        sparse[p, idx[p, j]] = vals[p, j].to(dtype)
        feature_write = sparse @ tc.W_dec.detach().cpu().to(dtype)  # [P, d]
        skip = mid.to(dtype) @ tc.W_skip.detach().cpu().to(dtype).T if tc.W_skip is not None else 0
        write = mlp - skip  # everything but the skip path: features + b_dec + error
        writes.append(write)
        errors.append(write - feature_write - tc.b_dec.detach().cpu().to(dtype))
    active = _Active(np.concatenate(layers), np.concatenate(positions), np.concatenate(features),
                     np.concatenate(values))
    return active, writes, errors


def _merge(errors: list[torch.Tensor], active: _Active, rows: np.ndarray, tcs: list[Transcoder],
           dtype: torch.dtype) -> list[torch.Tensor]:
    out = [e.clone() for e in errors]
    for r in rows:
        ly, p, f = int(active.layer[r]), int(active.position[r]), int(active.feature[r])
        out[ly][p] += float(active.value[r]) * tcs[ly].W_dec[f].detach().cpu().to(dtype)
    return out


@dataclass
class _LayerWrites:
    """One layer's active features' writes a·W_dec[f], grouped by position and padded to the most a position has,
    so that every row's edges from them are one batched product."""

    positions: torch.Tensor  # [Pl] the positions with active features
    w: torch.Tensor  # [Pl, d, n] their writes, transposed, zero where a position has fewer than n
    slots: torch.Tensor  # [F_l] each feature's place in the flattened [Pl, n]
    cols: slice  # their columns in the adjacency, in ``slots``' order

    def edges(self, g: torch.Tensor) -> torch.Tensor:
        """[B, F_l] the direct effects of these features on rows whose adjoint at this layer's write is ``g``
        [B, P, d]."""
        at = g[:, self.positions].transpose(0, 1)  # [Pl, B, d]
        return torch.bmm(at, self.w).transpose(0, 1).reshape(len(g), -1)[:, self.slots]


@torch.no_grad()
def _writes_by_position(active: _Active, tcs: list[Transcoder], dtype: torch.dtype) -> list[_LayerWrites | None]:
    """For each layer, its active features' writes by position (``_LayerWrites``), None where it has none: a row's
    feature edges are then one batched product a layer, not [B, P, d_sae]."""
    out: list[_LayerWrites | None] = []
    for ly, tc in enumerate(tcs):
        on = np.flatnonzero(active.layer == ly)  # in (position, feature) order
        if not len(on):
            out.append(None)
            continue
        assert on[-1] - on[0] + 1 == len(on) and (np.diff(active.position[on]) >= 0).all()  # (layer, position) order
        positions, starts, counts = np.unique(active.position[on], return_index=True, return_counts=True)
        width = int(counts.max())
        dec = tc.W_dec.detach().cpu().to(dtype)
        writes = dec[torch.from_numpy(active.feature[on])] * torch.from_numpy(active.value[on]).to(dtype)[:, None]
        group = np.repeat(np.arange(len(positions)), counts)  # each feature's position group
        slots = group * width + (np.arange(len(on)) - np.repeat(starts, counts))
        w = torch.zeros(len(positions) * width, dec.shape[1], dtype=dtype)
        w[torch.from_numpy(slots)] = writes
        out.append(_LayerWrites(torch.from_numpy(positions), w.view(len(positions), width, -1).transpose(1, 2),
                                torch.from_numpy(slots), slice(int(on[0]), int(on[-1]) + 1)))
    return out


@torch.no_grad()
def _rows(frozen: FrozenModel, rows: range | list[int], active: _Active, errors: list[torch.Tensor],
          embed: torch.Tensor, tcs: list[Transcoder], writes: list[_LayerWrites | None], dtype: torch.dtype,
          out: np.ndarray | None = None) -> np.ndarray:
    """[len(rows), N] the direct effects on each row's input: row r < F the feature r, else the target; written into
    ``out`` (zeros) when given. A feature's row has no edge from itself or from anything at its layer or after: the
    adjoint is exactly zero there, and those columns are left as they are (above the batch's highest layer, not
    computed)."""
    n_feat, n_layers, n_pos = len(active.value), len(frozen.layers), frozen.n_pos
    B = len(rows)
    if out is None:
        out = np.zeros((B, n_feat + n_layers * n_pos + n_pos + 1), np.float64 if dtype == torch.float64 else np.float32)
    at = np.asarray(rows)
    feature_rows = np.flatnonzero(at < n_feat)  # the rest: the target's row
    seeds: dict[int, torch.Tensor] = {}
    row_layers = active.layer[at[feature_rows]]
    for ly in np.unique(row_layers):  # each row's seed: its encoder direction at its position
        bs = feature_rows[row_layers == ly]
        seeds[int(ly)] = torch.zeros(B, n_pos, frozen.d, dtype=dtype)
        w_enc = tcs[int(ly)].W_enc.detach()[:, torch.from_numpy(active.feature[at[bs]])].T  # [rows, d]
        seeds[int(ly)][torch.from_numpy(bs), torch.from_numpy(active.position[at[bs]])] = w_enc.cpu().to(dtype)
    head_seed = torch.from_numpy((at >= n_feat).astype(np.float64)).to(dtype)
    target = len(feature_rows) < B
    g_embed, g_writes = frozen.backward(seeds, head_seed if target else None)
    upto = n_layers if target else max(seeds)  # the layers a row reads: those below it
    for ly in range(upto):
        layer_writes = writes[ly]
        if layer_writes is not None:
            out[:, layer_writes.cols] = layer_writes.edges(g_writes[ly]).numpy()  # [B, F_l]
        out[:, n_feat + ly * n_pos:n_feat + (ly + 1) * n_pos] = torch.einsum("bpd,pd->bp", g_writes[ly], errors[ly]).numpy()
    out[:, n_feat + n_layers * n_pos:n_feat + n_layers * n_pos + n_pos] = torch.einsum("bpd,pd->bp", g_embed, embed).numpy()
    return out


def _feature_order(frozen: FrozenModel, active: _Active, tcs: list[Transcoder], keep: int, dtype: torch.dtype
                   ) -> np.ndarray:
    """Every active feature in (layer, position, feature) order where all fit the budget; else ranked by the size of
    their direct effect on the target (one row; circuit-tracer ranks by partial influence over rounds of rows),
    ``CHUNK`` features' decoder rows at a time: every active feature's write at once is the budget's size again."""
    n_feat = len(active.value)
    if keep >= n_feat:
        return np.arange(n_feat)
    _, g_writes = frozen.backward({}, torch.ones(1, dtype=dtype))  # [1, P, d] a layer: the target's adjoint
    adjoint = torch.cat(g_writes)  # [L, P, d]
    direct = np.empty(n_feat)
    for start in range(0, n_feat, CHUNK):
        at = slice(start, start + CHUNK)
        layer, feature = active.layer[at], torch.from_numpy(active.feature[at])
        g = adjoint[torch.from_numpy(layer), torch.from_numpy(active.position[at])]  # [chunk, d]
        for ly in np.unique(layer):
            mine = torch.from_numpy(np.flatnonzero(layer == ly))
            dec = tcs[int(ly)].W_dec.detach()[feature[mine]].cpu().to(dtype)  # [rows, d]
            value = torch.from_numpy(active.value[at][mine.numpy()]).to(dtype)
            direct[start + mine.numpy()] = ((g[mine] * dec).sum(-1) * value).numpy()
    return np.argsort(-np.abs(direct), kind="stable")


def _nodes(active: _Active, n_layers: int, n_pos: int, tokens: list[str], value: float) -> list[Node]:
    nodes = [Node(f"F{ly}.{p}.{f}", "feature", ly, p, f, a)
             for ly, p, f, a in zip(active.layer.tolist(), active.position.tolist(), active.feature.tolist(),
                                    active.value.astype(float).tolist())]
    nodes += [Node(f"E{ly}.{p}", "error", ly, p, None, None) for ly in range(n_layers) for p in range(n_pos)]
    nodes += [Node(f"T{p}", "embedding", None, p, None, None) for p in range(n_pos)]
    nodes.append(Node("target", "target", None, None, None, value))
    return nodes
