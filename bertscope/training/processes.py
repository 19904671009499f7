"""The processes one run of the recipe trains on: one, or N data-parallel ones under Hugging Face
Accelerate (``accelerate launch -m bertscope pretrain …``, or ``pretrain --processes N``, which
starts that launch; DDP over gloo on CPUs, NCCL on GPUs).

    >>> group = Processes.join("auto")      # outside a launch: the one process of a run
    >>> group.rank, group.world
    (0, 1)

How the work is split, so that N processes end with the weights of one (to float rounding,
without dropout): every process draws the same global order and the same corruption of each
global batch (the generators are seeded per epoch, as on one process), then keeps its own
share of the batch's rows (``share``). Its loss is its rows' summed losses over the *whole*
batch's chosen positions, times N because DDP averages gradients over processes: the average
is then the whole batch's gradient. Micro-batching by bytes holds per process (each has its
share of the machine's memory); only the last micro-batch of a step all-reduces (``no_sync``).
Held-out scoring is sharded the same way and its sums gathered (``sum``). Only the main process
writes the run folder; the others wait for it (``barrier``). A process that dies ends the run:
torchrun's agent stops the others, and a collective that waits longer than ``BERTSCOPE_DIST_TIMEOUT``
seconds (default 600) fails rather than hangs.

Accelerate is imported only when a launch made more than one process (``WORLD_SIZE`` > 1), so a
single-process run and the app never load it.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.devices import resolve_device

DEFAULT_TIMEOUT_S = 600


def launched_world() -> int:
    """Processes the launcher (torchrun / accelerate launch) started; 1 outside a launch."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def collective_timeout() -> timedelta:
    value = os.environ.get("BERTSCOPE_DIST_TIMEOUT", "").strip()
    try:
        seconds = float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise BertScopeError(f"BERTSCOPE_DIST_TIMEOUT must be a positive number of seconds, not {value!r}.")
    return timedelta(seconds=seconds)


@dataclass
class Processes:
    """This process's place in the run: rank of world, its device, and the collectives."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    accelerator: Any = None  # accelerate.Accelerator when world > 1

    @classmethod
    def join(cls, device: str = "auto") -> Processes:
        """One process (no launch), or this process's place among those a launch started."""
        world = launched_world()
        if world == 1:
            return cls(0, 1, resolve_device(device))
        from accelerate import Accelerator, InitProcessGroupKwargs
        from accelerate.utils import DistributedDataParallelKwargs

        on_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
        if not on_cpu and not torch.cuda.is_available():
            raise BertScopeError(f"--device {device} with several processes needs CUDA GPUs; use cpu or auto.")
        accelerator = Accelerator(cpu=on_cpu, mixed_precision="no", kwargs_handlers=[
            InitProcessGroupKwargs(timeout=collective_timeout()),
            DistributedDataParallelKwargs(find_unused_parameters=False)])
        return cls(accelerator.process_index, accelerator.num_processes, accelerator.device, accelerator)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, rows: int) -> slice:
        """This process's rows of a batch of ``rows`` (as even as can be; the first ones get one
        more). May be empty when the batch has fewer rows than processes."""
        base, extra = divmod(rows, self.world)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (self.rank < extra))

    def wrap(self, model: Any) -> Any:
        """The model that trains: DDP-wrapped across processes (gradients all-reduced in buckets
        during backward, parameters broadcast from the main process), or the model itself."""
        return model if self.accelerator is None else self.accelerator.prepare_model(model)

    def no_sync(self, model: Any, last: bool):
        """Gradients kept local until the step's last micro-batch."""
        return nullcontext() if self.accelerator is None or last else self.accelerator.no_sync(model)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over processes (float64 sums of held-out figures, a step's loss)."""
        if self.accelerator is None:
            return values
        return self.accelerator.reduce(values.to(self.device), reduction="sum").cpu()

    def barrier(self) -> None:
        if self.accelerator is None:
            return
        if self.device.type == "cpu":  # gloo on the CPU: accelerate's barrier names a CUDA device when one
            import torch.distributed as dist  # is visible (cuda:1 on a one-GPU machine: no such device)

            dist.barrier()
        else:
            self.accelerator.wait_for_everyone()

    def memory_share(self, budget: int) -> int:
        """A byte budget split among the processes of one machine (a GPU is each process's own)."""
        if self.device.type == "cuda":
            return budget
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", self.world)))
        return max(1, budget // local)

    def end(self) -> None:
        if self.accelerator is not None:
            self.accelerator.end_training()  # destroys the process group


def unwrap(model: Any) -> Any:
    """The model inside a DDP wrapper (its heads, hooks and saving need the model itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
