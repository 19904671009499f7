"""Streamlit AppTest of the Predictions page: a classifier (a text, a pair, a labelled file), a
tagger, a question-answering model, an encoder without a task head, and bad input."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.kit import start, texts
from tests.conftest import labels, task_checkpoint

PAGE = "bertscope/app/predictions.py"
SENTIMENT = ["negative", "neutral", "positive"]


def open_page(monkeypatch, model) -> AppTest:
    return start(monkeypatch, str(model)).switch_page(PAGE).run()


def press(at: AppTest, form: str, label: str) -> AppTest:
    next(b for b in at.button if b.label == label and form in b.id).click()
    return at.run()


def test_a_classifier_shows_every_labels_probability_and_takes_a_pair(monkeypatch, tiny_bert_dir, tmp_path):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    at = open_page(monkeypatch, folder)
    assert not at.exception and not at.error
    assert any("sequence classification (3 labels: negative, neutral, positive)" in c for c in texts(at.caption))
    chart = at.get("plotly_chart")[0].proto.spec
    assert all(name in chart for name in SENTIMENT)
    at.text_area(key="pred_text").input("the dog ate the bread .")
    at.text_input(key="pred_pair").input("the cat sat there .")
    at = press(at, "pred_form", "Predict")
    assert not at.exception and not at.error and at.query_params["text"] in ("the dog ate the bread .",
                                                                              ["the dog ate the bread ."])
    at.toggle(key="pred_by_layer").set_value(True).run()  # asked for: a pass per hidden state, on the budget
    assert not at.exception and not at.error
    assert any("from hidden state" in c for c in texts(at.caption))


def test_a_classifier_offers_a_labelled_file_with_its_cap(monkeypatch, tiny_bert_dir, tmp_path):
    """The upload itself runs in the browser test (AppTest cannot fill a file uploader)."""
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    at = open_page(monkeypatch, folder)
    assert not at.exception and "A labelled file" in [s.value for s in at.subheader]
    assert any("up to 5,000 records" in c for c in texts(at.caption))
    assert any(b.label == "Score the file" for b in at.button)


def test_a_tagger_marks_its_entities_and_lists_each_word(monkeypatch, tiny_bert_dir, tmp_path):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "tag", "AutoModelForTokenClassification", 6, num_labels=5,
                             **labels(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))
    at = open_page(monkeypatch, folder)
    at.text_area(key="pred_text").input("the man walked along the river bank .")
    at = press(at, "pred_form", "Predict")
    assert not at.exception and not at.error
    words = at.dataframe[0].value
    assert list(words.columns) == ["word", "start", "end", "label", "score"] and len(words) == 8
    assert any("<mark" in m.proto.body for m in at.get("html")) or any("No entity" in c for c in texts(at.caption))


def test_a_question_answering_model_marks_the_answer(monkeypatch, tiny_bert_dir, tmp_path):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)
    at = open_page(monkeypatch, folder)
    at.text_input(key="pred_question").input("where did the man walk ?")
    at.text_area(key="pred_text").input("the man walked along the river bank and the dog ate the bread .")
    at = press(at, "pred_form", "Predict")
    assert not at.exception and not at.error
    answers = at.dataframe[0].value
    assert list(answers.columns) == ["answer", "start", "end", "score"] and 1 <= len(answers) <= 3
    assert any("<mark" in m.proto.body for m in at.get("html"))


def test_an_encoder_without_a_task_head_says_what_the_page_needs(monkeypatch, tiny_bert_dir):
    at = open_page(monkeypatch, tiny_bert_dir)
    assert not at.exception and not at.error
    warning = next(w for w in texts(at.warning) if "has no task head" in w)
    # not a dead end: the fine-tuned models that ship offline are named and one click away
    assert "which the Predictions page needs" in warning and "bundled-sentiment, bundled-upos" in warning
    assert {"bundled-sentiment", "bundled-upos"} <= {b.label.split()[2] for b in at.button if b.key.startswith("need_")}


def test_bad_input_is_one_line(monkeypatch, tiny_bert_dir, tmp_path):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)
    at = open_page(monkeypatch, folder)
    at.text_input(key="pred_question").input(" ")
    at = press(at, "pred_form", "Predict")
    assert not at.exception
    assert texts(at.error) == ["The question is empty."]


def test_why_this_decision_explains_a_class(monkeypatch, tiny_bert_dir, tmp_path):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    at = open_page(monkeypatch, folder)
    at.selectbox(key="pred_why").set_value("positive")
    at = press(at, "pred_why_form", "Explain")
    assert not at.exception and not at.error
    assert any("completeness error" in c for c in texts(at.caption))
    assert any("Integrated gradients for the class" in c.proto.spec and "positive" in c.proto.spec
               for c in at.get("plotly_chart"))


def test_why_this_answer(monkeypatch, tiny_bert_dir, tmp_path):
    qa = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)
    at = open_page(monkeypatch, qa)
    at.text_input(key="pred_question").input("where did the man walk ?")
    at.text_area(key="pred_text").input("the man walked along the river bank and the dog ate the bread .")
    at = press(at, "pred_form", "Predict")
    at = press(at, "pred_why_form", "Explain")
    assert not at.exception and not at.error
    assert any("the answer span, tokens" in c.proto.spec for c in at.get("plotly_chart"))


def test_a_new_text_explains_its_own_decision(monkeypatch):
    """The Explain box follows the decision of the text now on the page, not of the text before it."""
    at = open_page(monkeypatch, "bundled-sentiment")
    at.text_area(key="pred_text").input("I love this airline, the crew was wonderful and kind!")
    at = press(at, "pred_form", "Predict")
    assert not at.exception and any("Decision: positive" in c.proto.spec for c in at.get("plotly_chart"))
    assert at.selectbox(key="pred_why").value == "positive"
    at = press(at, "pred_why_form", "Explain")
    assert not at.exception and not at.error
    at.text_area(key="pred_text").input("Worst flight ever: they lost my bag and nobody helped.")
    at = press(at, "pred_form", "Predict")
    assert not at.exception and not at.error
    assert any("Decision: negative" in c.proto.spec for c in at.get("plotly_chart"))
    assert at.selectbox(key="pred_why").value == "negative"
    assert any('for the class \\"negative\\"' in c.proto.spec or "for the class “negative”" in c.proto.spec
               or 'class "negative"' in c.proto.spec for c in at.get("plotly_chart") if "Integrated" in c.proto.spec)
    at.selectbox(key="pred_why").set_value("neutral")  # a class chosen for the same text stays chosen
    at = press(at, "pred_why_form", "Explain")
    assert at.selectbox(key="pred_why").value == "neutral"


def test_a_part_of_speech_tagger_gives_every_word_its_own_chip(monkeypatch):
    """bundled-upos tags words, not entities: two nouns side by side are two chips, not "job airline NOUN"."""
    at = open_page(monkeypatch, "bundled-upos")
    at.text_area(key="pred_text").input("The airline job fair starts today .")
    at = press(at, "pred_form", "Predict")
    assert not at.exception and not at.error
    marked = next(m.proto.body for m in at.get("html") if "<mark" in m.proto.body)
    assert marked.count("<mark") == 7  # one per word
    words = at.dataframe[0].value
    assert list(words["word"]) == ["The", "airline", "job", "fair", "starts", "today", "."]


def test_the_tuned_lens_reading_is_charged_once_and_kept(monkeypatch):
    """The classifier's tuned lens (its head read through every state: 2L + 3 passes) ran on every rerun, uncharged;
    now a stored job on the budget, charged when it runs."""
    from bertscope.app.kit.budget import cost_budget

    at = open_page(monkeypatch, "bundled-sentiment")
    spent = cost_budget().spent("local")
    at.toggle(key="pred_by_layer").set_value(True).run()
    assert not at.exception and not at.error
    assert any("The tuned lens (Belrose et al. 2023)" in c for c in texts(at.caption))
    charged = cost_budget().spent("local")
    assert charged == spent + 2  # the layer reading and the tuned lens
    at.run()
    assert any("The tuned lens (Belrose et al. 2023)" in c for c in texts(at.caption))
    assert cost_budget().spent("local") == charged  # kept: a rerun charges nothing
