"""Circuits scored as the Mechanistic Interpretability Benchmark scores them (Mueller et al. 2025, MIB,
§3 "circuit localization"): run the model with every edge outside the circuit ablated, and normalise its
metric between the empty circuit and the full model,

    f(C) = (m(C) − m(∅)) / (m(N) − m(∅)),

means over the pairs first (EAP-IG's ``evaluate_graph`` reports the means). Swept over circuit sizes from
0.1 % to 100 % of the edges (MIB's sizes), the area under f is CPR (higher is better) and the area under
|1 − f| is CMD (lower is better), by the trapezoid rule over the share of edges (a linear axis from 0.1 % to
100 %, as MIB's ``evaluate_area_under_curve``; n = ⌊share × edges⌋). Beside each curve, circuits of random edges of the same sizes (pruned the same way).

Ablation "patch" puts in the corrupted run (an interchange intervention); "mean" each sender's mean
output over every position of the pairs' clean runs. All circuits of a pair run as rows of one pass,
as many as the byte budget allows (``circuits.decomposed``: one pass per circuit, never one per edge).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.circuits.contributions import Scratch
from bertscope.circuits.decomposed import run_pass
from bertscope.circuits.edges import EdgeScores, Progress, end_metrics
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.runs import LayerWeights, RecordedPair, layer_weights
from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.hooked_pass import turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import pass_bytes
from bertscope.errors import BertScopeError

SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # MIB's shares of the edges
RANDOM_SEEDS = 3


def row_bytes(lm: LoadedModel, graph: CircuitGraph, tokens: int) -> int:
    """One circuit's row of the circuit pass, about: every sender's change carried (and the corrupted run's
    contributions), the receivers' inputs of a layer, a pass's activations."""
    d, size = lm.hidden_size, max(4, torch.empty((), dtype=lm.dtype).element_size())  # half precision is widened
    return size * tokens * d * (2 * graph.n_senders + 3 * lm.num_heads + 2) + pass_bytes(lm, tokens)


def evaluate(lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], items: Sequence[RecordedPair],
             where: str, circuits: np.ndarray, max_batch_bytes: int = DEFAULT_BATCH_BYTES,
             progress: Callable[[int, int], None] | None = None, stop: Callable[[], bool] | None = None
             ) -> np.ndarray:
    """[circuit, pair] the metric with each circuit ([circuit, sender, receiver] bool) in place. The full
    graph is the clean run and the empty circuit the ablated one (exactly: ``tests/circuits``), each read
    by one pass; the others run smallest first, as many rows a pass as the byte budget allows."""
    if circuits.ndim != 3 or circuits.shape[1:] != graph.real.shape:
        raise BertScopeError("Circuits are [circuit, sender, receiver] masks of this model's graph.")
    sizes = (circuits & graph.real).sum(axis=(1, 2))
    full, empty = sizes == graph.n_edges, sizes == 0
    order = [int(i) for i in np.argsort(sizes, kind="stable") if not full[i] and not empty[i]]
    out = np.empty((len(circuits), len(items)))
    done, total = 0, len(items) * (len(order) + 1)
    scratch = Scratch()  # one pass's buffers, reused by the next
    for j, pair in enumerate(items):
        if stop is not None and stop():
            raise BertScopeError(f"Stopped after {done} of {total} circuit passes.")
        fresh = not pair.recorded  # recorded here: forgotten after, so memory holds one pair's runs
        out[full, j], out[empty, j] = end_metrics(lm, graph, weights, pair, where)
        done += 1
        per = max(1, max_batch_bytes // row_bytes(lm, graph, pair.prepared.length))
        for start in range(0, len(order), per):
            if stop is not None and stop():
                raise BertScopeError(f"Stopped after {done} of {total} circuit passes.")
            chosen = order[start:start + per]
            keep = torch.from_numpy(circuits[chosen] & graph.real).to(lm.device)
            with turn(lm), torch.inference_mode():
                out[chosen, j] = run_pass(lm, graph, weights, pair, where, keep=keep,
                                          scratch=scratch).double().cpu().numpy()
            done += len(chosen)
            if progress:
                progress(done, total)
        if fresh:
            pair.forget()
    return out


@dataclass(frozen=True)
class FaithfulnessCurve:
    """Faithfulness against circuit size for one edge ranking, beside random circuits."""

    sizes: list[float]  # shares of the edges asked for
    edges: list[int]  # edges asked for at each size
    kept: list[int]  # edges left after pruning
    values: list[float]  # f at each size
    random_kept: list[float]  # mean edges left, random circuits
    random_values: list[float]  # mean f over RANDOM_SEEDS random circuits
    clean_metric: float  # m(N)
    empty_metric: float  # m(∅)
    cpr: float
    cmd: float
    random_cpr: float
    random_cmd: float

    def share_reaching(self, level: float = 0.8) -> float | None:
        """The smallest share of edges whose circuit reaches ``level`` faithfulness (None: none does)."""
        for size, value in zip(self.sizes, self.values):
            if value >= level:
                return size
        return None


def areas(sizes: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """(CPR, CMD): the areas under f and |1 − f| by the trapezoid rule over the shares of edges swept, on a
    linear axis from the smallest share to the largest (MIB's ``evaluate_area_under_curve``)."""
    x, f = np.asarray(sizes, float), np.asarray(values, float)
    if len(x) < 2:
        return float("nan"), float("nan")
    return float(np.trapezoid(f, x)), float(np.trapezoid(np.abs(1 - f), x))


def faithfulness_curve(lm: LoadedModel, scores: EdgeScores, items: Sequence[RecordedPair], where: str,
                       sizes: Sequence[float] = SIZES, seeds: int = RANDOM_SEEDS,
                       max_batch_bytes: int = DEFAULT_BATCH_BYTES, progress: Progress | None = None,
                       stop: Callable[[], bool] | None = None) -> FaithfulnessCurve:
    """The curve of ``scores``'s top-n circuits on ``items`` (pairs held out from the attribution, ideally).

    Args:
        lm: the model.
        scores: the edges' scores (``attribute_edges``).
        items: recorded pairs, held out from the scoring.
        where: where the decision is read ("mask", "class", "tag", "span").
        sizes: the shares of edges kept.
        seeds: random circuits of each size.
        max_batch_bytes: about how many bytes a batch of circuits may hold.
        progress: called with (done, total, what).
        stop: asked between passes.

    Returns:
        A ``FaithfulnessCurve``: faithfulness at each size, the random circuits', CPR and CMD.
    """
    graph = scores.graph
    if not items:
        raise BertScopeError("Faithfulness needs at least one pair to evaluate on.")
    if not sizes or not all(0 < s <= 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
        raise BertScopeError("Circuit sizes are shares of the edges, ascending, above 0 and at most 1.")
    counts = [int(s * graph.n_edges) for s in sizes]

    def top(ranking: np.ndarray, n: int) -> np.ndarray:
        return graph.top(ranking, n) if n else np.zeros_like(graph.real)

    masks = [top(scores.scores, n) for n in counts]
    rng = np.random.default_rng(0)
    random_masks = [top(rng.random(graph.real.shape), n) for _ in range(seeds) for n in counts]
    ends = [graph.real, np.zeros_like(graph.real)]
    circuits = np.stack(ends + masks + random_masks)
    weights = layer_weights(lm)
    reported = (lambda d, t: progress(d, t, "circuits of every size on the held-out pairs")) if progress else None
    metrics = evaluate(lm, graph, weights, items, where, circuits, max_batch_bytes, reported, stop).mean(axis=1)
    full, empty = float(metrics[0]), float(metrics[1])
    if abs(full - empty) < 1e-6:
        raise BertScopeError(f"The full model and the empty circuit give the same metric ({full:.4f}): "
                             "these pairs leave nothing for a circuit to carry.")
    f = (metrics[2:] - empty) / (full - empty)
    values = f[: len(counts)]
    random = f[len(counts):].reshape(seeds, len(counts))
    cpr, cmd = areas(sizes, values)
    rand_cpr, rand_cmd = areas(sizes, random.mean(axis=0))
    random_kept = np.array([m.sum() for m in random_masks]).reshape(seeds, len(counts)).mean(axis=0)
    return FaithfulnessCurve(list(sizes), counts, [int(m.sum()) for m in masks], [float(v) for v in values],
                             [float(k) for k in random_kept], [float(v) for v in random.mean(axis=0)],
                             full, empty, cpr, cmd, rand_cpr, rand_cmd)
