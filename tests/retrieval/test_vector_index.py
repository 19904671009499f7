"""Nearest vectors (``retrieval.vector_index``): exact search is every document scored, FAISS's HNSW graph finds the
same neighbours on a corpus it can search exactly, and the index is refused where it buys nothing."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.errors import BertScopeError
from bertscope.retrieval import vector_index
from bertscope.retrieval.vector_index import Hnsw, exact, recall_at_k, vector_searcher


def _clustered(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(50, d))
    return (centres[rng.integers(0, 50, n)] + 0.6 * rng.normal(size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_exact_search_is_every_document_scored(similarity):
    docs, queries = _clustered(500, 16, 0), _clustered(7, 16, 1)
    rows, scores = exact(docs, similarity).search(queries, 5)
    if similarity == "cosine":
        docs = docs / np.linalg.norm(docs, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    full = queries @ docs.T
    np.testing.assert_array_equal(rows, np.argsort(-full, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(scores, np.sort(full, axis=1)[:, ::-1][:, :5], rtol=1e-5)


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_hnsw_finds_the_exact_neighbours(similarity):
    docs, queries = _clustered(3000, 32, 2), _clustered(50, 32, 3)
    truth, true_scores = exact(docs, similarity).search(queries, 10)
    index = Hnsw(docs, similarity)
    rows, scores = index.search(queries, 10)
    assert recall_at_k(rows, truth) >= 0.98
    np.testing.assert_allclose(scores[:, 0], true_scores[:, 0], rtol=1e-4)  # its scores are the model's similarity
    assert index.size_bytes > docs.nbytes


def test_the_search_breadth_is_raised_until_the_recall_target_is_measured():
    """iid Gaussian vectors have no neighbourhoods to follow: a narrow search misses most true neighbours, so the
    calibration doubles efSearch until the sampled recall reaches the target, and that recall holds on new queries."""
    rng = np.random.default_rng(5)
    docs, queries = rng.normal(size=(4000, 64)).astype(np.float32), rng.normal(size=(100, 64)).astype(np.float32)
    narrow = Hnsw(docs, "cosine", neighbours=8, build_ef=16, search_ef=16, target=None)
    assert narrow.recall is None and narrow.search_ef == 16
    truth, _ = exact(docs, "cosine").search(queries, 10)
    assert recall_at_k(narrow.search(queries, 10)[0], truth) < 0.9
    tuned = Hnsw(docs, "cosine", neighbours=8, build_ef=16, search_ef=16, target=0.95)
    assert tuned.recall >= 0.95 and tuned.search_ef in (32, 64, 128, 256, 512, 1024, 2048, 4096)
    assert recall_at_k(tuned.search(queries, 10)[0], truth) >= 0.9  # new queries: near the sampled recall


def test_recall_counts_the_true_neighbours_found():
    truth = np.array([[1, 2, 3], [4, 5, 6]])
    assert recall_at_k(np.array([[3, 2, 9], [6, 5, 4]]), truth) == pytest.approx(5 / 6)


def test_auto_is_exact_below_the_threshold_and_an_index_beyond(monkeypatch):
    docs = _clustered(400, 8, 4)
    assert vector_searcher(docs, "cosine").kind == "exact"
    with pytest.raises(BertScopeError, match="buys nothing.*leave the index at auto"):
        vector_searcher(docs, "cosine", "hnsw")
    with pytest.raises(BertScopeError, match="No index 'ivf'"):
        vector_searcher(docs, "cosine", "ivf")
    monkeypatch.setattr(vector_index, "EXACT_MAX", 300)
    assert vector_searcher(docs, "cosine").kind == "hnsw"
    assert vector_searcher(docs, "cosine", "exact").kind == "exact"
