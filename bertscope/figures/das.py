"""Distributed alignment search (``causal.das``): IIA by layer beside the controls, and the layer × position map."""

from __future__ import annotations

import plotly.graph_objects as go

from bertscope.causal.alignment import IiaMap
from bertscope.causal.das import DasResult

CONTROLS = (("iia", "learned subspace"), ("iia_random_rotation", "random rotation"), ("iia_neurons", "neurons"),
            ("iia_full_vector", "whole state"), ("iia_base", "no intervention"))


def das_figure(result: DasResult) -> go.Figure:
    """IIA at each layer searched (a line, when every layer was) and, at the layer reported, the learned
    subspace's IIA beside its controls (bars)."""
    out = result.to_json()
    fig = go.Figure()
    if result.by_layer:
        fig.add_scatter(x=[str(r["layer"]) for r in result.by_layer], y=[r["iia"] for r in result.by_layer],
                        mode="lines+markers", name="learned subspace, by layer", xaxis="x2", yaxis="y",
                        hovertemplate="layer %{x}<br>IIA %{y:.3f}<extra></extra>")
    fig.add_bar(x=[label for _, label in CONTROLS], y=[out[k] for k, _ in CONTROLS], name=f"at layer {result.layer}",
                marker_color=["#1f77b4", "#bbbbbb", "#999999", "#d8b365", "#eeeeee"],
                hovertemplate="%{x}<br>IIA %{y:.3f}<extra></extra>", text=[f"{out[k]:.2f}" for k, _ in CONTROLS],
                textposition="outside")
    title = (f"DAS on {result.model}, {result.task}: interchange intervention accuracy (held out, "
             f"{result.pairs_held_out} pairs), a {result.dim}-dimensional subspace")
    layout = dict(title=title, height=430, yaxis=dict(title="IIA", range=[0, 1.1]), showlegend=bool(result.by_layer),
                  legend=dict(orientation="h", y=-0.22), xaxis=dict(domain=[0, 0.48] if result.by_layer else [0, 1]))
    if result.by_layer:
        layout["xaxis2"] = dict(domain=[0.55, 1], type="category", title="layer (every state searched)", anchor="y")
    fig.update_layout(**layout)
    return fig


def iia_map_figure(found: IiaMap) -> go.Figure:
    """A heatmap: layers (rows, the embeddings at the bottom) × the first pair's tokens (columns)."""
    labels = [f"{i}: {t}" for i, t in enumerate(found.tokens)]
    fig = go.Figure(go.Heatmap(z=found.iia, x=labels, y=[str(x) for x in found.layers], zmin=0, zmax=1,
                               colorscale="Viridis", colorbar=dict(title="IIA"),
                               hovertemplate="layer %{y}, %{x}<br>IIA %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"Where {found.task}'s variable lives on {found.model}: IIA of a {found.dim}-dimensional "
                            "subspace aligned at one position", height=460,
                      xaxis=dict(type="category", title="position (the first pair's tokens)"),
                      yaxis=dict(type="category", title="layer"))
    return fig
