"""Everything needed to go on after an epoch, atomically: trainable weights, AdamW moments, RNG states
(safetensors + JSON, never pickle).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import recover, writing_folder
from bertscope.training.model import trainable


@dataclass
class RunState:
    epoch: int = 0  # epochs finished
    step: int = 0  # optimiser steps taken
    history: list[dict] = field(default_factory=list)  # one entry per finished epoch


def save_checkpoint(folder: Path, model: Any, optimizer: torch.optim.Optimizer, state: RunState,
                     cfg: Any) -> None:
    """Everything needed to go on, atomically: trainable weights, AdamW moments, RNG states."""
    from safetensors.torch import save_file

    params = trainable(model)
    names = list(params)
    tensors = {f"param.{n}": p.detach().cpu().contiguous() for n, p in params.items()}
    index = {id(p): i for i, p in enumerate(params.values())}
    for p, moments in optimizer.state.items():
        for key, value in moments.items():
            tensors[f"opt.{index[id(p)]}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    try:
        with writing_folder(folder) as tmp:
            save_file(tensors, str(tmp / "state.safetensors"))
            (tmp / "state.json").write_text(json.dumps({"epoch": state.epoch, "step": state.step,
                                                        "history": state.history, "config": asdict(cfg),
                                                        "params": names}, indent=1))
    except OSError as err:  # a full disk: the previous checkpoint stays whole, and a rerun resumes from it
        kept = f"epoch {state.epoch - 1}'s checkpoint is kept" if state.epoch > 1 else "nothing was kept"
        raise BertScopeError(f"Could not write the checkpoint of epoch {state.epoch} in {folder} "
                             f"({err.strerror or err}): {kept}; free space and run the same command again.") from None


def load_checkpoint(folder: Path, model: Any, optimizer: torch.optim.Optimizer, cfg: Any) -> RunState | None:
    """The run's last checkpoint loaded into ``model`` and ``optimizer`` (None when there is none). A kill between
    a checkpoint's two renames left it as ``{folder}.old-…``: it is put back and read (``atomic.recover``)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    recover(folder)
    if not (folder / "state.json").is_file():
        return None
    try:
        meta = json.loads((folder / "state.json").read_text())
        tensors = load_file(str(folder / "state.safetensors"))
    except (OSError, ValueError, SafetensorError) as err:
        raise BertScopeError(f"The checkpoint in {folder} cannot be read ({str(err).splitlines()[0]}): remove it to "
                             "start the run again.") from None
    # a setting added after the run was saved (pair tasks, a held-out budget, length groups) takes its
    # default, which is what runs did before it existed
    saved = {**asdict(type(cfg)()), **meta["config"]}
    if {k: v for k, v in saved.items() if k != "epochs"} != {k: v for k, v in asdict(cfg).items() if k != "epochs"}:
        raise BertScopeError(f"{folder.parent} holds a run with other settings: choose another output folder.")
    params = trainable(model)
    if list(params) != meta["params"]:
        raise BertScopeError(f"The checkpoint in {folder} does not fit this model.")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[f"param.{n}"])
    values = list(params.values())
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, i, name = key.split(".", 2)
            optimizer.state[values[int(i)]][name] = value.to(values[int(i)].device) if name != "step" else value
    torch.set_rng_state(tensors["rng.cpu"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return RunState(meta["epoch"], meta["step"], meta["history"])
