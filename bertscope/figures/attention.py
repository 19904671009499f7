"""Attention figures: plotly views that work offline, and bertviz's views made safe to embed.

Pure functions from an ``Inspection`` to a figure or an HTML string; no widgets. Token strings
are HTML-escaped before they reach a plotly label, and reach bertviz's page only as JSON with
``<``, ``>`` and ``&`` written as unicode escapes, so user text is shown, never run.
"""

from __future__ import annotations

import html
import json
from typing import Literal

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..attention_stats import STATISTICS, HeadStats
from ..errors import BertScopeError
from ..inspect import Inspection

BERTVIZ_DEFAULT_MAX_TOKENS = 128
_REQUIRE_JS = '<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>'
_CDN_NOTE = (
    "bertviz could not load require.js, d3 and jQuery from cdnjs.cloudflare.com (no network?). "
    "The other attention views are drawn without them."
)


def label(token: str) -> str:
    """A token as safe text for plotly, which renders a subset of HTML in labels."""
    return html.escape(token, quote=False)  # plotly decodes &lt; &gt; &amp; but shows &quot; raw


def kept_positions(r: Inspection, hide_special: bool) -> np.ndarray:
    """Token indices to show: all, or all but special tokens ([CLS], [SEP], <s>, ...)."""
    keep = np.flatnonzero(~r.special_mask) if hide_special else np.arange(r.n_tokens)
    if keep.size == 0:
        raise BertScopeError("Nothing is left to show once special tokens are hidden.")
    return keep


def select(r: Inspection, attention: np.ndarray, hide_special: bool, renormalise: bool) -> np.ndarray:
    """``attention`` [..., query, key] restricted to the kept tokens, rows renormalised if asked."""
    keep = kept_positions(r, hide_special)
    a = attention[..., keep, :][..., keep]
    if renormalise:
        a = a / np.clip(a.sum(-1, keepdims=True), 1e-12, None)
    return a


def _heatmap(matrix: np.ndarray, x_labels: list[str], y_labels: list[str], **kwargs) -> go.Heatmap:
    # integer axes with tick text: a categorical axis would merge repeated tokens ("the" ... "the")
    return go.Heatmap(
        z=matrix, x=list(range(len(x_labels))), y=list(range(len(y_labels))),
        customdata=[[(y, x) for x in x_labels] for y in y_labels],
        hovertemplate="%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>",
        colorscale="Blues", zmin=0, **kwargs,
    )


def _token_axes(fig: go.Figure, x_labels: list[str], y_labels: list[str], row=None, col=None) -> None:
    fig.update_xaxes(tickvals=list(range(len(x_labels))), ticktext=x_labels, tickangle=-60,
                     row=row, col=col, title_text="key (attended to)" if row in (None, 1) and col in (None, 1) else None)
    fig.update_yaxes(tickvals=list(range(len(y_labels))), ticktext=y_labels, autorange="reversed",
                     row=row, col=col)


def head_heatmap(r: Inspection, layer: int, head: int, hide_special=False, renormalise=False) -> go.Figure:
    """One head: query rows x key columns."""
    _check_head(r, layer, head)
    keep = kept_positions(r, hide_special)
    labels = [label(r.tokens[i]) for i in keep]
    matrix = select(r, r.attentions[layer, head], hide_special, renormalise)
    fig = go.Figure(_heatmap(matrix, labels, labels, zmax=1))
    _token_axes(fig, labels, labels)
    fig.update_layout(title=f"Layer {layer}, head {head}", yaxis_title="query (attending)",
                      height=max(420, 22 * len(labels) + 160))
    return fig


def layer_grid(r: Inspection, layer: int, hide_special=False, renormalise=False, columns=4) -> go.Figure:
    """Every head of one layer, small multiples."""
    _check_head(r, layer, 0)
    keep = kept_positions(r, hide_special)
    labels = [label(r.tokens[i]) for i in keep]
    heads = r.n_heads
    rows = -(-heads // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=[f"head {h}" for h in range(heads)],
                        horizontal_spacing=0.03, vertical_spacing=0.06)
    matrices = select(r, r.attentions[layer], hide_special, renormalise)  # [head, q, k]
    for h in range(heads):
        fig.add_trace(_heatmap(matrices[h], labels, labels, zmax=1, showscale=False),
                      row=h // columns + 1, col=h % columns + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(title=f"Layer {layer}: all {heads} heads", height=260 * rows + 80)
    return fig


def token_across_layers(
    r: Inspection, position: int, head: int | None = None, hide_special=False, renormalise=False
) -> go.Figure:
    """Where one token attends, layer by layer (rows), to every key (columns)."""
    if not 0 <= position < r.n_tokens:
        raise BertScopeError(f"Token {position} does not exist: this input has {r.n_tokens} tokens.")
    if hide_special and r.special_mask[position]:
        raise BertScopeError("That token is a special token, which is hidden: pick another.")
    keep = kept_positions(r, hide_special)
    source = r.attentions[:, head] if head is not None else r.attentions.mean(axis=1)  # [layer, q, k]
    rows = select(r, source, hide_special, renormalise)[:, int(np.flatnonzero(keep == position)[0])]
    labels = [label(r.tokens[i]) for i in keep]
    layer_labels = [f"layer {i}" for i in range(r.n_layers)]
    fig = go.Figure(_heatmap(rows, labels, layer_labels, zmax=float(rows.max())))
    _token_axes(fig, labels, layer_labels)
    which = f"head {head}" if head is not None else "mean over heads"
    fig.update_layout(title=f"Where “{label(r.tokens[position])}” attends ({which})",
                      height=max(360, 30 * r.n_layers + 160))
    return fig


def stats_heatmap(stats: HeadStats, statistic: str, selected: tuple[int, int] | None = None) -> go.Figure:
    """layer x head heatmap of one statistic; an invisible marker per cell makes cells clickable."""
    if statistic not in stats.stats:
        raise BertScopeError(f"Unknown statistic {statistic!r}.")
    values = stats.stats[statistic]
    layers, heads = values.shape
    fig = go.Figure(go.Heatmap(
        z=values, x=list(range(heads)), y=list(range(layers)), colorscale="Viridis",
        hovertemplate="layer %{y}, head %{x}: %{z:.3f}<extra></extra>",
        colorbar=dict(title=statistic),
    ))
    hh, ll = np.meshgrid(np.arange(heads), np.arange(layers))
    fig.add_trace(go.Scatter(
        x=hh.ravel(), y=ll.ravel(), mode="markers", marker=dict(size=18, opacity=0),
        customdata=values.ravel(), hovertemplate="layer %{y}, head %{x}: %{customdata:.3f}<extra></extra>",
        showlegend=False, name="heads",
    ))
    if selected is not None:
        fig.add_shape(type="rect", x0=selected[1] - 0.5, x1=selected[1] + 0.5,
                      y0=selected[0] - 0.5, y1=selected[0] + 0.5, line=dict(color="red", width=3))
    fig.update_layout(title=STATISTICS[statistic], xaxis_title="head", yaxis_title="layer",
                      yaxis=dict(autorange="reversed", dtick=1), xaxis=dict(dtick=1),
                      height=max(420, 48 * layers + 160))
    return fig


def _check_head(r: Inspection, layer: int, head: int) -> None:
    if not 0 <= layer < r.n_layers or not 0 <= head < r.n_heads:
        raise BertScopeError(
            f"Layer {layer}, head {head} does not exist: the model has layers 0-{r.n_layers - 1} "
            f"and heads 0-{r.n_heads - 1}."
        )


def bertviz_inputs(r: Inspection) -> tuple[tuple, list[str], int | None]:
    """What bertviz is given: per-layer attention [1, head, q, k] tensors, tokens, B's start."""
    import torch

    attention = tuple(torch.from_numpy(r.attentions[i][None]) for i in range(r.n_layers))
    b_start = next((i for i, s in enumerate(r.sequence_ids) if s == 1), None)  # B's first token
    return attention, list(r.tokens), b_start


def bertviz_html(
    r: Inspection, view: Literal["head", "model"] = "head", max_tokens: int = BERTVIZ_DEFAULT_MAX_TOKENS
) -> str:
    """bertviz's head or model view as one HTML document, tokens escaped, with an offline notice."""
    if r.n_tokens > max_tokens:
        raise BertScopeError(
            f"bertviz is capped at {max_tokens} tokens and this input has {r.n_tokens}: "
            "use the heatmap views, or raise the cap."
        )
    from bertviz import head_view, model_view

    attention, tokens, b_start = bertviz_inputs(r)
    placeholders = [f"__bertscope_token_{i}__" for i in range(len(tokens))]
    draw = head_view if view == "head" else model_view
    page = draw(attention, placeholders, sentence_b_start=b_start, prettify_tokens=False,
                html_action="return").data
    for placeholder, token in zip(placeholders, tokens):
        safe = json.dumps(token).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        page = page.replace(json.dumps(placeholder), safe)
    notice = (
        f'<div id="bertscope-cdn-note" style="display:none;font-family:sans-serif;color:#a33;'
        f'padding:8px;border:1px solid #e99;border-radius:4px">{html.escape(_CDN_NOTE)}</div>'
        "<script>function bertscopeCdnFailed(){document.getElementById('bertscope-cdn-note')"
        ".style.display='block';}"
        "setTimeout(function(){if(!document.querySelector('svg')){bertscopeCdnFailed();}},6000);"
        "</script>"
    )
    page = page.replace(
        _REQUIRE_JS,
        notice + _REQUIRE_JS.replace("<script ", '<script onerror="bertscopeCdnFailed()" '),
    )
    # bertviz's own script assumes require.js loaded; without it, show the notice instead of failing
    opening = '<script type="text/javascript">'
    start = page.rindex(opening) + len(opening)
    end = page.rindex("</script>")
    guard = ("\nif (typeof require === 'undefined') { bertscopeCdnFailed(); } else {\n"
             "requirejs.onError = function () { bertscopeCdnFailed(); };\n")
    return page[:start] + guard + page[start:end] + "\n}\n" + page[end:]
