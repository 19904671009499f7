"""BERT's masked-LM recipe run by BertScope: corruption, training, resume, LoRA delta, bundled-mlm."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from bertscope.errors import BertScopeError
from bertscope.pretrain import main as pretrain_main
from bertscope.pretraining import (
    IGNORE_INDEX, RecipeConfig, apply_delta, chunk_documents, mask_tokens, special_mask, train,
)

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
    assert pretrain_main([str(tiny_bert_dir), "--corpus", str(tmp_path / "none.txt"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert pretrain_main([str(tiny_bert_dir), "--corpus", "x", "--out", str(tmp_path), "--lr", "0"]) == 2
    assert "learning rate" in capsys.readouterr().err
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(TEXT * 3) + "\n\n" + "\n".join(TEXT))
    assert pretrain_main([str(tiny_bert_dir), "--corpus", str(corpus), "--out", str(tmp_path / "r"), "--epochs", "1",
                          "--seq-len", "32", "--batch-size", "4", "--lora", "0", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["epochs"] == 1


@pytest.mark.slow
def test_bundled_mlm_reproduces_its_recorded_held_out_figure(tmp_path, monkeypatch):
    """The shipped delta, merged onto the bundled package, on a fixed sample of held-out Brown
    documents (the first 64 chunks, one seeded corruption): the figure recorded when it was made."""
    from bertscope import load_model
    from bertscope.fill_mask import fill_mask
    from bertscope.pretrain import brown_documents
    from bertscope.pretraining import evaluate

    _, held = brown_documents(None, 0)  # the installed corpus (make test installs it)
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # the model built afresh from the package + delta
    lm = load_model("bundled-mlm", device="cpu")
    assert lm.heads == {"mlm"} and "Brown corpus" in " ".join(lm.notes)
    chunks = chunk_documents(lm.tokenizer, held, 128)
    assert len(chunks) == 1080
    figures = evaluate(lm.model, lm.tokenizer, chunks[:64], RecipeConfig(), lm.device)
    assert figures["positions"] == 1209
    assert figures["top1"] == pytest.approx(0.3780, abs=0.003) and figures["top5"] == pytest.approx(0.5318, abs=0.003)
    top = [p.token.strip() for p in fill_mask(lm, "He deposited the money in the [MASK].", 5).predictions[0]]
    assert "bank" in top


def test_training_job_runs_in_the_background_is_cancelled_and_refuses_a_second_run(tiny_bert_dir, tmp_path):
    from bertscope.training_job import TrainingJob

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
    failed = TrainingJob.start(str(tiny_bert_dir), TRAIN, HELD, tmp_path / "d", replace(SMALL, seq_len=128), device="cpu")
    assert failed.wait(timeout=60)
    assert failed.snapshot().status == "failed" and "longer than" in failed.snapshot().error
