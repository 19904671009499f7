"""What a finished run leaves in its folder: ``model/`` (LoRA merged), ``adapter/`` (the delta alone),
``metrics.json`` and ``curves.png``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bertscope.runtime.atomic import write_text, writing_folder
from bertscope.runtime.hf import quiet_transformers
from bertscope.training.checkpoint import RunState
from bertscope.training.config import RecipeConfig
from bertscope.training.model import inner_name


def export_run(model: Any, tokenizer: Any, out: Path, cfg: Any, model_name: str,
               adapter_files: dict[str, str] | None = None) -> None:
    """``model/`` (standard folder, LoRA merged) and, for LoRA, ``adapter/`` (the delta: the
    adapter, the weights trained in full beside it, and ``adapter_files`` by name)."""
    from safetensors.torch import save_file

    if cfg.lora_rank:
        model.peft_config["default"].base_model_name_or_path = model_name  # the name, not a local path
        with writing_folder(out / "adapter") as tmp:
            # the embeddings are frozen (never resized), so peft has no vocabulary to compare with the base's:
            # without save_embedding_layers=False it looks the base's name up on the hub, offline or not
            model.save_pretrained(tmp, save_embedding_layers=False)  # adapter_config.json + adapter_model.safetensors
            extras = {inner_name(n): p.detach().cpu().contiguous() for n, p in model.named_parameters()
                      if p.requires_grad and "lora_" not in n}
            save_file(extras, str(tmp / "extras.safetensors"))
            for name, text in (adapter_files or {}).items():
                (tmp / name).write_text(text, encoding="utf-8")
        merged = model.merge_and_unload()
    else:
        merged = model
    with writing_folder(out / "model") as tmp, quiet_transformers():  # no progress bar of shards on a run's output
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def write_metrics(out: Path, model_name: str, cfg: RecipeConfig, state: RunState, n_train: int, n_held: int,
                   n_trainable: int, after: list[dict], device: torch.device, memory: dict) -> None:
    metrics = {
        "model": model_name, "config": asdict(cfg), "train_chunks": n_train, "held_out_chunks": n_held,
        "trainable_parameters": n_trainable, "memory": memory,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "before": state.history[0]["before"] if state.history else None,
        "epochs": [{k: v for k, v in h.items() if k != "before"} for h in state.history],
        "after": {"held_out": state.history[-1]["held_out"] if state.history else None, "cloze": after},
    }
    write_text(out / "metrics.json", json.dumps(metrics, indent=1))
    plot_curves(metrics, out / "curves.png")


def two_panels(path: Path, epochs: list[int], left: dict[str, tuple[list[float], str]],
               right: dict[str, tuple[list[float], str]], right_title: str, right_label: str) -> None:
    """A run's curves per epoch: losses on the left, held-out figures (0 to 1) on the right; each
    series is (values, matplotlib style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for axis, series in zip(axes, (left, right)):
        for name, (values, style) in series.items():
            axis.plot(epochs, values, style, label=name)
    axes[0].set(xlabel="epoch", ylabel="loss (nats)", title="Loss")
    axes[1].set(xlabel="epoch", ylabel=right_label, title=right_title, ylim=(0, 1))
    for axis in axes:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(metrics: dict, path: Path) -> None:
    epochs = [e["epoch"] for e in metrics["epochs"]]
    held = [e["held_out"] for e in metrics["epochs"]]
    task = metrics["config"].get("pair_task", "none")
    paired = task != "none" and all("pair_accuracy" in h for h in held)
    mlm = "masked-LM " if paired else ""
    left = {f"{mlm}train": ([e["train_loss"] for e in metrics["epochs"]], "o-"),
            f"{mlm}held out": ([h["loss"] for h in held], "s-")}
    right = {"top-1 (masked positions)": ([h["top1"] for h in held], "o-"),
             "top-5 (masked positions)": ([h["top5"] for h in held], "s-")}
    if paired:
        left[f"{task.upper()} held out"] = ([h["pair_loss"] for h in held], "^--")
        right[f"{task.upper()} accuracy (pairs; chance 0.5)"] = ([h["pair_accuracy"] for h in held], "^--")
    two_panels(path, epochs, left, right, "Held-out accuracy", "held-out accuracy")
