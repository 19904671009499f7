"""Similarity explained: the token-pair (or word-pair) map of two texts, each entry its share of the score (a
diverging scale centred on 0, hover for the numbers), and each text's tokens' totals."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from bertscope.figures.tasks import LINE_COLOURS
from bertscope.figures.text import label


def pair_map(a: list[str], b: list[str], pairs: np.ndarray, title: str) -> go.Figure:
    """[a, b] pairs as a heatmap: a's tokens down, b's across (each axis keeps repeated tokens apart)."""
    bound = (float(np.abs(pairs).max()) if pairs.size else 0.0) or 1.0  # an empty map (no words): drawn empty
    ys = [f"{label(t)} ({i})" for i, t in enumerate(a)]  # a visitor's text, as text (plotly renders some HTML)
    xs = [f"{label(t)} ({j})" for j, t in enumerate(b)]
    fig = go.Figure(go.Heatmap(z=pairs.astype(np.float32), x=xs, y=ys, colorscale="RdBu", zmid=0, zmin=-bound,
                               zmax=bound, colorbar=dict(title="share"),
                               hovertemplate="%{y} ~ %{x}: %{z:+.4f}<extra></extra>"))
    fig.update_layout(title=title, xaxis=dict(title="text b", tickangle=-45), yaxis=dict(title="text a",
                                                                                        autorange="reversed"),
                      height=max(360, 26 * len(a) + 180))
    return fig


def totals(a: list[str], b: list[str], a_scores: np.ndarray, b_scores: np.ndarray) -> go.Figure:
    """Each text's tokens' totals (the map's row and column sums), side by side."""
    fig = go.Figure([go.Bar(x=[f"{label(t)} ({i})" for i, t in enumerate(a)], y=a_scores, name="text a",
                            marker_color=LINE_COLOURS[0], hovertemplate="%{x}: %{y:+.4f}<extra>a</extra>"),
                     go.Bar(x=[f"{label(t)} ({j})" for j, t in enumerate(b)], y=b_scores, name="text b",
                            marker_color=LINE_COLOURS[1], hovertemplate="%{x}: %{y:+.4f}<extra>b</extra>")])
    fig.update_layout(title="Each token's total: its row (a) or column (b) of the map", height=340,
                      yaxis_title="share of the score", legend=dict(orientation="h", y=-0.3))
    return fig


def deletion_figure(curves) -> go.Figure:
    """The score as text b's top tokens go, one line per method's ranking (random dotted): the faster it falls, the
    better the ranking found what the score rests on."""
    fig = go.Figure()
    for n, curve in enumerate(curves):
        random = curve.method == "random"
        fig.add_trace(go.Scatter(x=curve.removed, y=curve.scores, mode="lines+markers",
                                 name=f"{curve.method} (mean fall {curve.area:+.3f})",
                                 line=dict(color="grey" if random else LINE_COLOURS[n % len(LINE_COLOURS)],
                                           dash="dot" if random else None),
                                 hovertemplate="%{x} removed: score %{y:.4f}<extra>" + curve.method + "</extra>"))
    fig.update_layout(title="Deleting text b's most important tokens first (each replaced by the padding token)",
                      xaxis_title="tokens of b removed", yaxis_title="the model's score", height=360,
                      legend=dict(orientation="h", y=-0.25))
    return fig
