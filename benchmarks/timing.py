"""What every benchmark shares: --model/--device/--dtype, synchronised interleaved timing,
a bare Hugging Face baseline on the model's own device, and random full-size models.

Figures only: nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch


def add_model_args(parser: argparse.ArgumentParser, model: str = "bundled") -> None:
    parser.add_argument("--model", default=model,
                        help="preset, hub id, folder, or random:CONFIG (e.g. random:bert-base-uncased)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="auto", help="auto (float32), float16 or bfloat16 (GPU only)")


def random_model_dir(config: str, heads: str = "pretraining") -> str:
    """A random model of ``config``'s shapes, built once into the user cache and reused."""
    from bertscope.core.random_models import save_random_model
    from bertscope.runtime.user_cache import user_cache_dir

    folder = user_cache_dir() / "random-models" / f"{config}-{heads}"
    if not (folder / "config.json").is_file():
        tmp = folder.with_name(folder.name + ".tmp")
        save_random_model(config, tmp, heads=heads)
        tmp.rename(folder)
    return str(folder)


def load(args: argparse.Namespace, heads: str = "pretraining"):
    from bertscope import load_model

    name = args.model
    if name.startswith("random:"):
        name = random_model_dir(name.removeprefix("random:"), heads)
    return load_model(name, device=args.device, dtype=args.dtype)


def synchronize(device: torch.device | str) -> None:
    """Wait for queued GPU work, so a timer measures it (a no-op on the CPU)."""
    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()


def interleaved(functions: dict[str, Callable[[], object]], repeats: int,
                device: torch.device | str = "cpu") -> dict[str, list[float]]:
    """Run each function once to warm up, then ``repeats`` rounds in turn (drift hits all alike),
    synchronising ``device`` around every timed call. Returns seconds per call for each name."""
    for fn in functions.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            synchronize(device)
            start = time.perf_counter()
            fn()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return times


def bare_forward(lm, texts: list[str], heads: bool = False, **outputs: Any) -> Any:
    """The baseline: tokenise, move to the model's device, one forward (no BertScope code).
    Without ``heads`` it runs the encoder alone (``base_model``), as a careful caller who
    needs no logits would, and as our passes without logits do."""
    enc = lm.tokenizer(texts, padding=True, truncation=True, max_length=lm.max_length, return_tensors="pt")
    enc = {k: v.to(lm.device) for k, v in enc.items()}
    with torch.inference_mode():
        return (lm.model if heads else lm.model.base_model)(**enc, **outputs)


def describe(lm) -> str:
    name = torch.cuda.get_device_name(lm.device) if lm.device.type == "cuda" else str(lm.device)
    return (f"model {Path(lm.name).name}: {lm.num_layers} layers x {lm.num_heads} heads, {lm.hidden_size} wide, "
            f"device {name}, dtype {str(lm.dtype).removeprefix('torch.')}, torch threads {torch.get_num_threads()}")


@contextlib.contextmanager
def forced_kernel(lm, kernel: str) -> Iterator[None]:
    """Passes without attention weights use ``kernel`` ("eager", "sdpa") while inside: the
    benchmark's own model only (LoadedModel is frozen; the app never does this)."""
    fast = lm.fast_attention
    object.__setattr__(lm, "fast_attention", kernel)
    try:
        yield
    finally:
        object.__setattr__(lm, "fast_attention", fast)
