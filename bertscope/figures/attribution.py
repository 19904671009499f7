"""Attribution figures: token-to-token matrices side by side, and a token strip coloured by
per-token scores. Pure functions from arrays to plotly figures; no widgets.

Matrices travel as float32 percent block means (``compact.percent_blocks``) with the block
size chosen so all panels together stay under ``MATRICES_MAX_BYTES``; each panel has its own
colour scale from 0 to its largest value (methods differ in scale: norms are in hidden units).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertscope.attribution.registry import METHODS
from bertscope.errors import BertScopeError
from bertscope.figures.compact import block_size, percent_blocks, percent_blocks_heatmap
from bertscope.figures.text import label

MATRICES_MAX_BYTES = 1_000_000  # all panels of one figure, as base64 float32
STRIP_TEXT_TOKENS = 48  # beyond this the cells carry no printed token (the hover names it)


def matrices_side_by_side(tokens: list[str], panels: dict[str, np.ndarray], layer: int,
                          max_bytes: int = MATRICES_MAX_BYTES) -> go.Figure:
    """``panels``: method -> [query, key] after block ``layer`` (from 0). Values are scaled by
    each panel's maximum to [0, 100] before plotting; the subtitle gives that maximum."""
    if not panels:
        raise BertScopeError("Nothing to draw: choose at least one method.")
    n = len(tokens)
    block = block_size(n, len(panels), max_bytes)
    names = list(panels)
    tops = {m: float(np.max(panels[m])) if panels[m].size else 0.0 for m in names}
    titles = [f"{METHODS[m].title if m in METHODS else m}<br><sup>max {tops[m]:.3g}</sup>" for m in names]
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=titles, horizontal_spacing=0.04)
    labels = [label(t) for t in tokens]
    step = -(-n // 40)
    for c, name in enumerate(names, start=1):
        scaled = np.asarray(panels[name], np.float32) / max(tops[name], 1e-12)  # [q, k] in [0, 1]
        z = percent_blocks(scaled, block)  # [rows, columns] percent of the panel's maximum
        fig.add_trace(percent_blocks_heatmap(z, block, zmax=100.0, showscale=c == len(names),
                                             name=name), row=1, col=c)
        if block == 1:
            fig.update_xaxes(tickvals=list(range(0, n, step)), ticktext=labels[::step], tickangle=-60, row=1, col=c)
            fig.update_yaxes(tickvals=list(range(0, n, step)), ticktext=labels[::step] if c == 1 else None,
                             showticklabels=c == 1, row=1, col=c)
        fig.update_yaxes(autorange="reversed", row=1, col=c)
    note = "" if block == 1 else f"; each cell: mean of {block}×{block} tokens"
    fig.update_layout(
        title=f"After layer {layer}: row i = where token i's representation comes from "
              f"(colour: % of each panel's max{note})",
        height=min(900, max(380, 300 + 10 * min(n, 48))), margin=dict(t=110),
    )
    fig.update_yaxes(title_text="token i", row=1, col=1)
    return fig


def token_strip(tokens: list[str], scores: np.ndarray, title: str) -> go.Figure:
    """One row of cells, one per token, coloured by signed ``scores`` (red: pushes the target
    up; blue: down), on a symmetric scale."""
    scores = np.asarray(scores, np.float32)  # [token]
    if scores.shape != (len(tokens),):
        raise BertScopeError(f"{len(tokens)} tokens but {scores.shape} scores.")
    top = float(np.abs(scores).max()) or 1.0
    labels = [label(t) for t in tokens]
    show_text = len(tokens) <= STRIP_TEXT_TOKENS
    fig = go.Figure(go.Heatmap(
        z=scores[None], x=np.arange(len(tokens), dtype=np.int32), y=[0], colorscale="RdBu", reversescale=True,
        zmin=-top, zmax=top, customdata=np.array(labels, dtype=object)[None],
        hovertemplate="%{x}: %{customdata}  %{z:+.4f}<extra></extra>",
        text=np.array(labels, dtype=object)[None] if show_text else None,
        texttemplate="%{text}" if show_text else None, textfont=dict(size=12),
        colorbar=dict(title="score", thickness=12),
    ))
    step = -(-len(tokens) // 64)
    fig.update_xaxes(tickvals=list(range(0, len(tokens), step)), ticktext=labels[::step], tickangle=-60,
                     showticklabels=not show_text)
    fig.update_yaxes(showticklabels=False)
    fig.update_layout(title=title, height=210 if show_text else 250, margin=dict(t=60, b=40 if show_text else 90))
    return fig
