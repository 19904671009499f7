"""A fine-tuned model's decisions as figures: every label's score as bars, a labelled file's
confusion matrix, and spans (entities, answers) marked in their text as escaped HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative

from bertscope.figures.text import label

PALETTE = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fecaca", "#ddd6fe", "#fbcfe8", "#fed7aa", "#a5f3fc")


def label_bars(ranked: Sequence[tuple[str, float]], title: str, axis: str = "probability") -> go.Figure:
    """Horizontal bars, best on top (integer rows with label tick text, so repeats stay apart)."""
    names = [label(name) for name, _ in ranked]
    fig = go.Figure(go.Bar(x=[score for _, score in ranked], y=list(range(len(names))), orientation="h",
                           customdata=names, hovertemplate="%{customdata}: %{x:.4f}<extra></extra>"))
    fig.update_layout(title=label(title), xaxis_title=axis, height=170 + 36 * len(names), bargap=0.25,
                      yaxis=dict(autorange="reversed", tickvals=list(range(len(names))), ticktext=names))
    if axis == "probability":
        fig.update_xaxes(range=[0, 1])
    return fig


LINE_COLOURS = qualitative.D3  # blue, orange, green, red, …: neighbours far apart


def layer_readings(states: Sequence[str], labels: Sequence[str], scores, axis: str = "probability") -> go.Figure:
    """Each label's score as the head reads each hidden state ([state, label]), one line a label."""
    fig = go.Figure()
    for c, name in enumerate(labels):  # colours set here: Streamlit's theme would draw two labels in near blues
        colour = LINE_COLOURS[c % len(LINE_COLOURS)]
        fig.add_trace(go.Scatter(x=list(range(len(states))), y=[float(v) for v in scores[:, c]], mode="lines+markers",
                                 name=label(name), line=dict(color=colour), marker=dict(color=colour),
                                 hovertemplate=f"{label(name)}: %{{y:.4f}}<extra></extra>"))
    fig.update_layout(xaxis=dict(title="hidden state the head reads", tickvals=list(range(len(states))),
                                 ticktext=list(states)), yaxis_title=axis, height=360, legend_title_text="label")
    return fig


def confusion_heatmap(evaluation: dict) -> go.Figure:
    """Counts, [gold, predicted] in the model's label order, each cell written in it."""
    names = [label(n) for n in evaluation["labels"]]
    counts = evaluation["confusion"]
    fig = go.Figure(go.Heatmap(z=counts, x=names, y=names, colorscale="Blues", text=counts, texttemplate="%{text}",
                               hovertemplate="gold %{y}, predicted %{x}: %{z}<extra></extra>", showscale=False))
    fig.update_layout(title=f"Confusion matrix ({evaluation['records']:,} records)", xaxis_title="predicted",
                      yaxis_title="gold", yaxis_autorange="reversed", height=200 + 30 * len(names))
    return fig


def marked_text(text: str, spans: Sequence[tuple[int, int, str, float]]) -> str:
    """``text`` as HTML with each (start, end, tag, score) span in a coloured mark that names its tag;
    overlapping spans after the first are left out. Everything from the text is escaped."""
    colours: dict[str, str] = {}
    out, at = [], 0
    for start, end, tag, score in sorted(spans):
        if start < at or end <= start:
            continue
        colour = colours.setdefault(tag, PALETTE[len(colours) % len(PALETTE)])
        out.append(html.escape(text[at:start]))
        out.append(f'<mark style="background:{colour};padding:0 0.2em;border-radius:0.2em" '
                   f'title="{html.escape(tag)} {score:.3f}">{html.escape(text[start:end])}'
                   f'<sup style="font-size:0.7em;margin-left:0.2em">{html.escape(tag)}</sup></mark>')
        at = end
    out.append(html.escape(text[at:]))
    return '<div style="line-height:2;white-space:pre-wrap">' + "".join(out) + "</div>"
