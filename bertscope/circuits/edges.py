"""Edge attribution patching: a score for every edge of the encoder's graph from gradients, not from one
pass per edge (Syed, Rager & Conmy 2023, EAP; Hanna, Pezzelle & Belinkov 2024, EAP-IG). Checked against
the reference code, hannamw/EAP-IG ``src/eap/attribute.py``, method by method:

- ``eap`` (``get_scores_eap``): score(u → r) = Σ_pos (ablated_u − clean_u)_r · ∂m/∂input_r at the clean run;
- ``eap-ig-inputs`` (``get_scores_eap_ig``): the same difference times the gradient averaged over ``steps``
  passes whose input node moves from the ablated run to the clean one (k/steps of the way, k = 0…steps−1;
  the reference takes patching only: with mean ablation the path starts at the mean embeddings);
- ``eap-ig-activations`` (``get_scores_ig_activations``): averaged over passes that move one node group's
  output at a time (the input, each layer's heads, each feed-forward; k = 1…steps).

Positive scores: corrupting the edge raises logit(answer) − logit(foil); a circuit takes the edges of largest
|score|, as the reference's ``apply_topn(absolute=True)``. Scores are averaged over the pairs.

The gradient is the circuit pass's own (``circuits.decomposed``: LayerNorm's scale known), so a score
estimates exactly what removing the edge does in the pass that evaluates circuits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.circuits.contributions import Columns, Contributions, mean_record
from bertscope.circuits.decomposed import Flow, run_pass
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.norm_transport import carry_through_norm_
from bertscope.circuits.pairs import MASK, Pair, PreparedPair, decision, prepare_all
from bertscope.circuits.runs import LayerWeights, RecordedPair, RunRecord, SenderMeans, layer_weights, record_run
from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.hooked_pass import turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import pass_bytes, wide
from bertscope.errors import BertScopeError

METHODS = {"eap": "EAP (one gradient)", "eap-ig-inputs": "EAP-IG on the inputs",
           "eap-ig-activations": "EAP-IG on the activations"}  # name -> what a page calls it
ABLATIONS = {"patch": "the corrupted run", "mean": "each node's mean output"}  # what edges outside a circuit carry
DEFAULT_STEPS = 5
MAX_STEPS = 100

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class EdgeScores:
    """Every edge's score on a set of pairs."""

    graph: CircuitGraph
    scores: np.ndarray  # [sender, receiver] float64; 0 where no edge exists
    method: str
    ablation: str
    steps: int
    pairs: int
    clean_metric: float  # mean logit(answer) − logit(foil) of the clean runs
    ablated_metric: float  # the same with every edge ablated (the corrupted runs, for "patch")

    def to_json(self) -> dict:
        return {"method": self.method, "ablation": self.ablation, "steps": self.steps, "pairs": self.pairs,
                "clean_metric": self.clean_metric, "ablated_metric": self.ablated_metric,
                "edges": self.graph.edge_list(self.graph.real, self.scores)}


def check_method(method: str, steps: int, ablation: str) -> None:
    if method not in METHODS:
        raise BertScopeError(f"Unknown method {method!r}: use {', '.join(METHODS)}.")
    if ablation not in ABLATIONS:
        raise BertScopeError(f"Unknown ablation {ablation!r}: use patch (the corrupted run) or mean.")
    if method != "eap" and not 1 <= steps <= MAX_STEPS:
        raise BertScopeError(f"Integrated gradients take 1 to {MAX_STEPS} steps; {steps} was asked.")


def record_pairs(lm: LoadedModel, pairs: Sequence[Pair], ablation: str = "patch",
                 weights: list[LayerWeights] | None = None, progress: Progress | None = None,
                 mean_over: Sequence[RecordedPair] | None = None) -> tuple[str, list[RecordedPair]]:
    """(where ``lm`` decides, each pair ready to record its clean run and its ablated run when first read:
    ``RecordedPair``, which a loop over many pairs forgets again). A mean ablation averages the clean runs of
    ``mean_over`` (default: these pairs), one run at a time, once: held-out pairs use the mean their edges
    were scored against."""
    weights = weights or layer_weights(lm)
    where, prepared = prepare_all(lm, pairs)

    def run(p: PreparedPair, feed: dict) -> RunRecord:
        with turn(lm):
            return record_run(lm, feed, weights, lambda output: decision(lm, output, p, where),
                              encoder_only=where == MASK)

    shared: dict[str, SenderMeans] = {}  # the mean ablation's basis, once gathered

    def recorder(p: PreparedPair) -> Callable[[], tuple[RunRecord, RunRecord]]:
        def record() -> tuple[RunRecord, RunRecord]:
            # plain tensors, whoever reads first (gradient passes read them too), and no graph
            with torch.inference_mode(False), torch.no_grad():
                clean = run(p, p.clean_feed)
                ablated = run(p, p.corrupted_feed) if ablation == "patch" else \
                    mean_record(shared["means"], clean, weights)
            return clean, ablated
        return record

    out = [RecordedPair(p, recorder(p)) for p in prepared]
    if ablation == "mean":
        basis = list(mean_over) if mean_over is not None else out
        ids = tuple(id(b) for b in basis)
        known = next((b.means for b in basis if b.means is not None and b.means.basis == ids), None)
        if known is None:  # these pairs' own clean runs, one at a time
            known = SenderMeans(basis=ids)
            with torch.inference_mode(False), torch.no_grad():
                for i, b in enumerate(basis):
                    if b.recorded:
                        known.add(b.clean)
                    else:  # a pass that sums as it goes: the pair's clean run is recorded when its turn comes
                        with turn(lm):
                            known.add_pass(lm, b.prepared.clean_feed, encoder_only=where == MASK)
                    if progress:
                        progress(i + 1, len(basis), "the mean of every clean run")
        shared["means"] = known
        for r in out:
            r.means = known
    return where, out


def gradient_row_bytes(lm: LoadedModel, tokens: int) -> int:
    """One row of a gradient pass, about: every layer's activations kept for the backward pass."""
    return pass_bytes(lm, tokens) * lm.num_layers


def _gradients(lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair, where: str,
               method: str, steps: int, max_batch_bytes: int = DEFAULT_BATCH_BYTES
               ) -> tuple[dict[str, torch.Tensor], int]:
    """(receiver group -> summed gradient [pos, ...], passes summed over). Integrated-gradient steps run as
    rows of a pass, as many as the byte budget allows."""
    flows: list[Flow] = []
    if method == "eap":
        flows.append(Flow())
    elif method == "eap-ig-inputs":
        flows.append(Flow(input_shift=torch.tensor([1 - k / steps for k in range(steps)], device=lm.device)))
    else:
        shift = torch.tensor([1 - k / steps for k in range(1, steps + 1)], device=lm.device)
        flows.append(Flow(input_shift=shift))
        for layer in range(lm.num_layers):
            for kind in ("heads", "mlp"):
                flows.append(Flow(group=(kind, layer), group_shift=shift))
    per = max(1, max_batch_bytes // gradient_row_bytes(lm, pair.prepared.length))
    total: dict[str, torch.Tensor] = {}
    passes = 0
    for whole in flows:
        shifts = whole.input_shift if whole.input_shift is not None else whole.group_shift
        rows = 1 if shifts is None else len(shifts)
        for start in range(0, rows, per):
            part = slice(start, min(rows, start + per))
            flow = Flow(None if whole.input_shift is None else whole.input_shift[part], whole.group,
                        None if whole.group_shift is None else whole.group_shift[part])
            with turn(lm), torch.enable_grad():
                metric = run_pass(lm, graph, weights, pair, where, flow=flow, rows=part.stop - part.start)
                metric.sum().backward()
            for name, leaf in flow.grads.items():
                # [pos, ...] summed over rows; none where a replaced node output cuts every path
                g = wide(leaf.grad.sum(dim=0)) if leaf.grad is not None else wide(torch.zeros_like(leaf[0]).detach())
                total[name] = total[name] + g if name in total else g
        passes += rows
    return total, passes


def end_metrics(lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair, where: str
                ) -> tuple[float, float]:
    """(m(N), m(∅)): the clean run (the full circuit is it exactly), and every edge ablated (the corrupted
    run, exactly; a mean ablation's empty circuit is one pass)."""
    assert pair.clean.metric is not None  # a record of a run of the model
    if pair.ablated.metric is not None:
        return pair.clean.metric, pair.ablated.metric
    with turn(lm), torch.inference_mode():
        nothing = torch.zeros(1, graph.n_senders, graph.n_receivers, device=lm.device)
        empty = run_pass(lm, graph, weights, pair, where, keep=nothing)
    return pair.clean.metric, float(empty[0])


def replay_sender_bytes(pair: RecordedPair) -> int:
    """What each sender costs a replay: its [pos, d_model] contribution in both of the replay's buffers."""
    return 2 * pair.clean.embed.numel() * pair.clean.embed.element_size()


def _replay(graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair, grads: dict[str, torch.Tensor],
            scores: torch.Tensor, max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> None:
    """scores [sender, receiver] += Σ_pos (ablated − clean contribution of u at r) · gradient at r. The
    decomposition is linear in the senders (each carries its own contribution through the recorded LayerNorm
    scales and attention patterns), so the senders are replayed in groups whose two [pos, sender, d_model] buffers
    fit the byte budget: BERT-large at 512 tokens would need 1.7 GB for all of them at once."""
    per = max(1, max_batch_bytes // replay_sender_bytes(pair))
    for start in range(0, graph.n_senders, per):
        active = [start <= u < start + per for u in range(graph.n_senders)]
        _replay_senders(graph, weights, pair, grads, scores, active)


def _replay_senders(graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair,
                    grads: dict[str, torch.Tensor], scores: torch.Tensor, active: list[bool]) -> None:
    """The replay of the ``active`` senders, as the circuit pass carries them: each one's ablated contribution,
    and its clean − ablated change in the clean run's frame, through every LayerNorm in one sweep
    (``norm_transport``); a product per position and receiver group on the change alone."""
    clean, ablated = pair.clean, pair.ablated
    ablated_c = Contributions(ablated, weights, active, position_major=True)
    pos, d = clean.embed.shape
    change = clean.embed.new_empty(1, pos, len(ablated_c.index), d)  # [1, pos, sender, d]: clean − ablated
    columns = Columns(active)

    def senders(clean_out: torch.Tensor, ablated_out: torch.Tensor) -> None:  # [pos, k, d]: the next k in pass order
        taken = columns.take(clean_out.shape[1])
        if taken is not None:
            torch.sub(clean_out[:, taken[0]], ablated_out[:, taken[0]], out=change[0, :, taken[1]])

    senders(clean.embed[:, None], ablated.embed[:, None])  # the input node

    def through_norm(layer: int, which: int) -> None:
        sigma_clean = (clean.sigma1 if which == 1 else clean.sigma2)[layer]

        def carry(c: Contributions, gamma: torch.Tensor, sigma_ablated: torch.Tensor) -> None:
            assert c.n == columns.n
            carry_through_norm_(change, c.buffer, c.n, gamma, sigma_clean, sigma_ablated)

        with ablated_c.carrying(carry):
            (ablated_c.after_attention if which == 1 else ablated_c.after_mlp)(layer)

    def add(receivers: slice | int, g: torch.Tensor) -> None:  # g [pos, receiver, d]
        n = columns.n
        if not n:  # none of the group's senders is reached yet
            return
        # [pos, sender, d] @ [pos, d, receiver], summed over positions: Σ_pos (clean − ablated) · g
        s = torch.bmm(change[0, :, :n], g.to(change.dtype).transpose(1, 2)).sum(0)  # [sender, receiver]
        rows = torch.tensor(ablated_c.carried, device=scores.device)
        if isinstance(receivers, slice):
            scores[rows, receivers] -= s
        else:
            scores[rows, receivers] -= s[:, 0]

    for layer, w in enumerate(weights):
        for which, weight in zip("qkv", (w.query, w.key, w.value)):
            first = graph.qkv_receiver(layer, which, 0)
            add(slice(first, first + graph.heads), torch.einsum("phe,hed->phd", grads[f"{layer}.{which}"], weight))
        senders(clean.results[layer], ablated.results[layer])
        through_norm(layer, 1)
        add(graph.mlp_receiver(layer), grads[f"{layer}.mlp"][:, None])  # already the feed-forward's input, [pos, d]
        senders(clean.mlp_out[layer][:, None], ablated.mlp_out[layer][:, None])
        through_norm(layer, 2)
    add(graph.logits_receiver, grads["logits"][:, None])


def attribute_edges(lm: LoadedModel, pairs: Sequence[Pair] | None = None, method: str = "eap",
                    steps: int = DEFAULT_STEPS, ablation: str = "patch", *,
                    recorded: tuple[str, list[RecordedPair]] | None = None, progress: Progress | None = None,
                    stop: Callable[[], bool] | None = None) -> EdgeScores:
    """Every edge's score, averaged over ``pairs`` (or pairs already recorded by ``record_pairs``).

    Args:
        lm: the model.
        pairs: clean/corrupted pairs (or ``recorded``).
        method: "eap", "eap-ig-inputs" or "eap-ig-activations".
        steps: integrated gradients' steps.
        ablation: "patch" or "mean".
        recorded: pairs already recorded by ``record_pairs`` (where the decision is read, the recordings).
        progress: called with (done, total, what).
        stop: asked between passes.

    Returns:
        ``EdgeScores``: [sender, receiver] scores, averaged over the pairs.
    """
    check_method(method, steps, ablation)
    weights = layer_weights(lm)
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    if recorded is None:
        if pairs is None:
            raise BertScopeError("Give the pairs to attribute on.")
        recorded = record_pairs(lm, pairs, ablation, weights, progress)
    where, items = recorded
    scores = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.float64, device=lm.device)
    clean_total = ablated_total = 0.0
    if progress:  # the first pair's runs are recorded inside its step: say which step runs now
        progress(0, len(items), f"{method} on every pair")
    for i, pair in enumerate(items):
        if stop is not None and stop():
            raise BertScopeError(f"Stopped after {i} of {len(items)} pairs.")
        fresh = not pair.recorded  # recorded here: forgotten after, so memory holds one pair's runs
        grads, passes = _gradients(lm, graph, weights, pair, where, method, steps)
        grads = {k: v / passes for k, v in grads.items()}
        per_pair = torch.zeros_like(scores, dtype=pair.clean.embed.dtype)
        with torch.no_grad():
            _replay(graph, weights, pair, grads, per_pair)
        scores += per_pair.double()
        clean, ablated = end_metrics(lm, graph, weights, pair, where)
        clean_total += clean
        ablated_total += ablated
        if fresh:
            pair.forget()
        if progress:
            progress(i + 1, len(items), f"{method} on every pair")
    scores /= len(items)
    out = scores.cpu().numpy()
    out[~graph.real] = 0.0
    return EdgeScores(graph, out, method, ablation, steps if method != "eap" else 0, len(items),
                      clean_total / len(items), ablated_total / len(items))
