"""BERT's second stage: a task head trained on labelled texts or tagged words, through the same loop
as pretraining (resume, micro-batches, LoRA deltas), its output opened as a fine-tuned model, and
every bad input one line with exit status 2."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertscope import load_model
from bertscope.errors import BertScopeError
from bertscope.sources.delta import apply_delta
from bertscope.training.config import FinetuneConfig
from bertscope.training.fine_tuning import class_weights, finetune
from bertscope.training.task_data import load_task_data
from bertscope.training.task_objective import IGNORE, encode, scores

GOOD = ["the food was good", "a good dog", "very good bread", "the good horse ate", "good fish and good bread",
        "the man was good", "a very good boat", "good water"]
BAD = ["the food was bad", "a bad dog", "very bad bread", "the bad horse sat", "bad fish and bad bread",
       "the man was bad", "a very bad boat", "bad water"]
TAGS = {"the": "DET", "a": "DET", "dog": "NOUN", "cat": "NOUN", "man": "NOUN", "woman": "NOUN", "sat": "VERB",
        "ate": "VERB", "walked": "VERB", "rode": "VERB", "horse": "NOUN", "food": "NOUN", "river": "NOUN",
        "in": "ADP", "on": "ADP", ".": "PUNCT", "unbelievably": "ADV", "playful": "ADJ"}
SENTENCES = ["the dog sat on the river .", "a man ate the food .", "the woman rode a horse .",
             "the cat walked in the river .", "a playful dog ate unbelievably .", "the man walked on a horse ."]
SMALL = FinetuneConfig(task="classify", seq_len=32, epochs=3, batch_size=4, lr=5e-3, seed=0, held_out=0.25)


@pytest.fixture
def records(tmp_path):
    path = tmp_path / "reviews.csv"
    rows = [(t, "positive") for t in GOOD * 2] + [(t, "negative") for t in BAD * 2]
    path.write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in rows), encoding="utf-8")
    return path


@pytest.fixture
def tagged(tmp_path):
    path = tmp_path / "tagged.jsonl"
    lines = [json.dumps({"tokens": s.split(), "tags": [TAGS[w] for w in s.split()]}) for s in SENTENCES * 4]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_classifier_learns_and_opens_as_a_fine_tuned_model(tiny_bert_dir, records, tmp_path, monkeypatch):
    from transformers import AutoModelForSequenceClassification

    from bertscope.training.task_objective import TaskObjective

    data = load_task_data("classify", str(records), held_out=0.25, seed=0)
    assert data.labels == ["negative", "positive"] and len(data.held_out) == 8
    scorings, predictions = [], TaskObjective.predictions
    monkeypatch.setattr(TaskObjective, "predictions", lambda self, *a, **k: scorings.append(1) or predictions(self, *a, **k))
    state = finetune(str(tiny_bert_dir), data, tmp_path / "run", SMALL, device="cpu")
    assert len(scorings) == 1 + SMALL.epochs  # before, then every epoch; the worst examples reuse the last
    before, after = state.history[0]["before"]["held_out"], state.history[-1]["held_out"]
    assert after["loss"] < before["loss"] and after["accuracy"] == 1.0 and after["macro_f1"] == 1.0
    assert sum(map(sum, after["confusion"])) == after["examples"] == 8
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3] and metrics["split"].startswith("stratified 25%")
    assert metrics["worst_held_out"][0]["gold"] in ("negative", "positive") and metrics["after"]["test"] is None
    folder = tmp_path / "run" / "model"
    hf = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert hf.config.id2label == {0: "negative", 1: "positive"}
    lm = load_model(str(folder))
    assert lm.task.kind == "sequence-classification" and lm.task.labels == ("negative", "positive")
    from bertscope.tasks.classify import classify

    ours = classify(lm, ["a good horse", "a bad horse"])
    assert [r.predicted for r in ours] == ["positive", "negative"]
    enc = lm.tokenizer(["a good horse"], return_tensors="pt")
    with torch.no_grad():
        np.testing.assert_allclose(ours[0].scores, torch.softmax(hf(**enc).logits, -1)[0].numpy(), atol=1e-5)


def test_word_pieces_take_their_words_label_on_the_first_piece_only(tiny_bert):
    data = load_task_data("tag", "ewt-upos")  # the shape only; a sentence of our own is encoded
    from bertscope.training.task_data import Tagged

    side = Tagged("t", [["the", "unbelievably", "playful", "dog"]], [["DET", "ADV", "ADJ", "NOUN"]])
    labels = ["ADJ", "ADV", "DET", "NOUN"]
    enc = encode(tiny_bert.tokenizer, "tag", side, labels, 32)
    pieces = tiny_bert.tokenizer.convert_ids_to_tokens(enc.ids[0])
    assert pieces == ["[CLS]", "the", "un", "##bel", "##ie", "##va", "##bly", "play", "##ful", "dog", "[SEP]"] or \
        pieces[:3] == ["[CLS]", "the", "un"]
    first = {i for i, p in enumerate(pieces) if p not in ("[CLS]", "[SEP]") and not p.startswith("##")}
    assert [labels[v] for v in enc.labels[0] if v != IGNORE] == ["DET", "ADV", "ADJ", "NOUN"]
    assert {i for i, v in enumerate(enc.labels[0]) if v != IGNORE} == first
    short = encode(tiny_bert.tokenizer, "tag", side, labels, 5)  # [CLS] the un ##bel [SEP]: three words cut
    assert short.truncated == 1 and short.unscored_words == 2
    assert len(data.labels) == 17


def test_a_tagger_learns_its_tags(tiny_bert_dir, tagged, tmp_path):
    data = load_task_data("tag", str(tagged), held_out=0.25, seed=0)
    cfg = replace(SMALL, task="tag", epochs=4, lr=1e-2)
    state = finetune(str(tiny_bert_dir), data, tmp_path / "run", cfg, device="cpu")
    before, after = state.history[0]["before"]["held_out"], state.history[-1]["held_out"]
    assert after["accuracy"] > max(0.8, before["accuracy"]) and after["words"] == before["words"] > 0
    assert set(after["per_label"]) == set(data.labels)
    lm = load_model(str(tmp_path / "run" / "model"))
    assert lm.task.kind == "token-classification" and set(lm.task.labels) == set(TAGS.values())


def total_steps(cfg) -> int:
    return -(-24 // cfg.batch_size)  # steps of one epoch: 24 training records


def test_resuming_gives_the_weights_of_an_uninterrupted_run(tiny_bert_dir, records, tmp_path):
    data = load_task_data("classify", str(records), held_out=0.25, seed=0)
    cfg = replace(SMALL, epochs=2)
    whole = finetune(str(tiny_bert_dir), data, tmp_path / "whole", cfg, device="cpu")
    steps: list[int] = []  # a Stop pressed during the second epoch: the first epoch's checkpoint is kept
    cut = finetune(str(tiny_bert_dir), data, tmp_path / "parts", cfg, device="cpu",
                   progress=lambda step, total, info: steps.append(step), stop=lambda: len(steps) > total_steps(cfg))
    assert cut.epoch == 1 and not (tmp_path / "parts" / "model").exists()
    parts = finetune(str(tiny_bert_dir), data, tmp_path / "parts", cfg, device="cpu")
    assert parts.step == whole.step and [h["held_out"] for h in parts.history] == [h["held_out"] for h in whole.history]
    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "parts" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other = load_task_data("tag", "ewt-upos")
    with pytest.raises(BertScopeError, match="another model, data or label set"):
        finetune(str(tiny_bert_dir), other, tmp_path / "parts", replace(SMALL, task="tag", epochs=2), device="cpu")


def test_micro_batches_add_up_to_the_batch(tiny_bert_dir, records, tmp_path):
    from transformers import AutoTokenizer, BertModel

    still = tmp_path / "still"  # no dropout: the same numbers either way
    BertModel.from_pretrained(tiny_bert_dir, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                              add_pooling_layer=True).save_pretrained(still)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(still)
    data = load_task_data("classify", str(records), held_out=0.25, seed=0)
    cfg = replace(SMALL, epochs=1, class_weights=True)
    whole = finetune(str(still), data, tmp_path / "whole", cfg, device="cpu")
    parts = finetune(str(still), data, tmp_path / "parts", cfg, device="cpu", memory_bytes=1)
    memory = [json.loads((tmp_path / run / "metrics.json").read_text())["memory"] for run in ("whole", "parts")]
    assert memory[0]["rows_per_pass"] == cfg.batch_size and memory[1]["rows_per_pass"] == 1
    assert whole.history[0]["train_loss"] == pytest.approx(parts.history[0]["train_loss"], rel=1e-5)
    x = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    y = load_file(str(tmp_path / "parts" / "model" / "model.safetensors"))
    # float32 sums in another order over a whole epoch of Adam steps: ~1e-5 apart on some CPUs
    worst = max((x[k] - y[k]).abs().max().item() for k in x)
    assert worst < 3e-5, worst


def _varied(tiny_bert):
    """A tagging side of 48 sentences of 1 to 12 words, encoded, and its objective."""
    from bertscope.training.task_data import Tagged
    from bertscope.training.task_objective import TaskObjective

    words = "the dog sat on the river with a playful horse in water".split()
    order = [5, 12, 1, 9, 3, 11, 7, 2, 10, 4, 8, 6] * 4
    side = Tagged("t", [words[:n] for n in order], [[TAGS.get(w, "NOUN") for w in words[:n]] for n in order])
    labels = sorted(set(TAGS.values()))
    enc = encode(tiny_bert.tokenizer, "tag", side, labels, 32)
    return enc, lambda **kw: TaskObjective("tag", labels, enc, enc, tiny_bert.tokenizer.pad_token_id,
                                           torch.device("cpu"), **kw)


def test_a_processs_rows_of_like_length_share_a_micro_batch(tiny_bert):
    import contextlib
    from types import SimpleNamespace

    from bertscope.training.processes import Processes

    enc, objective = _varied(tiny_bert)
    objective = objective()
    widths = []

    def runner(input_ids, **_):  # a model that records the width of each pass
        widths.append(input_ids.shape[1])
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, len(objective.labels), requires_grad=True))

    def passes(rows: int, group: Processes) -> tuple[list[int], float]:
        widths.clear()
        batch = objective.batch(torch.arange(rows), torch.Generator())
        loss = objective.accumulate(runner, batch, 2, group, contextlib.nullcontext(), None)["loss"]
        return list(widths), loss

    lengths = [len(enc.ids[r]) for r in range(6)]  # rows of 5, 12, 1, 9, 3 and 11 words
    drawn = [max(lengths[i:i + 2]) for i in range(0, 6, 2)]  # each pass as wide as its longest row, drawn order
    one = passes(6, Processes())[0]
    assert one == sorted(lengths, reverse=True)[::2]  # the two longest together, ...
    assert sum(one) < sum(drawn)
    # the second of two processes: its own share (rows 3 to 5), longest first
    assert passes(6, Processes(1, 2))[0] == sorted(lengths[3:], reverse=True)[::2]
    # a batch of one row: the second process has none and runs one pass that weighs nothing
    assert passes(1, Processes(1, 2)) == ([lengths[0]], 0.0)


def test_length_groups_are_transformers_order_and_pad_less(tiny_bert, tiny_bert_dir, tagged, tmp_path,
                                                            monkeypatch):
    from transformers.trainer_pt_utils import get_length_grouped_indices

    enc, objective = _varied(tiny_bert)
    lengths = [len(ids) for ids in enc.ids]
    grouped = objective(by_length=True).order(torch.Generator().manual_seed(3), 3)
    assert grouped.tolist() == get_length_grouped_indices(lengths, 3, generator=torch.Generator().manual_seed(3))
    assert sorted(grouped.tolist()) == list(range(48))

    def padded(order):  # the cells of all 16 batches of 3
        return sum(3 * max(lengths[r] for r in order[s:s + 3]) for s in range(0, 48, 3))

    drawn = objective().order(torch.Generator().manual_seed(3), 3)
    assert padded(grouped.tolist()) < padded(drawn.tolist())
    # a run batched by length draws transformers' order every epoch, and resumes from a checkpoint
    # saved before the setting existed
    import transformers.trainer_pt_utils as pt_utils

    calls = []

    def recorded(*args, **kwargs):
        calls.append(args[1])
        return get_length_grouped_indices(*args, **kwargs)

    monkeypatch.setattr(pt_utils, "get_length_grouped_indices", recorded)
    data = load_task_data("tag", str(tagged), held_out=0.25, seed=0)
    cfg = replace(SMALL, task="tag", epochs=1, lr=1e-2, group_by_length=True)
    finetune(str(tiny_bert_dir), data, tmp_path / "run", cfg, device="cpu")
    assert calls == [cfg.batch_size]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]["group_by_length"] is True
    old = tmp_path / "run" / "checkpoint" / "state.json"
    meta = json.loads(old.read_text())
    assert meta["config"].pop("group_by_length") is True and meta["config"].pop("max_held_out") is None
    old.write_text(json.dumps(meta))
    with pytest.raises(BertScopeError, match="other settings"):  # an old run was never batched by length
        finetune(str(tiny_bert_dir), data, tmp_path / "run", replace(cfg, epochs=2), device="cpu")
    state = finetune(str(tiny_bert_dir), data, tmp_path / "run", replace(cfg, epochs=2, group_by_length=False),
                     device="cpu")
    assert state.epoch == 2


def test_a_lora_run_ships_a_delta_that_merges_into_the_runs_model(tiny_bert_dir, tagged, tmp_path):
    from transformers import AutoModelForTokenClassification

    data = load_task_data("tag", str(tagged), held_out=0.25, seed=0)
    finetune(str(tiny_bert_dir), data, tmp_path / "run", replace(SMALL, task="tag", epochs=1, lora_rank=4),
             device="cpu")
    adapter = tmp_path / "run" / "adapter"
    task = json.loads((adapter / "task.json").read_text())
    assert task["auto"] == "AutoModelForTokenClassification" and list(task["id2label"].values()) == data.labels
    extras = load_file(str(adapter / "extras.safetensors"))
    assert {"classifier.weight", "classifier.bias"} <= set(extras) and any("LayerNorm" in k for k in extras)
    assert not any("lora_" in k for k in extras)
    merged = apply_delta(str(tiny_bert_dir), adapter, tmp_path / "merged")
    ids = torch.tensor([[2, 10, 11, 4, 12, 3]])
    with torch.no_grad():
        ours = AutoModelForTokenClassification.from_pretrained(merged)(input_ids=ids).logits
        theirs = AutoModelForTokenClassification.from_pretrained(tmp_path / "run" / "model")(input_ids=ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_scores_and_class_weights():
    confusion = np.array([[3, 1], [0, 4]])
    out = scores(confusion, ["a", "b"])
    assert out["accuracy"] == 7 / 8 and out["per_label"]["a"]["recall"] == 0.75 and out["per_label"]["b"]["precision"] == 0.8
    from sklearn.metrics import f1_score

    gold, predicted = [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]
    assert out["macro_f1"] == pytest.approx(f1_score(gold, predicted, average="macro"))
    from bertscope.training.task_objective import Encoded

    w = class_weights(Encoded([[0]] * 4, None, [0, 0, 0, 1], 0), ["x", "y", "z"], tagging=False)
    assert w.tolist() == pytest.approx([4 / 6, 2.0, 0.0])


def test_bad_input_is_one_line_with_exit_2(refused, tmp_path):
    run = refused
    one_class = tmp_path / "one.csv"
    one_class.write_text("text,label\na good dog,pos\na bad dog,pos\n", encoding="utf-8")
    assert "one class" in run(data=one_class)
    no_label = tmp_path / "nolabel.csv"
    no_label.write_text("text,stars\na good dog,5\n", encoding="utf-8")
    assert "no column 'label'" in run(data=no_label) and "stars" in run(data=no_label)
    assert "record 1" not in run("--label-column", "stars", data=one_class)  # its column is named
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\xe9 good,pos\nbad,neg\n".encode("latin-1"))
    assert "not UTF-8" in run(data=latin)
    mismatch = tmp_path / "tags.jsonl"
    mismatch.write_text(json.dumps({"tokens": ["a", "dog"], "tags": ["DET"]}) + "\n", encoding="utf-8")
    assert "2 tokens but 1 tags" in run(data=mismatch, task="tag")
    assert "has no answer spans" in run(data="sentiment", task="span")
    assert "use --task tag" in run(data="ewt-upos")
    assert "--lora R or --full" in run("--lora", "4", "--full", data="sentiment")
    assert "cores" in run("--processes", "64", data="sentiment")
    assert "No data" in run(data=tmp_path / "missing.csv")
    assert "--seq-len" in run("--seq-len", "4", data="sentiment")


def test_a_disk_that_fills_during_a_checkpoint_keeps_the_last_one(tiny_bert_dir, records, tmp_path, monkeypatch):
    import safetensors.torch

    data = load_task_data("classify", str(records), held_out=0.25, seed=0)
    cfg = replace(SMALL, epochs=2)
    whole = finetune(str(tiny_bert_dir), data, tmp_path / "whole", cfg, device="cpu")
    real = safetensors.torch.save_file
    calls = []

    def full_disk(tensors, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the second epoch's checkpoint
            raise OSError(28, "No space left on device")
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    with pytest.raises(BertScopeError, match="No space left on device.*epoch 1's checkpoint is kept") as err:
        finetune(str(tiny_bert_dir), data, tmp_path / "run", cfg, device="cpu")
    assert "\n" not in str(err.value)
    state = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())
    assert state["epoch"] == 1 and not list((tmp_path / "run").glob("checkpoint.*"))  # no half-written folder
    monkeypatch.setattr(safetensors.torch, "save_file", real)
    resumed = finetune(str(tiny_bert_dir), data, tmp_path / "run", cfg, device="cpu")
    assert resumed.step == whole.step
    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_runs_figures_cross_to_the_page_typed(tiny_bert_dir, records, tmp_path):
    from bertscope.training.task_metrics import LabelScores, read_task_metrics

    data = load_task_data("classify", str(records), held_out=0.25, seed=0)
    finetune(str(tiny_bert_dir), data, tmp_path / "run", replace(SMALL, epochs=1), device="cpu")
    raw = json.loads((tmp_path / "run" / "metrics.json").read_text())
    m = read_task_metrics(tmp_path / "run")
    assert isinstance(m.after, LabelScores) and not m.is_span and m.unit == "examples"
    assert m.after.accuracy == raw["after"]["held_out"]["accuracy"] and m.after.count == 8
    assert m.before.loss == raw["before"]["held_out"]["loss"] and [e.epoch for e in m.epochs] == [1]
    assert m.after.labels == ["negative", "positive"] and m.test is None and m.spans is None
    (tmp_path / "bad.json").write_text(json.dumps({"task": "classify"}))
    with pytest.raises(BertScopeError, match="not a fine-tuning run's"):
        read_task_metrics(tmp_path / "bad.json")
