"""A run's residual stream as one contribution per sender (``circuits.decomposed``'s docstring says why a
post-LayerNorm stream splits so): carried sub-block by sub-block in one preallocated buffer, the columns it
holds tracked in pass order, and the buffers a run of circuit passes reuses."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch

from bertscope.circuits.norm_transport import transport_
from bertscope.circuits.runs import LayerWeights, RunRecord, SenderMeans
from bertscope.errors import BertScopeError
from bertscope.runtime.host_buffers import empty_host


def mean_record(means: SenderMeans, like: RunRecord, weights: list[LayerWeights]) -> RunRecord:
    """``like`` (a clean run: its σ and stream) with every sender's output replaced by its mean over
    every position of the runs in ``means`` (MIB's mean ablation; the input node's biases stay the clean
    run's), the stream being the sum of those outputs carried with the clean run's σ."""
    if means.embed is None or means.results is None or means.mlp_out is None:
        raise BertScopeError("A mean ablation needs at least one run to average.")
    n = means.positions
    out = RunRecord((means.embed / n).expand_as(like.embed), (means.results / n).expand_as(like.results),
                    (means.mlp_out / n).expand_as(like.mlp_out), like.sigma1, like.sigma2, like.resid_mid,
                    like.resid_post)  # no metric: not a run
    mid, post = streams(out, weights)
    return replace(out, resid_mid=mid, resid_post=post)


class Scratch:
    """Buffers a run of circuit passes reuses (``faithfulness.evaluate``'s sweep). A fresh buffer of a
    few hundred MiB costs the first touch of its pages, about a tenth of a pass at BERT-base size and 512
    tokens; one kept for the sweep costs that once. Held only as long as the caller holds this."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}

    def empty(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised tensor of ``shape``, ``like``'s dtype and device, on the buffer ``name``."""
        size = math.prod(shape)
        have = self.buffers.get(name)
        if have is None or have.numel() < size or have.dtype != like.dtype or have.device != like.device:
            self.buffers.pop(name, None)  # the old one goes before the new one comes
            with torch.inference_mode(False):  # a plain tensor: any later pass may write into it
                have = self.buffers[name] = empty_host(size, like.dtype) if like.device.type == "cpu" else \
                    torch.empty(size, dtype=like.dtype, device=like.device)
        return have[:size].view(shape)


def empty_buffer(scratch: Scratch | None, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor of ``shape`` like ``like``: on ``scratch``'s buffer ``name``, or a fresh one."""
    return like.new_empty(shape) if scratch is None else scratch.empty(name, shape, like)


def carried_of(active: list[bool], first: int, count: int) -> list[int]:
    """Which of the ``count`` senders from ``first`` (pass order) are carried, counted from ``first``."""
    return [i for i in range(count) if active[first + i]]


def chosen_slice(chosen: list[int]) -> slice | list[int]:
    """``chosen`` (ascending indices) as a slice when they run without a gap: a view, not a copy."""
    return slice(chosen[0], chosen[-1] + 1) if chosen and chosen[-1] - chosen[0] == len(chosen) - 1 else chosen


class Columns:
    """Which senders a carried buffer holds as its columns, in pass order: each group of senders a pass
    writes (the input node; a layer's heads; its feed-forward) takes the next columns for those of them that
    are carried (``active``)."""

    def __init__(self, active: list[bool]) -> None:
        self.active = active
        self.next = 0  # the next sender in pass order
        self.n = 0  # columns taken

    def take(self, count: int) -> tuple[slice | list[int], slice] | None:
        """The next ``count`` senders in pass order: (those of them carried, as an index into the group;
        the columns they go to), or None when none of them is."""
        chosen = carried_of(self.active, self.next, count)
        self.next += count
        if not chosen:
            return None
        columns = slice(self.n, self.n + len(chosen))
        self.n += len(chosen)
        return chosen_slice(chosen), columns


class Contributions:
    """One run's residual stream as one contribution per sender, advanced sub-block by sub-block in one
    preallocated buffer: [sender, pos, d_model], or [pos, sender, d_model] with ``position_major`` (the
    layout the circuit pass sums receivers' inputs in: one small product per position). ``active`` (bool
    per sender; None: every one) says which senders to carry: the others' contributions are never read
    alone. Each LayerNorm uses the run's own σ."""

    def __init__(self, record: RunRecord, weights: list[LayerWeights], active: Any = None,
                 position_major: bool = False, scratch: Scratch | None = None) -> None:
        self.record, self.weights, self.position_major = record, weights, position_major
        n_senders = 1 + len(weights) * (record.results.shape[2] + 1)
        self.active = [True] * n_senders if active is None else [bool(a) for a in active]
        self.index = [i for i in range(n_senders) if self.active[i]]  # every sender carried, in pass order
        pos, d = record.embed.shape
        self.buffer = empty_buffer(scratch, "contributions", (pos, len(self.index), d) if position_major else
                             (len(self.index), pos, d), record.embed)
        self.columns = Columns(self.active)
        self._add(record.embed[:, None])  # the input node
        # carries the buffer through a LayerNorm (gamma, this run's σ) in place of ``transport_``, β apart
        self._carry: Callable[[Contributions, torch.Tensor, torch.Tensor], None] | None = None

    @property
    def n(self) -> int:
        """How many carried senders are reached so far."""
        return self.columns.n

    @contextmanager
    def carrying(self, carry: Callable[[Contributions, torch.Tensor, torch.Tensor], None]) -> Iterator[None]:
        """Within: each LayerNorm carries the buffer by ``carry`` (this, γ, this run's σ), β apart."""
        self._carry = carry
        try:
            yield
        finally:
            self._carry = None

    @property
    def comps(self) -> torch.Tensor:
        """The carried senders reached so far (a view of the buffer, in its layout)."""
        return self.buffer[:, : self.n] if self.position_major else self.buffer[: self.n]

    def sender(self, i: int) -> torch.Tensor:
        """[pos, d_model] the ``i``-th carried sender's contribution (a view)."""
        return self.buffer[:, i] if self.position_major else self.buffer[i]

    @property
    def carried(self) -> list[int]:
        return self.index[: self.n]

    def _add(self, new: torch.Tensor) -> None:  # new [pos, sender, d]: the next senders in pass order
        taken = self.columns.take(new.shape[1])
        if taken is not None:
            part, columns = taken
            if self.position_major:
                self.buffer[:, columns] = new[:, part]
            else:
                self.buffer[columns] = new[:, part].transpose(0, 1)

    def _norm(self, norm: tuple[torch.Tensor, torch.Tensor, float], sigma: torch.Tensor, bias: torch.Tensor | None
              ) -> None:
        gamma, beta, _ = norm
        has_input = self.active[0]
        if has_input and bias is not None:
            self.sender(0).add_(bias)
        if self._carry is not None:
            self._carry(self, gamma, sigma)
        else:
            transport_(self.comps, gamma, sigma[:, None] if self.position_major else sigma)
        if has_input:
            self.sender(0).add_(beta)

    def after_attention(self, layer: int) -> None:
        self._add(self.record.results[layer])
        self._norm(self.weights[layer].norm1, self.record.sigma1[layer], self.weights[layer].out_bias)

    def after_mlp(self, layer: int) -> None:
        self._add(self.record.mlp_out[layer][:, None])
        self._norm(self.weights[layer].norm2, self.record.sigma2[layer], None)


def streams(record: RunRecord, weights: list[LayerWeights]) -> tuple[torch.Tensor, torch.Tensor]:
    """(resid_mid, resid_post) [layer, pos, d_model] as the sum of every sender's contribution."""
    parts, mids, posts = Contributions(record, weights), [], []
    for layer in range(len(weights)):
        parts.after_attention(layer)
        mids.append(parts.comps.sum(0).clone())
        parts.after_mlp(layer)
        posts.append(parts.comps.sum(0).clone())
    return torch.stack(mids), torch.stack(posts)
