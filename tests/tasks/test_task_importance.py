"""Head importance on a fine-tuned classifier's own task loss (Michel et al. 2019's MNLI setting):
the gate gradient equals a finite difference, nothing removed is the model's own accuracy, and the
command takes a labelled file."""

from __future__ import annotations

import json

import pytest
import torch

from bertscope import load_model
from bertscope.cli import main
from bertscope.errors import BertScopeError
from bertscope.interventions.importance import new_gates
from bertscope.interventions.task_importance import (
    labelled_batches,
    task_accuracy,
    task_gated_loss,
    task_head_importance,
    task_pruning_curve,
)
from bertscope.tasks.classify import classify
from tests.conftest import labels, task_checkpoint

SENTIMENT = ["negative", "neutral", "positive"]
TEXTS = ["the river bank .", "she had cash !", "hello world , dog .", "the man sat .", "a cat ate bread .",
         "the boat was big .", "he walked to the bank .", "two dogs and a horse ."]


@pytest.fixture(scope="module")
def classifier(tiny_bert_dir, tmp_path_factory):
    folder = task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("cls"), "AutoModelForSequenceClassification", 1,
                             num_labels=3, **labels(SENTIMENT))
    return load_model(str(folder))


def gold_for(lm) -> list[str]:
    """Labels half of them right: the loss and the accuracy have something to move."""
    predicted = [r.predicted for r in classify(lm, TEXTS)]
    return [p if i % 2 == 0 else SENTIMENT[(SENTIMENT.index(p) + 1) % 3] for i, p in enumerate(predicted)]


def test_the_gate_gradient_is_a_finite_difference_of_the_task_loss(classifier):
    lm = classifier
    lm.model.double()
    try:
        gold = gold_for(lm)
        (rows, feed, labels_), = labelled_batches(lm, TEXTS, gold, batch_size=16)
        gates = new_gates(lm).double().detach().requires_grad_(True)
        loss = task_gated_loss(lm, gates, feed, labels_)
        with torch.enable_grad():
            loss = task_gated_loss(lm, gates, feed, labels_)
            (grad,) = torch.autograd.grad(loss, gates)
        eps = 1e-6
        for layer, head in [(0, 0), (1, 3)]:
            up, down = gates.detach().clone(), gates.detach().clone()
            up[layer, head] += eps
            down[layer, head] -= eps
            with torch.no_grad():
                difference = float(task_gated_loss(lm, up, feed, labels_) - task_gated_loss(lm, down, feed, labels_))
            assert float(grad[layer, head]) == pytest.approx(difference / (2 * eps), abs=1e-6)
    finally:
        lm.model.float()


def test_importance_and_the_pruning_curve_on_held_out_accuracy(classifier):
    lm = classifier
    gold = gold_for(lm)
    imp = task_head_importance(lm, TEXTS, gold, batch_size=4)
    assert imp.importance.shape == (lm.num_layers, lm.num_heads) and imp.sentences == len(TEXTS)
    assert imp.loss > 0
    curve = task_pruning_curve(lm, imp, TEXTS, gold)
    held = labelled_batches(lm, TEXTS, gold)
    assert curve.intact == task_accuracy(lm, held) == pytest.approx(0.5)  # nothing removed: the model itself
    assert len(curve.importance_order) == len(curve.fractions) and len(curve.random_orders) >= 1


def test_the_command_takes_a_labelled_file_and_refuses_what_it_cannot_read(classifier, tmp_path, capsys):
    lm = classifier
    records = tmp_path / "fit.csv"
    records.write_text("text,label\n" + "".join(f'"{t}",{g}\n' for t, g in zip(TEXTS, gold_for(lm))))
    capsys.readouterr()
    assert main(["head-importance", lm.name, "--data", str(records), "--prune", "--held-out-data", str(records),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["importance"]) == lm.num_layers and out["pruning"]["importance_order"][0] == pytest.approx(0.5)
    unlabelled = tmp_path / "texts.csv"
    unlabelled.write_text("text\nthe dog .\n")
    assert main(["head-importance", lm.name, "--data", str(unlabelled)]) == 2
    assert "no label column" in capsys.readouterr().err
    assert main(["head-importance", lm.name, "--data", str(records), "--prune"]) == 2
    assert "needs --held-out-data" in capsys.readouterr().err
    with pytest.raises(BertScopeError, match="labels joy are not the model's"):
        labelled_batches(lm, ["the dog ."], ["joy"])
