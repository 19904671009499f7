"""A LoRA run's frozen weights held in the autocast dtype for a training epoch on a GPU.

Autocast casts a float32 weight to bf16 (fp16) for every matmul, and keeps the cast for the rest
of the pass only for weights that require grad: a LoRA run's frozen base weights (every
``nn.Linear`` of the encoder) were cast again on every forward, a cast kernel per weight and bias
per pass, host time a step in runs of short rows. Held in the autocast dtype for the epoch's steps,
the same values reach the same matmuls (autocast's cast of the float32 tensor is what is held), so
the loss and every gradient are unchanged; the float32 tensors come back on exit, before evaluation,
checkpoints and export, which see them untouched. The copies cost half the frozen matrices' bytes
on the device while the epoch runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def frozen_in(model: torch.nn.Module, dtype: torch.dtype | None) -> Iterator[int]:
    """Within the block, each frozen float32 weight and bias of an ``nn.Linear`` in ``model`` is held
    in ``dtype`` (None: nothing changes); yields how many tensors were swapped. A tensor that more than
    one module shares (a tied decoder) is left as it is: some other use may not run under autocast."""
    if dtype is None:
        yield 0
        return
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    swapped: list[tuple[torch.Tensor, torch.Tensor]] = []  # (parameter, its float32 data)
    try:
        for module in model.modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            for p in (module.weight, module.bias):
                if p is None or p.requires_grad or p.dtype != torch.float32 or uses[id(p)] > 1:
                    continue
                swapped.append((p, p.data))
                p.data = p.data.to(dtype)
        yield len(swapped)
    finally:
        for p, data in swapped:
            p.data = data
