"""The one training loop of both of BERT's stages: epochs of seeded batches, AdamW with linear
warm-up and decay, gradient clipping, loss scaling on a GPU, a checkpoint after every epoch, a
progress callback and a stop flag. What is trained and how it is scored is the ``Objective``'s:
masked-LM pretraining (``training.recipe``) or a downstream task (``training.fine_tuning``).

Per epoch ``e`` one generator, seeded ``seed * 1000 + e``, draws the order of the rows and then
whatever the objective draws for each batch (BERT's masks), in step order: a resumed run draws
the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from bertscope.training.checkpoint import RunState, save_checkpoint
from bertscope.training.frozen_weights import frozen_in
from bertscope.training.processes import Processes
from bertscope.training.steps import autocast_dtype


class Objective(Protocol):
    """What one stage trains on and how it is scored."""

    def __len__(self) -> int:  # training rows
        ...

    def order(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        """This epoch's order of the training rows ([rows] int64), drawn from ``generator``."""

    def batch(self, idx: torch.Tensor, generator: torch.Generator) -> Any:
        """The training batch of rows ``idx`` ([batch] int64), ready for ``accumulate``."""

    def tokens(self, batch: Any) -> int:
        """Non-padding tokens in the batch (for tokens/s)."""

    def accumulate(self, runner: Any, batch: Any, micro: int, group: Processes, context: Any,
                   scaler: Any) -> dict[str, torch.Tensor]:
        """Backward passes over this process's share of the batch in slices of ``micro`` rows;
        the batch's losses ("loss" first, then any other, e.g. "pair_loss"), summed over processes,
        as 0-dim tensors left on the device (reading one waits for the GPU)."""

    def evaluate(self, model: Any, rows: int, group: Processes) -> dict:
        """Held-out figures (each process scores its share)."""


def adamw(params: dict[str, torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on biases and LayerNorms), as BERT's. On a
    GPU the fused kernel (one launch a step, as Trainer's default ``adamw_torch_fused``): the many
    small tensors of a LoRA run made the per-tensor launches a host cost every step."""
    decay = [p for p in params.values() if p.ndim >= 2]
    no_decay = [p for p in params.values() if p.ndim < 2]
    on_gpu = bool(params) and all(p.device.type == "cuda" for p in params.values())
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, fused=on_gpu or None)


def lr_at(step: int, total: int, lr: float, warmup: float) -> float:
    """Linear warm-up over ``warmup`` of the steps, then linear decay to 0."""
    warm = max(1, int(total * warmup))
    if step < warm:
        return lr * (step + 1) / warm
    return lr * max(0.0, (total - step) / max(1, total - warm))


def run_epochs(model: Any, runner: Any, params: dict[str, torch.nn.Parameter], optimizer: torch.optim.Optimizer,
               objective: Objective, cfg: Any, out: Path, state: RunState, workers: Processes, micro: int,
               eval_rows: int, before: dict, context: Any, scaler: Any,
               progress: Callable[[int, int, dict], None] | None = None,
               stop: Callable[[], bool] | None = None) -> bool:
    """Train from ``state`` to ``cfg.epochs`` (``cfg``: epochs, batch_size, lr, warmup, seed),
    updating ``state``; True when every epoch ran, False when ``stop()`` ended it early (the
    last finished epoch's checkpoint is kept). ``progress(step, total, info)`` after each step:
    ``info``'s losses are 0-dim tensors on the training device, so a caller that reads one
    (``float``) waits for the GPU then, and one that does not lets the host run ahead; the loop itself
    reads them once an epoch (Trainer likewise reads its loss only when it logs)."""
    steps_per_epoch = -(-len(objective) // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    half = autocast_dtype(next(model.parameters()).device)  # what autocast casts to; None on the CPU
    model.train()
    for epoch in range(state.epoch, cfg.epochs):
        generator = torch.Generator().manual_seed(cfg.seed * 1_000 + epoch)  # order and draws of this epoch
        order = objective.order(generator, cfg.batch_size)
        if workers.world > 1:  # dropout: each process its own masks, the same ones again on a resumed run
            torch.manual_seed(cfg.seed * 1_000_003 + epoch * 1_009 + workers.rank)
        started, losses, tokens = time.perf_counter(), {}, 0
        with frozen_in(model, half):  # a LoRA run's frozen weights cast once an epoch, not every pass
            for s in range(steps_per_epoch):
                if stop is not None and stop():
                    return False
                idx = order[s * cfg.batch_size:(s + 1) * cfg.batch_size]
                batch = objective.batch(idx, generator)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(state.step, total, cfg.lr, cfg.warmup)
                optimizer.zero_grad(set_to_none=True)
                step_losses = objective.accumulate(runner, batch, micro, workers, context, scaler)
                if scaler is not None:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
                    optimizer.step()
                state.step += 1
                for key, value in step_losses.items():
                    losses.setdefault(key, []).append(value)
                tokens += objective.tokens(batch)
                if progress is not None and workers.main:
                    progress(state.step, total, {"epoch": epoch + 1, **step_losses})
        means = {k: float(torch.stack(v).mean()) for k, v in losses.items()}  # waits for the epoch's last step
        seconds = time.perf_counter() - started
        held = objective.evaluate(model, eval_rows, workers)
        model.train()
        state.epoch = epoch + 1
        state.history.append({"epoch": epoch + 1, "train_loss": means.pop("loss"), "held_out": held,
                              **{f"train_{k}": v for k, v in means.items()},
                              "seconds": seconds, "tokens_per_s": tokens / seconds,
                              **({"before": before} if epoch == 0 else {})})
        if workers.main:  # the others wait: a checkpoint is whole before anyone goes on
            save_checkpoint(out / "checkpoint", model, optimizer, state, cfg)
        workers.barrier()
    return True
