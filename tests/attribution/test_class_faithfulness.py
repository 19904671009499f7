"""The faithfulness scoreboard on a fine-tuned classifier: y is the class the model predicts, p(y)
its head's probability (as ``classify`` gives it), erasure as for masked-token items."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.attribution.class_items import class_items
from bertscope.attribution.deletion import class_probabilities
from bertscope.attribution.faithfulness import FRACTIONS, faithfulness
from bertscope.attribution.methods import attribute
from bertscope.cli import main
from bertscope.errors import BertScopeError
from bertscope.tasks.classify import classify
from tests.conftest import labels, task_checkpoint

SENTIMENT = ["negative", "neutral", "positive"]
TEXTS = ["the man walked along the river bank .", "a dog ran to the store and back again .",
         "she read the old book by the fire ."]


@pytest.fixture(scope="module")
def classifier(tiny_bert_dir, tmp_path_factory):
    folder = task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("cls"), "AutoModelForSequenceClassification", 3,
                             num_labels=3, **labels(SENTIMENT))
    return load_model(str(folder))


def test_items_are_the_predicted_classes_with_the_pipelines_probability(classifier):
    items, skipped = class_items(classifier, TEXTS)
    assert skipped == 0 and len(items) == 3
    for item, scores in zip(items, classify(classifier, TEXTS)):
        assert item.decision == "class" and item.target == scores.predicted and item.mask_position == 0
        assert item.p_full == pytest.approx(float(max(scores.scores)), abs=1e-5)
        assert 0 not in item.candidates() and len(item.candidates()) == item.inspection.n_tokens - 2
    # removing nothing reads p(y); removing by the attention mask equals the shortened sequence with
    # its own positions
    item = items[0]
    n = item.inspection.n_tokens
    keep = np.ones((2, n), bool)
    keep[1, 3] = False
    p = class_probabilities(classifier, item.input_ids, item.inspection.token_type_ids, keep, 0, item.target_id)
    assert p[0] == pytest.approx(item.p_full, abs=1e-5)
    ids = torch.tensor([[i for j, i in enumerate(item.input_ids.tolist()) if j != 3]])
    positions = torch.tensor([[j for j in range(n) if j != 3]])
    with torch.no_grad():
        logits = classifier.model(input_ids=ids.to(classifier.device),
                                  position_ids=positions.to(classifier.device)).logits
    assert p[1] == pytest.approx(float(torch.softmax(logits, -1)[0, item.target_id]), abs=1e-5)


def test_scoreboard_explains_the_predicted_class(classifier):
    items, _ = class_items(classifier, TEXTS)
    board = faithfulness(classifier, items, ["rollout", "ig", "random"], steps=16)
    out = json.loads(json.dumps(board.to_json()))
    assert out["decision"] == "class" and list(out["methods"]) == ["rollout", "ig", "random"]
    for json_item, item in zip(out["items"], items):
        assert json_item["decision"] == "class" and json_item["target"] == item.target
        assert len(json_item["comprehensiveness"]["ig"]) == len(FRACTIONS)
    # IG's scores are those of `attribute` for the same class; rollout reads [CLS]'s row
    ig = attribute(classifier, TEXTS[0], method="ig", target=_class(items[0].target), steps=16)
    np.testing.assert_allclose(board.results[0].scores["ig"], ig.scores, atol=1e-6)
    rollout = attribute(classifier, TEXTS[0], method="rollout")
    np.testing.assert_allclose(board.results[0].scores["rollout"], rollout.matrices[-1][0], atol=1e-6)


def _class(label):
    from bertscope.attribution.targets import Target

    return Target("class", label=label)


def test_cli_on_a_classifier_and_bad_input(classifier, tiny_bert_dir, tmp_path, capsys):
    folder = classifier.name
    data = tmp_path / "texts.csv"
    data.write_text("text,label\n" + "".join(f'"{t}",positive\n' for t in TEXTS), encoding="utf-8")
    assert main(["faithfulness", folder, "--data", str(data), "--methods", "grad,random", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "class" and out["n_items"] == 3
    assert main(["faithfulness", folder, "--data", str(data), "--methods", "random"]) == 0
    assert "own predicted classes" in capsys.readouterr().out
    regression = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "reg", "AutoModelForSequenceClassification",
                                                4, num_labels=1)))
    with pytest.raises(BertScopeError, match="regression head"):
        class_items(regression, TEXTS)
    short = tmp_path / "short.txt"
    short.write_text("hi\nok\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["faithfulness", folder, "--data", str(short)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and "nothing to test" in err


def test_the_peers_methods_are_on_the_scoreboard_for_a_class(classifier):
    """Occlusion, LIME, KernelSHAP, SmoothGrad and VarGrad (captum's and shap's) explain the predicted
    class and are scored beside the floor, each with its seconds per item."""
    peers = ("occlusion", "lime", "kernelshap", "smoothgrad", "vargrad")
    items, _ = class_items(classifier, TEXTS[:2])
    summary = faithfulness(classifier, items, [*peers, "random"], steps=8).summary()
    assert list(summary) == [*peers, "random"]
    for method in peers:
        assert summary[method]["seconds_per_item"] > 0 and np.isfinite(summary[method]["comprehensiveness"]["mean"])
