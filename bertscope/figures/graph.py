"""An attribution graph drawn layer by layer: positions across (the input's tokens), the embeddings at the bottom,
each layer's kept features and error nodes above them, the target on top; a node's size is its influence on the
target, an edge's colour its sign (red raises the target, blue lowers it); the strongest edges are drawn."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

import numpy as np
import plotly.graph_objects as go

from bertscope.figures.tasks import LINE_COLOURS

KIND_COLOURS = {"embedding": "#7f7f7f", "feature": LINE_COLOURS[0], "error": "#bbbbbb", "target": LINE_COLOURS[3]}
MAX_EDGES = 400  # the strongest edges drawn; the JSON has them all


def _place(node: dict, n_layers: int, offsets: dict) -> tuple[float, float]:
    """(x, y): the position across (features of one (layer, position) fanned out a little), the row up."""
    if node["kind"] == "target":
        return float(node.get("position_hint", 0)), n_layers + 1.0
    if node["kind"] == "embedding":
        return float(node["position"]), 0.0
    key = (node["layer"], node["position"])
    offsets[key] = offsets.get(key, -1) + 1
    shift = 0.0 if node["kind"] == "error" else 0.12 * (1 + offsets[key])
    return node["position"] + (shift if node["kind"] == "feature" else -0.12), node["layer"] + 1.0


def _hover(node: dict, kind: str, tokens: list[str], examples: Callable[[int, int], list] | None) -> str:
    """A node's hover: what it is, where, its activation and influence, and for a feature where it fires most
    (``examples(layer, feature)``: ``graphs.contexts.FeatureExample``s). Text from the input or a corpus is escaped:
    plotly reads hover text as HTML."""
    text = f"{node['id']} ({kind})" + (f"<br>layer {node['layer']}" if node["layer"] is not None else "")
    if node["position"] is not None:
        text += f", token {node['position']}: {escape(tokens[node['position']], quote=False)}"
    if node["activation"] is not None:
        text += f"<br>activation {node['activation']:.3f}"
    text += f"<br>influence {node['influence']:.4f}"
    if kind == "feature" and examples is not None:
        found = examples(node["layer"], node["feature"])
        if found:
            text += "<br>fires most on:" + "".join(f"<br>  {escape(e.snippet, quote=False)} ({e.activation:.2f})" for e in found)
    return text


def graph_figure(graph: dict, n_layers: int, height: int = 640,
                 examples: Callable[[int, int], list] | None = None) -> go.Figure:
    """The pruned graph (``AttributionGraph.to_json``) as a layered plot; ``examples(layer, feature)``: where each
    feature fires most, shown on hover (``graphs.contexts.FeatureExamples.of``)."""
    offsets: dict = {}
    target_position = graph["target"]["position"]
    where = {}
    for node in graph["nodes"]:
        node = {**node, "position_hint": target_position}
        where[node["id"]] = _place(node, n_layers, offsets)
    fig = go.Figure()
    edges = sorted(graph["edges"], key=lambda e: -abs(e["weight"]))[:MAX_EDGES]
    for sign, colour in ((1, "rgba(214,39,40,0.45)"), (-1, "rgba(31,119,180,0.45)")):
        xs, ys = [], []
        for e in edges:
            if np.sign(e["weight"]) != sign or e["source"] not in where or e["target"] not in where:
                continue
            (x0, y0), (x1, y1) = where[e["source"]], where[e["target"]]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=colour, width=1.2), hoverinfo="skip",
                                 name="raises the target" if sign > 0 else "lowers the target"))
    largest = max((n["influence"] for n in graph["nodes"]), default=1.0) or 1.0
    for kind, colour in KIND_COLOURS.items():
        chosen = [n for n in graph["nodes"] if n["kind"] == kind]
        if not chosen:
            continue
        sizes = [8 + 28 * np.sqrt(max(n["influence"], 0) / largest) if kind != "target" else 22 for n in chosen]
        hover = [_hover(n, kind, graph["tokens"], examples) for n in chosen]
        fig.add_trace(go.Scatter(x=[where[n["id"]][0] for n in chosen], y=[where[n["id"]][1] for n in chosen],
                                 mode="markers", name=kind, marker=dict(size=sizes, color=colour,
                                                                         line=dict(width=0.5, color="#333")),
                                 text=hover, hovertemplate="%{text}<extra></extra>", customdata=[n["id"] for n in chosen]))
    fig.update_layout(title=f"Attribution graph: {len(graph['nodes'])} nodes, {len(graph['edges'])} edges "
                            f"(the strongest {min(len(graph['edges']), MAX_EDGES)} drawn)",
                      height=height, hovermode="closest", legend=dict(orientation="h", y=-0.2),
                      xaxis=dict(tickvals=list(range(len(graph["tokens"]))), ticktext=[escape(t, quote=False) for t in graph["tokens"]],
                                 tickangle=-45,
                                 title="position"),
                      yaxis=dict(tickvals=list(range(n_layers + 2)),
                                 ticktext=["embeddings", *[f"layer {i}" for i in range(n_layers)], "target"]))
    return fig
