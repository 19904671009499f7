"""Activation patching on a fine-tuned classifier: the metric is its head's logit difference of two
labels (a regression head: its value), read from the model's own head; the identities of patching
hold (every position of a hidden state is the clean run; the last state matters only at [CLS])."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.cli import main
from bertscope.errors import BertScopeError
from bertscope.interventions.patching import capture, patch, patched_metrics, prepare
from tests.conftest import labels, task_checkpoint

SENTIMENT = ["negative", "neutral", "positive"]
CLEAN, CORRUPT = "the food was good and the dog sat .", "the food was bad and the dog sat ."


@pytest.fixture(scope="module")
def classifier(tiny_bert_dir, tmp_path_factory):
    folder = task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("cls"), "AutoModelForSequenceClassification", 2,
                             num_labels=3, **labels(SENTIMENT))
    lm = load_model(str(folder))
    lm.model.double()
    return lm


def _logit_diff(lm, text: str) -> float:
    enc = {k: v.to(lm.device) for k, v in lm.tokenizer(text, return_tensors="pt").items()}  # a GPU too
    with torch.no_grad():
        logits = lm.model(**enc).logits[0]
    return float(logits[2] - logits[0])


def test_patching_a_classifier_reads_its_labels(classifier):
    lm = classifier
    setup = prepare(lm, CLEAN, CORRUPT, ("positive", "negative"))
    assert setup.reads == "class" and setup.position == 0 and setup.candidate_ids == (2, 0)
    pieces, m_clean, m_corrupt = capture(lm, setup, "hidden")
    assert m_clean == pytest.approx(_logit_diff(lm, CLEAN), abs=1e-9)
    assert m_corrupt == pytest.approx(_logit_diff(lm, CORRUPT), abs=1e-9)
    states, n = lm.num_layers + 1, len(setup.tokens)
    whole = patched_metrics(lm, setup, "hidden", [(s, range(n)) for s in range(states)], pieces)
    assert np.allclose((whole - m_corrupt) / (m_clean - m_corrupt), 1.0, atol=1e-9)
    grid = patch(lm, CLEAN, CORRUPT, ("positive", "negative"))
    assert grid.recovered[-1, 0] == pytest.approx(1.0, abs=1e-9)  # the head reads [CLS] of the last state
    assert np.allclose(grid.recovered[-1, 1:], 0.0, atol=1e-9)
    heads = patch(lm, CLEAN, CORRUPT, ("positive", "negative"), what="heads")
    assert heads.recovered.shape == (lm.num_layers, lm.num_heads) and np.isfinite(heads.recovered).all()
    out = json.loads(json.dumps(grid.to_json()))
    assert out["reads"] == "class" and out["candidates"] == ["positive", "negative"] and out["metric"] == "logit_diff"


def test_a_regression_head_patches_its_value_and_bad_labels_are_one_line(classifier, tiny_bert_dir, tmp_path, capsys):
    regression = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "reg", "AutoModelForSequenceClassification",
                                                5, num_labels=1)))
    regression.model.double()
    grid = patch(regression, "a man rode a horse", "the food was good .", ())
    assert grid.setup.reads == "value" and grid.to_json()["metric"] == "value"
    assert grid.recovered[-1, 0] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(BertScopeError, match="no label 'happy': its labels are negative, neutral, positive"):
        prepare(classifier, CLEAN, CORRUPT, ("happy", "negative"))
    with pytest.raises(BertScopeError, match="two labels"):
        prepare(classifier, CLEAN, CORRUPT, ("positive",))
    capsys.readouterr()
    assert main(["patch", classifier.name, "--clean", CLEAN, "--corrupt", CORRUPT, "--target", "positive,negative",
                 "--what", "heads"]) == 0
    assert "the classifier's logit(positive) - logit(negative)" in capsys.readouterr().out
    assert main(["patch", classifier.name, "--clean", CLEAN, "--corrupt", CORRUPT, "--target", "positive,bad"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and "no label 'bad'" in err
