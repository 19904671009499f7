"""Figures of SAE features: a context with the feature's activation on each word piece, its
activation histogram, and a text's word pieces against the features that fire on them."""

from __future__ import annotations

import html
import re

import numpy as np
import plotly.graph_objects as go

from bertscope.features.statistics import bin_edges
from bertscope.figures.text import label

CONTINUATION = "##"


def context_html(pieces: list[dict], peak: float | None = None) -> str:
    """Word pieces as HTML, each shaded by the feature's activation on it (0 to the context's
    peak, or ``peak``), its value and its word's gold tags on hover. Everything from the text is
    escaped."""
    top = peak if peak is not None else max((p["activation"] for p in pieces), default=0.0)
    out = []
    for i, p in enumerate(pieces):
        token = p["token"]
        glued = token.startswith(CONTINUATION)
        shown = html.escape(token[len(CONTINUATION):] if glued else token)
        if i and not glued:
            out.append(" ")
        a = float(p["activation"])
        tags = ", ".join(f"{k} {v}" for k, v in (p.get("tags") or {}).items())
        title = html.escape(f"{a:.3f}" + (f" · {tags}" if tags else ""))
        if a > 0 and top > 0:
            alpha = 0.15 + 0.85 * min(a / top, 1.0)
            out.append(f'<mark style="background:rgba(255,140,0,{alpha:.2f});padding:0 0.1em;border-radius:0.2em" '
                       f'title="{title}">{shown}</mark>')
        else:
            out.append(f'<span title="{title}">{shown}</span>')
    return '<div style="line-height:1.9">' + "".join(out) + "</div>"


def histogram_figure(counts: np.ndarray, feature: int, pieces: int) -> go.Figure:
    """The feature's firings by activation (log-spaced bins), out of ``pieces`` word pieces read."""
    edges = bin_edges()
    centres = np.sqrt(edges[:-1] * edges[1:])
    names = [f"{a:.3g} to {b:.3g}" for a, b in zip(edges[:-1], edges[1:])]
    names[0], names[-1] = f"below {edges[1]:.3g}", f"{edges[-2]:.3g} and above"  # the end bins hold the rest
    fig = go.Figure(go.Bar(x=centres, y=counts, width=np.diff(edges), marker_color="darkorange", customdata=names,
                           hovertemplate="activation %{customdata}: %{y:,} word pieces<extra></extra>"))
    fires = int(counts.sum())
    fig.update_layout(title=f"Feature {feature}: {fires:,} firings of {pieces:,} word pieces "
                            f"({fires / max(pieces, 1):.2%})",
                      xaxis=dict(type="log", title="activation (log scale)"), yaxis_title="word pieces",
                      height=300, bargap=0.05, margin=dict(t=50, b=40))
    return fig


def text_features_figure(result: dict, top: int = 16) -> tuple[go.Figure, list[int]]:
    """The ``top`` features with the largest activation anywhere in the text (rows) against its word
    pieces (columns); and those features, strongest first."""
    tokens = [t["token"] for t in result["tokens"]]
    peak: dict[int, float] = {}
    for t in result["tokens"]:
        for f in t["features"]:
            peak[f["feature"]] = max(peak.get(f["feature"], 0.0), f["activation"])
    chosen = sorted(peak, key=lambda f: -peak[f])[:top]
    z = np.zeros((len(chosen), len(tokens)))
    row = {f: i for i, f in enumerate(chosen)}
    for j, t in enumerate(result["tokens"]):
        for f in t["features"]:
            if f["feature"] in row:
                z[row[f["feature"]], j] = f["activation"]
    x = [f"{j}: {label(tok)}" for j, tok in enumerate(tokens)]  # a visitor's text, as text
    words = strongest_pieces(result)
    y = [label(feature_name(f, words)) for f in chosen]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale="Oranges", zmin=0, colorbar=dict(title="activation"),
                               hovertemplate="%{y} on %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"The {len(chosen)} features that fire hardest on this text ({hook_words(result['sae']['hook'])})",
                      xaxis=dict(title="word piece", type="category", tickangle=-45),
                      yaxis=dict(autorange="reversed", type="category"), height=max(320, 24 * len(chosen) + 170),
                      margin=dict(t=50))
    return fig, chosen


def hook_words(hook: str) -> str:
    """``blocks.2.hook_resid_post`` -> "layer 2's output" (a hook point, as a reader says it)."""
    found = re.fullmatch(r"blocks\.(\d+)\.hook_resid_post", hook)
    return f"layer {found.group(1)}'s output" if found else hook


def strongest_pieces(result: dict, most: int = 2) -> dict[int, str]:
    """{feature: the (up to ``most``) distinct word pieces of the text it fires hardest on, quoted}."""
    seen: dict[int, list[tuple[float, str]]] = {}
    for t in result["tokens"]:
        for f in t["features"]:
            seen.setdefault(f["feature"], []).append((f["activation"], t["token"]))
    out = {}
    for feature, hits in seen.items():
        pieces: list[str] = []
        for _, piece in sorted(hits, key=lambda h: -h[0]):
            if piece not in pieces:
                pieces.append(piece)
        out[feature] = ", ".join(f"“{p}”" for p in pieces[:most])
    return out


def feature_name(feature: int, words: dict[int, str]) -> str:
    """"feature 34 · “bank”, “river”": a number with the pieces it fired on here."""
    return f"feature {feature} · {words[feature]}" if words.get(feature) else f"feature {feature}"
