"""Rerankers (``retrieval.rerank``): the relevance is the cross-encoder's own score of the pair (two labels: the
relevant one's log-probability; one label: its logit), the order follows it, integrated gradients explain it to
their completeness error, ArchDetect's interactions are the mixed differences they say, and SQuAD reranked is the
retriever's top passages reordered."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.retrieval.rerank import (
    MAX_PAIRS,
    evaluate_rerank,
    explain_relevance,
    interactions,
    relevance,
    relevant_label,
    rerank,
)
from tests.conftest import labels, task_checkpoint

QUERY = "where was the bank ?"
PASSAGES = ["the bank of the river was muddy .", "she ate bread .", "the money is in the bank near the river ."]


@pytest.fixture(scope="module")
def two_labels(tiny_bert_dir, tmp_path_factory):
    return str(task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("rr2"), "AutoModelForSequenceClassification", 3,
                               num_labels=2, **labels(["irrelevant", "relevant"])))


@pytest.fixture(scope="module")
def one_label(tiny_bert_dir, tmp_path_factory):
    return str(task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("rr1"), "AutoModelForSequenceClassification", 4,
                               num_labels=1))


def _reference(folder: str, query: str, passages: list[str]) -> torch.Tensor:
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        return model(**tok([query] * len(passages), passages, padding=True, return_tensors="pt")).logits


def test_relevance_is_the_cross_encoders_own_score(two_labels, one_label):
    lm = load_model(two_labels)
    assert relevant_label(lm) == 1
    np.testing.assert_allclose(relevance(lm, QUERY, PASSAGES),
                               torch.log_softmax(_reference(two_labels, QUERY, PASSAGES), -1)[:, 1], atol=1e-5)
    single = load_model(one_label)
    np.testing.assert_allclose(relevance(single, QUERY, PASSAGES), _reference(one_label, QUERY, PASSAGES)[:, 0],
                               atol=1e-5)
    hits = rerank(single, QUERY, PASSAGES, ids=["a", "b", "c"])
    scores = _reference(one_label, QUERY, PASSAGES)[:, 0].numpy()
    assert [h.id for h in hits] == [["a", "b", "c"][i] for i in np.argsort(-scores)]
    assert [h.rank for h in hits] == [1, 2, 3]


def test_integrated_gradients_explain_the_relevance(two_labels):
    lm = load_model(two_labels)
    ig = explain_relevance(lm, QUERY, PASSAGES[0], steps=64)
    assert ig.attribution.target.label == "relevant" and ig.completeness_error < 0.01
    assert ig.attribution.f_input == pytest.approx(float(relevance(lm, QUERY, PASSAGES[:1])[0]), abs=1e-5)
    assert ig.tokens[0] == "[CLS]" and "muddy" in ig.tokens


def test_interactions_are_the_mixed_differences(two_labels):
    lm = load_model(two_labels)
    x = interactions(lm, QUERY, PASSAGES[2])
    assert x.query_words == ("where", "was", "the", "bank", "?")
    assert x.passage_words[:3] == ("the", "money", "is") and x.pairs.shape == (5, len(x.passage_words))
    assert x.passes == 1 + 5 + len(x.passage_words) + x.pairs.size
    tok = lm.tokenizer
    enc = tok(QUERY, PASSAGES[2], return_tensors="pt")
    ids = enc["input_ids"][0]
    q_bank = 4  # [CLS] where was the bank
    p_bank = ids.tolist().index(tok.convert_tokens_to_ids("bank"), q_bank + 1)
    j = x.passage_words.index("bank")
    rows = ids.repeat(4, 1)
    rows[1, q_bank] = rows[3, q_bank] = tok.pad_token_id
    rows[2, p_bank] = rows[3, p_bank] = tok.pad_token_id
    model = AutoModelForSequenceClassification.from_pretrained(two_labels).eval()
    with torch.no_grad():
        f = torch.log_softmax(model(input_ids=rows, token_type_ids=enc["token_type_ids"].expand(4, -1)).logits, -1)[:, 1]
    assert x.score == pytest.approx(float(f[0]), abs=1e-5)
    assert x.pairs[3, j] == pytest.approx(float(f[0] - f[1] - f[2] + f[3]), abs=1e-5)
    assert x.query_alone[3] == pytest.approx(float(f[0] - f[1]), abs=1e-5)
    assert len(x.strongest(3)) == 3 and x.to_json()["method"] == "archdetect"


def test_a_reranker_reorders_the_retrievers_top_passages(tiny_bert_dir, two_labels):
    from bertscope.retrieval.search import build_index, rank_scores, ranked, squad_retrieval

    retriever, reranker = load_model(str(tiny_bert_dir)), load_model(two_labels)
    got = evaluate_rerank(retriever, reranker, limit=6, depth=10)
    corpus, questions, gold = squad_retrieval(6)
    top, _ = ranked(retriever, build_index(retriever, corpus), questions, 10)
    order = np.array([rows[np.argsort(-relevance(reranker, q, [corpus.texts[i] for i in rows]), kind="stable")]
                      for q, rows in zip(questions, top)])
    assert got == rank_scores(got.system, gold, order, len(corpus.texts))
    assert got.system == f"{retriever.name} + {reranker.name}" and got.questions == 6
    from bertscope.retrieval.search import dense_squad, evaluate_squad

    scores, kept = dense_squad(retriever, 6, 12)  # what retrieval-eval --rerank ranks once and hands over
    assert scores == evaluate_squad(retriever, 6) and kept.shape == (6, 12)
    np.testing.assert_array_equal(kept[:, :10], top)
    assert evaluate_rerank(retriever, reranker, limit=6, depth=10, top=kept) == got


def test_bad_inputs_are_one_line(tiny_bert_dir, two_labels, monkeypatch):
    lm = load_model(two_labels)
    with pytest.raises(BertScopeError, match="is not a reranker.*no task head"):
        relevance(load_model(str(tiny_bert_dir)), QUERY, PASSAGES)
    with pytest.raises(BertScopeError, match="The query is empty"):
        relevance(lm, " ", PASSAGES)
    with pytest.raises(BertScopeError, match="No passages"):
        relevance(lm, QUERY, [])
    with pytest.raises(BertScopeError, match="passage is empty"):
        explain_relevance(lm, QUERY, "")
    with pytest.raises(BertScopeError, match="--depth 5"):
        evaluate_rerank(lm, lm, 2, depth=5)
    monkeypatch.setattr("bertscope.retrieval.rerank.MAX_PAIRS", 10)
    with pytest.raises(BertScopeError, match="Shorten the passage"):
        interactions(lm, QUERY, PASSAGES[2])
    assert MAX_PAIRS >= 4096


def test_a_reranker_reorders_the_sparse_readings_top_passages(tiny_bert_dir, two_labels, monkeypatch, capsys):
    """``--sparse --rerank``: the passages the term weights rank first (each pair's score as ``explain_sparse``
    computes it alone), reordered by the cross-encoder; the command reads the passages once."""
    from bertscope.cli import main
    from bertscope.retrieval import search, sparse

    passages = ("the dog ate the bread .", "she put the money in the bank .", "a man rode a horse .",
                "the river bank was muddy .", "bread and money .", "a dog and a horse .", "the bank .",
                "muddy bread .", "she rode .", "the man .", "a river .")
    questions = ["where is the money ?", "who rode the horse ?", "what did the dog eat ?"]
    monkeypatch.setattr(search, "squad_retrieval", lambda limit=None: (
        search.Corpus("squad", tuple(map(str, range(len(passages)))), passages), questions, np.array([1, 2, 0])))
    retriever, reranker = load_model(str(tiny_bert_dir)), load_model(two_labels)
    pair = np.array([[sparse.explain_sparse(retriever, q, p).score for p in passages] for q in questions])
    top = sparse.sparse_ranked(retriever, passages, questions, 10)
    for q in range(len(questions)):  # best first by each pair's own score (float rounding aside), the worst left out
        assert np.all(np.diff(pair[q, top[q]]) <= 1e-6 * np.abs(pair).max())
        assert set(top[q]) == set(range(len(passages))) - {int(np.argmin(pair[q]))}
    got = evaluate_rerank(retriever, reranker, depth=10, sparse=True)
    order = np.array([rows[np.argsort(-relevance(reranker, q, [passages[i] for i in rows]), kind="stable")]
                      for q, rows in zip(questions, top)])
    assert got.system == f"{retriever.name} (sparse, untrained head) + {reranker.name}"
    assert got == search.rank_scores(got.system, np.array([1, 2, 0]), order, len(passages))
    assert evaluate_rerank(retriever, reranker, depth=10, sparse=True, top=top) == got  # handed in: the same
    with pytest.raises(BertScopeError, match="at least --depth"):
        evaluate_rerank(retriever, reranker, depth=10, sparse=True, top=top[:, :5])
    calls = []
    real = sparse.sparse_embed
    monkeypatch.setattr(sparse, "sparse_embed", lambda lm, texts, *a, **k: calls.append(len(texts)) or real(lm, texts,
                                                                                                          *a, **k))
    code = main(["retrieval-eval", str(tiny_bert_dir), "--sparse", "--rerank", two_labels, "--depth", "10", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["reranked"]["mrr@10"] == pytest.approx(got.mrr_at_10)
    assert calls.count(len(passages)) == 1  # the passages embedded once for both tables
    code = main(["retrieval-eval", str(tiny_bert_dir), "--sparse", "--rerank", two_labels, "--depth", "5"])
    assert code == 2 and "--depth 5" in capsys.readouterr().err


def test_a_query_the_input_cannot_hold_with_a_passage_is_one_line_and_the_cost_is_said(two_labels):
    """A query of the model's whole length left the passage no room: truncation="only_second" raised a plain
    Exception after the job was charged. Now one line, before; and the pieces a reranking passes are counted."""
    from bertscope.retrieval.rerank import explain_cost, pair_lengths

    lm = load_model(two_labels)  # reads 40 tokens
    long = " ".join(["where"] * 37)
    for call in (lambda: relevance(lm, long, PASSAGES), lambda: interactions(lm, long, PASSAGES[0]),
                 lambda: explain_relevance(lm, long, PASSAGES[0]), lambda: pair_lengths(lm, long, PASSAGES)):
        with pytest.raises(BertScopeError, match=r"^The query has 37 word pieces; .* reads 40 with the passage, so "
                                                 r"keep the query under 37"):
            call()
    lengths = pair_lengths(lm, QUERY, PASSAGES)
    assert lengths == [len(lm.tokenizer(QUERY, p)["input_ids"]) for p in PASSAGES]
    pairs = interactions(lm, QUERY, PASSAGES[0])
    assert explain_cost(lm, QUERY, PASSAGES[0], 10) == lengths[0] * (10 + pairs.passes)
