"""Attention rollout and attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in
Transformers", ACL; section 3), from the raw attention weights of one pass.

Choices, as in the paper and its reference code (samiraabnar/attention_flow):
- heads are averaged: ``Ā_l = mean_h A_l^h`` (rows still sum to 1);
- the residual connection is counted as an identity of equal weight:
  ``Â_l = 0.5 Ā_l + 0.5 I`` (rows still sum to 1);
- **rollout** multiplies them up: ``R_l = Â_l Â_{l-1} … Â_1``; ``R_l[i, j]`` is how much input
  token j reaches token i after layer l (rows sum to 1);
- **flow** treats the layers as a graph (node = token at a layer, edge capacity ``Â_l[i, j]``
  from token j below to token i above) and takes, for every token i after layer l and every
  input token j, the maximum flow from j to i (networkx preflow-push, one residual network per
  layer depth; Edmonds-Karp as in the reference code gives the same values 7x slower), then
  normalises each row to sum to 1. That is n² max-flow problems per layer, each costlier the
  deeper the layer (bundled-mlm, 6 layers, its last layer: 4.6 s at 16 tokens, 23 s at 24,
  72 s at 32; ``benchmarks/attribution.py``), so it is capped at ``MAX_FLOW_TOKENS`` tokens
  and can be asked for chosen layers only.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from bertscope.errors import BertScopeError

MAX_FLOW_TOKENS = 24


def residual_attention(attentions: np.ndarray) -> np.ndarray:
    """[layer, head, q, k] -> [layer, q, k]: heads averaged, 0.5·A + 0.5·I."""
    mean = attentions.astype(np.float64).mean(axis=1)  # [layer, q, k]
    return 0.5 * mean + 0.5 * np.eye(mean.shape[-1])[None]


def rollout(attentions: np.ndarray) -> np.ndarray:
    """[layer, head, q, k] -> [layer, q, k]: after each layer, input token j's share in token i."""
    out = np.empty(attentions.shape[:1] + attentions.shape[2:], dtype=np.float64)
    acc = np.eye(attentions.shape[-1])
    for layer, a in enumerate(residual_attention(attentions)):
        acc = a @ acc
        out[layer] = acc
    return out.astype(np.float32)


def flow(attentions: np.ndarray, layers: Sequence[int] | None = None, max_tokens: int = MAX_FLOW_TOKENS,
         progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[layer, head, q, k] -> [len(layers), q, k]: max-flow from each input token to each token
    after each of ``layers`` (counted from 1; default all), rows normalised to 1.
    ``progress(done, total)`` is called after each row of problems."""
    import networkx as nx
    from networkx.algorithms.flow import build_residual_network, preflow_push

    n_layers, _, n, _ = attentions.shape
    chosen = sorted(set(layers)) if layers is not None else list(range(1, n_layers + 1))
    if not chosen or not all(1 <= layer <= n_layers for layer in chosen):
        raise BertScopeError(f"Flow layers are counted from 1 to {n_layers}; got {list(layers or [])}.")
    if n > max_tokens:
        raise BertScopeError(
            f"Attention flow solves n² max-flow problems per layer and is capped at {max_tokens} tokens "
            f"(this input has {n}): shorten the text, or use rollout, its fast approximation."
        )
    weights = residual_attention(attentions)  # [layer, q, k]
    out = np.zeros((len(chosen), n, n), dtype=np.float64)
    graph = nx.DiGraph()
    graph.add_nodes_from((0, j) for j in range(n))
    built, done = 0, 0
    for row, layer in enumerate(chosen):
        for depth in range(built + 1, layer + 1):  # grow the graph up to this layer
            a = weights[depth - 1]  # [q, k]: edge (depth-1, k) -> (depth, q)
            graph.add_edges_from(((depth - 1, k), (depth, q), {"capacity": float(a[q, k])})
                                 for q in range(n) for k in range(n) if a[q, k] > 0)
        built = layer
        residual = build_residual_network(graph, "capacity")  # reused by every problem of this depth
        for i in range(n):
            for j in range(n):
                out[row, i, j] = nx.maximum_flow_value(graph, (0, j), (layer, i), capacity="capacity",
                                                       flow_func=preflow_push, residual=residual)
            done += 1
            if progress:
                progress(done, n * len(chosen))
    out /= np.maximum(out.sum(axis=-1, keepdims=True), 1e-12)
    return out.astype(np.float32)
