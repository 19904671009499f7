"""TCAV by layer: the concept's score against each random set (mean and spread), the random CAVs'
beside it, and the verdict of the test (``causal.cavs``)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from bertscope.causal.cavs import TcavResult


def tcav_figure(result: TcavResult) -> go.Figure:
    """Bars per layer: the concept's mean TCAV (± one standard deviation over the runs) and the random
    CAVs' (grey); a star over each layer the test finds significant."""
    layers = [str(v.layer) for v in result.layers]
    fig = go.Figure()
    fig.add_bar(x=layers, y=[v.tcav for v in result.layers], name=f"{result.concept}",
                error_y={"type": "data", "array": [float(np.std(v.scores)) for v in result.layers]},
                hovertemplate="layer %{x}<br>TCAV %{y:.2f}<extra></extra>")
    fig.add_bar(x=layers, y=[float(np.mean(v.random_scores)) for v in result.layers], name="random CAVs",
                marker_color="#bbbbbb",
                error_y={"type": "data", "array": [float(np.std(v.random_scores)) for v in result.layers]},
                hovertemplate="layer %{x}<br>random %{y:.2f}<extra></extra>")
    stars = [v for v in result.layers if v.significant]
    fig.add_scatter(x=[str(v.layer) for v in stars], y=[min(1.05, v.tcav + float(np.std(v.scores)) + 0.06)
                                                         for v in stars],
                    mode="text", text=["*"] * len(stars), textfont={"size": 22}, name="significant",
                    hovertext=[f"p = {v.p_value:.1e}" for v in stars], hoverinfo="text")
    fig.update_layout(title=f"TCAV of {result.concept!r} for {result.target} ({result.model}): the share of inputs "
                            "whose decision rises along the concept", barmode="group", height=430,
                      xaxis=dict(type="category", title="layer"), yaxis_title="TCAV score", yaxis_range=[0, 1.12],
                      legend=dict(orientation="h", y=-0.18))
    return fig
