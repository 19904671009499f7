"""Faithfulness as MIB scores it: the areas by the trapezoid rule, the full graph at 1 and the empty
circuit at 0 by construction, random circuits beside, one pass per batch of circuits."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.circuits.edges import attribute_edges, record_pairs
from bertscope.circuits.faithfulness import areas, evaluate, faithfulness_curve
from bertscope.circuits.find import find_circuit, split_pairs
from bertscope.circuits.runs import layer_weights
from bertscope.errors import BertScopeError
from tests.circuits.conftest import PAIRS


def test_areas_are_mibs_trapezoids():
    sizes = [0.001, 0.01, 0.1, 1.0]
    cpr, cmd = areas(sizes, [1.0, 1.0, 1.0, 1.0])
    assert cpr == pytest.approx(0.999) and cmd == pytest.approx(0.0)
    cpr, cmd = areas([0.5, 1.0], [0.0, 1.0])
    assert cpr == pytest.approx(0.25) and cmd == pytest.approx(0.25)
    cpr, cmd = areas([0.5, 1.0], [2.0, 1.0])  # overshooting counts against CMD
    assert cpr == pytest.approx(0.75) and cmd == pytest.approx(0.25)


def test_the_curve_runs_from_the_corrupted_run_to_the_model_and_beats_nothing_by_construction(lm):
    where, recorded = record_pairs(lm, PAIRS, "patch")
    scores = attribute_edges(lm, method="eap", recorded=(where, recorded))
    curve = faithfulness_curve(lm, scores, recorded, where, sizes=(0.01, 0.1, 0.5, 1.0), seeds=2)
    assert curve.values[-1] == pytest.approx(1.0, abs=1e-9) and curve.random_values[-1] == pytest.approx(1.0, abs=1e-9)
    assert curve.edges == [int(s * scores.graph.n_edges) for s in (0.01, 0.1, 0.5, 1.0)]
    assert all(k <= n for k, n in zip(curve.kept, curve.edges)) and curve.kept[-1] == scores.graph.n_edges
    assert curve.clean_metric == pytest.approx(scores.clean_metric) and curve.empty_metric == pytest.approx(
        scores.ablated_metric)
    assert (curve.cpr, curve.cmd) == pytest.approx(areas(curve.sizes, curve.values))
    # evaluating an explicit empty circuit gives the corrupted run, a full one the clean run, for each pair
    graph, weights = scores.graph, layer_weights(lm)
    ends = evaluate(lm, graph, weights, recorded, where, np.stack([graph.real, np.zeros_like(graph.real)]),
                    max_batch_bytes=1)  # one row per pass
    assert ends.mean(axis=1) == pytest.approx([curve.clean_metric, curve.empty_metric], abs=1e-9)
    with pytest.raises(BertScopeError, match="ascending"):
        faithfulness_curve(lm, scores, recorded, where, sizes=(0.5, 0.1))


def test_find_circuit_holds_out_half_and_reports_the_issues_json(lm):
    first, second = split_pairs(PAIRS, seed=0)
    assert len(first) == 2 and len(second) == 1 and set(first + second) == set(PAIRS)
    found = find_circuit(lm, PAIRS, method="eap-ig-inputs", steps=3, top_n=20, ablation="mean",
                         sizes=(0.05, 0.5, 1.0))
    data = found.to_json()
    assert set(data) >= {"graph", "circuit", "faithfulness", "random_faithfulness", "cpr", "cmd", "clean_metric",
                         "corrupted_metric"}
    assert len(data["graph"]["edges"]) == found.graph.n_edges
    assert set(data["graph"]["edges"][0]) == {"source", "target", "score"}
    assert data["circuit"]["asked"] == 20 and len(data["circuit"]["edges"]) == int(found.circuit.sum()) <= 20
    assert [p["clean"] for p in data["evaluation_pairs"]] == [second[0].clean]
    assert data["ablation"] == "mean" and data["faithfulness"][-1]["value"] == pytest.approx(1.0)
    with pytest.raises(BertScopeError, match="A circuit has 1 to"):
        find_circuit(lm, PAIRS, top_n=10**6)
    single = find_circuit(lm, PAIRS[:1], sizes=(0.5, 1.0))  # one pair serves both halves
    assert single.attribution_pairs == single.evaluation_pairs == PAIRS[:1]
