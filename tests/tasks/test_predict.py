"""Task heads (``core.task_head``) and their decisions (``bertscope.tasks``): every family's
fine-tuned checkpoints load with their head and labels, and what ``predict`` says equals
transformers' own pipelines (``text-classification``, ``token-classification`` with the simple
grouping) to 1e-5; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.cli import main
from bertscope.core.card import model_card
from bertscope.errors import BertScopeError
from bertscope.tasks.classify import classify
from bertscope.tasks.predict import predict, read_records
from bertscope.tasks.tag import tag

FAMILIES = ["tiny_bert_dir", "tiny_roberta_dir", "tiny_xlmr_dir", "tiny_albert_dir", "tiny_distilbert_dir",
            "tiny_electra_dir", "tiny_deberta_dir"]
SENTIMENT = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
# short: the tiny XLM-R's character-level vocabulary makes many pieces, and its limit is 32 tokens
TEXTS = ["the river bank .", "she had cash !", "hello world , dog ."]
PAIRS = ["the river was muddy .", "he had a loan .", "the cat sat there ."]


def task_checkpoint(base: Path, folder: Path, auto: str, seed: int, **config) -> Path:
    """``base``'s encoder under a new task head (seeded), saved as a fine-tuned checkpoint is."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(base, **config)
    model = getattr(transformers, auto).from_pretrained(base, config=cfg).eval()
    for name, p in model.named_parameters():  # a decisive head: larger weights than the init's
        if not name.startswith(model.base_model_prefix):
            p.data.normal_(0, 2.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def labels(names: list[str]) -> dict:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


@pytest.fixture(params=FAMILIES)
def family(request):
    return Path(request.getfixturevalue(request.param))


def _pipeline(kind: str, folder: Path, **kw):
    from transformers import pipeline

    return pipeline(kind, model=str(folder), tokenizer=str(folder), device="cpu", **kw)


def test_every_family_classifies_as_the_pipeline(family, tmp_path):
    folder = task_checkpoint(family, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    lm = load_model(str(folder))
    assert lm.task is not None and lm.task.kind == "sequence-classification" and lm.task.labels == tuple(SENTIMENT)
    assert lm.task.scoring == "softmax" and not lm.task.generic_labels
    ours = classify(lm, TEXTS)
    reference = _pipeline("text-classification", folder, top_k=None)(TEXTS)
    for mine, theirs in zip(ours, reference):
        assert [label for label, _ in mine.ranked] == [t["label"] for t in theirs]
        np.testing.assert_allclose([s for _, s in mine.ranked], [t["score"] for t in theirs], atol=1e-5)
    assert len({r.predicted for r in ours}) >= 1 and all(abs(r.scores.sum() - 1) < 1e-5 for r in ours)


def test_pairs_multi_label_regression_and_unnamed_labels(tiny_bert_dir, tmp_path):
    pair_model = task_checkpoint(tiny_bert_dir, tmp_path / "nli", "AutoModelForSequenceClassification", 2,
                                 num_labels=3, **labels(["entailment", "neutral", "contradiction"]))
    lm = load_model(str(pair_model))
    mine = classify(lm, TEXTS, PAIRS)
    theirs = _pipeline("text-classification", pair_model, top_k=None)(
        [{"text": t, "text_pair": p} for t, p in zip(TEXTS, PAIRS)])
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose([s for _, s in m.ranked], [x["score"] for x in t], atol=1e-5)
    alone = classify(lm, TEXTS[:1])[0]
    assert not np.allclose(alone.scores, mine[0].scores)  # the pair's segment B reaches the decision

    multi = task_checkpoint(tiny_bert_dir, tmp_path / "multi", "AutoModelForSequenceClassification", 3, num_labels=3,
                            problem_type="multi_label_classification", **labels(["sports", "politics", "tech"]))
    lm = load_model(str(multi))
    assert lm.task.scoring == "sigmoid"
    theirs = _pipeline("text-classification", multi, top_k=None)(TEXTS)
    for m, t in zip(classify(lm, TEXTS), theirs):
        assert [x["label"] for x in t] == [label for label, _ in m.ranked]
        np.testing.assert_allclose([s for _, s in m.ranked], [x["score"] for x in t], atol=1e-5)

    regression = task_checkpoint(tiny_bert_dir, tmp_path / "reg", "AutoModelForSequenceClassification", 4,
                                 num_labels=1)
    lm = load_model(str(regression))
    assert lm.task.problem_type == "regression" and lm.task.scoring == "none"
    theirs = _pipeline("text-classification", regression, top_k=None, function_to_apply="none")(TEXTS)
    for m, t in zip(classify(lm, TEXTS), theirs):
        assert m.scores.shape == (1,) and m.scores[0] == pytest.approx(t[0]["score"], abs=1e-5)
        assert m.scores[0] == pytest.approx(m.logits[0])  # the raw value

    unnamed = task_checkpoint(tiny_bert_dir, tmp_path / "plain", "AutoModelForSequenceClassification", 5, num_labels=2)
    lm = load_model(str(unnamed))
    assert lm.task.generic_labels and lm.task.labels == ("LABEL_0", "LABEL_1")
    assert any("does not name its labels" in note for note in lm.notes)


def test_every_family_tags_as_the_pipeline(family, tmp_path):
    folder = task_checkpoint(family, tmp_path / "tag", "AutoModelForTokenClassification", 6, num_labels=5,
                             **labels(TAGS))
    lm = load_model(str(folder))
    assert lm.task.kind == "token-classification" and lm.task.labels == tuple(TAGS)
    ours = tag(lm, TEXTS)
    grouped = _pipeline("token-classification", folder, aggregation_strategy="simple")(TEXTS)
    plain = _pipeline("token-classification", folder, aggregation_strategy="none", ignore_labels=[])(TEXTS)
    for mine, entities, pieces in zip(ours, grouped, plain):
        assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in mine.entities] == \
               [(e["entity_group"], e["word"], e["start"], e["end"]) for e in entities]
        np.testing.assert_allclose([e["score"] for e in mine.entities], [e["score"] for e in entities], atol=1e-5)
        assert [(t["token"], t["label"]) for t in mine.tokens] == [(p["word"], p["entity"]) for p in pieces]
        np.testing.assert_allclose([t["score"] for t in mine.tokens], [p["score"] for p in pieces], atol=1e-5)
        # a word is its first piece's label; words cover the text's words in order
        assert [w["start"] for w in mine.words] == sorted(w["start"] for w in mine.words)
        assert all(mine.text[w["start"]:w["end"]] == w["word"] for w in mine.words)


def test_question_answering_checkpoints_load_with_their_head(tiny_bert_dir, tmp_path):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)
    lm = load_model(str(folder))
    assert lm.task.kind == "question-answering" and "answer spans" in lm.task.describe()
    with pytest.raises(BertScopeError, match="does not read answer spans yet"):
        predict(lm, TEXTS)


def test_a_checkpoint_saved_as_a_classifier_without_its_head_is_the_encoder_and_says_so(tiny_bert_dir, tmp_path):
    from transformers import AutoConfig, BertModel, BertTokenizer

    folder = tmp_path / "headless"
    BertModel.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    BertTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    cfg = AutoConfig.from_pretrained(folder)
    cfg.architectures = ["BertForSequenceClassification"]
    cfg.save_pretrained(folder)
    lm = load_model(str(folder))
    assert lm.task is None and any("task head's weights are not all in it" in note for note in lm.notes)


def test_the_predict_command_and_a_labelled_file(tiny_bert_dir, tmp_path, capsys):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    assert main(["predict", str(folder), TEXTS[0], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "sequence-classification" and out["labels"] == SENTIMENT
    assert [s["label"] for s in out["items"][0]["scores"]] and len(out["items"][0]["scores"]) == 3
    assert main(["predict", str(folder), TEXTS[0], "--top-k", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["items"][0]["scores"]) == 1
    lm = load_model(str(folder))
    predicted = [r.predicted for r in classify(lm, TEXTS)]
    gold = [predicted[0], predicted[1], next(label for label in SENTIMENT if label != predicted[2])]
    records = tmp_path / "records.csv"
    records.write_text("text,label\n" + "".join(f'"{t}",{g}\n' for t, g in zip(TEXTS, gold)))
    assert main(["predict", str(folder), "--file", str(records), "--json"]) == 0
    evaluation = json.loads(capsys.readouterr().out)["evaluation"]
    assert evaluation["accuracy"] == pytest.approx(2 / 3) and evaluation["misclassified_count"] == 1
    assert evaluation["misclassified"][0]["index"] == 2 and np.sum(evaluation["confusion"]) == 3
    assert main(["predict", str(folder), "--file", str(records)]) == 0
    assert "accuracy 0.6667" in capsys.readouterr().out
    card = model_card(lm)
    assert card["task"]["labels"] == SENTIMENT
    assert main(["info", str(folder)]) == 0
    assert "task head: sequence classification (3 labels: negative, neutral, positive)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["TEXT", "--file", "x.csv"], "Give a TEXT or --file"),
    ([], "Give a TEXT or --file"),
    (["TEXT", "--question", "who?"], "question-answering"),
    (["--file", "missing.csv"], "No records file"),
    (["TEXT", "--top-k", "0"], "--top-k takes a number from 1"),
])
def test_bad_input_is_one_line(tiny_bert_dir, tmp_path, capsys, argv, message):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    capsys.readouterr()  # building the checkpoint printed transformers' own progress
    assert main(["predict", str(folder), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_wrong_labels_a_model_without_a_task_and_bad_files_are_one_line(tiny_bert_dir, tmp_path, capsys):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    records = tmp_path / "r.jsonl"
    records.write_text('{"text": "the dog .", "label": "POSITIVE"}\n{"text": "the cat .", "label": "joy"}\n')
    capsys.readouterr()
    assert main(["predict", str(folder), "--file", str(records)]) == 2
    err = capsys.readouterr().err
    assert "labels POSITIVE, joy are not the model's: it has negative, neutral, positive" in err
    assert main(["predict", str(tiny_bert_dir), "the dog ."]) == 2
    assert "has no task head" in capsys.readouterr().err
    with pytest.raises(BertScopeError, match="name a text column"):
        read_records("sentence,label\na,b\n", "x.csv")
    with pytest.raises(BertScopeError, match="a label for every record"):
        read_records("text,label\na,b\nc,\n", "x.csv")
    with pytest.raises(BertScopeError, match="line 1: not a JSON object"):
        read_records("[1, 2]\n", "x.jsonl")
