"""The encoder's computational graph as EAP-IG builds it (Hanna, Pezzelle & Belinkov 2024; reference code
hannamw/EAP-IG, ``src/eap/graph.py``), for a bidirectional encoder.

Senders (the reference's "forward" nodes), in pass order: ``embed`` (the input node), then per layer l
each head ``blocks.{l}.attn.hook_result[h]`` and the feed-forward ``blocks.{l}.hook_mlp_out``.
Receivers (its "backward" nodes): per layer each head's query, key and value inputs
(``blocks.{l}.attn.hook_q[h]``, ``hook_k[h]``, ``hook_v[h]``), the feed-forward's input
(``blocks.{l}.mlp.hook_pre``), and the decision (``logits``: the last hidden state the output head reads).
An edge runs from every sender to every receiver downstream of it through the residual stream: a head
of layer l reads every sender of layers < l, a feed-forward of layer l also its own layer's heads, the
decision everything. Attention is bidirectional, so an edge carries all positions (EAP-IG sums its
score over positions, and so do we: per-position edges would multiply the graph by the squared length).

A circuit is a set of edges; ``prune`` keeps an edge only when its sender is reachable from the input
and its receiver's node reaches the decision through edges of the circuit (the reference's ``prune``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from bertscope.errors import BertScopeError

INPUT, LOGITS = "embed", "logits"


@dataclass(frozen=True)
class CircuitGraph:
    """Indices of senders and receivers for ``layers`` blocks of ``heads`` heads."""

    layers: int
    heads: int

    # ---- senders ("forward" nodes): 0 = embed; layer l's heads, then its feed-forward
    @property
    def n_senders(self) -> int:
        return 1 + self.layers * (self.heads + 1)

    def head_sender(self, layer: int, head: int) -> int:
        return 1 + layer * (self.heads + 1) + head

    def mlp_sender(self, layer: int) -> int:
        return 1 + layer * (self.heads + 1) + self.heads

    def senders_before_attention(self, layer: int) -> int:
        """How many senders a head of ``layer`` reads (every earlier layer's, and the input)."""
        return 1 + layer * (self.heads + 1)

    def senders_before_mlp(self, layer: int) -> int:
        return self.senders_before_attention(layer) + self.heads

    # ---- receivers ("backward" nodes): per layer q of every head, k, v, then the feed-forward; then logits
    @property
    def n_receivers(self) -> int:
        return self.layers * (3 * self.heads + 1) + 1

    def qkv_receiver(self, layer: int, which: str, head: int) -> int:
        return layer * (3 * self.heads + 1) + "qkv".index(which) * self.heads + head

    def mlp_receiver(self, layer: int) -> int:
        return layer * (3 * self.heads + 1) + 3 * self.heads

    @property
    def logits_receiver(self) -> int:
        return self.n_receivers - 1

    # ---- names (hook-point names, a head's index in brackets)
    @cached_property
    def sender_names(self) -> list[str]:
        names = [INPUT]
        for layer in range(self.layers):
            names += [f"blocks.{layer}.attn.hook_result[{h}]" for h in range(self.heads)]
            names.append(f"blocks.{layer}.hook_mlp_out")
        return names

    @cached_property
    def receiver_names(self) -> list[str]:
        names = []
        for layer in range(self.layers):
            for which in "qkv":
                names += [f"blocks.{layer}.attn.hook_{which}[{h}]" for h in range(self.heads)]
            names.append(f"blocks.{layer}.mlp.hook_pre")
        return [*names, LOGITS]

    @cached_property
    def receiver_node(self) -> np.ndarray:
        """[receiver] the sender index of the node a receiver belongs to (a head's q/k/v: that head;
        the decision: ``n_senders``, a node that sends nothing)."""
        out = np.empty(self.n_receivers, np.int64)
        for layer in range(self.layers):
            for which in "qkv":
                for h in range(self.heads):
                    out[self.qkv_receiver(layer, which, h)] = self.head_sender(layer, h)
            out[self.mlp_receiver(layer)] = self.mlp_sender(layer)
        out[self.logits_receiver] = self.n_senders
        return out

    @cached_property
    def real(self) -> np.ndarray:
        """[sender, receiver] bool: the edges that exist (a sender upstream of the receiver)."""
        mask = np.zeros((self.n_senders, self.n_receivers), bool)
        for layer in range(self.layers):
            for which in "qkv":
                for h in range(self.heads):
                    mask[: self.senders_before_attention(layer), self.qkv_receiver(layer, which, h)] = True
            mask[: self.senders_before_mlp(layer), self.mlp_receiver(layer)] = True
        mask[:, self.logits_receiver] = True
        return mask

    @cached_property
    def n_edges(self) -> int:
        return int(self.real.sum())

    def node_of(self, sender: int) -> dict:
        """{"name", "kind", "layer", "head"} of a sender ("embeddings" for the input, as everywhere)."""
        if sender == 0:
            return {"name": INPUT, "kind": "input", "layer": "embeddings", "head": None}
        layer, rest = divmod(sender - 1, self.heads + 1)
        if rest == self.heads:
            return {"name": self.sender_names[sender], "kind": "mlp", "layer": layer, "head": None}
        return {"name": self.sender_names[sender], "kind": "head", "layer": layer, "head": rest}

    def nodes(self) -> list[dict]:
        return [self.node_of(s) for s in range(self.n_senders)] + [
            {"name": LOGITS, "kind": "output", "layer": self.layers, "head": None}]

    # ---- circuits
    def prune(self, edges: np.ndarray) -> np.ndarray:
        """[sender, receiver] bool: ``edges`` less every edge whose sender the input cannot reach or whose
        receiver's node cannot reach the decision, within ``edges`` (the reference's ``Graph.prune``)."""
        edges = edges & self.real
        node = self.receiver_node
        reached = np.zeros(self.n_senders + 1, bool)  # from the input, in pass order
        reached[0] = True
        for s in range(1, self.n_senders + 1):
            feeding = edges[:, node == s].any(axis=1)  # [sender] edges into any of node s's receivers
            reached[s] = bool((feeding & reached[: self.n_senders]).any())
        reaches = np.zeros(self.n_senders + 1, bool)  # to the decision, backwards
        reaches[self.n_senders] = True
        for s in range(self.n_senders - 1, -1, -1):
            reaches[s] = bool((edges[s] & reaches[node]).any())
        return edges & reached[: self.n_senders, None] & reaches[node][None, :]

    def top(self, scores: np.ndarray, n: int, absolute: bool = True) -> np.ndarray:
        """[sender, receiver] bool: the ``n`` edges of highest score (|score| when ``absolute``), pruned."""
        if not 0 < n <= self.n_edges:
            raise BertScopeError(f"A circuit has 1 to {self.n_edges:,} edges (this graph's); {n:,} was asked.")
        flat = np.where(self.real, np.abs(scores) if absolute else scores, -np.inf).ravel()
        chosen = np.zeros(flat.shape, bool)
        chosen[np.argsort(-flat, kind="stable")[:n]] = True
        return self.prune(chosen.reshape(self.real.shape))

    def edge_list(self, edges: np.ndarray, scores: np.ndarray | None = None) -> list[dict]:
        """[{"source", "target", "score"}] of the ``edges`` given, strongest first."""
        s, r = np.nonzero(edges)
        order = np.argsort(-np.abs(scores[s, r])) if scores is not None else np.arange(len(s))
        return [{"source": self.sender_names[s[i]], "target": self.receiver_names[r[i]],
                 "score": None if scores is None else round(float(scores[s[i], r[i]]), 8)} for i in order]
