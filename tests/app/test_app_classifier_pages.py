"""Streamlit AppTest of a fine-tuned classifier on the pages that explain and change decisions:
Interventions (every label before and after ablation, head importance on the task loss over
pasted records with the pruning curve, patching two labels) and Faithfulness (y = the class it
predicts)."""

from __future__ import annotations

import pytest

from tests.app.kit import start, texts
from tests.conftest import labels, task_checkpoint

SENTIMENT = ["negative", "neutral", "positive"]
RECORDS = "text,label\n" + "".join(f"{t},{g}\n" for t, g in [
    ("the food was good", "positive"), ("the food was bad", "negative"), ("the dog sat in the boat", "neutral"),
    ("a very good horse", "positive"), ("a very bad loan", "negative"), ("the man walked along the river", "neutral"),
    ("good bread and good fish", "positive"), ("bad water and bad food", "negative")])


@pytest.fixture
def classifier(tiny_bert_dir, tmp_path):
    return str(task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                               **labels(SENTIMENT)))


def press(at, form: str, label: str):
    next(b for b in at.button if b.label == label and form in b.id).click()
    return at.run()


def test_interventions_watch_the_classifier(monkeypatch, classifier):
    at = start(monkeypatch, classifier).switch_page("bertscope/app/interventions.py").run()
    assert not at.exception and not at.error
    assert any("fine-tuned classifier" in c for c in texts(at.caption))
    at.multiselect(key="int_heads").set_value(["0:1", "1:2"]).run()
    at.text_area(key="int_class_text").input("the food was good .")
    at = press(at, "int_class_form", "Run")
    assert not at.exception and not at.error
    table = next(f.value for f in at.dataframe if "heads removed" in f.value.columns)
    assert list(table["label"]) == SENTIMENT and abs(table["intact"].sum() - 1) < 1e-5
    assert any("Predicted:" in c for c in texts(at.caption))
    # head importance on the task loss: pasted records, two halves, the pruning curve
    at.text_area(key="int_task_paste").input(RECORDS)
    at.toggle(key="int_task_prune").set_value(True)
    at = press(at, "int_task_form", "Compute head importance")
    assert not at.exception and not at.error
    assert any("4 records: mean loss" in c for c in texts(at.caption))
    assert any("Held-out accuracy with every head" in c for c in texts(at.caption))
    # patching: two labels
    at.text_input(key="int_class_clean").input("the food was good .")
    at.text_input(key="int_class_corrupt").input("the food was bad .")
    at.selectbox(key="int_class_a").set_value("positive")
    at.selectbox(key="int_class_b").set_value("negative")
    at = press(at, "int_class_patch_form", "Patch")
    assert not at.exception and not at.error
    assert {"Clean: logit positive − logit negative", "Corrupted"} <= {m.label for m in at.metric}
    # bad input: labels the model lacks, and texts of different lengths, each one line
    at.text_area(key="int_task_paste").input(RECORDS.replace("neutral", "meh"))
    at = press(at, "int_task_form", "Compute head importance")
    assert not at.exception
    assert any("meh are not the model's" in e and "\n" not in e for e in texts(at.error))
    at.text_input(key="int_class_corrupt").input("the food was bad and cold .")
    at = press(at, "int_class_patch_form", "Patch")
    assert not at.exception
    assert any("same number" in e for e in texts(at.error))


def test_faithfulness_explains_the_predicted_class(monkeypatch, classifier):
    at = start(monkeypatch, classifier).switch_page("bertscope/app/faithfulness.py").run()
    assert not at.exception and not at.error
    assert any("fine-tuned classifier" in c for c in texts(at.caption))
    at.radio(key="faith_source").set_value("text")
    at.text_area(key="faith_class_text").input("the food was good and the dog sat .\nthe man walked along the river "
                                               ".\nshe ate bread in the boat .")
    at.multiselect(key="faith_methods").set_value(["rollout", "grad", "random"])
    at.select_slider(key="faith_steps").set_value(8)
    at = press(at, "faith_form", "Run the test")
    assert not at.exception and not at.error
    assert list(at.dataframe[0].value["method"])[-1] == "random (floor)"
    links = next(m for m in texts(at.markdown) if m.startswith("Open in the Predictions page"))
    assert "./predictions?" in links
