"""Moving inputs to the model's device: a tensor already off the host is never pinned (pinning is for host
memory). On a GPU machine, inputs already on ``cuda:0`` met a model that reports ``cuda`` and were pinned:
an error on every task path, seen on an H100. Here the copy itself is recorded instead of made, so the
test needs no GPU."""

import torch

from bertscope.runtime.devices import to_device


def test_a_cpu_tensor_stays_itself_on_the_cpu():
    t = torch.arange(3)
    assert to_device(t, torch.device("cpu")) is t


def test_a_tensor_already_on_an_accelerator_is_moved_without_pinning(monkeypatch):
    moves = []

    def refuse_to_pin(self):
        raise RuntimeError("cannot pin a tensor that is not on the host")

    monkeypatch.setattr(torch.Tensor, "pin_memory", refuse_to_pin)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *args, **kwargs: moves.append(args) or self)
    on_gpu = torch.empty(3, device="meta")  # stands for a tensor on cuda:0
    assert to_device(on_gpu, torch.device("cuda")) is on_gpu
    assert moves == [(torch.device("cuda"),)]
