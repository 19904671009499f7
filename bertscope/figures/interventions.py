"""Figures for interventions: the clickable layer x head grid, the recovered-fraction heatmaps of
patching, and the pruning curve with its random band."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from bertscope.core.layers import hidden_name
from bertscope.figures.text import label
from bertscope.interventions.importance import PruningCurve
from bertscope.interventions.patching import PatchResult


def head_grid(layers: int, heads: int, selected: Sequence[tuple[int, int]], title: str,
              values: np.ndarray | None = None, colour_title: str = "importance") -> go.Figure:
    """A layer x head board, coloured by ``values`` ([layer, head]) when given, ``selected`` heads
    outlined; an invisible marker per cell makes every cell clickable (and box-selectable)."""
    fig = go.Figure()
    if values is not None:
        fig.add_trace(go.Heatmap(z=values, x=list(range(heads)), y=list(range(layers)), colorscale="Viridis",
                                 zmin=0, colorbar=dict(title=colour_title), hoverinfo="skip"))
    else:  # a plain board: light cells so the outlines read
        fig.add_trace(go.Heatmap(z=np.zeros((layers, heads)), x=list(range(heads)), y=list(range(layers)),
                                 colorscale=[[0, "#eef2f7"], [1, "#eef2f7"]], showscale=False, hoverinfo="skip",
                                 xgap=2, ygap=2))
    hh, ll = np.meshgrid(np.arange(heads), np.arange(layers))
    hover = ("layer %{y}, head %{x}: %{customdata:.3f}<extra>click: add or remove</extra>" if values is not None
             else "layer %{y}, head %{x}<extra>click: add or remove</extra>")
    fig.add_trace(go.Scatter(x=hh.ravel(), y=ll.ravel(), mode="markers", showlegend=False, name="heads",
                             marker=dict(size=16, opacity=0), hovertemplate=hover,
                             customdata=None if values is None else values.ravel()))
    for layer, head in selected:
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="#d62728", width=3), fillcolor="rgba(214,39,40,0.25)")
    fig.update_layout(title=title, xaxis_title="head", yaxis_title="layer", yaxis=dict(autorange="reversed", dtick=1), xaxis=dict(dtick=1),
                      height=max(300, 34 * layers + 150), margin=dict(t=60, b=40))
    return fig


def recovered_heatmap(result: PatchResult) -> go.Figure:
    """The recovered fraction per (hidden state, position) or (layer, head), on a diverging scale
    centred on 0 (1: the clean piece restores the whole difference; negative: it pushes further
    away); the scale spans the largest magnitude shown, at least 1."""
    z = result.recovered
    span = float(max(1.0, np.nanmax(np.abs(z)) if np.isfinite(z).any() else 1.0))
    s = result.setup
    if result.what == "hidden":
        x = [f"{i}: {label(t)}" if t == c else f"{i}: {label(c)}→{label(t)}"
             for i, (t, c) in enumerate(zip(s.tokens, s.clean_tokens))]
        y = [hidden_name(i) for i in range(z.shape[0])]
        titles = ("position (corrupted token; clean→corrupted where they differ)", "hidden state")
        what = "each hidden state at each position"
        patched = np.flatnonzero(np.isfinite(z).any(axis=0))  # positions left out are not drawn
        if len(patched) < z.shape[1]:
            what += f" ({len(patched)} of {z.shape[1]} positions patched)"
            z, x = z[:, patched], [x[i] for i in patched]
    else:
        x, y = [str(h) for h in range(z.shape[1])], [str(layer) for layer in range(z.shape[0])]
        titles = ("head", "layer")
        what = "each head's context (all positions)"
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=y, colorscale="RdBu", zmid=0, zmin=-span, zmax=span,
        colorbar=dict(title="recovered"),
        hovertemplate="%{y} · %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(
        title=f"Recovered fraction when {what} comes from the clean run",
        xaxis=dict(title=titles[0], type="category", tickangle=-45 if result.what == "hidden" else 0),
        yaxis=dict(title=titles[1], type="category", autorange="reversed"),
        height=max(320, 30 * z.shape[0] + 200))
    return fig


def pruning_figure(curve: PruningCurve, score: str = "masked-LM top-1", unit: str = "positions") -> go.Figure:
    """Held-out top-1 (a classifier: its accuracy, ``score="accuracy"``, ``unit="records"``) against
    the share of heads removed: importance order, random mean, and the random orders' range as a
    band."""
    x = [100 * f for f in curve.fractions]
    low, high = curve.random_spread
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x + x[::-1], y=list(high) + list(low)[::-1], fill="toself", mode="lines",
                             line=dict(width=0), fillcolor="rgba(127,127,127,0.25)", hoverinfo="skip",
                             name=f"random orders (range of {len(curve.random_orders)})"))
    fig.add_trace(go.Scatter(x=x, y=curve.random_mean, mode="lines+markers", line=dict(color="grey", dash="dash"),
                             name="random orders (mean)"))
    fig.add_trace(go.Scatter(x=x, y=curve.importance_order, mode="lines+markers", line=dict(color="#1f77b4"),
                             name="least important first"))
    fig.update_layout(title=f"Pruning heads: held-out {score} over {curve.positions:,} {unit}",
                      xaxis=dict(title="heads removed (%)", dtick=10),
                      yaxis=dict(title="top-1 accuracy" if score == "masked-LM top-1" else score, rangemode="tozero"),
                      height=420, legend=dict(orientation="h", y=-0.25))
    return fig
