"""Parameter figures: the breakdown as a treemap and per layer, FLOPs per token by length, several
models side by side, and the timeline of BERT's story. Pure functions from tables to figures."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from bertscope.analysis.params import GROUP_ORDER


def breakdown_treemap(rows: pd.DataFrame) -> go.Figure:
    """``rows``: group, layer (or NA), component, count."""
    tree = rows.assign(layer=[f"layer {v}" if pd.notna(v) else "outside layers" for v in rows["layer"]])
    fig = px.treemap(tree, path=["group", "layer", "component"], values="count")
    fig.update_traces(hovertemplate="%{label}: %{value:,} parameters<extra></extra>")
    return fig


def per_layer_bars(rows: pd.DataFrame) -> go.Figure:
    per_layer = rows[rows["layer"].notna()].groupby(["layer", "component"], as_index=False)["count"].sum()
    fig = px.bar(per_layer, x="layer", y="count", color="component",
                 labels={"count": "parameters", "layer": "encoder layer"})
    fig.update_xaxes(tickmode="linear", dtick=1)
    return fig


def flops_area(flops: pd.DataFrame) -> go.Figure:
    """``flops``: length, part, GFLOPs per token."""
    return px.area(flops, x="length", y="GFLOPs per token", color="part")


def compare_bars(frame: pd.DataFrame) -> go.Figure:
    """``frame``: one row per model with its group totals (embeddings, encoder, pooler, heads)."""
    groups = [g for g in GROUP_ORDER if g in frame]
    long = frame.melt(id_vars="model", value_vars=groups, var_name="group", value_name="parameters")
    fig = px.bar(long, x="model", y="parameters", color="group")
    fig.update_traces(hovertemplate="%{x}: %{y:,} parameters<extra>%{fullData.name}</extra>")
    return fig


def timeline_scatter(story: pd.DataFrame) -> go.Figure:
    """``story``: year, parameters, model, source. Labels alternate above and below the points, so
    models of the same year (T5-11B and Megatron-LM, 2019) do not print over each other."""
    story = story.sort_values(["year", "parameters"]).reset_index(drop=True)
    fig = px.scatter(story, x="year", y="parameters", text="model", symbol="source", log_y=True)
    positions = ["top center" if i % 2 == 0 else "bottom center" for i in range(len(story))]
    for trace in fig.data:  # one trace per source: give each point its own side
        names = list(trace.text)
        trace.textposition = [positions[story.index[story["model"] == n][0]] for n in names]
    fig.update_traces(hovertemplate="%{text}: %{y:,} parameters (%{x})<extra></extra>")
    fig.update_xaxes(tickmode="linear", dtick=1, tickformat="d")  # whole years, no "2,018.5"
    return fig
