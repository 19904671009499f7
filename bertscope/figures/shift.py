"""Figures for the embedding-shift view: similarity at a layer, metrics across layers, 2-D maps."""

from __future__ import annotations

import numpy as np
import plotly.express as px
import plotly.graph_objects as go

from bertscope.analysis.shift import LayerMetrics, ShiftResult, cosine_matrix
from bertscope.core.layers import layer_title, names_of
from bertscope.corpora.brown import tag_name
from bertscope.figures.text import label


def _order(result: ShiftResult) -> list[int]:
    """Occurrences grouped by sense (stable within a sense)."""
    return sorted(range(len(result.occurrences)), key=lambda i: (str(result.labels[i]), i))


SNIPPET = 44  # characters of a sentence a row name shows, around the word


def snippet(sentence: str, word: str, width: int = SNIPPET) -> str:
    """The sentence, or the part of it around ``word`` when it is longer than ``width``."""
    if len(sentence) <= width:
        return sentence
    at = max(sentence.lower().find(word.lower()), 0)
    start = max(0, min(at - (width - len(word)) // 2, len(sentence) - width))
    return ("…" if start else "") + sentence[start:start + width].strip() + ("…" if start + width < len(sentence) else "")


def occurrence_names(result: ShiftResult) -> list[str]:
    """Each row as a reader knows it: its sense label and its sentence (around the word)."""
    return [f"{o.label or '—'}: {snippet(o.sentence, result.word)}" for o in result.occurrences]


def similarity_heatmap(result: ShiftResult, layer: int) -> go.Figure:
    order = _order(result)
    sim = cosine_matrix(result.vectors[order, layer])
    names = [label(occurrence_names(result)[i]) for i in order]
    sentences = [label(result.occurrences[i].sentence) for i in order]
    # the scale fits the values off the diagonal (the diagonal is 1 by definition): contextual
    # vectors are anisotropic, so their cosines sit in a narrow band that -1..1 would flatten
    off = sim[~np.eye(len(order), dtype=bool)] if len(order) > 1 else sim.ravel()
    low, high = float(off.min()), float(off.max())
    single = high - low < 1e-6  # two occurrences: one pair, one value
    if single:
        low, high = low - 0.05, high + 0.05
    fig = go.Figure(go.Heatmap(
        z=sim, x=list(range(len(order))), y=list(range(len(order))), colorscale="Viridis", zmin=low, zmax=high,
        colorbar=dict(title="cosine"),
        customdata=[[(sentences[a], sentences[b]) for b in range(len(order))] for a in range(len(order))],
        hovertemplate="%{customdata[0]}<br>%{customdata[1]}<br>cosine %{z:.3f}<extra></extra>",
    ))
    ticks = dict(tickvals=list(range(len(order))), ticktext=names)
    fig.update_xaxes(**ticks, tickangle=-60)
    fig.update_yaxes(**ticks, autorange="reversed")
    scale = (f"colour: {low:.2f} to {high:.2f}, the range off the diagonal" if not single
             else f"one value off the diagonal, {off[0]:.2f}")
    fig.update_layout(title=f"Cosine similarity of “{label(result.word)}” at {layer_title(layer)}, ordered by sense "
                            f"({scale})",
                      height=max(480, 18 * len(order) + 200))
    return fig


def layer_lines(metrics: list[LayerMetrics], which: str) -> go.Figure:
    layers = [m.layer for m in metrics]
    if which == "senses":
        series = {"within sense": [m.within for m in metrics], "across senses": [m.across for m in metrics],
                  "gap": [m.gap for m in metrics], "centroid accuracy (LOO)": [m.centroid_accuracy for m in metrics]}
        title = "Sense separation by layer"
    else:
        series = {"self-similarity": [m.self_similarity for m in metrics],
                  "intra-sentence": [m.intra_sentence for m in metrics],
                  "anisotropy baseline": [m.anisotropy for m in metrics],
                  "self-similarity, adjusted": [m.self_similarity_adjusted for m in metrics],
                  "intra-sentence, adjusted": [m.intra_sentence_adjusted for m in metrics]}
        title = "Contextuality (Ethayarajh 2019)"
    fig = go.Figure([go.Scatter(x=layers, y=v, mode="lines+markers", name=k) for k, v in series.items()])
    fig.update_layout(title=title, xaxis=dict(title="layer (the embeddings, then the output of each block)",
                                              tickvals=layers, ticktext=names_of(layers)),
                      yaxis_title="cosine / accuracy" if which == "senses" else "cosine",
                      height=440)
    return fig


SENSE_COLOURS = px.colors.qualitative.Set1  # red, blue, green, …: senses never in two similar blues


def projection_scatter(result: ShiftResult, coords: np.ndarray, title: str, method: str = "PCA") -> go.Figure:
    frame = {
        "x": coords[:, 0], "y": coords[:, 1],
        "sense": [str(x) if x is not None else "—" for x in result.labels],
        "sentence": [label(o.sentence) for o in result.occurrences],
    }
    fig = px.scatter(frame, x="x", y="y", color="sense", symbol="sense",
                     hover_data={"sentence": True, "x": False, "y": False}, title=label(title),
                     color_discrete_sequence=SENSE_COLOURS)
    fig.update_traces(marker=dict(size=11))
    fig.update_layout(height=520, xaxis_title=f"{method} 1", yaxis_title=f"{method} 2")
    return fig


def genre_scatter(coords: np.ndarray, genres: list[str], tags: list[str], sentences: list[str],
                  title: str, method: str = "PCA") -> go.Figure:
    """Occurrences of one word in the Brown corpus, one colour per genre (15 at most)."""
    frame = {"x": coords[:, 0], "y": coords[:, 1], "genre": genres, "tag": tags,
             "sentence": [label(s if len(s) <= 160 else s[:157] + "…") for s in sentences]}
    fig = px.scatter(frame, x="x", y="y", color="genre", symbol="tag", title=label(title),
                     hover_data={"sentence": True, "tag": True, "x": False, "y": False},
                     color_discrete_sequence=px.colors.qualitative.Dark24)
    fig.update_traces(marker=dict(size=9, opacity=0.85))
    fig.update_layout(height=560, xaxis_title=f"{method} 1", yaxis_title=f"{method} 2")
    return fig


def tag_bars(found) -> go.Figure:
    """Tags among the matches (bars) against each tag's share of the whole sample (markers)."""
    tags = sorted(found.corpus_tag_share, key=lambda t: -found.tag_counts.get(t, 0))
    total = max(1, sum(found.tag_counts.values()))
    fig = go.Figure([
        go.Bar(x=[tag_name(t) for t in tags], y=[found.tag_counts.get(t, 0) / total for t in tags],
               name="among the matches"),
        go.Scatter(x=[tag_name(t) for t in tags], y=[found.corpus_tag_share[t] for t in tags], mode="markers", name="in the whole sample",
                   marker=dict(symbol="line-ew-open", size=26, line=dict(width=3), color="#d62728")),
    ])
    fig.update_layout(title=label(f"Tags of the {total} Brown words nearest to “{found.query_word}” at "
                                  f"{layer_title(found.layer)}"), yaxis=dict(title="share", tickformat=".0%"),
                      xaxis_title="universal part of speech", height=360, legend=dict(orientation="h", y=1.12))
    return fig

