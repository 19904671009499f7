"""Figures for cross-lingual alignment: maps coloured by language, retrieval by layer and by
language pair, and one pair's token-to-token similarity with its argmax links."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from bertscope.analysis.align import AlignmentVectors, RetrievalResult, TokenAlignment, map_neighbours
from bertscope.core.layers import layer_title, names_of
from bertscope.corpora.parallel import language_name
from bertscope.figures.text import label

COLOURS = qualitative.Plotly + qualitative.Dark24


def projection_map(av: AlignmentVectors, coords: np.ndarray, title: str, join: bool = False,
                   axis: str = "PC") -> go.Figure:
    """coords [language * item, 2] in [language][item] order; ``join`` links each item's
    translations to its first-language point; ``axis`` names the two axes (PC 1, PC 2 / UMAP 1, UMAP 2).
    The subtitle says what the map shows in numbers (``map_neighbours``): with hundreds of points,
    two maps can look alike and differ."""
    n_lang, n_items = len(av.languages), av.data.n_items
    xy = coords.reshape(n_lang, n_items, 2)
    fig = go.Figure()
    if join:
        xs, ys = [], []
        for i in range(n_items):
            for g in range(1, n_lang):
                xs += [xy[0, i, 0], xy[g, i, 0], None]
                ys += [xy[0, i, 1], xy[g, i, 1], None]
        fig.add_trace(go.Scattergl(x=xs, y=ys, mode="lines", line=dict(width=0.6, color="rgba(120,120,120,0.35)"),
                                   hoverinfo="skip", showlegend=False))
    for g, language in enumerate(av.languages):
        texts = [label(t) for t in av.data.texts(language)]
        fig.add_trace(go.Scattergl(
            x=xy[g, :, 0], y=xy[g, :, 1], mode="markers", name=label(f"{language_name(language)} ({language})"),
            marker=dict(size=8, color=COLOURS[g % len(COLOURS)], line=dict(width=0.5, color="white")),
            customdata=[[i + 1, t] for i, t in enumerate(texts)],
            hovertemplate=f"{label(language)} #%{{customdata[0]}}: %{{customdata[1]}}<extra></extra>",
        ))
    shown = map_neighbours(coords, n_lang, n_items)
    fig.update_layout(title=dict(text=label(title), subtitle=dict(
        text=f"nearest point on the map: same language {shown.same_language:.0%}, its own translation "
             f"{shown.translation:.0%} (chance {shown.chance_translation:.1%})")),
        height=540, xaxis=dict(title=f"{axis} 1", zeroline=False), yaxis=dict(title=f"{axis} 2", zeroline=False),
        legend=dict(itemsizing="constant"), margin=dict(t=90))
    return fig


def retrieval_by_layer(result: RetrievalResult, pivot: str, direction: str = "to") -> go.Figure:
    """P@1 per layer for each language against ``pivot``: solid raw, dashed mean-centred.
    direction "to": language -> pivot (its sentences retrieve among the pivot's); "from": pivot -> language."""
    p = result.languages.index(pivot)
    layers = list(range(result.raw.shape[0]))
    fig = go.Figure()
    for g, language in enumerate(result.languages):
        if g == p:
            continue
        s, t = (g, p) if direction == "to" else (p, g)
        name = f"{language} → {pivot}" if direction == "to" else f"{pivot} → {language}"
        colour = COLOURS[g % len(COLOURS)]
        fig.add_trace(go.Scatter(x=layers, y=result.raw[:, s, t], mode="lines+markers", name=label(name),
                                 legendgroup=language, line=dict(color=colour)))
        fig.add_trace(go.Scatter(x=layers, y=result.centred[:, s, t], mode="lines+markers",
                                 name=label(f"{name}, centred"), legendgroup=language,
                                 line=dict(color=colour, dash="dash"), marker=dict(symbol="circle-open")))
    fig.add_hline(y=result.chance, line=dict(color="grey", dash="dot"),
                  annotation_text=f"chance 1/{result.n_items}", annotation_position="bottom right")
    # every language in view: a legend below the plot, wrapped, never a scrolling box at the side
    pairs = max(1, len(result.languages) - 1)
    fig.update_layout(title="Retrieval P@1 by layer (solid: raw, dashed: mean-centred)",
                      height=460 + 24 * (-(-2 * pairs // 4)),
                      xaxis=dict(title="layer (the embeddings, then the output of each block)",
                                 tickvals=layers, ticktext=names_of(layers)),
                      yaxis=dict(title="P@1", range=[0, 1.02]),
                      legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0))
    return fig


def retrieval_heatmap(table: np.ndarray, languages: tuple[str, ...], title: str) -> go.Figure:
    """table [source, target] P@1 at one layer."""
    names = [label(g) for g in languages]
    text = [["—" if np.isnan(v) else f"{v:.0%}" for v in row] for row in table]
    fig = go.Figure(go.Heatmap(
        z=table, x=names, y=names, zmin=0, zmax=1, colorscale="Viridis", text=text, texttemplate="%{text}",
        hovertemplate="%{y} → %{x}: P@1 %{z:.3f}<extra></extra>", colorbar=dict(title="P@1"),
    ))
    fig.update_layout(title=label(title), height=460, xaxis_title="target (searched)",
                      yaxis=dict(title="source (query)", autorange="reversed"))
    return fig


def alignment_heatmap(al: TokenAlignment, source_name: str, target_name: str) -> go.Figure:
    """Token cosine with the argmax links: circles from the source side, crosses from the
    target side; a link chosen by both (SimAlign ArgMax) shows both marks."""
    xs, ys = list(range(len(al.target_tokens))), list(range(len(al.source_tokens)))
    low, high = float(np.min(al.similarity)), float(np.max(al.similarity))  # fitted: contextual cosines bunch up
    if high - low < 1e-6:
        low, high = low - 0.05, high + 0.05
    fig = go.Figure(go.Heatmap(
        z=al.similarity, x=xs, y=ys, colorscale="Blues", colorbar=dict(title="cosine"), zmin=low, zmax=high,
        customdata=[[(label(a), label(b)) for b in al.target_tokens] for a in al.source_tokens],
        hovertemplate="%{customdata[0]} ↔ %{customdata[1]}: %{z:.3f}<extra></extra>",
    ))
    fig.add_trace(go.Scatter(x=[int(j) for j in al.forward], y=ys, mode="markers", name="source's argmax",
                             marker=dict(symbol="circle-open", size=14, color="#d62728", line=dict(width=2)),
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=xs, y=[int(i) for i in al.backward], mode="markers", name="target's argmax",
                             marker=dict(symbol="x-thin-open", size=12, color="#ff7f0e", line=dict(width=2)),
                             hoverinfo="skip"))
    fig.update_xaxes(tickvals=xs, ticktext=[label(t) for t in al.target_tokens], tickangle=-60,
                     title=label(target_name))
    fig.update_yaxes(tickvals=ys, ticktext=[label(t) for t in al.source_tokens], autorange="reversed",
                     title=label(source_name))
    size = max(len(xs), len(ys))
    fig.update_layout(title=f"Token cosine at {layer_title(al.layer)} (colour: {low:.2f} to {high:.2f}, the values' "
                            f"range); {len(al.mutual)} mutual argmax links",
                      height=max(420, 26 * size + 200), legend=dict(orientation="h", y=-0.25))
    return fig
