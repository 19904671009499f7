"""2-D maps of vectors: PCA, and UMAP (McInnes et al. 2018) seeded, warmed and memoised.

UMAP's first call in a process compiles its numba kernels (seconds to tens of seconds on a
small CPU); ``warm_umap`` pays that once, off the request path. ``project`` memoises
coordinates by the vectors' bytes and the settings, so redrawing a page never recomputes.

    >>> import numpy as np
    >>> project(np.eye(5, 8, dtype=np.float32), "pca").shape
    (5, 2)
"""

from __future__ import annotations

import hashlib
import threading
import time
import warnings
from collections import OrderedDict
from typing import Literal

import numpy as np

from bertscope.errors import BertScopeError

Method = Literal["pca", "umap"]
_MEMO: OrderedDict[tuple, np.ndarray] = OrderedDict()
_MEMO_SIZE = 128
EXACT_LIMIT = 4096  # UMAP's own threshold for exact neighbours
_LOCK = threading.Lock()
_WARM = threading.Event()
_WARMING = threading.Lock()


def pca_2d(x: np.ndarray) -> np.ndarray:
    """x [n, dim] -> [n, 2], principal components (sign fixed so results are stable)."""
    centred = x - x.mean(0)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ vt[:2].T
    signs = np.sign(vt[:2, np.argmax(np.abs(vt[:2]), axis=1)].diagonal())
    coords = coords * np.where(signs == 0, 1, signs)
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    return coords


def umap_2d(x: np.ndarray, seed: int = 0, n_neighbors: int = 15) -> np.ndarray:
    """x [n, dim] -> [n, 2] with UMAP (seeded); works for tiny n (random init, fewer neighbours)."""
    if len(x) < 4:
        raise BertScopeError("UMAP needs at least 4 points; use PCA for fewer.")
    import umap

    x = np.asarray(x, dtype=np.float32)
    if len(x) <= EXACT_LIMIT:
        # UMAP computes exact neighbours for small inputs through scikit-learn with a Python
        # callable per pair (millions of calls); one matrix product gives the same distances.
        unit = x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)
        features, metric = np.clip(1.0 - unit @ unit.T, 0.0, 2.0), "precomputed"  # [n, n] cosine distance
        np.fill_diagonal(features, 0.0)
    else:
        features, metric = x, "cosine"

    def run(init: str) -> np.ndarray:
        reducer = umap.UMAP(n_components=2, n_neighbors=max(2, min(n_neighbors, len(x) - 1)),
                            random_state=seed, init=init, metric=metric,
                            n_jobs=1)  # seeded runs are single-threaded anyway
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "n_jobs overridden by random_state", spectral fallbacks
            return reducer.fit_transform(features)

    if len(x) < 20:  # spectral init needs a graph with enough structure
        return run("random")
    try:
        return run("spectral")
    except (ValueError, np.linalg.LinAlgError, TypeError):  # e.g. disconnected tiny graphs
        return run("random")


def warm_umap() -> float:
    """Compile UMAP's kernels once per process; returns the seconds it took (0.0 if done)."""
    if _WARM.is_set():
        return 0.0
    with _WARMING:
        if _WARM.is_set():
            return 0.0
        start = time.perf_counter()
        rng = np.random.default_rng(0)
        umap_2d(rng.normal(size=(64, 8)).astype(np.float32), seed=0)  # spectral path
        umap_2d(rng.normal(size=(8, 8)).astype(np.float32), seed=0)  # random-init path
        _WARM.set()
        return time.perf_counter() - start


def umap_is_warm() -> bool:
    return _WARM.is_set()


def project(x: np.ndarray, method: Method, seed: int = 0, n_neighbors: int = 15) -> np.ndarray:
    """x [n, dim] -> [n, 2] by ``method``; memoised by the vectors' bytes and the settings."""
    if method not in ("pca", "umap"):
        raise BertScopeError("The projection must be 'pca' or 'umap'.")
    x = np.ascontiguousarray(x, dtype=np.float32)
    key = (hashlib.sha1(x.tobytes()).hexdigest(), x.shape, method, seed, n_neighbors)
    with _LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
    coords = pca_2d(x) if method == "pca" else umap_2d(x, seed=seed, n_neighbors=n_neighbors)
    coords = np.asarray(coords, dtype=np.float32)
    coords.setflags(write=False)  # shared by every caller
    with _LOCK:
        _MEMO[key] = coords
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return coords
