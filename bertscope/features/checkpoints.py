"""A dictionary trainer's run so far, on disk after every epoch: the weights (in the dictionary's own format), Adam's
state, the trainer's counters, its settings. Written to a temporary folder and renamed into place, so a checkpoint
is whole or absent: a run killed at any moment goes on from its last epoch and ends with the weights the
uninterrupted run would have (the epochs' shuffles are seeded by the epoch, not by the run).

Used by the SAE trainer (``features.trainer``) and the crosscoder trainer (``features.crosscoder_trainer``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import recover, sweep, writing_folder

STATE_FILE = "state.json"
TENSORS_FILE = "optimizer.safetensors"


def adam_tensors(optimizer: torch.optim.Optimizer, names: list[str]) -> dict[str, torch.Tensor]:
    """Adam's moments and step of each parameter (in ``names``' order), keyed ``{name}.{what}``."""
    out = {}
    for name, param in zip(names, optimizer.param_groups[0]["params"]):
        for key, value in optimizer.state.get(param, {}).items():
            out[f"{name}.{key}"] = torch.as_tensor(value).detach().cpu().reshape(-1) if key == "step" else \
                value.detach().cpu().contiguous()
    return out


def load_adam(optimizer: torch.optim.Optimizer, names: list[str], tensors: dict[str, torch.Tensor]) -> None:
    for name, param in zip(names, optimizer.param_groups[0]["params"]):
        state = {key.split(".", 1)[1]: value for key, value in tensors.items() if key.split(".", 1)[0] == name}
        if state:
            step = state.pop("step").reshape(())  # on the CPU, as torch keeps it (no device sync a step)
            optimizer.state[param] = {"step": step, **{k: v.to(param.device) for k, v in state.items()}}


def save_checkpoint(folder: Path, write_weights: Callable[[Path], Any], optimizer: torch.optim.Optimizer,
                    names: list[str], state: Any, counters: dict[str, torch.Tensor], cfg: Any,
                    identity: dict[str, Any]) -> None:
    """The run so far, whole or not at all: ``write_weights(tmp)`` writes the dictionary into a fresh folder,
    ``state`` and ``cfg`` are dataclasses, ``counters`` the trainer's tensors (dead-latent counts), ``identity``
    what the run reads (its models, hook point, width and activation caches: JSON values)."""
    from safetensors.torch import save_file

    with writing_folder(folder) as tmp:
        write_weights(tmp)
        save_file({**adam_tensors(optimizer, names), **{k: v.detach().cpu() for k, v in counters.items()}},
                  str(tmp / TENSORS_FILE))
        (tmp / STATE_FILE).write_text(json.dumps({"state": asdict(state), "config": asdict(cfg),
                                                  "identity": identity}))
    sweep(folder.parent, recursive=False)  # a killed run's leftovers, once this checkpoint is in place
    for stale in folder.parent.glob(f".{folder.name}.*"):  # and those of versions before atomic.writing_folder
        shutil.rmtree(stale, ignore_errors=True)


def read_checkpoint(folder: Path, cfg: Any, optimizer: torch.optim.Optimizer, names: list[str],
                    counters: tuple[str, ...], identity: dict[str, Any]
                    ) -> tuple[dict, dict[str, torch.Tensor], Path] | None:
    """None when ``folder`` holds no checkpoint; else Adam's state loaded into ``optimizer`` and (the saved state as a
    dict, the counters named, the folder the weights are in). One line when it was made with other settings than
    ``cfg``, or on other data than ``identity`` says (another model, layer, corpus or token count: its weights would
    be carried on with the wrong activations). A kill between a checkpoint's two renames leaves the last one as
    ``{folder}.old-…``: it is put back first (``atomic.recover``)."""
    recover(folder)
    if not (folder / STATE_FILE).is_file():
        return None
    try:
        saved = json.loads((folder / STATE_FILE).read_text())
        made = saved["config"], saved["state"], saved.get("identity")
    except (OSError, ValueError, KeyError, TypeError):
        raise BertScopeError(f"{folder} is not a checkpoint this version can read: give another --out, or remove "
                             "it to start again.") from None
    if made[2] != json.loads(json.dumps(identity)):  # compared as JSON gives it back (tuples are lists there)
        raise BertScopeError(f"{folder} holds a run on other data ({made[2]}); give another --out, or remove it "
                             "to start again.")
    later = {f.name: f.default for f in fields(cfg) if f.default is not MISSING}  # settings added since: defaults
    if {**later, **saved["config"]} != asdict(cfg):
        raise BertScopeError(f"{folder} was made with other settings ({saved['config']}); give another --out, or "
                             "the same settings to resume.")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(folder / TENSORS_FILE))
    except (OSError, SafetensorError) as err:
        raise BertScopeError(f"The checkpoint in {folder} cannot be read ({str(err).splitlines()[0]}): remove it to "
                             "start again.") from None
    carried = {name: tensors.pop(name) for name in counters}
    load_adam(optimizer, names, tensors)
    return saved["state"], carried, folder
