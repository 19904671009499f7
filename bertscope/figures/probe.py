"""Probe results by layer: plotly for the app and HTML, matplotlib for PNG files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from bertscope.analysis.probing import ProbeResult
from bertscope.core.layers import names_of
from bertscope.figures.text import label

COLOURS = qualitative.Plotly


def run_name(result: ProbeResult) -> str:
    return f"{result.model} · {result.task} · {result.pooling} · {result.probe}"


def layer_figure(results: Sequence[ProbeResult]) -> go.Figure:
    """Accuracy with its 95% interval (solid), control task (dashed), majority baseline (dotted)."""
    fig = go.Figure()
    for i, r in enumerate(results):
        colour, name = COLOURS[i % len(COLOURS)], label(run_name(r))
        layers = [x.layer for x in r.layers]  # hidden-state indices, named on the axis
        fig.add_trace(go.Scatter(
            x=layers, y=[x.accuracy for x in r.layers], mode="lines+markers", name=f"{name}: task",
            line=dict(color=colour), legendgroup=str(i),
            error_y=dict(type="data", symmetric=False, array=[x.ci[1] - x.accuracy for x in r.layers],
                         arrayminus=[x.accuracy - x.ci[0] for x in r.layers], thickness=1),
        ))
        fig.add_trace(go.Scatter(x=layers, y=[x.control_accuracy for x in r.layers], mode="lines+markers",
                                 name=f"{name}: control", line=dict(color=colour, dash="dash"),
                                 marker=dict(symbol="circle-open"), legendgroup=str(i)))
        fig.add_trace(go.Scatter(x=[layers[0], layers[-1]], y=[r.majority_baseline] * 2, mode="lines",
                                 name=f"{name}: majority", line=dict(color=colour, dash="dot", width=1),
                                 legendgroup=str(i)))
    every = sorted({x.layer for r in results for x in r.layers})
    fig.update_layout(title="Probe accuracy by layer (bars: 95% bootstrap interval)", height=480,
                      xaxis=dict(title="layer (the embeddings, then the output of each block)",
                                 tickvals=every, ticktext=names_of(every)),
                      yaxis=dict(title="accuracy on held-out sentences", range=[0, 1.02]),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def save_png(results: Sequence[ProbeResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=150)
    for i, r in enumerate(results):
        colour = COLOURS[i % len(COLOURS)]
        layers = [x.layer for x in r.layers]
        acc = [x.accuracy for x in r.layers]
        ax.errorbar(layers, acc, yerr=[[a - x.ci[0] for a, x in zip(acc, r.layers)],
                                       [x.ci[1] - a for a, x in zip(acc, r.layers)]],
                    color=colour, marker="o", capsize=2, label=f"{run_name(r)}: task")
        ax.plot(layers, [x.control_accuracy for x in r.layers], color=colour, ls="--", marker="o", mfc="none",
                label="control")
        ax.axhline(r.majority_baseline, color=colour, ls=":", lw=1, label="majority")
    ax.set_xlabel("layer (the embeddings, then the output of each block)")
    ax.set_ylabel("accuracy on held-out sentences")
    ax.set_ylim(0, 1.02)
    every = sorted({x.layer for r in results for x in r.layers})
    ax.set_xticks(every, names_of(every), rotation=45 if len(every) > 14 else 0)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def confusion_figure(counts: np.ndarray, classes: Sequence[str], layer: str) -> go.Figure:
    """[gold, predicted] counts; colour = share of each gold row (so rare classes show too)."""
    counts = np.asarray(counts)
    share = counts / np.clip(counts.sum(axis=1, keepdims=True), 1, None)  # [gold, predicted]
    names = [label(c) for c in classes]
    fig = go.Figure(go.Heatmap(
        z=share.astype(np.float32), x=names, y=names, colorscale="Blues", zmin=0, zmax=1,
        customdata=counts, colorbar=dict(title="share of row"),
        hovertemplate="gold %{y} → predicted %{x}: %{customdata} (%{z:.0%} of the row)<extra></extra>",
        text=counts if len(classes) <= 20 else None, texttemplate="%{text}" if len(classes) <= 20 else None,
    ))
    fig.update_xaxes(title="predicted", tickangle=-60)
    fig.update_yaxes(title="gold", autorange="reversed")
    side = max(420, 22 * len(classes) + 200)
    where = "the embeddings" if layer == "embeddings" else f"layer {layer}"
    fig.update_layout(title=f"Confusion matrix at {where} (counts; colour: share of the gold row)",
                      height=side)
    return fig

