"""A fine-tuned model's decisions as targets: gradients and integrated gradients explain a class,
a token's label and an answer span (IG's completeness holds), ablation watches them, and a
target the model lacks is one line naming what it has."""

from __future__ import annotations

import json

import pytest
import torch

from bertscope import load_model
from bertscope.attribution.gradients import Target, input_embeddings, parse_target, score_function
from bertscope.attribution.methods import attribute
from bertscope.cli import main
from bertscope.core.forward import inspect
from bertscope.errors import BertScopeError
from bertscope.interventions.ablation import ablate_heads
from bertscope.tasks.classify import classify
from tests.conftest import labels, task_checkpoint

SENTIMENT = ["negative", "neutral", "positive"]
TEXT = "the man walked along the river bank ."


@pytest.fixture(scope="module")
def classifier(tiny_bert_dir, tmp_path_factory):
    folder = task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("cls"), "AutoModelForSequenceClassification", 1,
                             num_labels=3, **labels(SENTIMENT))
    return load_model(str(folder))


def test_class_targets_are_the_heads_own_log_probability_and_ig_is_complete(classifier):
    lm = classifier
    scores = classify(lm, [TEXT])[0]
    ins = inspect(lm, TEXT, with_attentions=False, with_hidden_states=False, with_logits=False)
    f, resolved = score_function(lm, ins, Target("class"))
    assert resolved.label == scores.predicted  # no label: the predicted class
    x, _ = input_embeddings(lm, ins)
    with torch.no_grad():
        assert float(f(x)[0].exp()) == pytest.approx(float(scores.scores[SENTIMENT.index(resolved.label)]), abs=1e-5)
    for label in SENTIMENT:
        ig = attribute(lm, TEXT, method="ig", target=Target("class", label=label), steps=64)
        assert ig.attribution.completeness_error < 0.01, label
        assert ig.attribution.target.describe() == f'the class "{label}"'
    grad = attribute(lm, TEXT, method="grad", target=parse_target("class:negative"))
    assert grad.scores.shape == (ins.n_tokens,)


def test_tag_and_answer_span_targets(tiny_bert_dir, tmp_path):
    tagger = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "tag", "AutoModelForTokenClassification", 6,
                                            num_labels=3, **labels(["O", "B-LOC", "I-LOC"]))))
    ig = attribute(tagger, TEXT, method="ig", target=parse_target("tag:6"), steps=64)
    assert ig.attribution.target.kind == "tag" and ig.attribution.target.label in ("O", "B-LOC", "I-LOC")
    a = ig.attribution  # completeness within 1%, or within 1e-5 where f(x) - f(x') is itself near 0 (a GPU's
    change = a.f_input - a.f_baseline  # float32 kernels then leave a relative error of a few percent)
    assert abs(float(a.scores.sum()) - change) <= max(0.01 * abs(change), 1e-5)
    qa = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)))
    question, context = "where did the man walk ?", "the man walked along the river bank and the dog ate ."
    span = attribute(qa, question, context, method="ig", target=parse_target("span"), steps=64)
    target = span.attribution.target
    ins = inspect(qa, question, context, with_attentions=False, with_hidden_states=False, with_logits=False)
    assert ins.sequence_ids[target.position] == 1 and ins.sequence_ids[target.end] == 1  # inside the context
    assert target.position <= target.end and span.attribution.completeness_error < 0.01
    from bertscope.tasks.spans import answer

    best = answer(qa, [question], [context])[0].answers[0]
    offsets = ins.offsets
    assert context[offsets[target.position][0]:offsets[target.end][1]] in best["answer"]  # the decoded answer
    start = attribute(qa, question, context, method="grad", target=parse_target("start"))
    assert start.attribution.target.position == target.position


def test_ablation_watches_a_class(classifier):
    lm = classifier
    p = float(classify(lm, [TEXT])[0].scores[SENTIMENT.index("positive")])
    nothing = ablate_heads(lm, TEXT, [], target=parse_target("class:positive"))
    assert nothing.decision["before"] == pytest.approx(p, abs=1e-5) == pytest.approx(nothing.decision["after"])
    removed = ablate_heads(lm, TEXT, [(0, h) for h in range(4)] + [(1, h) for h in range(4)],
                           target=parse_target("class:positive"))
    assert removed.decision["after"] != pytest.approx(removed.decision["before"], abs=1e-4)


def test_the_commands_take_task_targets(classifier, capsys):
    capsys.readouterr()
    assert main(["attribute", classifier.name, TEXT, "--method", "ig", "--target", "class:positive", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"]["label"] == "positive" and out["completeness_error"] < 0.05
    assert main(["ablate", classifier.name, TEXT, "--heads", "0:1", "--target", "class", "--json"]) == 0
    decision = json.loads(capsys.readouterr().out)["decision"]
    assert decision["target"]["kind"] == "class" and 0 <= decision["after"] <= 1


@pytest.mark.parametrize("target, message", [
    ("class:joy", "has no label 'joy': its labels are negative, neutral, positive"),
    ("tag:3", "needs a token classification model; .* has a sequence classification head"),
    ("span", "needs a question answering model"),
    ("tag:x", "'x' is not a token position"),
    ("span:3", "takes no position"),
])
def test_a_target_the_model_lacks_is_one_line(classifier, capsys, target, message):
    import re

    capsys.readouterr()
    assert main(["attribute", classifier.name, TEXT, "--method", "grad", "--target", target]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1
    with pytest.raises(BertScopeError):
        attribute(load_model(classifier.name), TEXT, method="grad", target=parse_target(target))
