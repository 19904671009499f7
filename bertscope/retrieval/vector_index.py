"""Nearest vectors: exact (numpy, every document scored) up to ``EXACT_MAX`` documents, FAISS's HNSW graph beyond,
its search breadth raised at build until recall@10 against exact search reaches ``RECALL_TARGET`` on a sample.

    searcher = vector_searcher(vectors, "cosine")          # exact below EXACT_MAX documents, HNSW at or above it
    rows, scores = searcher.search(queries, k=10)          # [query, k] document rows and scores, best first
    recall_at_k(rows, exact(vectors, "cosine").search(queries, 10)[0])   # the index against exact search

Why FAISS (``faiss-cpu``, Meta's library; pinned): the field's reference for vector search, a CPU wheel with no
service to run, its HNSW (Malkov & Yashunin 2018) builds without training (no clusters to fit, unlike IVF) and
answers in milliseconds at a million vectors; its files are its own format (no pickle). Below ``EXACT_MAX``
documents exact search answers a query in tens of milliseconds (2,067 SQuAD passages: 39 ms, most of it the
query's embedding) and is exact, so an index there buys nothing: asked for, it is refused with a line saying so.
The model's similarity is kept: cosine searches unit vectors by inner product, a dot-product model its raw
vectors (FAISS's inner-product metric either way). A graph's recall depends on the data, so its search breadth is
measured rather than assumed: at a million vectors shaped as bundled's embeddings the calibration settles on
efSearch 1,024 (recall@10 0.972 on new queries, 5.1 ms a query against exact search's 17.7 ms:
``benchmarks/retrieval.py --index 1000000``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bertscope.errors import BertScopeError

EXACT_MAX = 100_000  # documents: exact search below, an HNSW index from here on
KINDS = {"auto": f"exact below {EXACT_MAX:,} documents, HNSW at or above",
         "exact": "every document scored (numpy)",
         "hnsw": "FAISS's HNSW graph (approximate; for large corpora)"}
HNSW_NEIGHBOURS = 32  # M: links a node keeps (FAISS's default is 32)
HNSW_BUILD_EF = 80  # candidates kept while linking a new vector
HNSW_SEARCH_EF = 256  # candidates kept while searching, at least: recall against speed
RECALL_TARGET = 0.95  # recall@10 against exact search the graph's search breadth is raised to, measured at build
CALIBRATION_QUERIES = 200  # documents searched for, against exact search, to measure it
MAX_SEARCH_EF = 4096
QUERY_BLOCK = 256  # exact search scores [256, document] at a time


class Searcher(Protocol):
    @property
    def kind(self) -> str: ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _prepared(x: np.ndarray, similarity: str) -> np.ndarray:
    return _unit(x) if similarity == "cosine" else np.ascontiguousarray(x, dtype=np.float32)


@dataclass(frozen=True)
class Exact:
    """Every document scored: [document, dim] vectors as the similarity reads them."""

    vectors: np.ndarray
    similarity: str
    kind: str = "exact"

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """([query, k] rows, [query, k] scores), best first."""
        q, d = _prepared(queries, self.similarity), self.vectors
        k = min(k, len(d))
        rows, scores = [], []
        for start in range(0, len(q), QUERY_BLOCK):
            s = q[start:start + QUERY_BLOCK] @ d.T  # [block, document]
            top = np.argpartition(-s, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(s, top, axis=1), axis=1, kind="stable")
            top = np.take_along_axis(top, order, axis=1)
            rows.append(top)
            scores.append(np.take_along_axis(s, top, axis=1))
        return np.concatenate(rows), np.concatenate(scores)


def exact(vectors: np.ndarray, similarity: str) -> Exact:
    return Exact(_prepared(vectors, similarity), similarity)


class Hnsw:
    """FAISS's ``IndexHNSWFlat`` over the vectors (inner product; unit vectors for a cosine model)."""

    kind = "hnsw"

    def __init__(self, vectors: np.ndarray, similarity: str, neighbours: int = HNSW_NEIGHBOURS,
                 build_ef: int = HNSW_BUILD_EF, search_ef: int = HNSW_SEARCH_EF,
                 target: float | None = RECALL_TARGET):
        import faiss

        x = _prepared(vectors, similarity)
        self.similarity, self.size, self.neighbours = similarity, len(x), neighbours
        self.index = faiss.IndexHNSWFlat(x.shape[1], neighbours, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = build_ef
        self.index.hnsw.efSearch = search_ef
        self.index.add(x)
        self.recall: float | None = None  # recall@10 measured at build (None: not calibrated)
        if target is not None:
            self.calibrate(x, target)

    @property
    def search_ef(self) -> int:
        return int(self.index.hnsw.efSearch)

    def calibrate(self, x: np.ndarray, target: float, queries: int = CALIBRATION_QUERIES, k: int = 10) -> float:
        """Raise the search breadth (efSearch, doubling) until recall@k against exact search reaches ``target`` on
        ``queries`` of the documents themselves (each one's own row left out of both lists), up to
        ``MAX_SEARCH_EF``; returns the recall reached. A graph's recall depends on the data (1M iid Gaussian
        vectors: 0.29 at efSearch 256; vectors shaped as real embeddings: 0.85), so it is measured, not assumed.

        What it measures is the recall of queries drawn from the documents: new queries from the same distribution
        matched it at a million vectors (0.972 against 0.975), but queries of another kind (questions against
        passages) lie off the documents and may fare worse; ``recall_at_k`` measures them where a user has them.
        Exact search runs 25 queries at a time: [25, document] scores, 100 MB at a million documents."""
        picked = np.random.default_rng(0).choice(len(x), min(queries, len(x)), replace=False)
        q = x[picked]
        searcher = exact(x, "dot")
        truth = _without(np.concatenate([searcher.search(q[s:s + 25], k + 1)[0] for s in range(0, len(q), 25)]),
                         picked, k)
        while True:
            found = _without(self.index.search(q, k + 1)[1].astype(np.int64), picked, k)
            self.recall = recall_at_k(found, truth)
            if self.recall >= target or self.search_ef >= MAX_SEARCH_EF:
                return self.recall
            self.index.hnsw.efSearch = min(2 * self.search_ef, MAX_SEARCH_EF)

    @property
    def size_bytes(self) -> int:
        return self.size * (4 * self.index.d + 4 * 2 * self.neighbours)  # the vectors and the bottom layer's links (upper layers: ~1/M more)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """([query, k] rows, [query, k] scores), best first; a row of -1 where the graph found fewer than k."""
        scores, rows = self.index.search(_prepared(queries, self.similarity), min(k, self.size))
        return rows.astype(np.int64), scores


def _without(rows: np.ndarray, own: np.ndarray, k: int) -> np.ndarray:
    """[query, k] of [query, k + 1] rows, each query's own row left out (or the last, where it was not found)."""
    out = np.empty((len(rows), k), np.int64)
    for i, (r, o) in enumerate(zip(rows, own)):
        kept = r[r != o]
        out[i] = kept[:k] if len(kept) >= k else np.pad(kept, (0, k - len(kept)), constant_values=-1)
    return out


def check_index(kind: str, documents: int) -> int:
    """``documents``, or a one-line error where ``kind`` is unknown or an index would buy nothing."""
    if kind not in KINDS:
        raise BertScopeError(f"No index {kind!r}: give {', '.join(KINDS)}.")
    if kind == "hnsw" and documents < EXACT_MAX:
        raise BertScopeError(f"An HNSW index for {documents:,} documents buys nothing: exact search is exact and "
                             f"answers in milliseconds below {EXACT_MAX:,}; leave the index at auto (or exact).")
    return documents


def vector_searcher(vectors: np.ndarray, similarity: str, kind: str = "auto") -> Searcher:
    """Exact search or an HNSW index over ``vectors`` [document, dim], as ``kind`` (``KINDS``) asks.

    Args:
        vectors: the documents' embeddings.
        similarity: "cosine" or "dot", as the model declares.
        kind: "auto", "exact" or "hnsw".

    Returns:
        An object whose ``search(queries, k)`` gives ([query, k] rows, [query, k] scores), best first.
    """
    n = check_index(kind, len(vectors))
    if kind == "exact" or (kind == "auto" and n < EXACT_MAX):
        return exact(vectors, similarity)
    return Hnsw(vectors, similarity)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """The share of the true top k ([query, k] rows, exact search) that ``found`` [query, k] holds."""
    k = truth.shape[1]
    hits = [len(set(f[:k].tolist()) & set(t.tolist())) for f, t in zip(found, truth)]
    return float(np.sum(hits) / truth.size)
