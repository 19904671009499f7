"""Search a corpus with an embedding model, and measure it as the field does.

    index = build_index(lm, documents("squad"))             # the passages embedded once (kept on disk)
    search(lm, index, "Who wrote the Iliad?", top_k=5)        # [Hit(rank, id, text, score), ...]
    evaluate_squad(lm)                                        # MRR@10, recall@1, recall@10 on SQuAD dev

Passages are embedded as the model declares its passages ("passage: " for E5), queries as its queries, in
length-sorted batches bounded by bytes; the vectors are kept in the user cache (``retrieval/``, within a hosted
demo's disk quota), keyed by the model's weights and tokenizer and the corpus's digest. Search is exact (every
passage scored, numpy, the model's own cosine or dot product) up to ``vector_index.EXACT_MAX`` documents: a query
over SQuAD dev's 2,067 passages takes milliseconds (``benchmarks/retrieval.py``); past it FAISS's HNSW graph.

SQuAD as retrieval: each dev question's gold passage is the paragraph it was asked on; MRR@10 is the mean of 1/rank
of that passage among the top 10 (0 beyond), recall@k the share found in the top k. BM25 (Robertson & Zaragoza 2009,
through ``bm25s``, its default k1 = 1.5, b = 0.75, lower-cased words) is the lexical baseline on the same passages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.analysis.hidden_cache import tokenizer_fingerprint, weights_fingerprint
from bertscope.core.models import LoadedModel
from bertscope.corpora.sentences import read_lines_file
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import embed, settings_of
from bertscope.retrieval.vector_index import Searcher, check_index, vector_searcher
from bertscope.runtime.atomic import write_file
from bertscope.runtime.disk_quota import make_room, touch
from bertscope.runtime.user_cache import user_cache_dir

CORPORA = {  # the only list: the command, its help and the page read it
    "squad": "SQuAD v1.1 dev's 2,067 Wikipedia paragraphs",
    "topics": "the BBC's 2,225 news articles",
    "brown": "the Brown corpus's sentences (the first 5,000)",
    "ewt": "UD English-EWT's 2,077 test sentences",
}
KIND_OF_PASSAGE = ("passage", "document")  # the prompt names models give what is searched


@dataclass(frozen=True)
class Corpus:
    """Documents to search: a name, their ids and texts."""

    name: str
    ids: tuple[str, ...]
    texts: tuple[str, ...]

    def digest(self) -> str:
        return hashlib.sha256(json.dumps([self.name, self.ids, self.texts]).encode()).hexdigest()[:24]


def documents(name: str, limit: int | None = None) -> Corpus:
    """An installed corpus's documents (``CORPORA``), or a file's lines (a path): one document a line.

    Args:
        name: a name of ``CORPORA`` or a text file's path.
        limit: the first documents only.

    Returns:
        A ``Corpus``: ids and texts.
    """
    if name == "squad":
        from bertscope.corpora.squad import read_squad

        passages = list(dict.fromkeys(read_squad("dev").contexts))
        texts = passages
    elif name == "topics":
        from bertscope.corpora.topics import read_topics

        texts = list(read_topics().texts)
    elif name == "brown":
        from bertscope.corpora.brown_tasks import brown_texts

        texts = list(brown_texts(5_000))
    elif name == "ewt":
        from bertscope.corpora.ewt import read_ewt

        texts = [" ".join(s.tokens) for s in read_ewt("test")]
    else:
        texts = read_lines_file(name, f"No corpus {name!r}: give {', '.join(CORPORA)}, or a text file (one document "
                                      "a line).")
        name = Path(name).name
    texts = texts[:limit] if limit else texts
    if not texts:
        raise BertScopeError(f"{name} holds no documents.")
    return Corpus(name, tuple(str(i) for i in range(len(texts))), tuple(texts))


@dataclass(frozen=True)
class Index:
    """A corpus embedded by a model: [document, dim] vectors, and what searches them (exact, or an HNSW graph past
    ``vector_index.EXACT_MAX`` documents)."""

    model: str
    corpus: Corpus
    vectors: np.ndarray  # [document, dim] float32
    kind: str | None  # the prompt the documents were embedded with
    truncated: int  # documents longer than the model reads (cut)
    hit: bool  # read from the cache
    searcher: Searcher

    @property
    def size_bytes(self) -> int:
        return int(self.vectors.nbytes)


def passage_kind(lm: LoadedModel) -> str | None:
    prompts = settings_of(lm).prompts
    return next((k for k in KIND_OF_PASSAGE if k in prompts), None)


def query_kind(lm: LoadedModel) -> str | None:
    return "query" if "query" in settings_of(lm).prompts else None


def _cache_file(lm: LoadedModel, corpus: Corpus, kind: str | None) -> Path:
    key = json.dumps([lm.name, weights_fingerprint(lm), tokenizer_fingerprint(lm), corpus.digest(), kind, 1])
    return user_cache_dir() / "retrieval" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.npz"


def build_index(lm: LoadedModel, corpus: Corpus, progress: Callable[[int, int], None] | None = None,
                cache: bool = True, index: str = "auto", engine: Any = None) -> Index:
    """The corpus embedded as the model embeds what it searches (read back from the cache when kept).

    Args:
        lm: an embedding model (its own pooling and normalisation, ``retrieval.embedding``).
        corpus: the documents (``documents``).
        progress: called with (done, total) documents.
        cache: keep the vectors on disk and read them back.
        index: "auto", "exact" or "hnsw" (``vector_index.KINDS``): checked before any embedding.
        engine: None (this process) or a ``runtime.engine.Engine`` (a Ray cluster): the same batches embedded by
            its actors, for a corpus past one machine (``retrieval.embed``).

    Returns:
        An ``Index``: [document, dim] vectors and their searcher.
    """
    similarity = settings_of(lm).similarity
    check_index(index, len(corpus.texts))
    kind = passage_kind(lm)
    file = _cache_file(lm, corpus, kind)
    if cache and file.is_file():
        try:
            with np.load(file, allow_pickle=False) as kept:
                vectors, truncated = kept["vectors"], int(kept["truncated"])
            touch(file)
            if progress:
                progress(1, 1)
            return Index(lm.name, corpus, vectors, kind, truncated, True, vector_searcher(vectors, similarity, index))
        except (OSError, ValueError, KeyError):
            file.unlink(missing_ok=True)
    out = embed(lm, list(corpus.texts), kind, progress=progress, engine=engine)
    if cache:
        try:
            make_room(out.vectors.nbytes, "keeping this index")
            write_file(file, lambda tmp: np.savez(tmp, vectors=out.vectors, truncated=np.int64(out.truncated.sum())))
        except (OSError, BertScopeError):
            pass  # a cache that cannot be written: the index is still returned
    return Index(lm.name, corpus, out.vectors, kind, int(out.truncated.sum()), False,
                 vector_searcher(out.vectors, similarity, index))


@dataclass(frozen=True)
class Hit:
    rank: int  # from 1
    id: str
    text: str
    score: float

    def to_json(self) -> dict:
        return {"rank": self.rank, "id": self.id, "text": self.text, "score": self.score}


def ranked(lm: LoadedModel, index: Index, queries: list[str], top_k: int, engine: Any = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """([query, k] document rows, [query, k] scores), best first (exact, or the index's approximation); ``engine``:
    where the queries are embedded (None: here)."""
    if top_k < 1:
        raise BertScopeError("--top-k must be at least 1.")
    q = embed(lm, queries, query_kind(lm), engine=engine).vectors  # [query, dim]
    return index.searcher.search(q, top_k)


def search(lm: LoadedModel, index: Index, query: str, top_k: int = 10) -> list[Hit]:
    """The ``top_k`` documents nearest the query, best first.

    Args:
        lm: the model that built ``index``.
        index: the corpus embedded (``build_index``).
        query: the query (its prompt added where the model declares one).
        top_k: hits returned.

    Returns:
        A ``Hit`` a document: rank, score, text.
    """
    if not query.strip():
        raise BertScopeError("The query is empty: type what to search for.")
    rows, scores = ranked(lm, index, [query], top_k)
    return [Hit(r + 1, index.corpus.ids[i], index.corpus.texts[i], float(s))
            for r, (i, s) in enumerate(zip(rows[0], scores[0]))]


@dataclass(frozen=True)
class RetrievalScores:
    """SQuAD dev as retrieval: its questions against its passages."""

    system: str
    questions: int
    passages: int
    mrr_at_10: float
    recall_at_1: float
    recall_at_10: float

    def to_json(self) -> dict:
        return {"system": self.system, "questions": self.questions, "passages": self.passages,
                "mrr@10": self.mrr_at_10, "recall@1": self.recall_at_1, "recall@10": self.recall_at_10}


def rank_scores(system: str, gold: np.ndarray, top: np.ndarray, passages: int) -> RetrievalScores:
    """MRR@10 and recall@k of ``top`` [question, >= 10] document rows against ``gold`` [question]."""
    hit = top[:, :10] == gold[:, None]  # [question, 10]
    first = np.where(hit.any(1), hit.argmax(1) + 1, 0)  # rank of the gold passage in the top 10 (0: not there)
    mrr = float(np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0).mean())
    return RetrievalScores(system, len(gold), passages, mrr, float(hit[:, :1].any(1).mean()), float(hit.any(1).mean()))


def squad_retrieval(limit: int | None = None) -> tuple[Corpus, list[str], np.ndarray]:
    """(SQuAD dev's passages, its questions, [question] the row of each question's passage)."""
    from bertscope.corpora.squad import read_squad

    dev = read_squad("dev")
    passages = list(dict.fromkeys(dev.contexts))
    row = {p: i for i, p in enumerate(passages)}
    questions, gold = dev.questions, np.array([row[c] for c in dev.contexts])
    if limit:
        questions, gold = questions[:limit], gold[:limit]
    return Corpus("squad", tuple(str(i) for i in range(len(passages))), tuple(passages)), list(questions), gold


def evaluate_squad(lm: LoadedModel, limit: int | None = None,
                   progress: Callable[[int, int], None] | None = None, engine: Any = None) -> RetrievalScores:
    """The model's MRR@10 and recall@1/10 on SQuAD dev's questions against its passages.

    Args:
        lm: an embedding model (its own embedding, its query and passage prompts).
        limit: the first questions only.
        progress: called with (done, total) passages embedded.
        engine: None (this process) or a ``runtime.engine.Engine``: where the passages and questions are embedded.

    Returns:
        ``RetrievalScores``.
    """
    return dense_squad(lm, limit, 10, progress, engine)[0]


def dense_squad(lm: LoadedModel, limit: int | None = None, depth: int = 10,
                progress: Callable[[int, int], None] | None = None, engine: Any = None
                ) -> tuple[RetrievalScores, np.ndarray]:
    """The model's scores on SQuAD dev (``evaluate_squad``) and each question's ``depth`` best passages, for a
    reranker to reorder without embedding the passages and questions again.

    Args:
        lm: an embedding model.
        limit: the first questions only.
        depth: passages kept a question (10 or more).
        progress: called with (done, total) passages embedded.
        engine: None (this process) or a ``runtime.engine.Engine``: where the passages and questions are embedded.

    Returns:
        (``RetrievalScores`` of the first 10, [question, depth] the passages' rows, best first).
    """
    corpus, questions, gold = squad_retrieval(limit)
    index = build_index(lm, corpus, progress, engine=engine)
    top, _ = ranked(lm, index, questions, max(10, depth), engine)
    return rank_scores(lm.name, gold, top[:, :10], len(corpus.texts)), top


def bm25_squad(limit: int | None = None) -> RetrievalScores:
    """BM25 (``bm25s``: k1 1.5, b 0.75, lower-cased words, English stop words kept) on the same questions and
    passages."""
    import bm25s

    corpus, questions, gold = squad_retrieval(limit)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(corpus.texts), stopwords=None, show_progress=False), show_progress=False)
    top, _ = retriever.retrieve(bm25s.tokenize(questions, stopwords=None, show_progress=False), k=10,
                                show_progress=False)
    return rank_scores("BM25", gold, np.asarray(top), len(corpus.texts))
