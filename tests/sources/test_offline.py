"""Offline means no attempt, not a failed one: nothing BertScope does asks the network unasked.

Each test runs with the Hugging Face offline switches *off* (as a user who simply has no network),
and fails on any DNS lookup or connection attempt, with the stack that made it.
"""

from __future__ import annotations

import socket
import traceback

import pytest
import torch


@pytest.fixture
def no_network(monkeypatch):
    """Record and refuse every DNS lookup and connection; the test fails if there was any."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    attempts: list[str] = []

    def refuse(what):
        def blocked(*args, **kwargs):
            attempts.append(f"{what}{args[:2]}\n" + "".join(traceback.format_stack(limit=8)[:-1]))
            raise OSError(f"blocked by the test: {what}")
        return blocked

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    yield attempts
    assert not attempts, "tried the network:\n" + "\n".join(attempts[:2])


def test_building_bundled_mlm_from_its_delta_asks_nothing(no_network, tmp_path):
    from bertscope.sources.delta import apply_delta
    from bertscope.sources.minilm import bundled_model_dir
    from bertscope.sources.minilm_mlm import DELTA

    folder = apply_delta(str(bundled_model_dir()), DELTA, tmp_path / "bundled-mlm")
    assert (folder / "model.safetensors").is_file()


def test_saving_a_lora_run_of_a_named_model_asks_nothing(no_network, tmp_path, tiny_mlm_dir):
    """peft checks a base named like a hub id ("bundled-mlm") on the hub when it saves an adapter."""
    from bertscope.training.config import RecipeConfig
    from bertscope.training.export import export_run
    from bertscope.training.model import build_model

    cfg = RecipeConfig(lora_rank=4)
    torch.manual_seed(0)
    model = build_model(str(tiny_mlm_dir), True, cfg)
    from transformers import AutoTokenizer

    export_run(model, AutoTokenizer.from_pretrained(tiny_mlm_dir), tmp_path, cfg, "bundled-mlm")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "model" / "config.json").is_file()
