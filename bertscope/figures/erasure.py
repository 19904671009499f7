"""Amnesic probing's chart: each behaviour's change when the concept is erased at a layer (solid),
beside its change when random directions of the same rank are erased (dotted), layer by layer."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from bertscope.figures.text import label
from bertscope.interventions.amnesic import AmnesicResult, Arms, LayerErasure

COLOURS = qualitative.Plotly


def behaviours(row: LayerErasure) -> dict[str, Arms | None]:
    """Every behaviour measured when erasing at ``row``'s layer, by the name a chart shows."""
    return {"probe at the erased layer": row.probe,
            "probe at the last layer": row.later[-1].probe if row.later else None,
            "masked LM top-1": row.mlm_top1, "UUAS at the last layer": row.uuas, "task accuracy": row.task_accuracy}


def measured(result: AmnesicResult) -> list[str]:
    """The behaviours measured at some erased layer, in ``behaviours``' order."""
    return [n for n in behaviours(result.layers[0]) if any(
        (a := behaviours(r)[n]) is not None and a.change is not None for r in result.layers)]


def change_figure(result: AmnesicResult) -> go.Figure:
    """One layer: a bar per behaviour, erased beside random; several: a line per behaviour across layers."""
    if len(result.layers) == 1:
        return _bars(result)
    layers = [str(r.layer) for r in result.layers]
    fig = go.Figure()
    names = measured(result)
    for i, name in enumerate(names):
        colour = COLOURS[i % len(COLOURS)]
        arms = [behaviours(r)[name] for r in result.layers]
        fig.add_trace(go.Scatter(x=layers, y=[a.change if a else None for a in arms], mode="lines+markers",
                                 name=f"{name}: concept erased", line=dict(color=colour), legendgroup=name))
        fig.add_trace(go.Scatter(x=layers, y=[a.control_change if a else None for a in arms], mode="lines+markers",
                                 name=f"{name}: random, same rank", line=dict(color=colour, dash="dot"),
                                 marker=dict(symbol="circle-open"), legendgroup=name))
    fig.add_hline(y=0, line=dict(color="grey", width=1))
    fig.update_layout(title=_title(result), xaxis_title="layer erased (its output, at every position)",
                      yaxis_title="after − before", xaxis=dict(type="category"), height=430,
                      legend=dict(font=dict(size=11)))
    return fig


def _title(result: AmnesicResult) -> str:
    return f"{label(result.concept)} erased by {result.method.upper()} in {label(result.model)}: change from before"


def _bars(result: AmnesicResult) -> go.Figure:
    (row,) = result.layers
    names = measured(result)
    arms = [behaviours(row)[n] for n in names]
    fig = go.Figure([
        go.Bar(x=names, y=[a.change if a else None for a in arms], name="concept erased", marker_color=COLOURS[0],
               text=[f"{a.change:+.3f}" if a and a.change is not None else "" for a in arms], textposition="outside"),
        go.Bar(x=names, y=[a.control_change if a else None for a in arms], name="random directions, same rank",
               marker_color="lightgrey",
               text=[f"{a.control_change:+.3f}" if a and a.control_change is not None else "" for a in arms],
               textposition="outside"),
    ])
    fig.add_hline(y=0, line=dict(color="grey", width=1))
    fig.update_layout(title=f"{_title(result)} (erased at layer {row.layer})", barmode="group",
                      yaxis_title="after − before", height=430, legend=dict(orientation="h", y=-0.15))
    return fig
