"""Search with an embedding model (``retrieval.search``): exact search equals scoring every document by hand, the
index is kept and read back, MRR@10 and recall@k are what they say, and BM25 runs on the same SQuAD questions."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import embed
from bertscope.retrieval.search import Corpus, build_index, documents, rank_scores, ranked, search

DOCS = ["the dog ate the bread .", "a man is eating food .", "the bank of the river was muddy .",
        "she deposited the money in the bank .", "the cat sat on the water ."]


@pytest.fixture(scope="module")
def lm(tiny_bert_dir):
    return load_model(str(tiny_bert_dir))


def test_exact_search_scores_every_document_as_the_model_does(lm, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))
    corpus = Corpus("mine", tuple(map(str, range(len(DOCS)))), tuple(DOCS))
    index = build_index(lm, corpus)
    assert not index.hit and build_index(lm, corpus).hit  # kept, and read back
    hits = search(lm, index, "the river bank", top_k=3)
    q = embed(lm, ["the river bank"]).vectors[0]
    d = embed(lm, DOCS).vectors
    cos = d @ q / np.linalg.norm(d, axis=1) / np.linalg.norm(q)
    assert [h.text for h in hits] == [DOCS[i] for i in np.argsort(-cos)[:3]]
    np.testing.assert_allclose([h.score for h in hits], np.sort(cos)[::-1][:3], atol=1e-5)
    assert [h.rank for h in hits] == [1, 2, 3]


def test_mrr_and_recall_count_the_gold_passages_rank():
    gold = np.array([0, 1, 2, 3])
    top = np.array([[0] + [9] * 9, [9, 1] + [8] * 8, [9] * 10, [9] * 9 + [3]])  # ranks 1, 2, none, 10
    scores = rank_scores("x", gold, top, 10)
    assert scores.mrr_at_10 == pytest.approx((1 + 1 / 2 + 0 + 1 / 10) / 4)
    assert scores.recall_at_1 == 0.25 and scores.recall_at_10 == 0.75


def test_a_file_of_documents_and_bad_inputs(lm, tmp_path):
    file = tmp_path / "docs.txt"
    file.write_text("\n".join(DOCS) + "\n\n", encoding="utf-8")
    corpus = documents(str(file))
    assert corpus.texts == tuple(DOCS) and corpus.name == "docs.txt"
    with pytest.raises(BertScopeError, match="No corpus 'nowhere'"):
        documents("nowhere")
    index = build_index(lm, corpus, cache=False)
    with pytest.raises(BertScopeError, match="The query is empty"):
        search(lm, index, "  ")
    with pytest.raises(BertScopeError, match="at least 1"):
        ranked(lm, index, ["x"], 0)


@pytest.mark.parametrize(("name", "count"), [("squad", 2067), ("topics", 2225), ("brown", 5000), ("ewt", 2077)])
def test_every_installed_corpus_gives_its_documents(name, count):
    corpus = documents(name)
    assert len(corpus.texts) == count and all(t.strip() for t in corpus.texts)


@pytest.mark.slow
def test_squad_retrieval_with_bm25_beside_the_model(lm):
    from bertscope.retrieval.search import bm25_squad, evaluate_squad

    bm25 = bm25_squad(limit=500)
    assert bm25.questions == 500 and bm25.passages == 2067 and 0.5 < bm25.mrr_at_10 <= 1
    ours = evaluate_squad(lm, limit=200)  # a random tiny model: far below BM25, as it should be
    assert ours.questions == 200 and ours.mrr_at_10 < bm25.mrr_at_10
