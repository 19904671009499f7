"""Pairs from a file or a list: every bad one is refused in one line that names it."""

from __future__ import annotations

import json

import pytest

from bertscope import load_model
from bertscope.circuits.pairs import Pair, prepare_all, read_pairs
from bertscope.errors import BertScopeError
from tests.conftest import labels, task_checkpoint


def test_csv_and_json_lines_read_the_same_pairs(tmp_path):
    rows = [{"clean": "the man [MASK] here .", "corrupted": "the dog [MASK] here .", "answer": "is", "foil": "was"},
            {"clean": "they fish .", "corrupted": "the fish .", "answer": "VERB", "foil": "NOUN", "word": "fish"},
            {"clean": "who sat ?", "corrupted": "what sat ?", "answer": "the man", "foil": "the river",
             "context": "the man sat by the river ."}]
    columns = ("clean", "corrupted", "answer", "foil", "word", "context")
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "p.csv").write_text(",".join(columns) + "\n" + "\n".join(
        ",".join(r.get(k, "") for k in columns) for r in rows))
    expected = [Pair(**r) for r in rows]
    assert read_pairs(tmp_path / "p.jsonl") == expected == read_pairs(tmp_path / "p.csv")
    assert read_pairs((tmp_path / "p.csv").read_bytes(), "upload.csv") == expected


@pytest.mark.parametrize("name, text, message", [
    ("e.csv", "", "holds no pairs"),
    ("m.csv", "clean,corrupted\na,b\n", "lacks the columns answer, foil"),
    ("b.jsonl", '{"clean": "a"}\nnot json\n', "line 2: not valid JSON"),
    ("l.jsonl", '["a", "b"]\n', "line 1: not a JSON object"),
])
def test_bad_files_are_one_line(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(BertScopeError, match=message):
        read_pairs(tmp_path / name)
    with pytest.raises(BertScopeError, match="No pairs file"):
        read_pairs(tmp_path / "missing.csv")
    with pytest.raises(BertScopeError, match="not CSV this reader can use"):
        read_pairs(b'clean,corrupted,answer,foil\n"' + b"x" * 200_000 + b'",b,c,d\n', "long.csv")
    with pytest.raises(BertScopeError, match="not UTF-8"):
        read_pairs("clean,corrupted,answer,foil\ncaf\xe9,b,c,d\n".encode("latin-1"), "latin.csv")


def test_bad_pairs_name_the_pair_and_what_the_model_has(tiny_mlm_dir, tiny_bert_dir, tmp_path):
    lm = load_model(str(tiny_mlm_dir))
    good = Pair("the man [MASK] here .", "the dog [MASK] here .", "is", "was")
    with pytest.raises(BertScopeError, match="empty"):
        prepare_all(lm, [])
    with pytest.raises(BertScopeError, match=r"Pair 2 has 7 tokens clean and 8 corrupted"):
        prepare_all(lm, [good, Pair("the man [MASK] here .", "the big dog [MASK] here .", "is", "was")])
    with pytest.raises(BertScopeError, match="no \\[MASK\\] at position 3, where the clean text's is"):
        prepare_all(lm, [Pair("the man [MASK] here .", "the dog here [MASK] .", "is", "was")])
    with pytest.raises(BertScopeError, match="no \\[MASK\\]"):
        prepare_all(lm, [Pair("the man is here .", "the dog is here .", "is", "was")])
    with pytest.raises(BertScopeError, match="not one vocabulary item"):
        prepare_all(lm, [Pair(good.clean, good.corrupted, "zebra", "was")])
    with pytest.raises(BertScopeError, match="same item"):
        prepare_all(lm, [Pair(good.clean, good.corrupted, "is", "is")])
    cls = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "c", "AutoModelForSequenceClassification", 1,
                                         num_labels=2, **labels(["negative", "positive"]))))
    with pytest.raises(BertScopeError, match="no label 'happy': its labels are negative, positive"):
        prepare_all(cls, [Pair("the food was good .", "the food was bad .", "happy", "negative")])
    regression = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "r", "AutoModelForSequenceClassification",
                                                1, num_labels=1)))
    with pytest.raises(BertScopeError, match="regression head"):
        prepare_all(regression, [Pair("the food was good .", "the food was bad .", "a", "b")])
    tagger = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "t", "AutoModelForTokenClassification", 1,
                                            num_labels=2, **labels(["NOUN", "VERB"]))))
    with pytest.raises(BertScopeError, match="names the word"):
        prepare_all(tagger, [Pair("they fish .", "the fish .", "VERB", "NOUN")])
    with pytest.raises(BertScopeError, match="'boat' of pair 1 is not a word"):
        prepare_all(tagger, [Pair("they fish .", "the fish .", "VERB", "NOUN", "boat")])
    qa = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "q", "AutoModelForQuestionAnswering", 1,
                                        num_labels=2)))
    context = "the man sat by the river ."
    with pytest.raises(BertScopeError, match="pair 1 has no context"):
        prepare_all(qa, [Pair("who sat ?", "what sat ?", "the man", "the river")])
    with pytest.raises(BertScopeError, match="The foil 'a boat' of pair 1 is not in its context"):
        prepare_all(qa, [Pair("who sat ?", "what sat ?", "the man", "a boat", context=context)])
    with pytest.raises(BertScopeError, match="same span"):
        prepare_all(qa, [Pair("who sat ?", "what sat ?", "man", "man", context=context)])
    with pytest.raises(BertScopeError, match="Pair 1 has 12 tokens clean and 13 corrupted"):
        prepare_all(qa, [Pair("who ?", "who sat ?", "the man", "the river", context=context)])
    long = " ".join(["the man sat by the river ."] * 40)  # cut at the model's maximum: both rows as long
    with pytest.raises(BertScopeError, match="Pair 1 has .* tokens clean and .* corrupted"):
        prepare_all(qa, [Pair("who ?", "who sat ?", "the man", "the river", context=long)])
    with pytest.raises(BertScopeError, match="'the ma' of pair 1 does not start and end where the context's pieces"):
        prepare_all(qa, [Pair("who sat ?", "what sat ?", "the ma", "the river", context=context)])
    (p,) = prepare_all(qa, [Pair("who sat ?", "what sat ?", "man", "river",
                                 context="the woman and the man sat by the river .")])[1]
    assert p.tokens[p.ids[0] - 1:p.ends[0] + 1] == ["the", "man"]  # the whole word, not woman's end
