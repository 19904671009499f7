"""Concept erasure: remove what a linear probe reads from a layer, with the least change.

- **LEACE** (Belrose et al. 2023, "LEACE: Perfect linear concept erasure in closed form"), through
  EleutherAI's ``concept-erasure`` (its ``LeaceFitter``, streamed over the cached states): an affine
  map after which no linear classifier predicts the concept better than a constant (the class-
  conditional means are equal), changing the states as little as possible in the mean squared sense.
  Its rank is at most the number of classes less one.
- **INLP** (Ravfogel et al. 2020, "Null It Out"), the baseline: train a linear classifier, project
  its directions out, repeat until the classifier is at the majority baseline on held-out rows.
  Here the projection is centred (``x - (x - mean) Q Qᵀ``) as LEACE's affine eraser, so neither
  moves the states' mean; Ravfogel et al. project uncentred states.
- **A random erasure of the same rank** (Elazar et al. 2021's control for amnesic probing): project
  out ``rank`` random orthonormal directions, centred the same way, so a change in behaviour is read
  against what removing any directions costs.

Each is one ``Eraser``: ``x -> x - (x - bias) @ right.T @ left.T``, applied to numpy rows or, as a
hook at a hidden state's hook point, to every position of a forward pass. Affine maps commute with
the mean of a word's pieces, so erasing the pieces erases the word vectors the probes read.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(400, 8)).astype(np.float32); y = np.where(x[:, 0] > 0, "a", "b")
    >>> eraser = fit_eraser(x, y, "leace")
    >>> eraser.rank, float(abs(eraser.apply(x)[y == "a"].mean(0) - eraser.apply(x)[y == "b"].mean(0)).max()) < 1e-4
    (1, True)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_file

Method = Literal["leace", "inlp", "random"]
Labels = Sequence[str] | np.ndarray  # [example] the concept's label of each row
METHODS: dict[str, str] = {  # the only list: the command, the page and the JSON read it
    "leace": "LEACE (Belrose et al. 2023): closed form, provably no linear classifier recovers the concept",
    "inlp": "INLP (Ravfogel et al. 2020): iterated nullspace projection of linear classifiers",
}
CHUNK = 8_192  # rows read from a memory-mapped layer at a time while fitting
INLP_ITERATIONS = 20  # at most; it stops once the classifier is at the majority baseline
INLP_MARGIN = 0.01  # "at the majority baseline": within this of it, on held-out rows
SVD_TOL = 1e-6  # LEACE keeps every label contrast above this (whitened) singular value


@dataclass(frozen=True)
class Eraser:
    """``x -> x - (x - bias) @ right.T @ left.T``: an identity less a rank-``rank`` map, about ``bias``."""

    method: str  # leace, inlp or random
    left: np.ndarray  # [dim, k] float32
    right: np.ndarray  # [k, dim] float32
    bias: np.ndarray  # [dim] float32: the fitted states' mean, kept by the map
    rank: int
    classes: tuple[str, ...] = ()  # the concept's labels it was fitted on (none for a random eraser)

    @property
    def dim(self) -> int:
        return int(self.left.shape[0])

    def apply(self, x: np.ndarray) -> np.ndarray:
        """[..., dim] -> [..., dim] float32."""
        x = np.asarray(x, np.float32)
        if x.shape[-1] != self.dim:
            raise BertScopeError(f"This eraser was fitted on {self.dim}-dimensional states, not {x.shape[-1]}.")
        return x - ((x - self.bias) @ self.right.T) @ self.left.T

    def hook(self) -> Any:
        """A hook-point function that erases every position of a hidden state ([batch, pos, dim])."""
        tensors: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, ...]] = {}

        def erase(x: torch.Tensor, hook: Any) -> torch.Tensor:
            key = (x.device, x.dtype)
            if key not in tensors:  # moved to the pass's device and dtype once
                tensors[key] = tuple(torch.from_numpy(a).to(x.device, torch.float32)
                                     for a in (self.left, self.right, self.bias))
            left, right, bias = tensors[key]
            delta = (x.float() - bias) @ right.T @ left.T  # [batch, pos, dim]
            return (x.float() - delta).to(x.dtype)

        return erase

    def save(self, path: Path | str) -> None:
        """An ``.npz`` of arrays and the method's name (never a pickle)."""
        write_file(Path(path), lambda tmp: np.savez(
            tmp, left=self.left, right=self.right, bias=self.bias, rank=np.int64(self.rank),
            method=np.array(self.method), classes=np.array(self.classes, dtype=str)))

    @classmethod
    def load(cls, path: Path | str) -> Eraser:
        with np.load(path, allow_pickle=False) as f:
            return cls(str(f["method"]), f["left"], f["right"], f["bias"], int(f["rank"]),
                       tuple(str(c) for c in f["classes"]))


def _classes(labels: Labels) -> tuple[tuple[str, ...], np.ndarray]:
    """(sorted classes, [row] class index); one class is refused."""
    classes, index = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
    if len(classes) < 2:
        raise BertScopeError(f"The concept has one label ({classes[0] if len(classes) else 'none'}): erasing it "
                             "needs two or more.")
    return tuple(str(c) for c in classes), index.astype(np.int64)


def _rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x) if not isinstance(x, np.ndarray) else x
    if x.ndim != 2 or not len(x):
        raise BertScopeError("Erasure is fitted on a matrix of states, [example, dim], with at least one row.")
    return x


def fit_leace(x: np.ndarray, labels: Labels) -> Eraser:
    """LEACE through ``concept_erasure.LeaceFitter`` (float64 statistics, its default shrinkage),
    streamed over ``x`` [example, dim] (a memory-mapped layer is read a chunk at a time)."""
    from concept_erasure import LeaceFitter

    x = _rows(x)
    classes, index = _classes(labels)
    if len(index) != len(x):
        raise BertScopeError(f"{len(x)} states but {len(index)} labels: they must align.")
    # svd_tol: the library's 0.01 drops the contrasts of rare labels (on EWT's dependency labels 5 of 35 stayed
    # readable); constrain_cov_trace=False: the paper's closed form (0.2.4's trace-capping branch builds its
    # right factor with the singular values on the wrong axis)
    fitter = LeaceFitter(x.shape[1], len(classes), dtype=torch.float64, svd_tol=SVD_TOL, constrain_cov_trace=False)
    eye = torch.eye(len(classes), dtype=torch.float64)
    for start in range(0, len(x), CHUNK):
        rows = torch.from_numpy(np.asarray(x[start:start + CHUNK], np.float64))  # [chunk, dim]
        fitter.update(rows, eye[torch.from_numpy(index[start:start + CHUNK])])  # one-hot [chunk, class]
    eraser = fitter.eraser
    left, right = eraser.proj_left, eraser.proj_right  # [dim, k], [k, dim]
    rank = int(torch.linalg.matrix_rank(left @ right, rtol=1e-6))
    bias = eraser.bias if eraser.bias is not None else torch.zeros(x.shape[1], dtype=torch.float64)
    return Eraser("leace", left.float().numpy(), right.float().numpy(), bias.float().numpy(), rank, classes)


def _mean(x: np.ndarray) -> np.ndarray:
    total = np.zeros(x.shape[1], np.float64)
    for start in range(0, len(x), CHUNK):
        total += np.asarray(x[start:start + CHUNK], np.float64).sum(0)
    return (total / len(x)).astype(np.float32)


def _orthonormal(directions: np.ndarray) -> np.ndarray:
    """[dim, r] an orthonormal basis of the columns' span (near-null directions dropped)."""
    u, s, _ = np.linalg.svd(directions.astype(np.float64), full_matrices=False)
    return u[:, s > s.max() * 1e-6].astype(np.float32) if len(s) and s.max() > 0 else u[:, :0].astype(np.float32)


def fit_inlp(x: np.ndarray, labels: Labels, iterations: int = INLP_ITERATIONS, seed: int = 0,
             steps: int = 50, groups: np.ndarray | None = None) -> Eraser:
    """INLP: logistic classifiers on the centred, already-projected states; each one's directions
    join the removed span, until a classifier scores within ``INLP_MARGIN`` of the majority baseline
    on a held-out quarter of the groups (``groups`` [example]: each row's sentence, so no sentence is on
    both sides; default each row its own), or ``iterations`` are spent."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    x = _rows(x)
    classes, index = _classes(labels)
    if len(index) != len(x):
        raise BertScopeError(f"{len(x)} states but {len(index)} labels: they must align.")
    mean = _mean(x)
    centred = np.asarray(x, np.float32) - mean  # [example, dim]
    scale = float(np.sqrt((centred ** 2).sum(1).mean())) or 1.0  # one scale: the directions stay those of x
    owners = np.arange(len(x)) if groups is None else np.asarray(groups)
    kinds = np.unique(owners)
    held = np.isin(owners, kinds[np.random.default_rng(seed).random(len(kinds)) < 0.25])
    if len(np.unique(index[held])) < 2 or len(np.unique(index[~held])) < 2:
        raise BertScopeError("INLP needs two labels or more on both sides of its held-out split: give it more "
                             "sentences.")
    majority = float(np.bincount(index[held], minlength=len(classes)).max() / max(held.sum(), 1))
    basis = np.zeros((x.shape[1], 0), np.float32)  # [dim, removed]
    for _ in range(iterations):
        projected = (centred - (centred @ basis) @ basis.T) / scale
        clf = LogisticRegression(max_iter=steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(projected[~held], index[~held])
        if clf.score(projected[held], index[held]) <= majority + INLP_MARGIN:
            break
        basis = _orthonormal(np.concatenate([basis, clf.coef_.T.astype(np.float32)], axis=1))
    return Eraser("inlp", basis, basis.T.copy(), mean, int(basis.shape[1]), classes)


def random_eraser(dim: int, rank: int, bias: np.ndarray, seed: int = 0) -> Eraser:
    """Project out ``rank`` random orthonormal directions about ``bias`` (Elazar et al.'s control)."""
    if not 0 <= rank <= dim:
        raise BertScopeError(f"A random erasure of rank {rank} does not fit {dim} dimensions.")
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, max(rank, 1))))
    basis = q[:, :rank].astype(np.float32)  # [dim, rank]
    return Eraser("random", basis, basis.T.copy(), np.asarray(bias, np.float32), rank)


def fit_eraser(x: np.ndarray, labels: Labels, method: str = "leace", seed: int = 0,
               groups: np.ndarray | None = None) -> Eraser:
    """The concept's eraser by ``method`` (``METHODS``), fitted on ``x`` [example, dim] and ``labels``
    (``groups``: each row's sentence, for INLP's held-out split).

    Args:
        x: [example, dim] the states.
        labels: the concept's label of each row.
        method: "leace" or "inlp".
        seed: INLP's seed.
        groups: each row's sentence (INLP's held-out split).

    Returns:
        An ``Eraser``: ``apply`` removes the concept from states, ``rank`` says how many directions.
    """
    if method == "leace":
        return fit_leace(x, labels)
    if method == "inlp":
        return fit_inlp(x, labels, seed=seed, groups=groups)
    raise BertScopeError(f"No erasure method {method!r}: choose {' or '.join(METHODS)}.")


@dataclass(frozen=True)
class EditReport:
    """What an eraser did to the rows it was fitted on."""

    class_mean_gap: float  # the largest distance of a class's mean from the overall mean, over the states' scale
    edit: float  # mean squared change of a row over the states' total variance (tr Σ)


def edit_report(eraser: Eraser, x: np.ndarray, labels: Labels) -> EditReport:
    """Streamed over ``x``: LEACE's guarantee (every class mean equals the overall mean: no linear
    classifier does better than a constant) and the size of the edit, to set beside the control's."""
    classes, index = _classes(labels)
    sums = np.zeros((len(classes), x.shape[1]), np.float64)
    change = variance = 0.0
    mean = _mean(x).astype(np.float64)
    for start in range(0, len(x), CHUNK):
        rows = np.asarray(x[start:start + CHUNK], np.float32)
        erased = eraser.apply(rows).astype(np.float64)
        np.add.at(sums, index[start:start + CHUNK], erased)
        change += float(((erased - rows) ** 2).sum())
        variance += float(((rows - mean) ** 2).sum())
    means = sums / np.bincount(index, minlength=len(classes))[:, None]
    scale = np.sqrt(variance / len(x) / x.shape[1]) or 1.0
    return EditReport(float(np.abs(means - means.T @ np.bincount(index) / len(x)).max() / scale),
                      change / max(variance, 1e-30))


def control_for(eraser: Eraser, seed: int = 0) -> Eraser:
    """The random erasure of the same rank about the same mean."""
    return random_eraser(eraser.dim, eraser.rank, eraser.bias, seed)
