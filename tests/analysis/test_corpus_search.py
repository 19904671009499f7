"""Corpus search over the Brown corpus against a brute-force float32 search (issue 16)."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope import BertScopeError, inspect
from bertscope.analysis.corpus_search import build_index, search, word_occurrences
from bertscope.analysis.hidden_cache import HiddenStateCache


@pytest.fixture(scope="module")
def index(tiny_bert, tmp_path_factory):
    return build_index(tiny_bert, sentences=200, cache=HiddenStateCache(tmp_path_factory.mktemp("hidden")))


def test_search_matches_a_brute_force_cosine(tiny_bert, index):
    text = "the bank of the river was muddy ."
    found = search(tiny_bert, index, text, word=1, layer=2, k=10)
    r = inspect(tiny_bert, text, with_logits=False, with_attentions=False)
    query = r.hidden_states[2, 2]  # "bank" is one piece at position 2
    x = np.asarray(index.states.layer(2), np.float64)
    cos = x @ query / (np.linalg.norm(x, axis=1) * np.linalg.norm(query))
    best = np.argsort(-cos)[:10]
    assert found.query_word == "bank" and found.layer == 2
    np.testing.assert_allclose([m.similarity for m in found.matches], cos[best], atol=3e-3)  # float16 rows
    assert [m.similarity for m in found.matches] == sorted((m.similarity for m in found.matches), reverse=True)
    # each match is one word of the sample, with its own tag, sentence, genre and cosine (ties may swap)
    s = index.states
    for m in found.matches:
        assert any(s.types[i] == m.word and s.labels[i] == m.tag and index.genres[i] == m.genre
                   and index.texts[s.sentences[i]] == m.sentence and abs(cos[i] - m.similarity) < 3e-3
                   for i in range(index.n_words))
        assert m.genre in {"news", "editorial", "reviews", "religion", "hobbies",
                                                             "lore", "belles_lettres", "government", "learned",
                                                             "fiction", "mystery", "science_fiction", "adventure",
                                                             "romance", "humor"}
    assert sum(found.tag_counts.values()) == 10
    assert sum(found.corpus_tag_share.values()) == pytest.approx(1.0)


def test_index_covers_every_genre_and_occurrences(index):
    assert len(set(index.genres)) == 15 and index.n_words == len(index.states.labels)
    the = word_occurrences(index, "The", 1)
    assert len(the.genres) == min(500, len(index.occurrences("the"))) and the.vectors.shape[1] == 32
    assert all("the" in s.lower() for s in the.sentences[:20])
    with pytest.raises(BertScopeError, match="does not occur"):
        word_occurrences(index, "zzzyzzx", 1)


def test_bad_queries_say_what_to_do(tiny_bert, index, tmp_path):
    with pytest.raises(BertScopeError, match="Word 9 does not exist"):
        search(tiny_bert, index, "the bank .", word=9, layer=1)
    with pytest.raises(BertScopeError, match="Hidden state 7 does not exist"):
        search(tiny_bert, index, "the bank .", word=1, layer=7)
    with pytest.raises(BertScopeError, match="1 to 200"):
        search(tiny_bert, index, "the bank .", word=1, layer=1, k=0)


def test_corpus_search_on_the_command_line(tiny_bert_dir, tmp_path, capsys):
    import json

    from bertscope.cli import main

    args = ["corpus-search", str(tiny_bert_dir), "the bank of the river .", "--word", "1", "--layer", "1",
            "--k", "5", "--size", "100", "--cache", str(tmp_path)]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["query_word"] == "bank" and out["layer"] == 1 and len(out["matches"]) == 5  # the last block
    assert main([*args[:5], "--layer", "embeddings", "--size", "100", "--cache", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layer"] == "embeddings"
    assert main([*args[:5], "--layer", "2", "--size", "100", "--cache", str(tmp_path)]) == 2  # blocks 0 and 1 only
    assert "numbered 0 to 1" in capsys.readouterr().err
    assert sum(out["tags"].values()) == 5 and set(out["matches"][0]) == {"word", "tag", "genre", "sentence", "similarity", "start", "end"}
    assert main([*args[:3], "--word", "9", "--size", "100", "--cache", str(tmp_path)]) == 2
    assert "Word 9 does not exist" in capsys.readouterr().err
