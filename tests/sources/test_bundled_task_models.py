"""The task models BertScope ships as deltas on the bundled encoder: each opens offline with its head
and labels, decides as a tagger / classifier should on plain cases, and reproduces the figures its
README and metrics.json record (EWT test UPOS accuracy; the tweets' held-out accuracy and macro-F1)."""

from __future__ import annotations

import json

import pytest

from bertscope import load_model
from bertscope.sources.minilm_tasks import SENTIMENT, UPOS
from bertscope.tasks.classify import classify
from bertscope.tasks.tag import tag


def test_bundled_upos_tags_words():
    lm = load_model("bundled-upos")
    assert lm.task.kind == "token-classification" and len(lm.task.labels) == 17 and "CONJ" in lm.task.labels
    words = tag(lm, ["The old dog slept under the table ."])[0].to_json()["words"]
    assert [w["label"] for w in words] == ["DET", "ADJ", "NOUN", "VERB", "ADP", "DET", "NOUN", "PUNCT"]


def test_bundled_sentiment_decides_plain_cases():
    lm = load_model("bundled-sentiment")
    assert lm.task.labels == ("negative", "neutral", "positive")
    out = classify(lm, ["I love this airline, the crew was wonderful!", "My flight was cancelled again. Terrible.",
                        "The meeting is on Tuesday."])
    assert [r.predicted for r in out] == ["positive", "negative", "neutral"]


def test_bundled_reranker_ranks_the_answering_passage_first():
    from bertscope.retrieval.rerank import rerank

    lm = load_model("bundled-reranker")
    assert lm.task.kind == "sequence-classification" and lm.task.labels == ("irrelevant", "relevant")
    passages = ["The Denver Broncos defeated the Carolina Panthers 24-10 to earn their third Super Bowl title.",
                "Super Bowl 50 was played at Levi's Stadium in Santa Clara, California.",
                "Photosynthesis turns light into chemical energy in plants."]
    assert [h.id for h in rerank(lm, "Where was Super Bowl 50 played?", passages)] == ["1", "0", "2"]
    assert rerank(lm, "What do plants turn light into?", passages)[0].id == "2"


@pytest.mark.slow
def test_the_shipped_figures_are_reproduced():
    from bertscope.training.task_data import load_task_data
    from bertscope.training.task_objective import TaskObjective, encode, scores

    for delta, name, task, side in ((UPOS, "bundled-upos", "tag", "test"), (SENTIMENT, "bundled-sentiment",
                                                                            "classify", "held_out")):
        recorded = json.loads((delta.folder / "metrics.json").read_text())
        lm = load_model(name)
        data = load_task_data(task, "ewt-upos" if task == "tag" else "sentiment", seed=0)
        labels = list(lm.task.labels)
        encoded = encode(lm.tokenizer, task, data.test if side == "test" else data.held_out, labels,
                         recorded["config"]["seq_len"])
        objective = TaskObjective(task, labels, encoded, encoded, lm.tokenizer.pad_token_id, lm.device)
        _, _, confusion, _ = objective.predictions(lm.model, encoded, 64)
        ours = scores(confusion, labels)
        # the tweets' text was repaired after the run: its rescoring on the repaired text is the figure
        theirs = recorded.get("rescored", recorded["after"])["test" if side == "test" else "held_out"]
        assert ours["accuracy"] == pytest.approx(theirs["accuracy"], abs=2e-3), name
        assert ours["macro_f1"] == pytest.approx(theirs["macro_f1"], abs=3e-3), name
    assert json.loads((UPOS.folder / "metrics.json").read_text())["after"]["test"]["accuracy"] >= 0.95
