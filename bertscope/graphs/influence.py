"""Influence, pruning and the graph scores, as circuit-tracer computes them (``circuit_tracer/graph.py``, 0.5.0:
``normalize_matrix``, ``compute_influence``, ``compute_edge_influence``, ``find_threshold``, ``prune_graph``,
``compute_graph_scores``), on an adjacency matrix whose rows are targets and columns sources, in the node order
features, errors, embeddings (circuit-tracer's tokens), target (circuit-tracer's logits; one here).

    Â        = |A| / Σ_row |A|                       (each row's sources' shares)
    influence = w Â + w Â² + …                        (w: 1 at the target; a DAG, so the series ends)
    replacement score  = I(embeddings) / (I(embeddings) + I(errors))
    completeness score = Σ_n (1 − Σ_errors Â[n, ·]) (I_n + w_n) / Σ_n (I_n + w_n)

Pruning keeps the nodes carrying ``node_threshold`` of the cumulative influence (embeddings and the target always),
then the edges carrying ``edge_threshold`` of the edge influence Â'[n, m] (I'_n + w_n) of the graph cut to those nodes
(Â' its rows normalised again over the kept sources, as circuit-tracer's ``compute_edge_influence`` does), then drops feature and error
nodes left without an outgoing edge (and features without an incoming one), until nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def normalize_matrix(a: np.ndarray) -> np.ndarray:
    """|A| with each row scaled to sum to 1 (rows of zeros stay zero)."""
    m = np.abs(a)
    return m / np.maximum(m.sum(axis=1, keepdims=True), 1e-10)


def compute_influence(a_hat: np.ndarray, w: np.ndarray, max_iter: int = 1000) -> np.ndarray:
    """w Â + w Â² + … (until the term is zero; a cycle would be a bug: refused after ``max_iter`` terms)."""
    current = w @ a_hat
    influence = current.copy()
    for _ in range(max_iter):
        if not current.any():
            return influence
        current = current @ a_hat
        influence += current
    raise ValueError("The influence did not converge: the graph has a cycle.")


def compute_edge_influence(a_hat: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Â[n, m] (I_n + w_n): each edge's share of the influence reaching the target."""
    return a_hat * (compute_influence(a_hat, w) + w)[:, None]


def find_threshold(scores: np.ndarray, threshold: float) -> float:
    """The score at which the largest scores first reach ``threshold`` of their total."""
    ordered = np.sort(scores.ravel())[::-1]
    cumulative = np.cumsum(ordered) / max(ordered.sum(), 1e-30)
    return float(ordered[min(int(np.searchsorted(cumulative, threshold)), len(ordered) - 1)])


@dataclass(frozen=True)
class Pruned:
    node_mask: np.ndarray  # [N] bool
    edge_mask: np.ndarray  # [N, N] bool
    influence: np.ndarray  # [N] each node's influence on the target (unpruned graph)


def node_influence(a: np.ndarray) -> np.ndarray:
    """[N] every node's influence on the target (the last node) in the unpruned graph ``a`` [target, source]:
    circuit-tracer's ``compute_node_influence`` of one logit of weight 1."""
    w = np.zeros(len(a))
    w[-1] = 1.0
    return compute_influence(normalize_matrix(a), w)


def prune_graph(a: np.ndarray, n_features: int, n_errors: int, node_threshold: float = 0.8,
                edge_threshold: float = 0.98) -> Pruned:
    """circuit-tracer's ``prune_graph`` on ``a`` [N, N] (features, errors, embeddings, the target last).

    Args:
        a: [target node, source node] direct effects.
        n_features: the feature nodes, first.
        n_errors: the error nodes, after them.
        node_threshold: the share of the target's influence the kept nodes explain.
        edge_threshold: the share of the kept nodes' influence the kept edges explain.

    Returns:
        ``Pruned``: the node and edge masks and every node's influence on the target.
    """
    n = len(a)
    w = np.zeros(n)
    w[-1] = 1.0
    influence = node_influence(a)
    node_mask = influence >= find_threshold(influence, node_threshold)
    node_mask[n_features + n_errors:] = True  # embeddings and the target stay
    kept = normalize_matrix(a * node_mask[:, None] * node_mask[None, :])  # each kept row over its kept sources
    edge_scores = compute_edge_influence(kept, w)
    edge_mask = edge_scores >= find_threshold(edge_scores, edge_threshold)
    edge_mask &= kept > 0
    always = np.zeros(n, bool)
    always[n_features + n_errors:] = True
    while True:  # a feature or error with no kept edge out, or a feature with none in, goes (and its edges)
        out_ok = edge_mask.any(axis=0) | always  # column m has an edge into some kept row
        in_ok = edge_mask.any(axis=1) | always
        in_ok[n_features:] = True  # errors and embeddings have no incoming edges
        keep = node_mask & out_ok & in_ok
        if (keep == node_mask).all():
            break
        node_mask = keep
        edge_mask &= node_mask[:, None] & node_mask[None, :]
    return Pruned(node_mask, edge_mask, influence)


def graph_scores(a: np.ndarray, n_features: int, n_errors: int) -> tuple[float, float]:
    """circuit-tracer's ``compute_graph_scores`` of the unpruned graph.

    Args:
        a: [target node, source node] direct effects (features, errors, embeddings, the target last).
        n_features: the feature nodes.
        n_errors: the error nodes.

    Returns:
        (replacement score, completeness score): the share of the target's influence that reaches it from the
        embeddings through features alone, and the share of every node's input that is not error.
    """
    n = len(a)
    w = np.zeros(n)
    w[-1] = 1.0
    a_hat = normalize_matrix(a)
    influence = compute_influence(a_hat, w)
    errors = slice(n_features, n_features + n_errors)
    embeddings = slice(n_features + n_errors, n - 1)
    token_influence, error_influence = influence[embeddings].sum(), influence[errors].sum()
    replacement = token_influence / max(token_influence + error_influence, 1e-30)
    non_error = 1 - a_hat[:, errors].sum(axis=1)
    output = influence + w
    return float(replacement), float((non_error * output).sum() / output.sum())
