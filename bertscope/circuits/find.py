"""Find a circuit and score it, in one call: edges attributed on one half of the pairs, circuits of every
size evaluated on the other half (MIB attributes and evaluates on separate splits), the circuit shown being
the top ``top_n`` edges, or by default the smallest of the sweep that reaches 80 % faithfulness.

    >>> from bertscope import load_model
    >>> from bertscope.circuits.find import find_circuit
    >>> from bertscope.circuits.tasks import task_pairs
    >>> lm = load_model("bundled-mlm")
    >>> found = find_circuit(lm, task_pairs(lm, "gender", size=8).pairs, method="eap")
    >>> found.faithfulness.values[-1]                    # every edge: the clean run
    1.0
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bertscope.circuits.edges import DEFAULT_STEPS, EdgeScores, Progress, attribute_edges, check_method, record_pairs
from bertscope.circuits.faithfulness import SIZES, FaithfulnessCurve, faithfulness_curve
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.pairs import Pair, prepare_all
from bertscope.circuits.runs import supports
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError

FAITHFUL = 0.8  # the level a default circuit reaches


@dataclass(frozen=True)
class CircuitResult:
    """Scores, the circuit, and its faithfulness curve beside random circuits."""

    model: str
    scores: EdgeScores
    circuit: np.ndarray  # [sender, receiver] bool, pruned
    asked: int  # edges asked for (before pruning)
    faithfulness: FaithfulnessCurve
    attribution_pairs: list[Pair]
    evaluation_pairs: list[Pair]

    @property
    def graph(self) -> CircuitGraph:
        return self.scores.graph

    def pairs_said(self) -> str:
        """Which pairs scored the edges and which tested the circuits, for a person."""
        return split_said(len(self.attribution_pairs), len(self.evaluation_pairs),
                          self.attribution_pairs == self.evaluation_pairs)

    def to_json(self) -> dict:
        g, f = self.graph, self.faithfulness
        nodes = g.nodes()
        return {
            "model": self.model, "method": self.scores.method, "steps": self.scores.steps,
            "ablation": self.scores.ablation,
            "graph": {"nodes": nodes, "receivers": g.receiver_names, "edges": g.edge_list(g.real, self.scores.scores)},
            "circuit": {"asked": self.asked, "edges": g.edge_list(self.circuit, self.scores.scores),
                        "nodes": [nodes[i]["name"] for i in sorted(  # in the graph's order: embeddings to the decision
                            {i for s, r in zip(*np.nonzero(self.circuit)) for i in (int(s), int(g.receiver_node[r]))})]},
            "faithfulness": [{"share": s, "edges": n, "kept": k, "value": round(v, 6)}
                             for s, n, k, v in zip(f.sizes, f.edges, f.kept, f.values)],
            "random_faithfulness": [{"share": s, "edges": n, "kept": round(k, 1), "value": round(v, 6)}
                                    for s, n, k, v in zip(f.sizes, f.edges, f.random_kept, f.random_values)],
            "cpr": round(f.cpr, 6), "cmd": round(f.cmd, 6), "random_cpr": round(f.random_cpr, 6),
            "random_cmd": round(f.random_cmd, 6), "share_reaching_80": f.share_reaching(FAITHFUL),
            "clean_metric": f.clean_metric, "corrupted_metric": f.empty_metric,
            "attribution_pairs": [p.to_json() for p in self.attribution_pairs],
            "evaluation_pairs": [p.to_json() for p in self.evaluation_pairs],
            "numbering": "layers and heads from 0; 'embed' is the embeddings; scores are summed over positions",
        }


def split_said(attributed: int, evaluated: int, same: bool) -> str:
    """The split in words: one pair both scores the edges and tests the circuits (nothing is held out)."""
    pairs = f"{attributed} pair{'s' if attributed != 1 else ''}"
    if same:
        return f"{pairs} both scored the edges and tested the circuits (too few to hold any out: the faithfulness is " \
               "measured where the circuit was found)"
    return f"{pairs} scored the edges, {evaluated} held out tested the circuits"


def split_pairs(pairs: Sequence[Pair], seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """(attribution half, evaluation half) in a seeded order; one pair serves both."""
    order = list(pairs)
    random.Random(seed).shuffle(order)
    if len(order) == 1:
        return order, order
    half = (len(order) + 1) // 2
    return order[:half], order[half:]


def find_circuit(lm: LoadedModel, pairs: Sequence[Pair], method: str = "eap", steps: int = DEFAULT_STEPS,
                 top_n: int | None = None, ablation: str = "patch", sizes: Sequence[float] = SIZES, seed: int = 0,
                 progress: Progress | None = None, stop: Callable[[], bool] | None = None) -> CircuitResult:
    """A circuit of ``lm`` for the behaviour ``pairs`` show, and its faithfulness.

    The pairs are shuffled (``seed``) and split: the first half scores every edge by ``method`` ("eap",
    "eap-ig-inputs" or "eap-ig-activations", integrated gradients with ``steps`` steps), the second half
    (held out; one pair serves both) runs circuits of each share of the edges in ``sizes`` with every edge
    outside them ablated (``ablation``: "patch" from the corrupted run, or "mean": each node's mean output).
    The circuit returned is the top ``top_n`` edges by |score|, or by default the smallest swept circuit that
    reaches 80 % faithfulness, with nodes that cannot reach both the embeddings and the decision pruned.
    ``progress(done, total, what)`` and ``stop()`` serve a progress bar and a Stop button; every bad input is
    one ``BertScopeError`` line. The module's docstring runs an example; ``CircuitResult.to_json`` is what
    ``bertscope circuit --json`` prints.

    Args:
        lm: the model.
        pairs: clean/corrupted pairs (``task_pairs``, ``read_pairs``).
        method: "eap", "eap-ig-inputs" or "eap-ig-activations".
        steps: integrated gradients' steps (the EAP-IG methods).
        top_n: the circuit's edges (default: the smallest swept size 80 % faithful).
        ablation: what edges outside the circuit carry: "patch" (the corrupted run) or "mean".
        sizes: the shares of edges swept on the held-out pairs.
        seed: the pairs' shuffle.
        progress: called with (done, total, what).
        stop: asked between passes; True ends the search.

    Returns:
        A ``CircuitResult``: the edges' scores, the circuit, its faithfulness curve (CPR, CMD) against random.
    """
    check_method(method, steps, ablation)
    supports(lm)
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    if top_n is not None and not 0 < top_n <= graph.n_edges:
        raise BertScopeError(f"A circuit has 1 to {graph.n_edges:,} edges (this model's graph); {top_n:,} was asked.")
    prepare_all(lm, pairs)  # every pair checked in the order given, before any pass
    attribution, evaluation = split_pairs(pairs, seed)
    recorded = record_pairs(lm, attribution, ablation, progress=progress)
    scores = attribute_edges(lm, method=method, steps=steps, ablation=ablation, recorded=recorded, progress=progress,
                             stop=stop)
    held = recorded if evaluation is attribution else record_pairs(lm, evaluation, ablation, progress=progress,
                                                                   mean_over=recorded[1])  # one mean set
    curve = faithfulness_curve(lm, scores, held[1], held[0], sizes, progress=progress, stop=stop)
    if top_n is None:
        share = curve.share_reaching(FAITHFUL)
        top_n = curve.edges[curve.sizes.index(share)] if share is not None else curve.edges[-2 if len(sizes) > 1 else -1]
    return CircuitResult(lm.name, scores, scores.graph.top(scores.scores, top_n), top_n, curve, list(attribution),
                         list(evaluation))
