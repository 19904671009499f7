"""What a training step leaves on the device: its losses stay tensors until someone shows them (a read
waits for the GPU), the job reads a run's new losses in one copy, and cuDNN's per-shape attention
planning is switched off when a model goes to a GPU."""

from __future__ import annotations

import contextlib

import pytest
import torch

from bertscope.training.job import TrainingJob, _numbers


def test_a_steps_losses_stay_tensors_and_the_loop_reads_them_once_an_epoch(tiny_bert, monkeypatch, tmp_path):
    from bertscope.training import loop
    from bertscope.training.processes import Processes
    from bertscope.training.task_data import Tagged
    from bertscope.training.task_objective import TaskObjective, encode

    side = Tagged("t", [["the", "dog", "sat"], ["a", "horse"]] * 4, [["DET", "NOUN", "VERB"], ["DET", "NOUN"]] * 4)
    labels = ["DET", "NOUN", "VERB"]
    enc = encode(tiny_bert.tokenizer, "tag", side, labels, 16)
    objective = TaskObjective("tag", labels, enc, enc, tiny_bert.tokenizer.pad_token_id, torch.device("cpu"))
    import copy

    model = copy.deepcopy(tiny_bert.model)  # trained below: never the session's shared model
    batch = objective.batch(torch.arange(4), torch.Generator())
    runner = lambda **feed: type("Out", (), {"logits": torch.zeros(*feed["input_ids"].shape, 3,  # noqa: E731
                                                                    requires_grad=True)})()
    losses = objective.accumulate(runner, batch, 2, Processes(), contextlib.nullcontext(), None)
    assert isinstance(losses["loss"], torch.Tensor) and losses["loss"].ndim == 0
    assert float(losses["loss"]) == pytest.approx(float(torch.log(torch.tensor(3.0))), rel=1e-6)

    reads = []
    real_stack = torch.stack

    def counting_stack(tensors, *args, **kwargs):  # the loop's one read an epoch is a stack of the steps' losses
        reads.append(len(tensors))
        return real_stack(tensors, *args, **kwargs)

    seen = []
    monkeypatch.setattr(loop.torch, "stack", counting_stack)

    class Cfg:
        epochs, batch_size, lr, warmup, seed = 1, 4, 1e-3, 0.0, 0

    params = {n: p for n, p in model.named_parameters()}
    for p in params.values():
        p.requires_grad_(True)
    objective.evaluate = lambda *a: {}
    state = loop.RunState()
    monkeypatch.setattr(loop, "save_checkpoint", lambda *a, **k: None)
    loop.run_epochs(model, runner, params, loop.adamw(params, 1e-3, 0.0), objective, Cfg(), tmp_path, state,
                    Processes(), 2, 4, {}, contextlib.nullcontext(), None,
                    progress=lambda step, total, info: seen.append(info["loss"]))
    assert len(seen) == 2 and all(isinstance(x, torch.Tensor) for x in seen)  # handed on unread
    assert reads == [2]  # one read of the epoch's two steps
    assert state.history[0]["train_loss"] == pytest.approx(float(torch.stack(seen).mean()))


def test_the_job_reads_new_losses_in_one_copy_and_keeps_floats(tmp_path):
    values = [0.5, torch.tensor(1.25, dtype=torch.float64), torch.tensor(2.0)]
    assert _numbers(values) == [0.5, 1.25, 2.0] and all(type(v) is float for v in _numbers(values))
    assert _numbers([0.5]) == [0.5]
    job = TrainingJob("m", out=tmp_path, cfg=None)
    for step, loss in enumerate([torch.tensor(3.0), torch.tensor(2.0)], start=1):
        job._progress(step, 2, {"epoch": 1, "loss": loss})
    snap = job.snapshot()
    assert snap.losses == [3.0, 2.0] and all(type(v) is float for v in snap.losses)


def test_cudnn_attention_is_switched_off_for_gpu_runs(monkeypatch):
    from bertscope.runtime.kernels import planless_attention

    before = torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        planless_attention()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
