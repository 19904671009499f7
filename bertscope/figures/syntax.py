"""Structural-probe figures: the four scores by layer with the chain baseline, a sentence's gold and
predicted trees as arcs over its words, and gold and predicted distance matrices side by side."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertscope.figures.text import label

SCORES = {"uuas": "UUAS", "dspr": "DSpr.", "root_accuracy": "root accuracy", "nspr": "NSpr."}
STAGGER_FROM = 14  # words; more than this and the labels alternate between two rows
COLOURS = {"uuas": "#1f77b4", "dspr": "#2ca02c", "root_accuracy": "#d62728", "nspr": "#9467bd"}


def scores_by_layer(layers: Sequence[dict], baselines: dict, model: str) -> go.Figure:
    """Each score per hidden state ("embeddings", 0, 1, …) with the chain's as a dotted line."""
    x = [str(r["layer"]) for r in layers]
    fig = go.Figure()
    for key, title in SCORES.items():
        values = [r.get(key) for r in layers]
        if all(v is None for v in values):
            continue
        fig.add_trace(go.Scatter(x=x, y=values, mode="lines+markers", name=title,
                                 line=dict(color=COLOURS[key]), hovertemplate="%{x}: %{y:.3f}<extra>" + title + "</extra>"))
        chain = baselines.get("chain", {}).get(key)
        if chain is not None:
            fig.add_trace(go.Scatter(x=x, y=[chain] * len(x), mode="lines", name=f"{title}, chain",
                                     line=dict(color=COLOURS[key], dash="dot", width=1), hoverinfo="skip"))
        random = baselines.get("random_model", {}).get(key)
        if random is not None:
            fig.add_trace(go.Scatter(x=[str(baselines["random_model"]["layer"])], y=[random], mode="markers",
                                     name=f"{title}, random model", marker=dict(color=COLOURS[key], symbol="x",
                                                                                 size=10)))
    fig.update_layout(title=f"Structural probes on {model}: test scores by hidden state (dotted: the "
                            "right-branching chain)", xaxis=dict(title="hidden state", type="category"),
                      yaxis=dict(title="score", range=[0, 1]), height=420, legend=dict(orientation="h", y=-0.25))
    return fig


def tree_arcs(words: Sequence[str], gold_heads: Sequence[int] | None, predicted_edges: Sequence[Sequence[int]],
              title: str) -> go.Figure:
    """Gold dependency arcs above the words, the probe's tree below (words numbered from 1; a
    predicted edge that is not a gold edge drawn in red). ``gold_heads`` None: a sentence without
    gold (one the user typed), its predicted tree alone."""
    n = len(words)
    gold = {tuple(sorted((i + 1, h))) for i, h in enumerate(gold_heads or []) if h}
    fig = go.Figure()

    def arc(a: int, b: int, up: bool, colour: str, name: str, show: bool) -> None:
        t = np.linspace(0, np.pi, 24)
        centre, radius = (a + b) / 2, abs(b - a) / 2
        height = 0.35 + 0.25 * abs(b - a)
        fig.add_trace(go.Scatter(x=centre - radius * np.cos(t), y=(1 if up else -1) * height * np.sin(t),
                                 mode="lines", line=dict(color=colour, width=1.6), name=name, legendgroup=name,
                                 showlegend=show, hovertemplate=f"{words[a - 1]} – {words[b - 1]}<extra>{name}</extra>"))

    shown: set[str] = set()
    for a, b in sorted(gold):
        arc(a, b, True, "#444", "gold tree", "gold tree" not in shown)
        shown.add("gold tree")
    for a, b in predicted_edges:
        right = gold_heads is None or tuple(sorted((a, b))) in gold
        name = "predicted tree" if gold_heads is None else \
            "predicted, in the gold tree" if right else "predicted, not in it"
        arc(a, b, False, "#1f77b4" if right else "#d62728", name, name not in shown)
        shown.add(name)
    # a long sentence's words take two rows (above and below the line, in pixels whatever the arcs' heights),
    # alternately, so neighbours do not overlap
    places = "middle center" if n <= STAGGER_FROM else ["bottom center" if i % 2 else "top center" for i in range(n)]
    fig.add_trace(go.Scatter(x=list(range(1, n + 1)), y=[0] * n, mode="text", text=[label(w) for w in words],
                             textposition=places, showlegend=False, hoverinfo="skip"))
    fig.update_layout(title=title, height=420, xaxis=dict(visible=False, range=[0.3, n + 0.7]),
                      yaxis=dict(visible=False), legend=dict(orientation="h", y=-0.05), plot_bgcolor="white")
    return fig


def distance_matrices(words: Sequence[str], gold: np.ndarray, predicted: np.ndarray) -> go.Figure:
    names = [f"{i + 1} {label(w)}" for i, w in enumerate(words)]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("gold tree distance", "probe's squared distance"),
                        horizontal_spacing=0.14)
    # each its own scale (edges in the tree; the probe's squared distance), each with its colour bar
    fig.add_trace(go.Heatmap(z=gold, x=names, y=names, colorscale="Viridis",
                             colorbar=dict(title="edges", x=0.45, len=0.9, thickness=12),
                             hovertemplate="%{y} – %{x}: %{z}<extra>gold</extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=predicted, x=names, y=names, colorscale="Viridis",
                             colorbar=dict(title="squared<br>distance", x=1.0, len=0.9, thickness=12),
                             hovertemplate="%{y} – %{x}: %{z:.2f}<extra>probe</extra>"), 1, 2)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=460)
    return fig
