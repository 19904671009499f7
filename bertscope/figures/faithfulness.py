"""Figures of the faithfulness scoreboard: each method's means with their 95% intervals, and the
perturbation curves (p(y) as the top-ranked tokens are removed, or kept alone)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertscope.attribution.faithfulness import RANDOM, Scoreboard
from bertscope.attribution.registry import METHODS

PANELS = (("comprehensiveness", "Comprehensiveness ↑<br><sup>p(y) lost without the top tokens</sup>"),
          ("sufficiency", "Sufficiency ↓<br><sup>p(y) lost with only the top tokens</sup>"),
          ("loo_spearman", "ρ with leave-one-out ↑<br><sup>rank agreement with single removals</sup>"))
FLOOR = "#9e9e9e"


def method_label(name: str) -> str:
    return METHODS[name].title if name in METHODS else name


def removal_words(removal: str) -> str:
    return ("removed = excluded as a key in every layer, positions kept" if removal == "attention"
            else "removed = replaced by [MASK]")


def scoreboard_bars(board: Scoreboard) -> go.Figure:
    """Three panels, a bar per method with its 95% bootstrap interval; the random floor in grey
    and as a dotted line across each panel."""
    summary = board.summary()
    names = list(summary)
    labels = [method_label(n) for n in names]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title in PANELS], horizontal_spacing=0.12)
    for col, (metric, _) in enumerate(PANELS, 1):
        means = [summary[n][metric]["mean"] for n in names]
        low = [(m - summary[n][metric]["low"]) if m is not None else None for n, m in zip(names, means)]
        high = [(summary[n][metric]["high"] - m) if m is not None else None for n, m in zip(names, means)]
        colours = [FLOOR if n == RANDOM else "#1f77b4" for n in names]
        fig.add_trace(go.Bar(y=labels, x=means, orientation="h", marker_color=colours, showlegend=False,
                             error_x=dict(type="data", array=high, arrayminus=low, visible=True),
                             hovertemplate="%{y}: %{x:.3f}<extra>" + metric + "</extra>"), row=1, col=col)
        if RANDOM in summary and summary[RANDOM][metric]["mean"] is not None:
            fig.add_vline(x=summary[RANDOM][metric]["mean"], line=dict(color=FLOOR, dash="dot"), row=1, col=col)
        fig.update_yaxes(autorange="reversed", showticklabels=col == 1, row=1, col=col)
    fig.update_layout(height=120 + 34 * len(names), margin=dict(t=90, l=10, r=10, b=40),
                      title=dict(text=f"{board.model}: {len(board.results)} items, {removal_words(board.removal)} "
                                      "(means, 95% bootstrap intervals)", font=dict(size=14)))
    return fig


def perturbation_curves(board: Scoreboard) -> go.Figure:
    """Mean p(y) against the share of candidate tokens removed (most important first), and against
    the share kept (only the most important), one line per method."""
    curves = board.curves()
    share = [f * 100 for f in board.fractions]
    p_full = sum(r.p_full for r in board.results) / max(1, len(board.results))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Top tokens removed (lower = more faithful)",
                                                        "Only the top tokens kept (higher = more faithful)"))
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    for i, (name, curve) in enumerate(curves.items()):
        colour = FLOOR if name == RANDOM else palette[i % len(palette)]
        dash = "dot" if name == RANDOM else "solid"
        for col, key in ((1, "without_top"), (2, "only_top")):
            fig.add_trace(go.Scatter(x=share, y=curve[key], mode="lines+markers", name=method_label(name),
                                     legendgroup=name, showlegend=col == 1, line=dict(color=colour, dash=dash),
                                     hovertemplate=f"{method_label(name)}: %{{x:.0f}}% → p(y) %{{y:.3f}}<extra></extra>"),
                          row=1, col=col)
    for col in (1, 2):
        fig.add_hline(y=p_full, line=dict(color="black", dash="dash", width=1), row=1, col=col)
        fig.update_xaxes(title_text="% of the candidate tokens", type="log", tickvals=share,
                         ticktext=[f"{s:g}" for s in share], row=1, col=col)
    fig.update_yaxes(title_text="mean p(y)", row=1, col=1)
    fig.update_layout(height=420, margin=dict(t=60, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text=f"Perturbation curves (dashed: p(y) on the intact inputs, {p_full:.3f}); "
                                      f"{removal_words(board.removal)}", font=dict(size=14)))
    return fig
