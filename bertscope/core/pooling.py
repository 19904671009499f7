"""Hidden states pooled where they are: the weighted sums that make one vector per word (or sentence)
run on the model's device for every layer at once, and only the pooled vectors cross to the host,
asynchronously, one batch behind (the shift view, probes, alignment, corpus search).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.forward import device_batches
from bertscope.core.inspection import BatchInspection
from bertscope.core.models import LoadedModel
from bertscope.runtime.devices import to_device


@dataclass(frozen=True)
class PoolingPlan:
    """Which token rows make each pooled vector: entry j adds ``weight[j]`` x the hidden state
    of (``row[j]``, ``token[j]``) to vector ``example[j]``. Mean pooling of a word's pieces is
    one entry per piece with weight 1/pieces; first-piece or [CLS] pooling is one entry."""

    n_examples: int
    example: np.ndarray  # [entry] int
    row: np.ndarray  # [entry] int, row in the batch
    token: np.ndarray  # [entry] int, position in that row
    weight: np.ndarray  # [entry] float32

    @staticmethod
    def from_groups(groups: Sequence[tuple[int, Sequence[int], str]]) -> PoolingPlan:
        """(row, token positions, "mean" | "first") per example, in example order."""
        chosen = [list(p)[:1] if how in ("first", "cls") else list(p) for _, p, how in groups]
        counts = np.fromiter(map(len, chosen), np.int64, len(chosen))  # [example] entries of each
        token = np.fromiter(itertools.chain.from_iterable(chosen), np.int64, int(counts.sum()))  # [entry]
        rows = np.fromiter((b for b, _, _ in groups), np.int64, len(groups))  # [example]
        weight = (1.0 / np.maximum(counts, 1)).astype(np.float32)  # [example]
        return PoolingPlan(len(groups), np.repeat(np.arange(len(groups), dtype=np.int64), counts),
                           np.repeat(rows, counts), token, np.repeat(weight, counts))


POOL_BYTES = 64 * 2**20  # float32 hidden states of the layers pooled in one product


def pool_layers(hidden_states: Sequence[torch.Tensor], plan: PoolingPlan) -> torch.Tensor:
    """[example, layer + 1, dim] float32 on the states' device: ``plan``'s weighted sums for every
    layer at once. The plan is a sparse [example, batch x token] matrix (one row per vector, its
    weights on that vector's pieces), and each group of layers is one product with the stacked
    [batch x token, layers x dim] states: a handful of kernels a batch instead of four per layer,
    which is what a GPU is waiting on when batches are short."""
    b, t, d = hidden_states[0].shape  # each [batch, token, dim]
    device = hidden_states[0].device
    if device.type not in ("cpu", "cuda"):  # no sparse products there (mps): one gather and sum per layer
        flat = to_device(torch.from_numpy(plan.row * t + plan.token), device)  # [entry]
        example = to_device(torch.from_numpy(plan.example), device)  # [entry]
        weight = to_device(torch.from_numpy(plan.weight), device)[:, None]  # [entry, 1]
        return torch.stack([torch.zeros(plan.n_examples, d, device=device).index_add_(
            0, example, h.reshape(-1, d)[flat].float() * weight) for h in hidden_states], dim=1)
    if len(plan.example) > 1 and (np.diff(plan.example) < 0).any():  # rows of a CSR matrix come in order
        order = np.argsort(plan.example, kind="stable")
        plan = PoolingPlan(plan.n_examples, plan.example[order], plan.row[order], plan.token[order], plan.weight[order])
    counts = np.bincount(plan.example, minlength=plan.n_examples)  # [example] entries of each
    crow = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # [example + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        weights = torch.sparse_csr_tensor(  # [example, batch x token]
            to_device(torch.from_numpy(crow), device), to_device(torch.from_numpy(plan.row * t + plan.token), device),
            to_device(torch.from_numpy(plan.weight), device), size=(plan.n_examples, b * t), check_invariants=False)
        per = max(1, POOL_BYTES // max(1, b * t * d * 4))
        parts = []
        for start in range(0, len(hidden_states), per):
            group = torch.stack(list(hidden_states[start:start + per]), dim=2).float()  # [batch, token, layers, dim]
            parts.append((weights @ group.reshape(b * t, -1)).reshape(plan.n_examples, -1, d))  # [example, layers, dim]
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def to_host_async(t: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """Start copying ``t`` to the CPU; returns (host tensor, event to wait on before reading
    it, or None when the copy is already done). On a GPU the copy goes to pinned memory and
    the host does not wait, so it can prepare the next batch meanwhile."""
    if t.device.type != "cuda":
        return t.cpu(), None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    done = cast(Callable[[], torch.cuda.Event], torch.cuda.Event)()  # torch leaves Event() unannotated
    done.record()
    return host, done


def pooled_hidden_states(
    lm: LoadedModel,
    texts: Sequence[str],
    plan_of: Callable[[BatchInspection], PoolingPlan],
    batch_size: int = 32,
    sort_by_length: bool = True,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
    plan: Sequence[Sequence[int]] | None = None,
) -> Iterator[tuple[BatchInspection, np.ndarray]]:
    """Hidden states pooled where they are: for each batch, ``plan_of(batch)`` says which token
    rows make each vector; the weighted sums run on the model's device (float32), and only
    the pooled [example, layer + 1, dim] array crosses to the CPU, one batch behind, so the
    next batch is tokenised and queued while the device works. The pass uses the fast
    attention kernel (no weights are returned) and the encoder alone."""
    pending = None  # (batch, host tensor, event) whose copy is under way
    for batch, out in device_batches(lm, texts, None, batch_size, with_attentions=False, with_hidden_states=True,
                                     max_batch_bytes=max_batch_bytes, sort_by_length=sort_by_length, plan=plan):
        pooling = plan_of(batch)  # this batch's plan; ``plan`` (the batches) went to device_batches
        if pooling.n_examples == 0:
            current = (batch, torch.zeros(0, lm.num_layers + 1, lm.hidden_size), None)
        else:
            with torch.inference_mode():
                current = (batch, *to_host_async(pool_layers(out.hidden_states, pooling)))  # [example, layer + 1, dim]
        del out
        if pending is not None:
            yield _collect(pending)
        pending = current
    if pending is not None:
        yield _collect(pending)


def _collect(pending: tuple[BatchInspection, torch.Tensor, Any]) -> tuple[BatchInspection, np.ndarray]:
    batch, host, done = pending
    if done is not None:
        done.synchronize()
    return batch, host.numpy().copy()  # a plain array: the pinned buffer goes back at once
