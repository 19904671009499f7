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
from tests.conftest import labels, task_checkpoint

FAMILIES = ["tiny_bert_dir", "tiny_roberta_dir", "tiny_xlmr_dir", "tiny_albert_dir", "tiny_distilbert_dir",
            "tiny_electra_dir", "tiny_deberta_dir", "tiny_modernbert_dir"]
SENTIMENT = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
# short: the tiny XLM-R's character-level vocabulary makes many pieces, and its limit is 32 tokens
TEXTS = ["the river bank .", "she had cash !", "hello world , dog ."]
PAIRS = ["the river was muddy .", "he had a loan .", "the cat sat there ."]


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


def brute_force_answers(lm, question: str, context: str, top_k: int, max_answer_len: int = 15) -> tuple[list, int]:
    """Every span of every window scored from the model's own logits, in float64: the old
    pipeline's rules written out as loops (windows of min(384, limit) tokens, stride half of it)."""
    tok = lm.tokenizer
    length = min(384, lm.max_length, tok.model_max_length)
    enc = tok(question, context, truncation="only_second", max_length=length, stride=min(length // 2, 128),
              return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    found: dict[str, dict] = {}
    for w in range(len(enc["input_ids"])):
        ids, seq = enc["input_ids"][w], enc.sequence_ids(w)
        with torch.no_grad():
            out = lm.model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([enc["token_type_ids"][w]]))
        allowed = [seq[i] == 1 or ids[i] == tok.cls_token_id for i in range(len(ids))]

        def probabilities(logits):
            x = np.where(allowed, logits[0].double().numpy(), -10000.0)
            x = np.exp(x - x.max())
            return x / x.sum()

        ps, pe = probabilities(out.start_logits), probabilities(out.end_logits)
        ps[0] = pe[0] = 0.0  # [CLS]: the no-answer score, not an answer
        spans = sorted(((ps[i] * pe[j], i, j) for i in range(len(ids)) for j in range(i, min(len(ids), i + max_answer_len))
                        if allowed[i] and allowed[j]), reverse=True)[:top_k * 2 + 10]
        window = enc[w]
        for score, i, j in spans:
            a = window.word_to_chars(window.token_to_word(i), sequence_index=1)[0]
            b = window.word_to_chars(window.token_to_word(j), sequence_index=1)[1]
            text = context[a:b]
            same = found.get(text.lower())
            if same:
                same["score"] += score
            else:
                found[text.lower()] = {"answer": text, "start": a, "end": b, "score": score}
    return sorted(found.values(), key=lambda x: x["score"], reverse=True)[:top_k], len(enc["input_ids"])


def test_question_answering_equals_every_span_scored_by_hand_also_over_several_windows(tiny_bert_dir, tmp_path):
    from bertscope.tasks.spans import answer

    folder = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)
    lm = load_model(str(folder))
    assert lm.task.kind == "question-answering" and "answer spans" in lm.task.describe()
    short = "the man walked along the river bank and the dog ate the bread ."
    long = " ".join(["the man walked along the river bank ; she had cash in the bank ; the dog ate bread ."] * 4)
    results = answer(lm, ["where was the man ?", "who had cash ?"], [short, long], top_k=3)
    assert results[0].windows == 1 and results[1].windows >= 3  # the long context is cut into windows
    for result, context in zip(results, [short, long]):
        expected, windows = brute_force_answers(lm, result.question, context, 3)
        assert result.windows == windows
        assert [(a["answer"], a["start"], a["end"]) for a in result.answers] == \
               [(a["answer"], a["start"], a["end"]) for a in expected]
        np.testing.assert_allclose([a["score"] for a in result.answers], [a["score"] for a in expected], rtol=1e-5)
        assert all(context[a["start"]:a["end"]] == a["answer"] for a in result.answers)
    out = predict(lm, [short], questions=["where was the man ?"])
    assert out["task"] == "question-answering" and len(out["items"][0]["answers"]) == 1
    said, computed = out["items"][0]["answers"][0], results[0].answers[0]  # one text, not two: float sums differ
    assert {k: v for k, v in said.items() if k != "score"} == {k: v for k, v in computed.items() if k != "score"}
    assert said["score"] == pytest.approx(computed["score"], rel=1e-5)
    with pytest.raises(BertScopeError, match="needs a question"):
        predict(lm, [short])
    with pytest.raises(BertScopeError, match="The question is empty"):
        answer(lm, [" "], [short])


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


def test_the_predict_command_answers_questions(tiny_bert_dir, tmp_path, capsys):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 7)
    context = "the man walked along the river bank and the dog ate the bread ."
    capsys.readouterr()
    assert main(["predict", str(folder), context, "--question", "where was the man ?", "--top-k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    answers = out["items"][0]["answers"]
    assert out["task"] == "question-answering" and len(answers) == 2 and answers[0]["score"] >= answers[1]["score"]
    assert all(context[a["start"]:a["end"]] == a["answer"] for a in answers)
    records = tmp_path / "qa.jsonl"
    records.write_text(json.dumps({"question": "who ate ?", "context": context}) + "\n")
    assert main(["predict", str(folder), "--file", str(records)]) == 0
    assert "Q: who ate ?" in capsys.readouterr().out
    assert main(["predict", str(folder), context]) == 2
    assert "needs a question" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["TEXT", "--file", "x.csv"], "Give a TEXT or --file"),
    ([], "Give a TEXT or --file"),
    (["TEXT", "--question", "who?"], "A question goes to a question-answering model"),
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


def test_the_heads_reading_of_every_layer_ends_on_the_models_decision(family, tmp_path):
    from bertscope.tasks.layer_lens import layer_decisions

    folder = task_checkpoint(family, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    lm = load_model(str(folder))
    lens = layer_decisions(lm, TEXTS[0])
    own = classify(lm, TEXTS[:1])[0]
    assert lens.states[0] == "embeddings" and len(lens.states) == lm.num_layers + 1
    np.testing.assert_allclose(lens.scores[-1], own.scores, atol=1e-5)  # the last reading is the model's own
    np.testing.assert_allclose(lens.logits[-1], own.logits, atol=1e-4)
    assert not np.allclose(lens.logits[0], lens.logits[-1], atol=1e-3)  # earlier states read otherwise
    assert lens.predicted[-1] == own.predicted and lens.first_final() in lens.states
    small = layer_decisions(lm, TEXTS[0], max_batch_bytes=1)  # a row at a time: the same readings
    np.testing.assert_allclose(small.logits, lens.logits, rtol=1e-6, atol=1e-4)  # batch-size rounding
    json_out = lens.to_json()
    assert json_out["layers"][0]["layer"] == "embeddings" and json_out["layers"][1]["layer"] == 0


def test_predict_by_layer_on_the_command_line(tiny_bert_dir, tmp_path, capsys):
    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    capsys.readouterr()
    assert main(["predict", str(folder), TEXTS[0], "--by-layer", "--json"]) == 0
    lens = json.loads(capsys.readouterr().out)["items"][0]["by_layer"]
    assert [row["layer"] for row in lens["layers"]] == ["embeddings", 0, 1] and lens["decided_from"] in ("embeddings", "0", "1")
    assert main(["predict", str(folder), TEXTS[0], "--by-layer"]) == 0
    assert "decided from hidden state" in capsys.readouterr().out


def test_a_fine_tuned_model_beside_its_base(tiny_bert_dir, tmp_path):
    """What fine-tuning changed, asked of CKA: a task head on an unchanged encoder changes no layer."""
    from bertscope.analysis.compare import compare_layers
    from bertscope.corpora.suites import shipped_task

    folder = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                             **labels(SENTIMENT))
    task = shipped_task("pos")
    result = compare_layers(load_model(str(folder)), load_model(str(tiny_bert_dir)), task, minibatch=8)
    np.testing.assert_allclose(np.diag(result.cka), 1.0, atol=1e-4)
