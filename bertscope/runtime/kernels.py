"""The attention kernel of each forward pass: eager when attention weights are needed, the
fastest available (SDPA) when only hidden states or logits are.

transformers 5 reads ``config._attn_implementation`` at every forward and can change it on a
loaded model (``set_attn_implementation``), so no reload is needed. The model is shared by
all sessions, so the switch is guarded: passes that want the same kernel run together; a pass
that wants the other kernel waits until they are done, switches, and runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

EAGER = "eager"


def planless_attention() -> None:
    """Turn off cuDNN's SDPA backend for this process (flash, memory-efficient and math stay).

    cuDNN's attention builds an execution plan on the host for every new input shape: about 3 ms a
    layer forward and again backward on an H100 (torch 2.11). Batches here are as wide as their
    longest row, so nearly every batch is a new shape: that planning was a third of a LoRA
    fine-tuning step's host time (0.33x Trainer's tokens/s; 0.97x without it). A process-wide
    switch, set when a model goes to a GPU, because the per-call ``sdpa_kernel`` context sets the
    same global flags and would race between the sessions that share a model."""
    import torch

    if torch.cuda.is_available():
        torch.backends.cuda.enable_cudnn_sdp(False)


def fastest_kernel(model: Any) -> str:
    """"sdpa" where this model class can switch to it on the fly, else "eager"."""
    can_switch = getattr(model, "_can_set_attn_implementation", lambda: False)
    if not getattr(model, "_supports_sdpa", False) or not can_switch():
        return EAGER
    return "sdpa"


class AttentionKernels:
    """Per-model switch between the eager kernel and the fast one (see the module docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._current = EAGER  # models are loaded eager
        self._active = 0

    @property
    def current(self) -> str:
        return self._current

    @contextlib.contextmanager
    def use(self, model: Any, want: str) -> Iterator[None]:
        with self._changed:
            while self._active and self._current != want:
                self._changed.wait()
            if self._current != want:
                model.set_attn_implementation(want)
                self._current = want
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                self._changed.notify_all()
