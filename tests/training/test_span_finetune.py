"""BERT's second stage for answer spans (§4.2, SQuAD): the SQuAD readers, SQuAD's official scores,
the windows' labels, a question-answering head that learns and opens as a fine-tuned model whose
answers on the Predictions page are the ones it was scored by, and bad input in one line."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from functools import partial

import pytest

from bertscope import load_model
from bertscope.corpora.questions import Questions, read_squad_file, split_by_context
from bertscope.corpora.squad import read_squad
from bertscope.errors import BertScopeError
from bertscope.sources.delta import apply_delta
from bertscope.tasks.spans import answer, question_windows
from bertscope.training.config import FinetuneConfig
from bertscope.training.fine_tuning import finetune
from bertscope.training.span_objective import doc_stride, encode_spans, window_label
from bertscope.training.span_scores import normalize_answer, question_scores
from bertscope.training.task_data import load_task_data

FOODS = ["bread", "fish", "food", "cash", "grass", "water"]
ANIMALS = ["dog", "cat", "horse", "man", "woman", "child"]
FILLER = ["the boat was big .", "the river was steep .", "it was very good .", "there was a bank .",
          "the world was small .", "he sat on the grass ."]


def tiny_squad(n: int, seed: int = 0, unanswerable: int = 0) -> dict:
    """SQuAD JSON in the tiny vocabulary: "the ANIMAL ate the FOOD" among filler; "the ANIMAL ate"
    asks for the food (SQuAD 2.0: the first ``unanswerable`` ask of an animal the context lacks)."""
    rng = random.Random(seed)
    articles = []
    for p in range(n):
        animal, food = rng.choice(ANIMALS), rng.choice(FOODS)
        sentences = rng.sample(FILLER, 2)
        sentences.insert(rng.randint(0, 2), f"the {animal} ate the {food} .")
        context = " ".join(sentences)
        at = context.index(f"ate the {food}") + len("ate the ")
        qa = {"id": f"q{p}", "question": f"the {animal} ate", "answers": [{"text": food, "answer_start": at}]}
        if p < unanswerable:
            qa = {"id": f"q{p}", "question": f"the {next(a for a in ANIMALS if a != animal)} ate", "answers": [],
                  "is_impossible": True}
        articles.append({"title": f"t{p}", "paragraphs": [{"context": context, "qas": [qa]}]})
    return {"version": "2.0" if unanswerable else "1.1", "data": articles}


@pytest.fixture
def squad_file(tmp_path):
    path = tmp_path / "tiny-squad.json"
    path.write_text(json.dumps(tiny_squad(48)), encoding="utf-8")
    return path


SMALL = FinetuneConfig(task="span", seq_len=32, epochs=6, batch_size=8, lr=3e-3, seed=0, held_out=0.25)


def test_the_squad_readers_take_both_forms_and_name_the_bad_record():
    v2 = {"data": [{"title": "a", "paragraphs": [{"context": "The cat sat on the mat.", "qas": [
        {"id": "x1", "question": "Where did the cat sit?", "answers": [{"text": "on the mat", "answer_start": 12}]},
        {"id": "x2", "question": "Who flew?", "answers": [], "is_impossible": True}]}]}]}
    data = read_squad_file(json.dumps(v2), "v2.json")
    assert data.answers == [[("on the mat", 12)], []] and data.unanswerable == 1 and data.ids == ["x1", "x2"]
    lines = [{"id": "a", "question": "Who sat?", "context": "The cat sat.", "answers": {"text": ["The cat"],
                                                                                          "answer_start": [0]}},
             {"question": "What sat?", "context": "The cat sat.", "answers": [{"text": "cat", "answer_start": 4}]}]
    jsonl = read_squad_file("\n".join(json.dumps(x) for x in lines), "q.jsonl")
    assert jsonl.answers == [[("The cat", 0)], [("cat", 4)]] and jsonl.ids == ["a", "q2"]
    as_json = read_squad_file("\n".join(json.dumps(x) for x in lines), "q.json")  # datasets' to_json: JSON Lines
    assert as_json.answers == jsonl.answers
    bad = json.loads(json.dumps(v2))
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 11
    for text, name, message in [
        (json.dumps(bad), "b.json", "article 1, paragraph 1, question 1: the answer 'on the mat' is not at character 11"),
        ("{", "b.json", "is not JSON"),
        (json.dumps({"version": 1}), "b.json", "a \"data\" list"),
        (json.dumps({"question": "", "context": "c"}), "b.jsonl", "record 1: no question"),
        (json.dumps({"question": "q", "context": "c", "answers": {"text": ["c"]}}), "b.jsonl", "of one length"),
        (json.dumps({"data": []}), "b.json", "has no questions"),
        (json.dumps({"question": "q", "context": "abcde", "answers": [{"text": "cd", "answer_start": -3}]}),
         "b.jsonl", "a character number from 0"),
    ]:
        with pytest.raises(BertScopeError, match=message):
            read_squad_file(text, name)


def test_held_out_contexts_keep_all_their_questions():
    data = Questions("q", [f"q{i}" for i in range(12)], [f"context {i // 3}" for i in range(12)],
                     [[] for _ in range(12)], [str(i) for i in range(12)])
    train, held = split_by_context(data, 0.25, seed=0)
    assert len(held) == 3 and not set(train.contexts) & set(held.contexts) and len(train) + len(held) == 12
    assert split_by_context(data, 0.25, seed=0)[1].ids == held.ids
    with pytest.raises(BertScopeError, match="one context"):
        split_by_context(data.take([0, 1, 2]), 0.25, seed=0)


def test_squad_scores_are_the_official_scripts():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert question_scores(["Denver Broncos", "the Broncos"], "denver broncos.") == (1, 1.0)
    em, f1 = question_scores(["Denver Broncos"], "the Denver")
    assert em == 0 and f1 == pytest.approx(2 * 1.0 * 0.5 / 1.5)  # precision 1, recall 1/2
    assert question_scores([], "") == (1, 1.0) and question_scores([], "a cat") == (0, 0.0)  # unanswerable
    assert question_scores(["cat"], "") == (0, 0.0)


@pytest.mark.parametrize("fixture", ["tiny_bert", "tiny_xlmr_dir"])
def test_each_window_points_at_its_answer_or_at_cls(fixture, request):
    value = request.getfixturevalue(fixture)
    tok = value.tokenizer if fixture == "tiny_bert" else load_model(str(value)).tokenizer
    context = " ".join(FILLER * 2 + ["the dog ate the bread ."] + FILLER)
    at = context.index("bread")
    side = Questions("q", ["the dog ate"], [context], [[("bread", at)]], ["q1"])
    windows = question_windows(tok, side.questions, side.contexts, 32, doc_stride(32))
    assert len(windows) > 2  # a long context, cut into overlapping windows
    encoded = encode_spans(tok, side, 32)
    assert encoded.several == 1 and len(encoded) == len(windows)
    holding = 0
    for w, (s, e) in zip(windows, encoded.labels):
        offsets = w.encoding.offsets
        inside = [t for t, q in enumerate(w.encoding.sequence_ids) if q == w.context_index]
        holds = offsets[inside[0]][0] <= at and offsets[inside[-1]][1] >= at + len("bread")
        assert ((s, e) != (0, 0)) == holds  # labelled exactly where the window holds the whole answer
        if holds:
            holding += 1
            assert context[offsets[s][0]:offsets[e][1]].strip() == "bread"  # SentencePiece keeps the space
            assert w.encoding.sequence_ids[s] == w.encoding.sequence_ids[e] == w.context_index
    assert 1 <= holding < len(windows)
    assert window_label(windows[0], None, 0) == (0, 0)
    # a question that leaves a window no room: refused in one line, or left out of training and counted
    long = Questions("q", ["the dog ate " * 12, "the dog ate"], [context] * 2, [[("bread", at)]] * 2, ["q1", "q2"])
    with pytest.raises(BertScopeError, match="question is too long for windows of 32 tokens"):
        question_windows(tok, long.questions, long.contexts, 32, doc_stride(32))
    kept = encode_spans(tok, long, 32)
    assert kept.too_long == 1 and {w.question for w in kept.windows} == {1}


def test_a_span_head_learns_and_answers_on_the_predictions_page_as_it_was_scored(tiny_bert_dir, squad_file,
                                                                                  tmp_path):
    from transformers import AutoModelForQuestionAnswering

    data = load_task_data("span", str(squad_file), held_out=0.25, seed=0)
    assert data.labels == ["start", "end"] and len(data.held_out) == 12 and data.how_split.startswith("25% of the")
    state = finetune(str(tiny_bert_dir), data, tmp_path / "run", SMALL, device="cpu")
    before, after = state.history[0]["before"]["held_out"], state.history[-1]["held_out"]
    assert after["loss"] < before["loss"] and after["exact_match"] >= 0.75 > before["exact_match"]
    assert after["questions"] == 12 and after["f1"] >= after["exact_match"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["task"] == "span" and metrics["held_out_examples"] == 12 and metrics["windows"]["held_out"] == 12
    worst = metrics["worst_held_out"]
    assert len(worst) == 12 and worst[0]["f1"] <= worst[-1]["f1"] and set(worst[0]) >= {"question", "gold", "predicted"}
    from bertscope.training.task_metrics import SpanScores, read_task_metrics

    typed = read_task_metrics(tmp_path / "run")  # what the page reads: attributes, span fields included
    assert typed.is_span and isinstance(typed.after, SpanScores) and typed.unit == "questions"
    assert typed.after.exact_match == after["exact_match"] and typed.spans.windows["held_out"] == 12
    folder = tmp_path / "run" / "model"
    assert AutoModelForQuestionAnswering.from_pretrained(folder).config.num_labels == 2
    lm = load_model(str(folder))
    assert lm.task.kind == "question-answering"
    held = data.held_out
    assert lm.model.config.task_specific_params["question-answering"] == {
        "max_seq_len": 32, "doc_stride": doc_stride(32), "max_answer_len": 30, "handle_impossible_answer": False}
    found = answer(lm, held.questions, held.contexts)  # the page's call: the run's own windows and decoding
    scored = {w["id"]: w["predicted"] for w in worst}
    assert [a.answers[0]["answer"] for a in found] == [scored[i] for i in held.ids]  # the page reads as it was scored


def test_a_lora_span_run_on_squad_2_ships_a_delta_that_merges(tiny_bert_dir, tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForQuestionAnswering

    path = tmp_path / "squad2.json"
    path.write_text(json.dumps(tiny_squad(48, unanswerable=16)), encoding="utf-8")
    data = load_task_data("span", str(path), held_out=0.25, seed=0)
    assert data.train.unanswerable + data.held_out.unanswerable == 16
    state = finetune(str(tiny_bert_dir), data, tmp_path / "run", replace(SMALL, epochs=1, lora_rank=4, max_held_out=4),
                     device="cpu")
    assert state.history[-1]["held_out"]["questions"] == 4  # --max-held-out: a seeded sample of the questions
    adapter = tmp_path / "run" / "adapter"
    task = json.loads((adapter / "task.json").read_text())
    assert task["auto"] == "AutoModelForQuestionAnswering"
    assert task["task_specific_params"]["question-answering"]["handle_impossible_answer"] is True  # "no answer" competes
    merged = apply_delta(str(tiny_bert_dir), adapter, tmp_path / "merged")
    assert AutoConfig.from_pretrained(merged).task_specific_params == task["task_specific_params"]
    ids = torch.tensor([[2, 10, 11, 4, 3, 12, 13, 3]])
    with torch.no_grad():
        ours = AutoModelForQuestionAnswering.from_pretrained(merged)(input_ids=ids)
        theirs = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "run" / "model")(input_ids=ids)
    torch.testing.assert_close(ours.start_logits, theirs.start_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.end_logits, theirs.end_logits, atol=1e-5, rtol=1e-5)


def test_squad_is_installed_with_its_own_split():
    dev = read_squad("dev")
    assert len(dev) == 10_570 and len(set(dev.contexts)) == 2_067
    assert dev.questions[0] == "Which NFL team represented the AFC at Super Bowl 50?"
    assert dev.answers[0][0] == ("Denver Broncos", 177) and dev.unanswerable == 0
    data = load_task_data("span", "squad")
    assert len(data.train) == 87_599 and data.held_out.name == "SQuAD v1.1 dev"
    assert not set(data.train.contexts) & set(dev.contexts[:50])


def test_bad_span_input_is_one_line_with_exit_2(refused, squad_file, tmp_path):
    run = partial(refused, task="span")

    assert "has no answer spans" in run(data="ewt-upos")
    assert "use --task span" in run(data="squad", task="classify")
    assert "Class weights" in run("--class-weights", data=squad_file)
    assert "--max-held-out" in run("--max-held-out", "0", data=squad_file)
    csv = tmp_path / "q.csv"
    csv.write_text("question,context\n", encoding="utf-8")
    assert "SQuAD's .json or .jsonl" in run(data=csv)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"question": "q", "context": "a cat", "answers": [{"text": "dog",
                                                                                     "answer_start": 2}]}) + "\n")
    assert "record 1: the answer 'dog' is not at character 2" in run(data=broken)
