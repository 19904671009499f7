"""Transcoders' writes refitted by least squares on their own features: each layer's decoder rows, skip path and
output bias solved in closed form over the training text, every encoder as trained.

A trained transcoder's decoder is where Adam left it after its last small, noisy batch (the shipped sets take 256
word pieces a step). Given the features it chose — the encoder and TopK untouched — the write

    ŷ = z @ W_dec + x @ W_skipᵀ + b_dec        z: [n, d_sae] (k nonzero a row), x: [n, d_in]

is linear in (W_dec, W_skip, b_dec), so the decoder that explains most of the feed-forward's output on those rows is
one linear solve: [Z X 1] W = Y, in the normal equations' form G W = H with G = AᵀA, H = AᵀY accumulated over blocks
of rows (Z sparse: its part of G is k rows a token). Every feature fires where it fired, on the same tokens with
the same activation, so a graph's features and their top contexts keep their meaning; only what each one writes
(and the skip path) moves. Decoder rows are no longer of unit norm (circuit-tracer's and SAELens's files do not
ask it).

Features that fire on fewer than ``MIN_ROWS`` of the rows keep their trained decoder rows (their part is taken out
of Y first): a row solved from a handful of tokens fits those tokens, not the feature. With rows weighed
(``chosen_weight``), the count is the effective one, (Σw)² / Σw²: a feature whose fit a few heavy rows carry is held
too. A small ridge (a millionth
of G's mean diagonal) keeps the solve defined where the skip path's inputs are nearly collinear.

Measured on bundled-mlm's shipped set (BENCHMARKS.md, 400,000 word pieces of its training mixture as it was
trained): held-out FVE +0.010-0.012 at layers 0-3, +0.005 at 4, +0.001 at 5; the replacement model's top-1
agreement 0.733 → 0.742 on 7,500 held-out texts. Weighing each row by the block's output LayerNorm (1/σ², the
error as the next block reads it) gave no more (0.741). Weighing the rows BERT's corruption chose for prediction
(``chosen_weight``, where the replacement model is scored) four times: 0.749 → 0.753 on 6,008 held-out masked
positions of the shipped set, sixteen times 0.751.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import overload

import numpy as np
import torch

from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet
from bertscope.features.trainer import check_weight_range
from bertscope.features.transcoder import Transcoder

MIN_ROWS = 32  # a feature firing on fewer rows keeps its trained decoder row
RIDGE = 1e-6  # times G's mean diagonal
SOLVE_BYTES = 1 << 30  # G and H in float64, at most
BLOCK_ROWS = 8192  # rows read a step


def normal_equations_bytes(tc: Transcoder) -> int:
    """Bytes of G [p, p] and H [p, d_out] in float64, p = d_sae + d_in + 1 (with a skip path; else d_sae + 1)."""
    p = tc.d_sae + (tc.d_in if tc.skip else 0) + 1
    return 8 * p * (p + tc.d_out)


def check_refittable(tc: Transcoder) -> None:
    """One line when ``tc``'s normal equations pass ``SOLVE_BYTES``."""
    need = normal_equations_bytes(tc)
    if need > SOLVE_BYTES:
        width = (tc.d_in if tc.skip else 0) + 1
        most = int((-tc.d_out + math.sqrt(tc.d_out ** 2 + SOLVE_BYTES / 2)) / 2) - width  # 8 p (p + d_out) = budget
        raise BertScopeError(f"Refitting layer {tc.info.layer}'s {tc.d_sae:,} features solves {need / 2**30:.1f} GiB "
                             f"of normal equations, past the {SOLVE_BYTES / 2**30:.0f} GiB budget: refit a set of at "
                             f"most {most:,} features a layer.")


Equations = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
# (G [p, p], H [p, d_out], support [2, d_sae]: Σw and Σw² over the rows each feature fired on; unweighted, both count
# the rows)


def empty_equations(tc: Transcoder) -> Equations:
    """Zero normal equations for ``tc``'s writes, in float64 (``check_refittable`` first)."""
    p = tc.d_sae + (tc.d_in if tc.skip else 0) + 1
    return (torch.zeros(p, p, dtype=torch.float64), torch.zeros(p, tc.d_out, dtype=torch.float64),
            torch.zeros(2, tc.d_sae, dtype=torch.float64))


@torch.no_grad()
def add_rows(equations: Equations, tc: Transcoder, x: torch.Tensor, y: torch.Tensor,
             weight: torch.Tensor | None = None) -> None:
    """Rows x [b, d_in] → y [b, d_out] added to ``equations`` in place, each row's features as ``tc``'s encoder
    chooses them (the sparse part of G costs k rows a token); ``weight`` [b] (≥ 0): each row's weight in the squared
    error (G = Aᵀ W A, H = Aᵀ W Y: every row scaled by √w)."""
    gram, cross, support = equations
    d_sae = tc.d_sae
    x, y = x.float().cpu(), y.float().cpu()
    values, indices = tc.encode_topk(x.to(tc.W_enc.device))
    values, indices = values.cpu().float(), indices.cpu()
    active = values.reshape(-1) > 0  # [b k]
    each = (torch.ones(len(x)) if weight is None else weight.double().cpu())[:, None].expand_as(indices)  # [b, k]
    fired, w = indices.reshape(-1)[active], each.reshape(-1)[active].double()
    support[0] += torch.bincount(fired, weights=w, minlength=d_sae)
    support[1] += torch.bincount(fired, weights=w * w, minlength=d_sae)
    root = None if weight is None else weight.float().cpu().sqrt()[:, None]  # [b, 1]
    if root is not None:
        values, y = values * root, y * root
    rows = torch.arange(len(x))[:, None].expand_as(indices)  # [b, k]
    z = torch.sparse_coo_tensor(torch.stack([rows.reshape(-1), indices.reshape(-1)]), values.reshape(-1),
                                (len(x), d_sae), check_invariants=False).coalesce()  # [b, d_sae]
    dense = torch.cat([x, torch.ones(len(x), 1)], 1) if tc.skip else torch.ones(len(x), 1)  # [b, width]
    if root is not None:
        dense = dense * root
    both = torch.cat([z.to_dense(), dense], 1)  # [b, p]
    gram[:d_sae] += torch.sparse.mm(z.t(), both).double()
    gram[d_sae:] += (dense.t() @ both).double()
    cross += (both.t() @ y).double()


def check_chosen_weight(chosen_weight: float, masked: bool) -> None:
    """One line when the chosen rows' weight is out of [1, 1000], or weighs rows of text read without masking."""
    check_weight_range(chosen_weight)
    if chosen_weight != 1 and not masked:
        raise BertScopeError("The chosen rows' weight weighs the positions BERT's corruption chose: the rows were read "
                             "without masking (a set trained with --masked reads them so).")


@torch.no_grad()
def _accumulate(tc: Transcoder, inputs: ActivationSet, outputs: ActivationSet,
                progress: Callable[[int, int], None] | None,
                stop: Callable[[], bool] | None, chosen_weight: float = 1.0) -> Equations | None:
    """The normal equations over every row, in float64 (the rows chosen for prediction weighing ``chosen_weight``);
    None when stopped."""
    equations, n = empty_equations(tc), inputs.tokens
    for start in range(0, n, BLOCK_ROWS):
        if stop is not None and stop():
            return None
        x = torch.from_numpy(np.asarray(inputs.rows[start:start + BLOCK_ROWS], np.float32))  # [b, d_in]
        y = torch.from_numpy(np.asarray(outputs.rows[start:start + BLOCK_ROWS], np.float32))  # [b, d_out]
        weight = None
        if chosen_weight != 1 and inputs.chosen is not None:  # check_chosen_weight: there are chosen rows
            picked = torch.from_numpy(np.array(inputs.chosen[start:start + BLOCK_ROWS], bool))  # [b], a copy
            weight = 1 + (chosen_weight - 1) * picked.float()
        add_rows(equations, tc, x, y, weight)
        if progress:
            progress(min(start + BLOCK_ROWS, n), n)
    return equations


@overload
def refit_writes(tc: Transcoder, inputs: ActivationSet, outputs: ActivationSet,
                 progress: Callable[[int, int], None] | None = None, stop: None = None,
                 chosen_weight: float = 1.0) -> Transcoder: ...


@overload
def refit_writes(tc: Transcoder, inputs: ActivationSet, outputs: ActivationSet,
                 progress: Callable[[int, int], None] | None = None,
                 stop: Callable[[], bool] | None = None, chosen_weight: float = 1.0) -> Transcoder | None: ...


def refit_writes(tc: Transcoder, inputs: ActivationSet, outputs: ActivationSet,
                 progress: Callable[[int, int], None] | None = None,
                 stop: Callable[[], bool] | None = None, chosen_weight: float = 1.0) -> Transcoder | None:
    """``tc`` with its decoder rows, skip path and output bias refitted by least squares over ``inputs`` →
    ``outputs`` (the feed-forward's input and output on the same tokens), its encoder as trained.

    Args:
        tc: a trained transcoder (moved to float32 on the CPU for the solve; left unchanged).
        inputs: ``blocks.{l}.hook_resid_mid`` over the training text.
        outputs: ``blocks.{l}.hook_mlp_out`` over the same tokens.
        progress: called with (rows done, rows).
        stop: asked between blocks of rows.
        chosen_weight: the weight, in the squared error, of the rows BERT's corruption chose for prediction
            (``inputs.chosen``: text read with masking), the others 1: where the replacement model is scored.

    Returns:
        A new ``Transcoder`` (float32, CPU; ``info.extra["refit"]`` says what was solved), or None when stopped
        (never without ``stop``: the overloads say so to a type checker).
    """
    if inputs.tokens != outputs.tokens:
        raise BertScopeError("The feed-forward's input and output were read from different tokens: read both in one "
                             "pass (features.activations.points_activations).")
    check_refittable(tc)
    check_chosen_weight(chosen_weight, getattr(inputs, "chosen", None) is not None)
    source = copy.deepcopy(tc).float().cpu()
    equations = _accumulate(source, inputs, outputs, progress, stop, chosen_weight)
    if equations is None:
        return None
    out = solved(source, equations, int(inputs.tokens))
    out.info.extra["refit"]["chosen_weight"] = chosen_weight
    return out


def solved(tc: Transcoder, equations: Equations, rows: int) -> Transcoder:
    """A float32 CPU copy of ``tc`` with its decoder rows, skip path and output bias solved from ``equations`` (over
    ``rows`` rows; ``info.extra["refit"]`` says what was solved), its encoder as it was; ``tc`` unchanged."""
    gram, cross, support = equations
    solution, fixed = _solve(tc, gram, cross, effective_rows(support))  # [p, d_out]
    out = copy.deepcopy(tc).float().cpu()
    out.info = type(tc.info)(tc.info.model_name, tc.info.layer, dict(tc.info.extra))
    with torch.no_grad():
        out.W_dec.copy_(solution[:tc.d_sae])
        if out.W_skip is not None:
            out.W_skip.copy_(solution[tc.d_sae:tc.d_sae + tc.d_in].T)
        out.b_dec.copy_(solution[-1])
    out.info.extra["refit"] = {"rows": rows, "min_rows": MIN_ROWS, "kept_as_trained": fixed, "ridge": RIDGE}
    return out.eval()


def effective_rows(support: torch.Tensor) -> torch.Tensor:
    """Each feature's effective number of rows [d_sae], (Σw)² / Σw² (Kish's): the rows it fired on when every row
    weighs alike, fewer when a few heavy rows carry its fit (0 where it never fired)."""
    total, squares = support  # [d_sae] each
    return torch.where(squares > 0, total * total / squares.clamp_min(1e-300), torch.zeros_like(total))


def _solve(tc: Transcoder, gram: torch.Tensor, cross: torch.Tensor, fired: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The least-squares write [p, d_out] (float32): the rarely-firing features' rows held at ``tc``'s, the rest
    solved; with how many were held."""
    held = torch.cat([fired < MIN_ROWS, torch.zeros(len(gram) - tc.d_sae, dtype=torch.bool)])  # [p]
    free = ~held
    trained = tc.W_dec.detach().double()[held[:tc.d_sae]]  # [held, d_out]
    rhs = cross[free] - gram[free][:, held] @ trained  # their part of Y taken out
    system = gram[free][:, free]
    system.diagonal().add_(RIDGE * float(system.diagonal().mean()))
    solution = torch.empty_like(cross)
    solution[free] = torch.linalg.solve(system, rhs)
    solution[held] = trained
    return solution.float(), int(held.sum())
