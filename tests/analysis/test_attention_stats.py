"""Head statistics against hand computations on small hand-made attention tensors."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

from bertscope import BertScopeError, inspect, inspect_batch
from bertscope.analysis.attention_stats import HeadStats, head_stats, sentence_statistics
from bertscope.corpora.sentences import read_corpus, shipped_corpus


def hand_made():
    """Two sentences, 1 layer, 1 head; the second (3 tokens) is padded to 4."""
    a0 = np.array([  # tokens: [CLS] a . [SEP]
        [0.5, 0.5, 0.0, 0.0],
        [0.1, 0.2, 0.3, 0.4],
        [0.0, 1.0, 0.0, 0.0],
        [0.25, 0.25, 0.25, 0.25],
    ])
    a1 = np.array([  # tokens: [CLS] b [SEP] <pad>; pad rows are garbage on purpose
        [0.2, 0.8, 0.0, 0.0],
        [0.6, 0.0, 0.4, 0.0],
        [0.0, 0.5, 0.5, 0.0],
        [9.0, 9.0, 9.0, 9.0],
    ])
    attentions = np.stack([a0, a1])[:, None, None].astype(np.float32)  # [b, l, h, q, k]
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    is_cls = np.array([[1, 0, 0, 0], [1, 0, 0, 0]], bool)
    is_sep = np.array([[0, 0, 0, 1], [0, 0, 1, 0]], bool)
    is_punct = np.array([[0, 0, 1, 0], [0, 0, 0, 0]], bool)
    return attentions, mask, is_cls, is_sep, is_punct, (a0, a1)


def entropy_by_hand(rows, n):
    total = 0.0
    for row in rows:
        p = 0.9999 * np.asarray(row[:n]) + 0.0001 / n
        total += -(p * np.log(p)).sum()
    return total / len(rows)


def test_statistics_equal_hand_computation():
    attentions, mask, cls, sep, punct, (a0, a1) = hand_made()
    s = {k: v[:, 0, 0] for k, v in sentence_statistics(attentions, mask, cls, sep, punct).items()}
    assert_allclose(s["cls"], [(0.5 + 0.1 + 0 + 0.25) / 4, (0.2 + 0.6 + 0) / 3], rtol=1e-6)
    assert_allclose(s["sep"], [(0 + 0.4 + 0 + 0.25) / 4, (0 + 0.4 + 0.5) / 3], rtol=1e-6)
    assert_allclose(s["punct"], [(0 + 0.3 + 0 + 0.25) / 4, 0.0], rtol=1e-6, atol=1e-7)
    assert_allclose(s["prev"], [(0 + 0.1 + 1.0 + 0.25) / 4, (0 + 0.6 + 0.5) / 3], rtol=1e-6)
    # the last real token of sentence 2 must not "see" the pad as its next token
    assert_allclose(s["next"], [(0.5 + 0.3 + 0 + 0) / 4, (0.8 + 0.4 + 0) / 3], rtol=1e-6)
    assert_allclose(s["self"], [(0.5 + 0.2 + 0 + 0.25) / 4, (0.2 + 0 + 0.5) / 3], rtol=1e-6)
    d0 = (0.5 * 1 + (0.1 * 1 + 0.3 * 1 + 0.4 * 2) + 1.0 * 1 + 0.25 * (3 + 2 + 1)) / 4
    d1 = (0.8 * 1 + (0.6 * 1 + 0.4 * 1) + 0.5 * 1) / 3
    assert_allclose(s["distance"], [d0, d1], rtol=1e-6)
    assert_allclose(s["entropy"], [entropy_by_hand(a0, 4), entropy_by_hand(a1[:3], 3)], rtol=1e-5)


def test_uniform_attention_has_log_n_entropy():
    n = 5
    a = np.full((1, 1, 1, n, n), 1 / n, np.float32)
    flags = np.zeros((1, n), bool)
    s = sentence_statistics(a, np.ones((1, n), bool), flags, flags, flags)
    assert_allclose(s["entropy"][0, 0, 0], np.log(n), rtol=1e-5)


def test_corpus_statistics_match_per_sentence_runs(tiny_bert):
    sentences = ["the bank of the river .", "a dog , a cat .", "hello world", "she ate bread ."]
    batched = head_stats(tiny_bert, sentences, batch_size=3)
    one_by_one = [head_stats(tiny_bert, [s], batch_size=1) for s in sentences]
    for name in batched.stats:
        mean = np.mean([o.stats[name] for o in one_by_one], axis=0)
        assert_allclose(batched.stats[name], mean, rtol=1e-4, atol=1e-6)
    assert batched.sentences == 4
    assert batched.tokens == sum(inspect(tiny_bert, s).n_tokens for s in sentences)


def test_flags_find_cls_sep_and_punctuation(tiny_bert):
    from bertscope.analysis.attention_stats import token_flags

    (batch,) = inspect_batch(tiny_bert, ["the bank , a river ."], batch_size=1)
    cls, sep, punct = (f[0].tolist() for f in token_flags(tiny_bert, batch))
    assert batch.tokens[0] == ["[CLS]", "the", "bank", ",", "a", "river", ".", "[SEP]"]
    assert cls == [True] + [False] * 7
    assert sep == [False] * 7 + [True]
    assert punct == [False, False, False, True, False, False, True, False]


def test_ranking_and_rows():
    values = np.array([[0.1, 0.9], [0.5, 0.3]])
    stats = HeadStats({"cls": values, "sep": values}, sentences=2, tokens=10)
    assert stats.ranking("cls")[:2] == [(0, 1, 0.9), (1, 0, 0.5)]
    assert stats.ranking("cls", descending=False)[0] == (0, 0, 0.1)
    assert len(stats.rows()) == 4 and stats.rows()[1] == {"layer": 0, "head": 1, "cls": 0.9, "sep": 0.9}
    with pytest.raises(BertScopeError, match="Unknown statistic"):
        stats.ranking("nope")


def test_shipped_corpus_and_bad_corpora(tiny_bert):
    corpus = shipped_corpus()
    assert len(corpus) >= 200 and len(set(corpus)) == len(corpus)
    assert read_corpus("a\n\n  b  \n") == ["a", "b"]
    with pytest.raises(BertScopeError, match="empty"):
        head_stats(tiny_bert, ["", "   "])
