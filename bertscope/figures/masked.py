"""Masked-token figures: one mask's top predictions as bars, and the rank of the final answer as the
head reads each layer (the logit lens). Pure functions from results to plotly figures."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.express as px
import plotly.graph_objects as go

from bertscope.figures.text import label
from bertscope.mlm.fill_mask import Prediction
from bertscope.mlm.logit_lens import LayerReading


def prediction_bars(predictions: Sequence[Prediction], title: str) -> go.Figure:
    """Horizontal bars, best on top; integer rows with token tick text (repeats stay apart)."""
    tokens = [label(p.token.strip() or repr(p.token)) for p in predictions]
    fig = px.bar(x=[p.score for p in predictions], y=list(range(len(tokens))), orientation="h",
                 title=label(title), labels={"x": "probability", "y": ""})
    fig.update_traces(customdata=tokens, hovertemplate="%{customdata}: %{x:.4f}<extra></extra>")
    fig.update_layout(yaxis=dict(autorange="reversed", tickvals=list(range(len(tokens))), ticktext=tokens),
                      height=110 + 28 * len(tokens))
    return fig


def rank_by_layer(readings: Sequence[LayerReading], layer_names: Sequence[str]) -> go.Figure:
    """The final answer's rank (1 = top, log scale, best on top) when the head reads each layer's
    hidden state; ``layer_names`` label the x axis (the embeddings, then each block)."""
    fig = px.line(x=list(range(len(readings))), y=[r.final_rank for r in readings], markers=True, log_y=True,
                  labels={"x": "hidden state", "y": "rank of the final answer"})
    fig.update_xaxes(tickvals=list(range(len(readings))), ticktext=list(layer_names))
    top = max(r.final_rank for r in readings)
    ticks = [v for decade in (1, 10, 100, 1_000, 10_000, 100_000) for v in (decade, 2 * decade, 5 * decade)
             if v <= max(top, 2) * 2]  # 1, 2, 5, 10, 20, 50, …: each written out (plotly's own log ticks abbreviate)
    fig.update_yaxes(autorange="reversed", tickvals=ticks, ticktext=[f"{v:,}" for v in ticks])
    return fig


def lens_kl_figure(layers: Sequence, layer_names: Sequence[str], what: str) -> go.Figure:
    """Each hidden state's KL to the final layer (nats), the tuned lens beside the logit lens (``layers``:
    ``lenses.readings.LensReading``s, or anything with ``kl_tuned`` and ``kl_logit``)."""
    fig = go.Figure()
    fig.add_scatter(x=list(layer_names), y=[r.kl_logit for r in layers], mode="lines+markers", name="logit lens")
    fig.add_scatter(x=list(layer_names), y=[r.kl_tuned for r in layers], mode="lines+markers", name="tuned lens")
    fig.update_layout(title=f"How far each layer's reading is from the final {what} (KL, nats)", height=360,
                      xaxis=dict(type="category", title="hidden state"), yaxis_title="KL to the final layer",
                      legend=dict(orientation="h", y=-0.25))
    return fig
