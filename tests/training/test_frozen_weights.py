"""A LoRA run's frozen weights held in the autocast dtype for an epoch (``training.frozen_weights``):
the same loss and gradients as autocast casting them every pass, and the float32 tensors back after."""

from __future__ import annotations

import pytest
import torch

from bertscope.training.frozen_weights import frozen_in


def _step(model, feed, labels):
    """Loss and the trainable parameters' gradients of one pass under the CPU's bf16 autocast."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(**feed).logits
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("lora", [4, 0], ids=["lora", "full"])
def test_holding_frozen_weights_in_bf16_changes_no_loss_or_gradient(tiny_bert_dir, lora):
    from bertscope.training.task_model import build_task_model

    model = build_task_model(str(tiny_bert_dir), True, "tag", ["A", "B", "C"], lora, 8, seed=0)
    model.train(False)  # no dropout: the two passes must see the same network
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(0)
    feed = {"input_ids": torch.randint(5, 20, (3, 7), generator=generator),
            "attention_mask": torch.ones(3, 7, dtype=torch.long)}
    labels = torch.randint(0, 3, (3, 7), generator=generator)

    loss, grads = _step(model, feed, labels)
    with frozen_in(model, torch.bfloat16) as swapped:
        held = {n for n, p in model.named_parameters() if p.dtype == torch.bfloat16}
        loss_held, grads_held = _step(model, feed, labels)

    if lora:  # every frozen projection of the encoder (weight and bias), nothing trained, no embedding
        frozen_linear = {n for n, p in model.named_parameters() if not p.requires_grad
                         and ".embeddings." not in n and "LayerNorm" not in n}
        assert held == frozen_linear and swapped == len(frozen_linear) > 0
        assert not any("lora_" in n or "classifier" in n for n in held)
    else:  # everything trains: nothing to hold
        assert swapped == 0 and not held
    assert torch.equal(loss_held, loss)  # bit for bit: the matmuls see autocast's own cast
    assert grads_held.keys() == grads.keys() and grads
    for name, grad in grads.items():
        assert torch.equal(grads_held[name], grad), name
    after = dict(model.named_parameters())
    assert all(after[n].dtype == torch.float32 and torch.equal(after[n], v) for n, v in before.items())


def test_a_tied_matrix_and_an_error_inside_leave_the_float32_weights_in_place(tiny_bert_dir):
    from transformers import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(tiny_bert_dir).requires_grad_(False)
    decoder = model.cls.predictions.decoder
    assert decoder.weight is model.bert.embeddings.word_embeddings.weight  # tied to the embedding
    with pytest.raises(RuntimeError, match="inside"):
        with frozen_in(model, torch.bfloat16) as swapped:
            assert swapped > 0 and decoder.weight.dtype == torch.float32
            assert model.bert.encoder.layer[0].attention.self.query.weight.dtype == torch.bfloat16
            raise RuntimeError("inside")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with frozen_in(model, None) as swapped:  # the CPU's runs: no autocast, nothing held
        assert swapped == 0


def test_a_lora_epoch_holds_them_for_its_steps_and_evaluates_and_saves_float32(tiny_bert_dir, tmp_path, monkeypatch):
    """The loop with the swap on (as on a GPU: here the CPU's bf16 autocast stands in): inside the steps the frozen
    projections are bf16; evaluation (which runs without autocast, so would fail on bf16 weights) and the
    checkpoint see float32; a run stopped mid-epoch leaves float32 weights too."""
    import json
    from dataclasses import replace

    from bertscope.training import fine_tuning, loop
    from bertscope.training.config import FinetuneConfig
    from bertscope.training.task_data import load_task_data

    monkeypatch.setattr(fine_tuning, "autocast_context", lambda device: (torch.autocast("cpu", dtype=torch.bfloat16),
                                                                         None))
    monkeypatch.setattr(loop, "autocast_dtype", lambda device: torch.bfloat16)
    words = ["the dog sat", "a cat ran", "the bank of the river", "a horse"] * 6
    tags = {"the": "DET", "a": "DET", "dog": "NOUN", "cat": "NOUN", "bank": "NOUN", "river": "NOUN", "horse": "NOUN",
            "sat": "VERB", "ran": "VERB", "of": "ADP"}
    path = tmp_path / "tagged.jsonl"
    path.write_text("".join(json.dumps({"tokens": s.split(), "tags": [tags[w] for w in s.split()]}) + "\n"
                            for s in words), encoding="utf-8")
    data = load_task_data("tag", str(path), held_out=0.25, seed=0)
    cfg = FinetuneConfig(task="tag", lora_rank=4, lora_alpha=8, epochs=1, batch_size=4, lr=1e-2, seq_len=16)
    seen: list[set] = []
    holder: dict = {}

    def progress(step, total, info):  # called inside the epoch's steps
        model = holder["model"]
        seen.append({p.dtype for n, p in model.named_parameters() if not p.requires_grad and ".embeddings." not in n
                     and "LayerNorm" not in n})

    real_build = fine_tuning.build_task_model

    def build(*args, **kwargs):
        holder["model"] = real_build(*args, **kwargs)
        return holder["model"]

    monkeypatch.setattr(fine_tuning, "build_task_model", build)
    state = fine_tuning.finetune(str(tiny_bert_dir), data, tmp_path / "run", cfg, device="cpu", progress=progress)
    assert seen and all(s == {torch.bfloat16} for s in seen)  # held for every step
    assert state.history[-1]["held_out"]["words"] > 0  # evaluated after the steps, in float32
    assert all(p.dtype == torch.float32 for p in holder["model"].parameters())
    steps = []
    stopped = fine_tuning.finetune(str(tiny_bert_dir), data, tmp_path / "stopped", replace(cfg, epochs=2),
                                   device="cpu", progress=lambda *a: steps.append(1), stop=lambda: len(steps) >= 2)
    assert len(steps) == 2 and stopped.epoch == 0
    assert all(p.dtype == torch.float32 for p in holder["model"].parameters())
