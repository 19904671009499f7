"""The encoder's graph as EAP-IG builds it: its counts, its names, and pruning to edges that connect
the input to the decision."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.circuits.graph import INPUT, LOGITS, CircuitGraph
from bertscope.errors import BertScopeError


def test_counts_match_the_reference_for_a_gpt2_sized_graph():
    g = CircuitGraph(12, 12)
    assert g.n_senders == 1 + 12 * 13 and g.n_receivers == 12 * 37 + 1
    assert g.n_edges == 32491  # MIB's EDGE_COUNTS["gpt2"]: 12 layers of 12 heads, the same graph


def test_edges_run_downstream_only_and_names_are_hook_points():
    g = CircuitGraph(2, 2)
    assert g.sender_names == [INPUT, "blocks.0.attn.hook_result[0]", "blocks.0.attn.hook_result[1]",
                              "blocks.0.hook_mlp_out", "blocks.1.attn.hook_result[0]", "blocks.1.attn.hook_result[1]",
                              "blocks.1.hook_mlp_out"]
    assert g.receiver_names[:7] == ["blocks.0.attn.hook_q[0]", "blocks.0.attn.hook_q[1]", "blocks.0.attn.hook_k[0]",
                                    "blocks.0.attn.hook_k[1]", "blocks.0.attn.hook_v[0]", "blocks.0.attn.hook_v[1]",
                                    "blocks.0.mlp.hook_pre"]
    assert g.receiver_names[-1] == LOGITS
    real = g.real
    assert real[:, g.qkv_receiver(0, "k", 1)].tolist() == [True] + [False] * 6  # layer 0 reads the input alone
    assert real[:, g.mlp_receiver(0)].tolist() == [True, True, True, False, False, False, False]  # and its heads
    assert real[:, g.qkv_receiver(1, "v", 0)].tolist() == [True] * 4 + [False] * 3
    assert real[:, g.logits_receiver].all()
    assert g.node_of(0)["layer"] == "embeddings" and g.node_of(g.head_sender(1, 1)) == {
        "name": "blocks.1.attn.hook_result[1]", "kind": "head", "layer": 1, "head": 1}


def test_prune_keeps_only_edges_on_a_path_from_the_input_to_the_decision():
    g = CircuitGraph(2, 2)
    edges = np.zeros_like(g.real)
    h00, m0, h11 = g.head_sender(0, 0), g.mlp_sender(0), g.head_sender(1, 1)
    edges[0, g.qkv_receiver(0, "q", 0)] = True        # input -> head 0.0
    edges[h00, g.mlp_receiver(0)] = True               # head 0.0 -> mlp 0
    edges[m0, g.logits_receiver] = True                # mlp 0 -> logits: a full path
    edges[h11, g.logits_receiver] = True               # head 1.1 is fed by nothing: cut
    edges[0, g.qkv_receiver(1, "v", 0)] = True         # input -> head 1.0, which feeds nothing: cut
    kept = g.prune(edges)
    assert set(zip(*np.nonzero(kept))) == {(0, g.qkv_receiver(0, "q", 0)), (h00, g.mlp_receiver(0)),
                                          (m0, g.logits_receiver)}
    assert np.array_equal(g.prune(g.real), g.real)  # every edge of the full graph is on a path


def test_top_n_by_absolute_score_and_its_bounds():
    g = CircuitGraph(1, 1)
    scores = np.zeros(g.real.shape)
    scores[0, g.logits_receiver] = -5.0  # input -> logits, strongest by |score|
    scores[g.head_sender(0, 0), g.logits_receiver] = 1.0
    scores[0, g.qkv_receiver(0, "v", 0)] = 0.5
    top = g.top(scores, 1)
    assert top.sum() == 1 and top[0, g.logits_receiver]
    top3 = g.top(scores, 3)
    assert top3.sum() == 3
    assert g.edge_list(top3, scores)[0] == {"source": INPUT, "target": LOGITS, "score": -5.0}
    for n in (0, g.n_edges + 1):
        with pytest.raises(BertScopeError, match="A circuit has 1 to"):
            g.top(scores, n)
