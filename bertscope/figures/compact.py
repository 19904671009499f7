"""Heatmaps of attention-like weights that stay small at 512 tokens.

plotly sends a numpy array as a base64 typed array (``{"dtype": "u2", "bdata": ...}``); the
typed arrays plotly.js decodes are int/uint 8-32 and float 32/64 (no float16). So weights in
[0, 1] travel as integers:

- ``thousandths``: uint16 ``round(w * 1000)``, capped at 999 so the hover text
  ``0.%{z:03d}`` reads the weight to 3 decimals (a weight >= 0.9995 reads 0.999: off by at
  most 0.001). 2 bytes a cell: a 512 x 512 head is 683 KB as base64.
- ``percent_blocks``: float32 percent after averaging square blocks of tokens, with the block
  size chosen so a grid of many heads fits a byte budget (an overview; exact values are in the
  single-head view). Not uint8: at 512 tokens a block's mean is often a fraction of a percent.

Colour scales run from 0 to the largest value shown (the title or colour bar says so): at
512 tokens most weights are far below 1, and a fixed 0-1 scale paints them all white.

Hover texts name tokens only while a per-cell label array stays small (``LABELLED_CELLS``);
beyond that they give positions, and the axes carry the token labels.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

LABELLED_CELLS = 4_096  # per-cell (query, key) label pairs cost ~25 bytes each as JSON
COLOURS = "Blues"


def thousandths(weights: np.ndarray) -> np.ndarray:
    """Weights in [0, 1] as uint16 thousandths, capped at 999 (see the module docstring)."""
    return np.clip(np.rint(np.asarray(weights, dtype=np.float32) * 1000), 0, 999).astype(np.uint16)


def weights_heatmap(
    weights: np.ndarray,  # [rows, columns] in [0, 1]
    x_labels: list[str],
    y_labels: list[str],
    zmax: float = 1.0,
    row_name: str = "query",
    **kwargs,
) -> go.Heatmap:
    """One heatmap trace with integer axes (repeated tokens stay apart) and a compact z."""
    z = thousandths(weights)  # [rows, columns] uint16
    rows, columns = z.shape
    top = max(1.0, min(999.0, round(zmax * 1000)))
    tick = np.linspace(0, top, 5)
    digits = 2 if top >= 100 else 3
    common = dict(
        z=z, x=np.arange(columns, dtype=np.int32), y=np.arange(rows, dtype=np.int32),
        colorscale=COLOURS, zmin=0, zmax=top,
        colorbar=dict(tickvals=tick, ticktext=[f"{v / 1000:.{digits}f}" for v in tick]),
    )
    if rows * columns <= LABELLED_CELLS:
        customdata = np.array([[(y, x) for x in x_labels] for y in y_labels], dtype=object)
        hover = "%{customdata[0]} → %{customdata[1]}: 0.%{z:03d}<extra></extra>"
        return go.Heatmap(customdata=customdata, hovertemplate=hover, **common, **kwargs)
    hover = f"{row_name} %{{y}} → key %{{x}}: 0.%{{z:03d}}<extra></extra>"
    return go.Heatmap(hovertemplate=hover, **common, **kwargs)


BLOCK_CELL_BYTES = 4  # float32 percent


def block_size(tokens: int, matrices: int, max_bytes: int) -> int:
    """Smallest square block so ``matrices`` maps of ``tokens``² float32 cells fit ``max_bytes``
    as base64 (4 bytes per 3)."""
    cells_allowed = max_bytes * 3 / 4 / BLOCK_CELL_BYTES / max(1, matrices)
    side = max(1, math.isqrt(int(cells_allowed)))
    return max(1, math.ceil(tokens / side))


def block_mean(weights: np.ndarray, block: int) -> np.ndarray:
    """[..., q, k] -> [..., ceil(q/block), ceil(k/block)]: the mean weight in each block."""
    if block == 1:
        return weights
    *lead, q, k = weights.shape
    qp, kp = -(-q // block) * block, -(-k // block) * block
    padded = np.full((*lead, qp, kp), np.nan, dtype=np.float32)
    padded[..., :q, :k] = weights
    blocks = padded.reshape(*lead, qp // block, block, kp // block, block)
    return np.nanmean(blocks, axis=(-3, -1))


def percent_blocks(weights: np.ndarray, block: int) -> np.ndarray:
    """[..., q, k] weights -> float32 percent block means."""
    return (block_mean(np.asarray(weights, dtype=np.float32), block) * 100).astype(np.float32)


def percent_blocks_heatmap(z: np.ndarray, block: int, zmax: float = 100.0, labels: list[str] | None = None,
                           **kwargs) -> go.Heatmap:
    """An overview trace of ``percent_blocks`` output [rows, columns]; x and y are each block's
    first token; colours from 0 to ``zmax`` percent (shared by the traces of one figure). ``labels``
    (one per token, block 1 only): the hover names the tokens, while the cells stay few."""
    if block == 1 and labels is not None and z.size <= LABELLED_CELLS:
        customdata = np.array([[(f"{y} {labels[y]}", f"{x} {labels[x]}") for x in range(z.shape[1])]
                               for y in range(z.shape[0])], dtype=object)
        return go.Heatmap(z=z, x=np.arange(z.shape[1], dtype=np.int32), y=np.arange(z.shape[0], dtype=np.int32),
                          colorscale=COLOURS, zmin=0, zmax=max(float(zmax), 1e-6), customdata=customdata,
                          hovertemplate="%{customdata[0]} → %{customdata[1]}: %{z:.2f}%<extra></extra>", **kwargs)
    if block == 1:
        hover = "query %{y} → key %{x}: %{z:.2f}%<extra></extra>"
    else:
        hover = f"queries %{{y}}–, keys %{{x}}– ({block}×{block} mean): %{{z:.2f}}%<extra></extra>"
    return go.Heatmap(
        z=z, x=np.arange(z.shape[1], dtype=np.int32) * block, y=np.arange(z.shape[0], dtype=np.int32) * block,
        colorscale=COLOURS, zmin=0, zmax=max(float(zmax), 1e-6), hovertemplate=hover, **kwargs,
    )
