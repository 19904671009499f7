"""Attention figures: plotly views that work offline, and bertviz's views made safe to embed.

Pure functions from an ``Inspection`` to a figure or an HTML string; no widgets. Token strings
are HTML-escaped before they reach a plotly label, and reach bertviz's page only as JSON with
``<``, ``>`` and ``&`` written as unicode escapes, so user text is shown, never run.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertscope.analysis.attention_stats import STATISTICS, HeadStats
from bertscope.core.inspection import Inspection
from bertscope.errors import BertScopeError
from bertscope.figures.compact import block_size, percent_blocks, percent_blocks_heatmap, weights_heatmap
from bertscope.figures.text import label, table_text

# bertviz writes every weight into its page as JSON; we round weights to 3 decimals first, so
# one weight costs about this many bytes ("0.012, "), and a page's size is known in advance
BERTVIZ_BYTES_PER_WEIGHT = 7
BERTVIZ_MAX_BYTES = int(float(os.environ.get("BERTSCOPE_BERTVIZ_MB", "8")) * 2**20)
GRID_MAX_BYTES = 2_500_000  # all heads of a layer: the z arrays of every small multiple together
_REQUIRE_JS = '<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>'
_CDN_NOTE = (
    "bertviz could not load require.js, d3 and jQuery from cdnjs.cloudflare.com (no network?). "
    "The other attention views are drawn without them."
)


def kept_positions(r: Inspection, hide_special: bool) -> np.ndarray:
    """Token indices to show: all, or all but special tokens ([CLS], [SEP], <s>, ...)."""
    keep = np.flatnonzero(~r.special_mask) if hide_special else np.arange(r.n_tokens)
    if keep.size == 0:
        raise BertScopeError("Nothing is left to show once special tokens are hidden.")
    return keep


def select(r: Inspection, attention: np.ndarray, hide_special: bool, renormalise: bool) -> np.ndarray:
    """``attention`` [..., query, key] restricted to the kept tokens, rows renormalised if asked."""
    keep = kept_positions(r, hide_special)
    a = attention[..., keep, :][..., keep].astype(np.float32)  # stored float16 in the app's cache
    if renormalise:
        a = a / np.clip(a.sum(-1, keepdims=True), 1e-12, None)
    return a


MAX_TICK_LABELS = 64  # beyond this, every k-th token is named (the hover names each cell)


GRID_TICK_LABELS = 16  # token labels along one small multiple's axis (every n-th token beyond that)


def _ticks(labels: list[str]) -> dict:
    step = -(-len(labels) // MAX_TICK_LABELS)
    return dict(tickvals=list(range(0, len(labels), step)), ticktext=labels[::step])


def _token_axes(fig: go.Figure, x_labels: list[str], y_labels: list[str], row=None, col=None) -> None:
    fig.update_xaxes(**_ticks(x_labels), tickangle=-60,
                     row=row, col=col, title_text="key (attended to)" if row in (None, 1) and col in (None, 1) else None)
    fig.update_yaxes(**_ticks(y_labels), autorange="reversed", row=row, col=col)


def head_heatmap(r: Inspection, layer: int, head: int, hide_special=False, renormalise=False) -> go.Figure:
    """One head: query rows x key columns; weights sent as uint16 thousandths (compact.py)."""
    _check_head(r, layer, head)
    keep = kept_positions(r, hide_special)
    labels = [label(r.tokens[i]) for i in keep]
    matrix = select(r, r.attentions[layer, head], hide_special, renormalise)  # [q, k]
    top = float(matrix.max())
    fig = go.Figure(weights_heatmap(matrix, labels, labels, zmax=top))
    _token_axes(fig, labels, labels)
    fig.update_layout(title=f"Layer {layer}, head {head} (colour: 0 to {top:.3f}, the largest weight)",
                      yaxis_title="query (attending)", height=min(1400, max(420, 22 * min(len(labels), 56) + 160)))
    return fig


def layer_grid(r: Inspection, layer: int, hide_special=False, renormalise=False, columns=4,
               max_bytes: int = GRID_MAX_BYTES) -> go.Figure:
    """Every head of one layer, small multiples; long inputs are shown as block means so the
    whole grid's data stays under ``max_bytes``."""
    _check_head(r, layer, 0)
    keep = kept_positions(r, hide_special)
    heads = r.n_heads
    rows = -(-heads // columns)
    block = block_size(len(keep), heads, max_bytes)
    titles = [f"head {h}" for h in range(heads)]
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=titles,
                        horizontal_spacing=0.03, vertical_spacing=0.06)
    matrices = select(r, r.attentions[layer], hide_special, renormalise)  # [head, q, k]
    z = percent_blocks(matrices, block)  # [head, rows, columns] float32 percent
    top = float(z.max())  # one colour scale for the layer, so its heads compare
    labels = [label(r.tokens[i]) for i in keep] if block == 1 else None
    for h in range(heads):
        fig.add_trace(percent_blocks_heatmap(z[h], block, zmax=top, labels=labels, showscale=False, name=titles[h]),
                      row=h // columns + 1, col=h % columns + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    if labels is not None:  # tokens along the left column (queries) and the bottom row (keys)
        ticks = dict(tickvals=list(range(0, len(labels), -(-len(labels) // GRID_TICK_LABELS))))
        ticks["ticktext"] = [labels[i] for i in ticks["tickvals"]]
        for row in range(1, rows + 1):
            fig.update_yaxes(showticklabels=True, tickfont=dict(size=9), **ticks, row=row, col=1)
        for h in range(heads):
            if h + columns >= heads:  # nothing below it: its x axis is the bottom of its column
                fig.update_xaxes(showticklabels=True, tickangle=-60, tickfont=dict(size=9), **ticks,
                                 row=h // columns + 1, col=h % columns + 1)
    note = "" if block == 1 else f"; each cell: mean of {block}×{block} tokens"
    fig.update_layout(title=f"Layer {layer}: all {heads} heads, weights in % (colour: 0 to {top:.1f}%{note})",
                      height=260 * rows + 80)
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
    if head is not None:
        source = r.attentions[:, head, position].astype(np.float32)  # [layer, key]
    else:
        source = r.attentions[:, :, position].astype(np.float32).mean(axis=1)  # [layer, key]
    rows = source[:, keep]  # [layer, kept key]
    if renormalise:
        rows = rows / np.clip(rows.sum(-1, keepdims=True), 1e-12, None)
    labels = [label(r.tokens[i]) for i in keep]
    layer_labels = [f"layer {i}" for i in range(r.n_layers)]
    fig = go.Figure(weights_heatmap(rows, labels, layer_labels, zmax=float(rows.max()), row_name="layer"))
    _token_axes(fig, labels, layer_labels)
    which = f"head {head}" if head is not None else "mean over heads"
    fig.update_layout(title=f"Where “{label(r.tokens[position])}” attends ({which})",
                      height=max(360, 30 * r.n_layers + 160))
    return fig


def attention_row(r: Inspection, layer: int, head: int, query: int, top: int = 10,
                  hide_special=False, renormalise=False) -> list[dict]:
    """Exact readout: the ``top`` keys one query attends to most, with float32 weights."""
    _check_head(r, layer, head)
    keep = kept_positions(r, hide_special)
    if query not in set(keep.tolist()):
        raise BertScopeError(f"Token {query} is not shown: pick one of the visible tokens.")
    weights = select(r, r.attentions[layer, head], hide_special, renormalise)[int(np.flatnonzero(keep == query)[0])]
    order = np.argsort(-weights, kind="stable")[:top]
    return [{"key": int(keep[j]), "token": table_text(r.tokens[keep[j]]), "weight": float(weights[j])} for j in order]


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
    """What bertviz is given: per-layer attention [1, head, q, k] float64 tensors rounded to 3
    decimals (its page holds every weight as JSON text: "0.012" instead of
    "0.012000000104308128" makes it ~3x smaller), tokens, and segment B's first position."""
    import torch

    attention = tuple(
        torch.round(torch.from_numpy(r.attentions[i][None].astype(np.float64)), decimals=3)
        for i in range(r.n_layers)
    )
    b_start = next((i for i, s in enumerate(r.sequence_ids) if s == 1), None)  # B's first token
    return attention, list(r.tokens), b_start


def bertviz_bytes(r: Inspection, view: Literal["head", "model"], layers: Sequence[int] | None = None,
                  heads: Sequence[int] | None = None) -> int:
    """Estimated size of bertviz's page for these layers (and, in the model view, heads)."""
    n_layers = len(layers) if layers else r.n_layers
    n_heads = len(heads) if heads and view == "model" else r.n_heads
    pair = any(s == 1 for s in r.sequence_ids)  # bertviz adds the A/B quadrants: twice the data
    weights = n_layers * n_heads * r.n_tokens ** 2 * (2 if pair else 1)
    return weights * BERTVIZ_BYTES_PER_WEIGHT + 20_000  # + its scripts and styles (16-20 KB)


def bertviz_fit(r: Inspection, view: Literal["head", "model"], max_bytes: int = BERTVIZ_MAX_BYTES
                ) -> tuple[list[int], list[int]]:
    """The most layers (from the first) and, for the model view, heads that fit ``max_bytes``;
    empty lists when even one layer (and one head) is too much."""
    all_heads = list(range(r.n_heads))
    for n in range(r.n_layers, 0, -1):
        if bertviz_bytes(r, view, list(range(n)), all_heads) <= max_bytes:
            return list(range(n)), all_heads
    if view == "model":
        for h in range(r.n_heads - 1, 0, -1):
            if bertviz_bytes(r, view, [0], list(range(h))) <= max_bytes:
                return [0], list(range(h))
    return [], []


def _bertviz_refusal(r: Inspection, view: str, size: int, max_bytes: int) -> BertScopeError:
    layers, heads = bertviz_fit(r, view, max_bytes)
    mb = lambda b: f"{b / 2**20:.1f} MB"  # noqa: E731
    if not layers:
        advice = (f"even one layer{' and head' if view == 'model' else ''} is too much at "
                  f"{r.n_tokens} tokens: shorten the input or use the heatmap views")
    elif view == "model" and len(layers) == 1 and len(heads) < r.n_heads:
        advice = f"pick one layer and at most {len(heads)} heads"
    else:
        advice = f"pick at most {len(layers)} layer{'s' if len(layers) > 1 else ''}"
    return BertScopeError(f"bertviz's {view} view would be about {mb(size)} for this selection, over the "
                          f"{mb(max_bytes)} cap: {advice}.")


def bertviz_html(
    r: Inspection, view: Literal["head", "model"] = "head", max_bytes: int = BERTVIZ_MAX_BYTES,
    layers: Sequence[int] | None = None, heads: Sequence[int] | None = None, assets: str | None = None,
) -> str:
    """bertviz's head or model view as one HTML document, tokens escaped, with an offline notice.

    ``layers`` (both views) and ``heads`` (model view) choose a subset; the page's size is
    estimated first and a selection over ``max_bytes`` is refused with what would fit.
    ``assets``: the URL path where the app serves require.js, d3 and jQuery
    (``bertviz_assets.URL_PATH``); the page loads them from there, cdnjs only as a fallback.
    """
    layers = sorted(set(layers)) if layers else None
    heads = sorted(set(heads)) if heads else None
    for name, chosen, top in (("Layer", layers, r.n_layers), ("Head", heads, r.n_heads)):
        bad = [i for i in chosen or [] if not 0 <= i < top]
        if bad:
            raise BertScopeError(f"{name} {bad[0]} does not exist: the model has {name.lower()}s 0-{top - 1}.")
    size = bertviz_bytes(r, view, layers, heads)
    if size > max_bytes:
        raise _bertviz_refusal(r, view, size, max_bytes)
    from bertviz import head_view, model_view

    attention, tokens, b_start = bertviz_inputs(r)
    options = {"include_layers": layers}
    if view == "model":
        options["include_heads"] = heads
    placeholders = [f"__bertscope_token_{i}__" for i in range(len(tokens))]
    draw = head_view if view == "head" else model_view
    page = draw(attention, placeholders, sentence_b_start=b_start, prettify_tokens=False,
                html_action="return", **options).data
    # bertviz's template names PYTHON_PARAMS again in a comment on the same line, so every page
    # carries all the weights twice: drop the comment (and the second copy) to halve the page
    hack = page.find("; // HACK: ")
    if hack != -1:
        page = page[: hack + 1] + page[page.index("\n", hack):]
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
    if assets:  # the app's own copies first; cdnjs only when they cannot be had
        cdn = _REQUIRE_JS.split('"')[1]
        # the classic fallback: a blocking local script, then cdnjs written in only if it did not load
        loader = (f'<script src="{assets}/require.js"></script><script>window.requirejs || document.write('
                  f'\'<script src="{cdn}" onerror="bertscopeCdnFailed()"><\\/script>\');</script>')
        page = page.replace(_REQUIRE_JS, notice + loader)
        for name, local in (("d3", "d3.min"), ("jquery", "jquery.min")):
            found = re.search(rf"{name}: '(https://cdnjs[^']+)'", page)
            if found:
                page = page.replace(found.group(0), f"{name}: ['{assets}/{local}', '{found.group(1)}']")
    else:
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
    return page[:start] + guard + page[start:end] + "\n}\n" + page[end:] + _FIT_TO_FRAME


# bertviz draws at a fixed size (its model view of 12 heads is 978 px wide): once drawn, the page
# scales itself to the frame's width, so no head is cut off at any window width (and again on resize)
_FIT_TO_FRAME = (
    "<script>(function () {"
    "function fit() { var body = document.body; body.style.zoom = 1;"
    " var wide = document.documentElement.scrollWidth, room = window.innerWidth - 4;"
    " if (wide > room) { body.style.zoom = room / wide; } }"
    "var tries = 0, wait = setInterval(function () {"
    " if (document.querySelector('svg') || ++tries > 60) { clearInterval(wait); setTimeout(fit, 300); } }, 250);"
    "window.addEventListener('resize', fit);"
    "})();</script>"
)


def query_key_figure(qk, keys: list[int]) -> go.Figure:
    """bertviz's neuron view for one query: the query vector, then q ⊙ k of each chosen key
    (a cell per dimension, blue adds to the score, red subtracts), with each key's score q·k/√d
    and attention weight beside it. ``qk``: ``analysis.query_key.QueryKey``."""
    names = [f"{j}: {label(qk.tokens[j])}" for j in keys]
    products = qk.products[keys]  # [key, d_head]
    span = float(max(1e-9, np.abs(products).max(), np.abs(qk.query).max()))
    fig = make_subplots(rows=2, cols=2, column_widths=[0.8, 0.2], row_heights=[0.12, 0.88], shared_yaxes=False,
                        horizontal_spacing=0.03, vertical_spacing=0.04,
                        subplot_titles=(f"query q of “{label(qk.tokens[qk.query_position])}”", "",
                                        "q ⊙ k per dimension (sum / √d = the score)", "weight (softmax)"))
    dims = list(range(qk.query.shape[0]))
    fig.add_trace(go.Heatmap(z=qk.query[None], x=dims, y=["q"], colorscale="RdBu", zmid=0, zmin=-span, zmax=span,
                             showscale=False, hovertemplate="q[%{x}] = %{z:.3f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Heatmap(z=products, x=dims, y=names, colorscale="RdBu", zmid=0, zmin=-span, zmax=span,
                             colorbar=dict(title="q·k term", len=0.8, y=0.42),
                             hovertemplate="%{y} · dim %{x}: %{z:.3f}<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Bar(x=qk.weights[keys], y=names, orientation="h", marker_color="#1f77b4", showlegend=False,
                         customdata=qk.scores[keys], hovertemplate="%{y}: weight %{x:.4f}, q·k/√d %{customdata:+.3f}"
                                                                   "<extra></extra>"), row=2, col=2)
    fig.update_yaxes(autorange="reversed", row=2, col=1)
    fig.update_yaxes(autorange="reversed", showticklabels=False, row=2, col=2)
    fig.update_xaxes(title_text="dimension of the head", row=2, col=1)
    fig.update_layout(height=160 + 24 * len(keys), margin=dict(t=70, b=40),
                      title=dict(text=f"Layer {qk.layer}, head {qk.head}: why query {qk.query_position} attends where "
                                      f"it does ({len(keys)} of {len(qk.tokens)} keys)", font=dict(size=14)))
    return fig
