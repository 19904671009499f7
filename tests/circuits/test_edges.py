"""Edge attribution patching: EAP's score of an edge is the derivative of the circuit pass's metric with
respect to that edge's presence (checked by autograd on the edge mask, to float precision); EAP-IG
tracks exact removal of single edges on the real model better than EAP; bad requests are one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.circuits.decomposed import layer_weights, run_pass
from bertscope.circuits.edges import attribute_edges, record_pairs
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.pairs import Pair
from bertscope.errors import BertScopeError
from tests.circuits.conftest import PAIRS


@pytest.mark.parametrize("ablation", ["patch", "mean"])
def test_eap_is_minus_the_gradient_of_the_metric_with_respect_to_each_edge(lm, ablation):
    weights = layer_weights(lm)
    recorded = record_pairs(lm, PAIRS, ablation, weights)
    scores = attribute_edges(lm, method="eap", ablation=ablation, recorded=recorded)
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    expected = np.zeros(graph.real.shape)
    for pair in recorded[1]:
        keep = torch.ones(1, graph.n_senders, graph.n_receivers, dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            run_pass(lm, graph, weights, pair, recorded[0], keep=keep).sum().backward()
        expected -= keep.grad[0].numpy() / len(recorded[1])
    expected[~graph.real] = 0
    np.testing.assert_allclose(scores.scores, expected, atol=1e-10)
    gap = abs(scores.clean_metric - scores.ablated_metric)
    assert gap > 1e-5 and np.abs(scores.scores).max() > 0.1 * gap and scores.pairs == 3  # not a zero identity


def test_every_method_scores_every_real_edge(lm):
    recorded = record_pairs(lm, PAIRS, "patch")
    out = {m: attribute_edges(lm, method=m, steps=4, recorded=recorded) for m in
           ("eap", "eap-ig-inputs", "eap-ig-activations")}
    graph = out["eap"].graph
    for method, scores in out.items():
        assert scores.scores.shape == graph.real.shape and np.isfinite(scores.scores).all()
        assert (scores.scores[~graph.real] == 0).all() and np.abs(scores.scores[graph.real]).sum() > 0, method
        assert scores.to_json()["edges"][0]["source"] in graph.sender_names
    assert not np.allclose(out["eap"].scores, out["eap-ig-inputs"].scores)


def test_bad_requests_are_one_line(lm):
    for kwargs, message in (({"method": "acdc"}, "Unknown method 'acdc'"), ({"ablation": "zero"}, "Unknown ablation"),
                            ({"method": "eap-ig-inputs", "steps": 0}, "1 to 100 steps")):
        with pytest.raises(BertScopeError, match=message):
            attribute_edges(lm, PAIRS, **kwargs)
    with pytest.raises(BertScopeError, match="empty"):
        attribute_edges(lm, [])


@pytest.mark.slow
def test_eap_ig_tracks_exact_edge_removal_on_bundled_mlm():
    """On the real model, each method's score against removing that edge alone (one circuit pass per
    edge): the strongest 60 edges by EAP and 140 at random. EAP-IG is the closer (0.98 against 0.88 when
    this was written), as Hanna et al. 2024 found on decoders."""
    lm = load_model("bundled-mlm")
    pairs = [Pair("The men at the table [MASK] tired.", "The man at the table [MASK] tired.", "were", "was")]
    weights = layer_weights(lm)
    where, recorded = record_pairs(lm, pairs, "patch", weights)
    scores = {m: attribute_edges(lm, method=m, steps=10, recorded=(where, recorded)).scores
              for m in ("eap", "eap-ig-inputs")}
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    s, r = np.nonzero(graph.real)
    rng = np.random.default_rng(0)
    picked = np.concatenate([np.argsort(-np.abs(scores["eap"][s, r]))[:60], rng.choice(len(s), 140, replace=False)])
    keep = torch.ones(len(picked), graph.n_senders, graph.n_receivers)
    keep[torch.arange(len(picked)), s[picked], r[picked]] = 0
    with torch.inference_mode():
        full = float(run_pass(lm, graph, weights, recorded[0], where, keep=keep[:1] * 0 + 1)[0])
        exact = torch.cat([run_pass(lm, graph, weights, recorded[0], where, keep=keep[i:i + 50])
                           for i in range(0, len(picked), 50)]).double().numpy() - full
    corr = {m: np.corrcoef(v[s[picked], r[picked]], exact)[0, 1] for m, v in scores.items()}
    assert corr["eap-ig-inputs"] > 0.95 and corr["eap"] > 0.8 and corr["eap-ig-inputs"] > corr["eap"], corr
