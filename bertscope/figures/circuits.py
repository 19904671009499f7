"""Circuits' figures: the circuit drawn as a layered graph (embeddings at the bottom, each layer's heads
and feed-forward above, the decision on top; edges coloured by the sign of their score and sized by its
size, hover for numbers), and the faithfulness curve beside random circuits."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from bertscope.circuits.faithfulness import FaithfulnessCurve
from bertscope.circuits.find import CircuitResult
from bertscope.figures.tasks import LINE_COLOURS

RAISES, LOWERS = "#d62728", "#1f77b4"  # corrupting the edge raises / lowers logit(answer) − logit(foil)
WIDTHS = (1.0, 2.0, 3.5, 6.0)  # |score| quartiles of the drawn edges
DRAWN = 40  # edges drawn by default (the strongest): a few dozen, as circuit papers draw them; the page offers more
MAX_DRAWN = 400  # edges drawn at most; the table and the downloads hold them all


def node_xy(result: CircuitResult) -> dict[int, tuple[float, float]]:
    """Sender index (and ``n_senders`` for the decision) -> (x, y): heads spread across their layer's row,
    the feed-forward half a row above them at the right."""
    g = result.graph
    out = {0: ((g.heads - 1) / 2, 0.0), g.n_senders: ((g.heads - 1) / 2, g.layers + 1.0)}
    for layer in range(g.layers):
        for head in range(g.heads):
            out[g.head_sender(layer, head)] = (float(head), layer + 1.0)
        out[g.mlp_sender(layer)] = (g.heads + 0.5, layer + 1.5)
    return out


def on_paths(senders: np.ndarray, targets: np.ndarray, focus: int, decision: int) -> np.ndarray:
    """[edge] which of the edges ``senders[e] -> targets[e]`` (node indices) lie on a path from ``focus`` to the
    decision, or feed ``focus`` directly: what a click on a node shows of the circuit."""
    forward, changed = {focus}, True
    while changed:  # the nodes ``focus`` reaches
        grown = forward | {int(t) for s, t in zip(senders, targets) if int(s) in forward}
        changed, forward = grown != forward, grown
    backward, changed = {decision}, True
    while changed:  # the nodes that reach the decision
        grown = backward | {int(s) for s, t in zip(senders, targets) if int(t) in backward}
        changed, backward = grown != backward, grown
    return np.array([(int(s) in forward and int(t) in backward) or int(t) == focus for s, t in zip(senders, targets)],
                    bool)


def circuit_figure(result: CircuitResult, max_edges: int = DRAWN, focus: int | None = None) -> go.Figure:
    """The circuit's strongest ``max_edges`` edges by |score| (a few dozen by default: all of them at once are a
    tangle no path can be followed in); the nodes they touch drawn dark, the rest faded; with ``focus`` (a node
    index), the edges on its paths to the decision and those feeding it drawn strong and every other edge faded."""
    g, scores = result.graph, result.scores.scores
    xy = node_xy(result)
    s_idx, r_idx = np.nonzero(result.circuit)
    order = np.argsort(-np.abs(scores[s_idx, r_idx]))[:max_edges]
    s_idx, r_idx = s_idx[order], r_idx[order]
    values = scores[s_idx, r_idx]
    targets = g.receiver_node[r_idx]
    lit = on_paths(s_idx, targets, focus, g.n_senders) if focus is not None else np.ones(len(values), bool)
    cuts = np.quantile(np.abs(values), [0.25, 0.5, 0.75]) if len(values) else np.zeros(3)
    fig = go.Figure()
    for sign, colour, word in ((1, RAISES, "raises"), (-1, LOWERS, "lowers")):
        named = False
        for w, width in enumerate(WIDTHS):
            for bright in (False, True):
                xs: list[float | None] = []
                ys: list[float | None] = []
                for s, t, v, on in zip(s_idx, targets, values, lit):
                    if (v >= 0) != (sign > 0) or int(np.searchsorted(cuts, abs(v))) != w or bool(on) != bright:
                        continue
                    (x0, y0), (x1, y1) = xy[int(s)], xy[int(t)]
                    xs += [x0, x1, None]
                    ys += [y0, y1, None]
                if xs:
                    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=colour, width=width),
                                             opacity=(0.85 if focus is not None else 0.55) if bright else 0.08,
                                             hoverinfo="skip", showlegend=bright and not named,
                                             name=f"corrupting it {word} the metric", legendgroup=word))
                    named = named or bright
    fig.add_trace(go.Scatter(
        x=[(xy[int(s)][0] + xy[int(t)][0]) / 2 for s, t in zip(s_idx, targets)],
        y=[(xy[int(s)][1] + xy[int(t)][1]) / 2 for s, t in zip(s_idx, targets)], mode="markers",
        marker=dict(size=6, opacity=0), hoverinfo="text", showlegend=False,
        text=[f"{g.sender_names[s]} → {g.receiver_names[r]}<br>score {v:+.4f}" for s, r, v in zip(s_idx, r_idx, values)]))
    drawn = set(s_idx.tolist()) | {int(t) for t in targets}
    shown = {int(n) for s, t, on in zip(s_idx, targets, lit) if on for n in (s, t)} | ({focus} if focus is not None
                                                                                      else set())
    strength = np.zeros(g.n_senders + 1)
    np.add.at(strength, s_idx, np.abs(values))
    np.add.at(strength, targets, np.abs(values))
    nodes = sorted(xy)
    names = [*g.sender_names, "logits"]
    dark = shown if focus is not None else drawn
    fig.add_trace(go.Scatter(
        x=[xy[n][0] for n in nodes], y=[xy[n][1] for n in nodes], mode="markers",
        marker=dict(size=[18 if n == focus else 14 if n in dark else 6 for n in nodes],
                    color=["#d62728" if n == focus else "#333" if n in dark else "#ddd" for n in nodes], symbol=[
                        "square" if n in (0, g.n_senders) else "diamond" if names[n].endswith("mlp_out") else "circle"
                        for n in nodes]),
        customdata=[[names[n], strength[n]] for n in nodes],
        hovertemplate="%{customdata[0]}<br>Σ|score| of its drawn edges %{customdata[1]:.4f}<extra></extra>",
        showlegend=False))
    total = int(result.circuit.sum())
    what = f"the strongest {len(order)} of its {total}" if len(order) < total else f"its {len(order)}"
    followed = f"; the paths of {names[focus]} to the decision" if focus is not None else ""
    fig.update_layout(
        title=f"The circuit: {what} edges ({result.scores.method}; circles are heads, diamonds feed-forwards){followed}",
        xaxis=dict(title="head", tickvals=list(range(g.heads)), zeroline=False, showgrid=False),
        yaxis=dict(title="layer", tickvals=[0, *range(1, g.layers + 1), g.layers + 1],
                   ticktext=["embeddings", *map(str, range(g.layers)), "decision"], zeroline=False),
        height=max(420, 70 * (g.layers + 2)), legend=dict(orientation="h", y=-0.12), hovermode="closest")
    return fig


def faithfulness_figure(curve: FaithfulnessCurve, method: str) -> go.Figure:
    fig = go.Figure([
        go.Scatter(x=curve.sizes, y=curve.values, mode="lines+markers", name=f"{method} circuits",
                   line=dict(color=LINE_COLOURS[0]),
                   customdata=np.stack([curve.edges, curve.kept], axis=1),
                   hovertemplate="%{x:.1%} of the edges (%{customdata[0]} asked, %{customdata[1]} kept)"
                                 "<br>faithfulness %{y:.3f}<extra></extra>"),
        go.Scatter(x=curve.sizes, y=curve.random_values, mode="lines+markers", name="random circuits, same sizes",
                   line=dict(color="grey", dash="dot"),
                   hovertemplate="%{x:.1%} of the edges<br>faithfulness %{y:.3f}<extra></extra>")])
    fig.add_hline(y=1, line=dict(color="black", width=1, dash="dash"))
    fig.add_hline(y=0.8, line=dict(color="grey", width=1, dash="dot"), annotation_text="80 %",
                  annotation_position="bottom right")
    fig.update_layout(
        title=f"Faithfulness on the held-out pairs: CPR {curve.cpr:.3f} (random {curve.random_cpr:.3f}), "
              f"CMD {curve.cmd:.3f} (random {curve.random_cmd:.3f})",
        xaxis=dict(title="share of the edges in the circuit", type="log", tickformat=".1%"),
        yaxis_title="faithfulness: (m(C) − m(∅)) / (m(model) − m(∅))", height=420,
        legend=dict(orientation="h", y=-0.2))
    return fig
