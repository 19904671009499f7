"""BERT's masked-LM recipe run by BertScope: corruption, training, resume, LoRA delta, bundled-mlm."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from bertscope.cli import main as pretrain_main
from bertscope.errors import BertScopeError
from bertscope.mlm.masking import IGNORE_INDEX
from bertscope.sources.delta import apply_delta
from bertscope.training.batches import mask_tokens, special_mask
from bertscope.training.config import RecipeConfig
from bertscope.training.instances import chunk_documents
from bertscope.training.recipe import train

TEXT = ["the man walked along the river bank with his dog .", "she deposited the money in the bank .",
        "the dog sat on the grass by the river .", "he ate bread and fish on the boat ."]
TRAIN = [TEXT * 3, TEXT[::-1] * 3]
HELD = [TEXT * 2]
SMALL = RecipeConfig(seq_len=32, epochs=3, batch_size=4, lr=3e-3, lora_rank=0, seed=3)


def test_mask_tokens_chooses_exactly_15_percent_and_splits_80_10_10():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 1000, (400, 128))
    ids[:, 0], ids[:, -1], ids[:, 100:] = 2, 3, 0  # [CLS], [SEP] and padding
    special = torch.isin(ids, torch.tensor([0, 2, 3]))
    replacements = torch.arange(10, 1000)
    cfg = RecipeConfig()
    inputs, labels = mask_tokens(ids, special, replacements, 4, cfg, generator)
    chosen = labels != IGNORE_INDEX
    n = (~special).sum(1)
    assert torch.equal(chosen.sum(1), (n * 0.15).round().long())  # exactly round(15% x n) per row
    assert not (chosen & special).any()
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])  # the loss mask: nothing else changes
    masked = (inputs[chosen] == 4).float().mean()
    unchanged = (inputs[chosen] == ids[chosen]).float().mean()
    assert abs(masked - 0.8) < 0.02 and abs(unchanged - 0.1 - 0.1 / 990) < 0.02  # a random id may equal the original


def test_chunks_never_mix_documents(tiny_bert):
    tok = tiny_bert.tokenizer
    chunks = chunk_documents(tok, [["the dog ."] * 3, ["a cat ."]], seq_len=8)
    assert chunks.shape[1] == 8 and chunks[:, 0].eq(tok.cls_token_id).all()
    rows = [tok.convert_ids_to_tokens([i for i in row.tolist() if i != tok.pad_token_id]) for row in chunks]
    assert rows[-1] == ["[CLS]", "a", "cat", ".", "[SEP]"]  # the second document starts its own chunk
    assert not special_mask(tok, chunks)[:, 1:4].any() or rows[0][1] == "the"


def test_training_lowers_the_held_out_loss(tiny_bert_dir, tmp_path):
    state = train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "run", SMALL, device="auto")  # a GPU where there is one
    losses = [h["held_out"]["loss"] for h in state.history]
    assert state.epoch == 3 and losses[-1] < losses[0] < state.history[0]["before"]["held_out"]["loss"]
    assert state.history[-1]["train_loss"] < state.history[0]["train_loss"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3] and (tmp_path / "run" / "curves.png").stat().st_size
    assert (tmp_path / "run" / "model" / "config.json").is_file()


def test_resuming_gives_the_weights_of_an_uninterrupted_run(tiny_bert_dir, tmp_path):
    # on the CPU: bit-identical weights need deterministic kernels, which GPU backward passes are not
    whole = train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "whole", replace(SMALL, epochs=2), device="cpu")
    train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "parts", replace(SMALL, epochs=1), device="cpu")
    parts = train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "parts", replace(SMALL, epochs=2), device="cpu")
    assert parts.step == whole.step and [h["held_out"] for h in parts.history] == [h["held_out"] for h in whole.history]
    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "parts" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(BertScopeError, match="other settings"):
        train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "parts", replace(SMALL, epochs=3, lr=1e-3), device="cpu")


def test_lora_delta_merged_onto_the_base_equals_the_runs_model(tiny_bert_dir, tmp_path):
    from transformers import AutoModelForMaskedLM

    cfg = replace(SMALL, epochs=1, lora_rank=4, lr=1e-2)
    train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "run", cfg, device="cpu")
    adapter = tmp_path / "run" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_bert_dir)
    extras = load_file(str(adapter / "extras.safetensors"))
    assert any("LayerNorm" in k for k in extras) and "cls.predictions.bias" in extras
    merged = apply_delta(str(tiny_bert_dir), adapter, tmp_path / "merged")
    ids = torch.tensor([[2, 10, 11, 4, 12, 3]])
    with torch.no_grad():
        ours = AutoModelForMaskedLM.from_pretrained(merged)(input_ids=ids).logits
        theirs = AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "model")(input_ids=ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_script_errors_are_one_line_with_exit_2(tiny_bert_dir, tmp_path, capsys):
    assert pretrain_main(["pretrain", str(tiny_bert_dir), "--corpus", str(tmp_path / "none.txt"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert pretrain_main(["pretrain", str(tiny_bert_dir), "--corpus", "x", "--out", str(tmp_path), "--lr", "0"]) == 2
    assert "learning rate" in capsys.readouterr().err
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(TEXT * 3) + "\n\n" + "\n".join(TEXT))
    assert pretrain_main(["pretrain", str(tiny_bert_dir), "--corpus", str(corpus), "--out", str(tmp_path / "r"), "--epochs", "1",
                          "--seq-len", "32", "--batch-size", "4", "--lora", "0", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["epochs"] == 1
    assert pretrain_main(["pretrain", str(tiny_bert_dir), "--corpus", str(corpus), "--out", str(tmp_path / "s"), "--pair", "sop",
                          "--seq-len", "32", "--device", "cpu"]) == 2  # BERT's pair head is NSP
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "choose --pair nsp" in err
    assert pretrain_main(["pretrain", str(tiny_bert_dir), "--corpus", str(corpus), "--out", str(tmp_path / "n"), "--pair", "nsp",
                          "--epochs", "1", "--seq-len", "32", "--batch-size", "4", "--device", "cpu",
                          "--cloze", "the dog sat by the [MASK] .", "--cloze", "a [MASK] ran ."]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["held_out_nsp_accuracy"] <= 1
    metrics = json.loads((tmp_path / "n" / "metrics.json").read_text())
    assert [c["text"] for c in metrics["after"]["cloze"]] == ["the dog sat by the [MASK] .", "a [MASK] ran ."]
    assert pretrain_main(["pretrain", str(tiny_bert_dir), "--corpus", str(corpus), "--out", str(tmp_path / "c"),
                          "--cloze", "no mask"]) == 2
    assert "needs a [MASK]" in capsys.readouterr().err


@pytest.mark.slow
def test_bundled_mlm_reproduces_its_recorded_held_out_figure(tmp_path, monkeypatch):
    """The shipped delta, merged onto the bundled package, on a fixed sample of held-out Brown
    documents (the first 64 chunks, one seeded corruption): the figure recorded when it was made."""
    from bertscope import load_model
    from bertscope.corpora.documents import brown_documents
    from bertscope.mlm.fill_mask import fill_mask
    from bertscope.training.steps import evaluate

    _, held = brown_documents(None, 0)  # the installed corpus (make test installs it)
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # the model built afresh from the package + delta
    lm = load_model("bundled-mlm", device="cpu")
    assert lm.outputs == {"mlm"} and "Brown corpus" in " ".join(lm.notes)
    chunks = chunk_documents(lm.tokenizer, held, 128)
    assert len(chunks) == 1080
    figures = evaluate(lm.model, lm.tokenizer, chunks[:64], RecipeConfig(), lm.device)
    assert figures["positions"] == 1209
    assert figures["top1"] == pytest.approx(0.3780, abs=0.003) and figures["top5"] == pytest.approx(0.5318, abs=0.003)
    top = [p.token.strip() for p in fill_mask(lm, "He deposited the money in the [MASK].", 5).predictions[0]]
    assert "bank" in top


def test_training_job_runs_in_the_background_is_cancelled_and_refuses_a_second_run(tiny_bert_dir, tmp_path):
    from bertscope.training.job import TrainingJob

    long = replace(SMALL, epochs=200)  # far more steps than the test waits for
    job = TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "a", long, device="cpu")
    with pytest.raises(BertScopeError, match="already use this server"):
        TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "b", SMALL, device="cpu")
    job.cancel()
    assert job.wait(timeout=120)
    snap = job.snapshot()
    assert snap.status == "cancelled" and snap.metrics is None and len(snap.losses) == snap.step  # stopped early
    done = TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "c", SMALL, device="cpu")  # the slot is free
    assert done.wait(timeout=300)
    snap = done.snapshot()
    assert snap.status == "done" and snap.step == snap.total == len(snap.losses)
    assert [e["epoch"] for e in snap.epochs] == [1, 2, 3] and snap.metrics["after"]["held_out"]["loss"] > 0
    assert snap.seconds_per_step > 0 and snap.seconds_left is None and snap.elapsed > 0  # the pace, measured
    assert done.device_label.startswith("the CPU")
    with pytest.raises(BertScopeError, match="Unknown device"):  # refused before taking the one slot
        TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "e", SMALL, device="tpu")
    free = TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "f", replace(SMALL, epochs=1), device="cpu")
    assert free.wait(timeout=300) and free.snapshot().status == "done"
    failed = TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "d", replace(SMALL, seq_len=128), device="cpu")
    assert failed.wait(timeout=60)
    assert failed.snapshot().status == "failed" and "longer than" in failed.snapshot().error


def test_the_head_runs_only_at_the_chosen_positions_with_the_full_heads_values(
        tiny_bert_dir, tiny_roberta_dir, tiny_albert_pretraining_dir, tiny_distilbert_dir):
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    from bertscope.training.instances import Chunks
    from bertscope.training.steps import forward_chosen

    ids = torch.randint(5, 60, (3, 12))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 5], labels[1, 7], labels[2, 11] = 9, 10, 11, 12
    for folder, auto in ((tiny_bert_dir, AutoModelForPreTraining), (tiny_bert_dir, AutoModelForMaskedLM),
                         (tiny_roberta_dir, AutoModelForMaskedLM), (tiny_albert_pretraining_dir, AutoModelForPreTraining),
                         (tiny_distilbert_dir, AutoModelForMaskedLM)):
        model = auto.from_pretrained(folder).eval()
        with torch.no_grad():
            full = model(input_ids=ids, attention_mask=torch.ones_like(ids))
            full = getattr(full, "prediction_logits", None) if hasattr(full, "prediction_logits") else full.logits
            picked, gold, _ = forward_chosen(model, Chunks(ids), ids, labels, -1, torch.device("cpu"), torch.no_grad())
        assert picked.shape == (4, model.config.vocab_size) and gold.tolist() == [9, 10, 11, 12]
        torch.testing.assert_close(picked, full[labels != IGNORE_INDEX], atol=1e-5, rtol=1e-5)
        assert not model.get_output_embeddings()._forward_pre_hooks  # the hook is gone after the pass


def _segments(tok, row, types):
    words = [t for t, i in zip(tok.convert_ids_to_tokens(row.tolist()), row.tolist()) if i != tok.pad_token_id]
    return words, types[:len(words)].tolist()


def test_sentence_pairs_follow_berts_recipe(tiny_bert):
    from bertscope.training.instances import pair_instances

    tok = tiny_bert.tokenizer
    docs = [[f"the dog {w} ." for w in ("sat", "ran", "ate", "slept")] * 40, ["a cat sat on the boat ."] * 120]
    for task in ("nsp", "sop"):
        pairs = pair_instances(tok, docs, 24, task, seed=1)
        assert pairs.ids.shape[1] == 24 and len(pairs) == len(pairs.pair_labels) >= 50
        assert 0.35 < pairs.pair_labels.float().mean() < 0.65  # about half are NotNext / swapped
        for row, types, _label in zip(pairs.ids, pairs.token_types, pairs.pair_labels):
            words, segs = _segments(tok, row, types)
            first = words.index("[SEP]")
            assert words[0] == "[CLS]" and words[-1] == "[SEP]" and words.count("[SEP]") == 2 and len(words) <= 24
            assert segs == [0] * (first + 1) + [1] * (len(words) - first - 1)  # A with [CLS] and its [SEP], then B
            a, b = words[1:first], words[first + 1:-1]
            assert a and b
            if task == "sop":  # the same document either way: SOP is about order, not topic
                assert ("cat" in a) == ("cat" in b)
    sop = pair_instances(tok, [["one two three four five six seven eight"] * 1], 12, "sop", seed=0)
    assert len(sop) == 1  # a one-sentence document is cut inside its sentence
    alone = pair_instances(tok, docs[:1], 24, "nsp", seed=0)  # one document: NotNext B from elsewhere in it
    assert len(alone) >= 20 and 0.2 < alone.pair_labels.float().mean() < 0.8


def test_nsp_pairs_take_b_from_another_document_exactly_when_labelled_notnext(tiny_bert):
    from bertscope.training.instances import pair_instances

    tok = tiny_bert.tokenizer
    docs = [["the dog sat .", "the dog ran .", "the dog ate ."] * 3, ["a cat sat on the boat ."] * 9]
    pairs = pair_instances(tok, docs, 20, "nsp", seed=4)
    for row, types, label in zip(pairs.ids, pairs.token_types, pairs.pair_labels):
        words, _ = _segments(tok, row, types)
        first = words.index("[SEP]")
        a, b = words[1:first], words[first + 1:-1]
        assert (("cat" in a) != ("cat" in b)) == bool(label)


@pytest.mark.parametrize("task, fixture", [("nsp", "tiny_bert_dir"), ("sop", "tiny_albert_pretraining_dir")])
def test_training_a_pair_head_beside_mlm_and_loading_it_back(task, fixture, request, tmp_path):
    from bertscope import load_model

    folder = request.getfixturevalue(fixture)
    docs = [[f"the dog {w} by the river ." for w in ("sat", "ran", "ate", "slept", "hid")] * 3,
            [f"a cat {w} on the boat ." for w in ("sat", "ran", "ate", "slept", "hid")] * 3,
            [f"he {w} bread and fish ." for w in ("ate", "had", "sold", "bought", "took")] * 3]
    # 3e-3: LoRA now wraps ALBERT's feed-forward and output projections too (BERT's names matched only q, k, v)
    cfg = replace(SMALL, seq_len=24, epochs=4, pair_task=task, lora_rank=4, lr=3e-3)
    state = train(str(folder), docs, docs, tmp_path / "run", cfg, device="cpu")
    held = [h["held_out"] for h in state.history]
    assert all(0 <= h["pair_accuracy"] <= 1 and h["pairs"] > 0 for h in held)
    assert held[-1]["pair_loss"] < state.history[0]["before"]["held_out"]["pair_loss"]
    assert state.history[-1]["train_pair_loss"] < state.history[0]["train_pair_loss"]
    assert held[-1]["loss"] < state.history[0]["before"]["held_out"]["loss"]
    lm = load_model(str(tmp_path / "run" / "model"), device="cpu")
    assert lm.outputs == {"mlm", task}  # the loader reads the trained pair head like any checkpoint's
    extras = load_file(str(tmp_path / "run" / "adapter" / "extras.safetensors"))
    assert any(k.startswith(("cls.seq_relationship.", "sop_classifier.")) for k in extras)
    merged = apply_delta(str(folder), tmp_path / "run" / "adapter", tmp_path / "merged")
    assert load_model(str(merged), device="cpu").outputs == {"mlm", task}


def test_a_pair_task_the_family_never_had_is_refused_in_one_line(tiny_bert_dir, tiny_roberta_dir, tmp_path):
    with pytest.raises(BertScopeError, match="its own is NSP: choose --pair nsp"):
        train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "a", replace(SMALL, pair_task="sop"), device="cpu")
    with pytest.raises(BertScopeError, match="no next-sentence head"):
        train(str(tiny_roberta_dir), TRAIN, HELD, tmp_path / "b", replace(SMALL, pair_task="nsp"), device="cpu")
    with pytest.raises(BertScopeError, match="sentence-pair task"):
        RecipeConfig(pair_task="both").check()


def test_the_sentences_compared_before_and_after_are_the_callers(tiny_bert_dir, tmp_path):
    mine = ["the dog sat by the [MASK] .", "she ate [MASK] on the boat ."]
    cfg = replace(SMALL, epochs=1)
    train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "run", cfg, device="cpu", cloze_texts=mine)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [c["text"] for c in metrics["before"]["cloze"]] == mine == [c["text"] for c in metrics["after"]["cloze"]]
    assert all(len(c["top"]) == 5 for c in metrics["after"]["cloze"])
    with pytest.raises(BertScopeError, match="other sentences to compare"):  # a resume must compare the same ones
        train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "run", replace(cfg, epochs=2), device="cpu",
              cloze_texts=mine[:1])
    for bad, message in ((["no mask here ."], "needs a \\[MASK\\]"), ([], "at least one sentence"),
                         (["[MASK] ."] * 13, "At most 12"), (["the [MASK] " + "dog " * 60], "longer than")):
        with pytest.raises(BertScopeError, match=message):
            train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "bad", cfg, device="cpu", cloze_texts=bad)


def test_a_batch_over_the_memory_budget_runs_as_micro_batches_with_the_same_result(tiny_bert_dir, tmp_path,
                                                                                    monkeypatch):
    from transformers import AutoTokenizer, BertForPreTraining

    model = BertForPreTraining.from_pretrained(tiny_bert_dir, hidden_dropout_prob=0.0,
                                               attention_probs_dropout_prob=0.0)  # the same masks either way
    model.save_pretrained(tmp_path / "still")
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "still")
    cfg = replace(SMALL, epochs=1, pair_task="nsp")
    whole = train(str(tmp_path / "still"), TRAIN, HELD, tmp_path / "whole", cfg, device="cpu")
    parts = train(str(tmp_path / "still"), TRAIN, HELD, tmp_path / "parts", cfg, device="cpu", memory_bytes=1)
    memory = [json.loads((tmp_path / run / "metrics.json").read_text())["memory"] for run in ("whole", "parts")]
    assert memory[0]["rows_per_pass"] == cfg.batch_size and memory[1]["rows_per_pass"] == 1
    assert memory[0]["activation_bytes_per_row"] == memory[1]["activation_bytes_per_row"] > 0
    for a, b in zip(whole.history, parts.history):  # the gradients of a batch add up to the same
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["train_pair_loss"] == pytest.approx(b["train_pair_loss"], rel=1e-5)
        assert a["held_out"]["loss"] == pytest.approx(b["held_out"]["loss"], rel=1e-4)
    x = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    y = load_file(str(tmp_path / "parts" / "model" / "model.safetensors"))
    assert x.keys() == y.keys() and all(torch.allclose(x[k], y[k], atol=1e-5) for k in x)
    monkeypatch.setenv("BERTSCOPE_TRAIN_MB", "lots")
    with pytest.raises(BertScopeError, match="BERTSCOPE_TRAIN_MB"):
        train(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "bad", cfg, device="cpu")


@pytest.mark.slow
def test_one_masking_rule_for_the_recipe_view_the_cli_and_the_trainer(capsys):
    """BERT's rule has one home (heads.masking): the per-text view (the Masked page), the CLI's
    mlm-recipe and the trainer count the same positions and draw replacements from the same ids,
    none of them a placeholder such as [unused0]."""
    import numpy as np

    from bertscope import load_model
    from bertscope.cli import main
    from bertscope.mlm import recipe as mlm_recipe
    from bertscope.mlm.masking import is_placeholder, replacement_ids, selection_count
    from bertscope.training import batches
    from bertscope.training.config import RecipeConfig

    lm = load_model("bundled")  # bert-base-uncased's vocabulary: 994 [unusedN] placeholders
    rule = replacement_ids(lm.tokenizer, lm.vocab_size)
    vocab = {i: piece for piece, i in lm.tokenizer.get_vocab().items()}
    assert not any(is_placeholder(vocab[i]) for i in rule) and len(rule) > 29_000
    np.testing.assert_array_equal(mlm_recipe.ordinary_vocab(lm), rule)  # the page and the CLI

    seen_by_recipe: set[int] = set()
    drawn = []
    real = mlm_recipe.corrupt

    def spy(ids, special, vocab_ids, *args, **kwargs):
        np.testing.assert_array_equal(vocab_ids, rule)
        c = real(ids, special, vocab_ids, *args, **kwargs)
        drawn.append(len(c.actions))
        seen_by_recipe.update(c.input_ids[i] for i, a in c.actions.items() if a == "random")
        return c

    mlm_recipe.corrupt = spy
    try:
        text = "The quick brown fox jumps over the lazy dog near the river bank today."
        for seed in range(20):
            view = mlm_recipe.recipe_corruption(lm, text, seed=seed, random_rate=0.9, mask_rate=0.0)
        calls = len(drawn)
        assert main(["mlm-recipe", "bundled-mlm", text, "--seed", "3", "--json"]) == 0  # the CLI's path
        assert len(drawn) == calls + 1 and json.loads(capsys.readouterr().out)["positions"]
    finally:
        mlm_recipe.corrupt = real
    n = sum(1 for t in view.tokens if t not in ("[CLS]", "[SEP]"))
    assert set(drawn) == {selection_count(n, 0.15)}
    assert seen_by_recipe <= set(rule.tolist())

    import torch

    cfg = RecipeConfig(select_rate=0.15, mask_rate=0.0, random_rate=1.0)
    ids = torch.tensor([[101] + [2000 + i for i in range(k)] + [102] + [0] * (40 - k) for k in (1, 7, 13, 38)])
    inputs, labels = batches.mask_tokens(ids, batches.special_mask(lm.tokenizer, ids), torch.from_numpy(rule),
                                         lm.tokenizer.mask_token_id, cfg, torch.Generator().manual_seed(0))
    for row, k in zip(labels, (1, 7, 13, 38)):
        assert int((row != -100).sum()) == selection_count(k, 0.15)  # the trainer counts by the same rule
    changed = inputs[labels != -100]
    assert set(changed.tolist()) <= set(rule.tolist())


def test_time_left_counts_the_held_out_scorings_and_settles(monkeypatch, tmp_path):
    """The estimate is the measured pace of steps within an epoch plus each scoring still to come: before
    an epoch has ended, the time before the first step stands for one scoring; then the measured one."""
    from bertscope.training import job as job_module
    from bertscope.training.job import TrainingJob

    clock = iter([0.0, 10.0, 11.0, 12.0, 18.0, 19.0])  # start; steps 1-3 (epoch 1); 4-5 (epoch 2)
    monkeypatch.setattr(job_module.time, "monotonic", lambda: now[0])
    now = [next(clock)]
    job = TrainingJob("m", tmp_path, replace(SMALL, epochs=2), _started=0.0)
    for step, epoch in ((1, 1), (2, 1), (3, 1)):
        now[0] = next(clock)
        job._progress(step, 6, {"loss": 1.0, "epoch": epoch})
    snap = job.snapshot()
    assert snap.seconds_per_step == pytest.approx(1.0)
    assert snap.seconds_left == pytest.approx(3 * 1.0 + 2 * 10.0)  # 3 steps, 2 scorings at the set-up time
    now[0] = next(clock)  # 1 s of step and 5 s of scoring after epoch 1
    job._progress(4, 6, {"loss": 1.0, "epoch": 2})
    snap = job.snapshot()
    assert snap.scoring_seconds == pytest.approx(5.0) and snap.scorings_left == 1
    assert snap.seconds_left == pytest.approx(2 * 1.0 + 5.0)  # what is really left: 2 steps and 1 scoring


def test_a_chunk_budget_cuts_the_held_out_scoring_in_proportion():
    """The newcomer's row 13: `--max-chunks 4` on all of Brown still scored the whole held-out side (about a tenth
    of Brown) before and after every epoch: no step after 30 minutes on ALBERT-base. Now in proportion, at least 64."""
    from bertscope.training.config import MIN_HELD_OUT, RecipeConfig

    assert RecipeConfig().held_out_budget(40_000, 4_000) is None  # no budget: all of it
    assert RecipeConfig(max_chunks=4).held_out_budget(40_000, 4_000) == MIN_HELD_OUT
    assert RecipeConfig(max_chunks=20_000).held_out_budget(40_000, 4_000) == 2_000  # half the training side: half
    assert RecipeConfig(max_chunks=50_000).held_out_budget(40_000, 4_000) is None
    assert RecipeConfig(max_chunks=4, max_held_out=10).held_out_budget(40_000, 4_000) == 10
