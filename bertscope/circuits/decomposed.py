"""The pass a circuit is run in: every receiver of the graph (``circuits.graph``) reads the clean run's
input, less what the edges outside the circuit carry, plus what they carry in the ablated run.

A decoder with LayerNorm before each sub-block has a residual stream that is a sum of the nodes'
outputs, so a receiver's input splits into one term per sender (EAP-IG's ``evaluate_graph``). BERT is
post-LayerNorm: the stream passes through a LayerNorm after every sub-block. With each LayerNorm's scale
σ (per position) taken as known, LayerNorm(x) = γ ⊙ (x − mean x) / σ + β is linear, and the stream at
any point is again a sum of one contribution per sender, each carried through every later LayerNorm
(ALTI's and DecompX's convention, Ferrando et al. 2022, Modarressi et al. 2023). The input node carries
the embeddings and every bias the blocks add (the output projection's and LayerNorm's β), so the sum is
the stream exactly. Contributions of the clean and the ablated runs are carried with their own σ;
changes a patched pass makes downstream are carried with the clean run's σ.

A receiver r of the circuit pass reads

    clean input_r + Σ_{u ∉ circuit} (ablated_u − clean_u)_r + Σ_{u ∈ circuit} (patched_u − clean_u)_r

so the full circuit is the clean run and the empty circuit the ablated (corrupted) run, both exactly
(``tests/circuits``). The clean stream is held in place at every block's output; receivers get
their own inputs: a block's input carries the change its heads' q, k and v inputs share, each receiver's
own extra is added at ``attn.hook_q/k/v`` (through W_Q, W_K, W_V of its head), the feed-forward reads its
input at ``hook_resid_mid`` (the residual branch it also feeds is held to the clean run at the block's
output), and the decision reads the last block's output.

Gradient passes (``Flow``: every edge in, the input or one node's output moved along a path) carry one
summed change instead of one per sender, and expose the gradient of the metric at every receiver.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.norm_transport import carry_through_norm_, layer_norm_linear, read_carried, transport_
from bertscope.circuits.pairs import MASK, PreparedPair, decision
from bertscope.core.block_modules import reads_blocks
from bertscope.core.hook_points import blocks, hook_point, model_family
from bertscope.core.models import LoadedModel
from bertscope.core.passes import repeat_feed, wide
from bertscope.errors import BertScopeError
from bertscope.runtime.host_buffers import empty_host


@dataclass(frozen=True)
class LayerWeights:
    """What carries a change into a layer's receivers and through its LayerNorms."""

    query: torch.Tensor  # [head, d_head, d_model] W_Q of each head (x -> q_h = W_Q^h x)
    key: torch.Tensor  # [head, d_head, d_model]
    value: torch.Tensor  # [head, d_head, d_model]
    out_bias: torch.Tensor  # [d_model] b_O (zeros when the projection has none)
    norm1: tuple[torch.Tensor, torch.Tensor, float]  # post-attention LayerNorm: γ [d_model], β [d_model], eps
    norm2: tuple[torch.Tensor, torch.Tensor, float]  # post-feed-forward LayerNorm


def supports(lm: LoadedModel) -> None:
    """One line when ``lm``'s family is not a post-LayerNorm encoder whose attention is softmax(q·k)."""
    if not reads_blocks(lm):
        family = model_family(lm.model)
        why = "LayerNorm before each sub-block" if not family.post_layernorm else \
            f"{family.scores} positions inside its attention scores"
        raise BertScopeError(f"Circuits are built for post-LayerNorm encoders whose attention reads q·k alone (BERT, "
                             f"RoBERTa, XLM-R, ELECTRA, ALBERT, DistilBERT); {family.name} has {why}.")


def _norm(module: Any) -> tuple[torch.Tensor, torch.Tensor, float]:
    return wide(module.weight.detach()), wide(module.bias.detach()), float(module.eps)


def layer_weights(lm: LoadedModel) -> list[LayerWeights]:
    """Each block's weights, widened as the recorded runs are (half precision to float32)."""
    supports(lm)
    family, model, heads = model_family(lm.model), lm.model, lm.num_heads
    out = []
    for layer, block in enumerate(blocks(model)):
        def w(suffix: str) -> torch.Tensor:
            weight = wide(hook_point(model, f"blocks.{layer}.{suffix}").module.weight.detach())  # [out, d_model]
            return weight.view(heads, -1, weight.shape[-1])
        proj = hook_point(model, f"blocks.{layer}.attn.hook_z").module
        bias = wide(proj.bias.detach()) if proj.bias is not None else \
            wide(torch.zeros(proj.weight.shape[0], device=lm.device, dtype=proj.weight.dtype))
        out.append(LayerWeights(
            w("attn.hook_q"), w("attn.hook_k"), w("attn.hook_v"), bias,
            _norm(block.get_submodule(family.attn_norm)), _norm(block.get_submodule(family.mlp_norm))))
    return out


@dataclass(frozen=True)
class RunRecord:
    """One run of one input: what each sender wrote and each LayerNorm's scale."""

    embed: torch.Tensor  # [pos, d_model] hidden state 0 ("embeddings")
    results: torch.Tensor  # [layer, pos, head, d_model] each head's share of W_O's output (no bias)
    mlp_out: torch.Tensor  # [layer, pos, d_model] the feed-forward's output (its bias in it)
    sigma1: torch.Tensor  # [layer, pos, 1] the post-attention LayerNorm's scale on this run
    sigma2: torch.Tensor  # [layer, pos, 1] the post-feed-forward LayerNorm's
    resid_mid: torch.Tensor  # [layer, pos, d_model] the stream between the sub-blocks
    resid_post: torch.Tensor  # [layer, pos, d_model] each block's output
    metric: float | None = None  # logit(answer) − logit(foil) of this run, when it is a run of the model


def _sigma(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + eps)  # [pos, 1]


def record_run(lm: LoadedModel, feed: dict, weights: list[LayerWeights],
               read: Callable[[Any], torch.Tensor] | None = None, encoder_only: bool = True) -> RunRecord:
    """The hook points of one pass of ``feed`` ([1, token]) read into a ``RunRecord``; ``read`` turns the
    pass's output into its metric ([1])."""
    n = lm.num_layers
    names = ["embed"] + [f"blocks.{layer}.{s}" for layer in range(n) for s in
                         ("hook_resid_pre", "attn.hook_result", "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
                          "hook_resid_post")]
    with torch.no_grad():  # not inference mode: gradient passes read these tensors
        output, cache = lm.run_with_cache(feed, names, encoder_only=encoder_only, grad=None)
        metric = None if read is None else float(read(output)[0])

    def take(name: str) -> torch.Tensor:  # the cache lets go of each tensor as it is read: no second copy of it all
        return wide(cache.pop(name)[0])

    def stack(suffix: str) -> torch.Tensor:  # [layer, ...] filled a layer at a time
        first = take(f"blocks.0.{suffix}")
        out = first.new_empty(n, *first.shape)
        out[0] = first
        for layer in range(1, n):
            out[layer] = take(f"blocks.{layer}.{suffix}")
        return out

    results = stack("attn.hook_result")  # the largest first
    sigma1 = torch.stack([_sigma(take(f"blocks.{layer}.hook_resid_pre") + take(f"blocks.{layer}.hook_attn_out"),
                                 weights[layer].norm1[2]) for layer in range(n)])  # [layer, pos, 1]
    mid, mlp_out = stack("hook_resid_mid"), stack("hook_mlp_out")
    sigma2 = torch.stack([_sigma(mid[layer] + mlp_out[layer], weights[layer].norm2[2]) for layer in range(n)])
    return RunRecord(take("embed"), results, mlp_out, sigma1, sigma2, mid, stack("hook_resid_post"), metric)


@dataclass
class SenderMeans:
    """Each sender's output summed over every position of the runs added so far: MIB's mean ablation's
    basis, gathered one run at a time (a few [layer, head, d_model] sums, never the runs themselves)."""

    embed: torch.Tensor | None = None  # [1, d_model]
    results: torch.Tensor | None = None  # [layer, 1, head, d_model]
    mlp_out: torch.Tensor | None = None  # [layer, 1, d_model]
    positions: int = 0
    basis: tuple[int, ...] = ()  # which recorded pairs' clean runs these are (their ids): who may reuse them

    def add(self, run: RunRecord) -> None:
        """A recorded run's outputs."""
        self._add_sums(run.embed.sum(0, keepdim=True), run.results.sum(1, keepdim=True),
                       run.mlp_out.sum(1, keepdim=True), run.embed.shape[0])

    def add_pass(self, lm: LoadedModel, feed: dict, encoder_only: bool = True) -> None:
        """One pass of ``feed`` ([1, token]), its senders' outputs summed over positions as each is written:
        no run recorded (a recorded run holds every head's output at every position, 0.2 GB at BERT-base size
        and 512 tokens)."""
        n = lm.num_layers
        sums: dict[str, torch.Tensor] = {}

        def keep(x: torch.Tensor, point: Any) -> None:  # [1, pos, ...] -> [1, ...]
            sums[point.name] = wide(x[0]).sum(0, keepdim=True)

        names = ["embed"] + [f"blocks.{layer}.{s}" for layer in range(n) for s in ("attn.hook_result", "hook_mlp_out")]
        with torch.no_grad():
            lm.run(feed, hooks={name: keep for name in names}, grad=None, encoder_only=encoder_only)
        self._add_sums(sums["embed"], torch.stack([sums[f"blocks.{layer}.attn.hook_result"] for layer in range(n)]),
                       torch.stack([sums[f"blocks.{layer}.hook_mlp_out"] for layer in range(n)]),
                       int(feed["input_ids"].shape[-1]))

    def _add_sums(self, embed: torch.Tensor, results: torch.Tensor, mlp_out: torch.Tensor, positions: int) -> None:
        if self.embed is None or self.results is None or self.mlp_out is None:
            self.embed, self.results, self.mlp_out = embed, results, mlp_out
        else:
            self.embed, self.results, self.mlp_out = self.embed + embed, self.results + results, self.mlp_out + mlp_out
        self.positions += positions


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


def _empty(scratch: Scratch | None, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
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
        self.buffer = _empty(scratch, "contributions", (pos, len(self.index), d) if position_major else
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


class RecordedPair:
    """A prepared pair and both of its runs (the clean one; the corrupted one, or the mean record), recorded
    when first read and kept until ``forget``. The loops over pairs (``edges.attribute_edges``,
    ``faithfulness.evaluate``) forget each pair they recorded once done with it, so memory holds one pair's
    runs (about 0.5 GB at BERT-base size and 512 tokens, float32), never every pair's."""

    def __init__(self, prepared: PreparedPair, record: Callable[[], tuple[RunRecord, RunRecord]],
                 means: SenderMeans | None = None) -> None:
        self.prepared = prepared
        self.means = means  # a mean ablation's basis, shared by every pair recorded with it
        self._record = record
        self._runs: tuple[RunRecord, RunRecord] | None = None

    @property
    def recorded(self) -> bool:
        """Whether both runs are in memory now."""
        return self._runs is not None

    def _both(self) -> tuple[RunRecord, RunRecord]:
        if self._runs is None:
            self._runs = self._record()
        return self._runs

    @property
    def clean(self) -> RunRecord:
        return self._both()[0]

    @property
    def ablated(self) -> RunRecord:
        return self._both()[1]

    def forget(self) -> None:
        """Let both runs go (they are recorded again if read again)."""
        self._runs = None


@dataclass
class Flow:
    """A gradient pass: every edge in; per row, the input node's contribution moved toward the ablated run
    by ``input_shift`` (1 = ablated, 0 = clean), or one node group's output replaced by
    clean + ``group_shift`` · (ablated − clean): ``group`` = ("heads" | "mlp", layer)."""

    input_shift: torch.Tensor | None = None  # [rows]
    group: tuple[str, int] | None = None
    group_shift: torch.Tensor | None = None  # [rows]
    grads: dict[str, torch.Tensor] = field(default_factory=dict)  # receiver group -> gradient leaf


def _per_head(change: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[rows, pos, head, d_head] each head's q (or k, v) change from its input change [rows, pos, head, d]."""
    return torch.einsum("rphd,hed->rphe", change, weight)


def _stream(record: RunRecord, where: str, layer: int) -> torch.Tensor:
    """[pos, d] the stream a receiver point reads: a layer's attention input, its feed-forward's, the end."""
    if where == "attention":
        return record.embed if layer == 0 else record.resid_post[layer - 1]
    return record.resid_mid[layer] if where == "mlp" else record.resid_post[layer]


def run_pass(lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair, where: str,
             keep: torch.Tensor | None = None, flow: Flow | None = None, rows: int = 1, scratch: Scratch | None = None
             ) -> torch.Tensor:
    """[rows] the metric of the circuit pass: ``keep`` [rows, sender, receiver] (1 = in the circuit) or a
    gradient pass ``flow`` (its leaves' gradients land in ``flow.grads`` after ``backward``). ``scratch``:
    buffers to reuse from an earlier pass (circuit passes without gradients only).

    A receiver reads clean + (ablated − clean stream) + Σ_{u in the circuit} (patched_u − ablated_u): the
    per-sender terms are carried only for senders with an edge in some row's circuit."""
    if (keep is None) == (flow is None):
        raise ValueError("give keep or flow")
    clean, ablated = pair.clean, pair.ablated
    pos, d = clean.embed.shape
    dtype = clean.embed.dtype
    if keep is not None:
        rows = keep.shape[0]
        keep = keep.to(dtype)
        active: list[bool] = (keep.sum(dim=(0, 2)) > 0).tolist()  # [sender] carried: an edge in some circuit
    else:  # a gradient pass: every edge in; only the input node's own term, when it moves
        assert flow is not None
        active = [flow.input_shift is not None] + [False] * (graph.n_senders - 1)
    # gradient passes: the input node's own contributions (when it moves), and every change summed [rows, pos, d].
    # circuit passes: per carried sender, kept = (patched − clean) − (ablated − clean) = patched − ablated as the
    # receivers read it [rows, pos, sender, d] (position-major: a receiver's sum is a product per position):
    # through a LayerNorm k it becomes T_clean(kept) + (σ_abl/σ_clean − 1) · T_abl(ablated) (T_abl = σ_clean/σ_abl
    # · T_clean, the shift of the LayerNorm's input cancelling), so the clean run's contributions are never carried.
    # Both buffers go through a LayerNorm in one sweep, the receivers right after it reading them in that sweep
    # (``norm_transport``); a block's LayerNorm after its feed-forward is carried when the next block reads.
    if keep is None or torch.is_grad_enabled():
        scratch = None  # autograd may keep views of these buffers
    elif scratch is None:
        scratch = Scratch()  # this pass's own: what receivers read is written into one buffer, layer after layer
    clean_c = Contributions(clean, weights, active, position_major=True) if keep is None else None
    ablated_c = Contributions(ablated, weights, active, position_major=True, scratch=scratch)
    if keep is None:
        state: dict[str, Any] = {"patched": torch.zeros(rows, pos, d, dtype=dtype, device=lm.device)}
    else:  # only the first ``n`` senders are ever read: no zeros to write
        state = {"patched": _empty(scratch, "kept", (rows, pos, len(ablated_c.index), d), ablated.embed)}
    columns = Columns(active)  # the kept buffer's (a gradient pass sums every change into one)
    if columns.take(1) is not None and keep is not None:  # the input node: patched = clean embeddings
        state["patched"][:, :, 0] = clean.embed - ablated.embed
    n_layers, heads = lm.num_layers, lm.num_heads
    if scratch is not None:  # what receivers read, held once at its largest (a block's q, k and v inputs)
        scratch.empty("read", (rows, pos, 3 * heads, d), ablated.embed)

    def chosen_readers(index: list[int], first: int, count: int) -> tuple[torch.Tensor, list[int]] | None:
        """The receivers first..first+count with an edge in some row's circuit (counted from ``first``) and
        their weights on the carried senders ``index``, [rows, chosen, sender]; None: no such receiver."""
        assert keep is not None
        if not index:
            return None
        k = keep[:, index, first:first + count]  # [rows, sender, receiver]
        chosen = torch.nonzero(k.sum(dim=(0, 1))).flatten().tolist()
        return (k[:, :, chosen].transpose(1, 2), chosen) if chosen else None

    def receiver_change(point: str, layer: int, first: int, count: int, norm: tuple[int, int] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        """What receivers first..first+count read beyond the clean run, once every carried quantity has gone
        through the LayerNorm ``norm`` ((layer, 1 | 2)) before them, if one is: (shared [rows or 1, pos, d],
        read by every one of them; extra [rows, pos, chosen, d] or None, read besides by the chosen
        receivers, those with an edge in some row's circuit; the chosen, counted from ``first``)."""
        if keep is None:
            assert flow is not None and clean_c is not None
            if norm is not None:
                through_norm(*norm)
            change = state["patched"]
            if flow.input_shift is not None:  # the input's own term: (1 − shift) of the way back to clean
                change = change + flow.input_shift.view(rows, 1, 1) * (ablated_c.sender(0) - clean_c.sender(0))
            return change, None, []
        total = (_stream(ablated, point, layer) - _stream(clean, point, layer))[None]  # every sender ablated
        if norm is not None:
            found = through_norm(*norm, (first, count))
        else:
            index = ablated_c.carried
            readers = chosen_readers(index, first, count)
            found = None if readers is None else (read_carried(state["patched"], len(index), readers[0]), readers[1])
        return (total, None, []) if found is None else (total, *found)

    def single(change: tuple[torch.Tensor, torch.Tensor | None, list[int]]) -> torch.Tensor:
        """[rows, pos, d] one receiver's change."""
        shared, extra, _ = change
        return shared if extra is None else shared + extra[:, :, 0]

    def leaf(name: str, like: torch.Tensor) -> torch.Tensor:
        if flow is None:
            return torch.zeros((), dtype=like.dtype, device=like.device)
        x = torch.zeros_like(like, requires_grad=True)
        flow.grads[name] = x
        return x

    def pre(x: torch.Tensor, point: Any) -> torch.Tensor:  # [rows, pos, d]: block ``layer``'s input
        """The block reads the clean stream plus the change every head's q, k and v share: the projections
        compute it themselves (a receiver's own extra is added at its head)."""
        layer = point.layer
        state["qkv"] = receiver_change("attention", layer, graph.qkv_receiver(layer, "q", 0), 3 * heads,
                                       None if layer == 0 else (layer - 1, 2))  # the previous block's LayerNorm now
        clean_in = clean.embed if layer == 0 else clean.resid_post[layer - 1]
        return (clean_in + state["qkv"][0]).expand(rows, pos, d).to(x.dtype)

    def qkv(which: str) -> Callable:
        i = "qkv".index(which)

        def hook(x: torch.Tensor, point: Any) -> torch.Tensor | None:  # [rows, pos, head, d_head]
            layer = point.layer
            _, extra, chosen = state["qkv"]
            mine = [(j, c - i * heads) for j, c in enumerate(chosen) if i * heads <= c < (i + 1) * heads]
            if mine:
                assert extra is not None
                own = chosen_slice([h for _, h in mine])
                w = (weights[layer].query, weights[layer].key, weights[layer].value)[i]
                x = x.clone()
                x[:, :, own] += _per_head(extra[:, :, chosen_slice([j for j, _ in mine])], w[own]).to(x.dtype)
            return x + leaf(f"{layer}.{which}", x) if flow is not None else (x if mine else None)
        return hook

    def patched_senders(layer_first: int, x: torch.Tensor, base: torch.Tensor) -> None:
        """x [rows, pos, sender, d] less base [pos, sender, d]: a gradient pass's patched − clean (summed into
        its one change); a circuit pass's patched − ablated, written straight into the buffer for the senders
        it carries."""
        assert columns.next == layer_first
        taken = columns.take(x.shape[2])
        if keep is None:
            state["patched"] = state["patched"] + (x - base).sum(dim=2)
        elif taken is not None:
            part, into = taken[0], state["patched"][:, :, taken[1]]  # [rows, pos, chosen, d]
            if torch.is_grad_enabled():  # autograd writes no product into a given tensor
                into[...] = x[:, :, part] - base[:, part]
            else:
                torch.sub(x[:, :, part], base[:, part], out=into)

    def through_norm(layer: int, which: int, receivers: tuple[int, int] | None = None
                     ) -> tuple[torch.Tensor, list[int]] | None:
        """Every carried quantity through block ``layer``'s LayerNorm ``which`` (1: after attention, 2: after
        the feed-forward). A circuit pass with ``receivers`` (first, count: those reading right after it):
        returns what the chosen ones among them read of the carried senders, [rows, pos, chosen, d], summed
        in the same sweep, and the chosen (None: no edge of theirs in any row)."""
        gamma = (weights[layer].norm1 if which == 1 else weights[layer].norm2)[0]
        sigma_clean = (clean.sigma1 if which == 1 else clean.sigma2)[layer]
        step = "after_attention" if which == 1 else "after_mlp"
        if keep is None:  # differentiated: out of place
            state["patched"] = layer_norm_linear(state["patched"], gamma, sigma_clean)
            getattr(clean_c, step)(layer)
            getattr(ablated_c, step)(layer)
            return None
        if torch.is_grad_enabled():  # autograd keeps the buffer as it was
            state["patched"] = state["patched"].clone()
        kept, n = state["patched"], columns.n  # [rows, pos, sender, d]: its first n senders carried
        found: tuple[torch.Tensor, list[int]] | None = None

        def carry(c: Contributions, gamma: torch.Tensor, sigma_ablated: torch.Tensor) -> None:
            nonlocal found
            assert c.n == n
            readers = None if receivers is None else chosen_readers(c.carried, *receivers)  # this layer's senders in
            out = None if readers is None or torch.is_grad_enabled() else \
                _empty(scratch, "read", (rows, pos, len(readers[1]), d), kept)  # read before the next carry
            read = carry_through_norm_(kept, c.buffer, n, gamma, sigma_clean, sigma_ablated,
                                       None if readers is None else readers[0], out)
            found = None if readers is None or read is None else (read, readers[1])

        with ablated_c.carrying(carry):
            getattr(ablated_c, step)(layer)
        return found

    def group_output(kind: str, layer: int, x: torch.Tensor, clean_x: torch.Tensor, ablated_x: torch.Tensor
                     ) -> torch.Tensor:
        if flow is not None and flow.group == (kind, layer):
            assert flow.group_shift is not None
            shift = flow.group_shift.view(rows, *([1] * (x.dim() - 1)))
            return (clean_x + shift * (ablated_x - clean_x)).expand_as(x)  # constant: no gradient upstream
        return x

    def result(x: torch.Tensor, point: Any) -> None:  # [rows, pos, head, d]
        layer = point.layer
        x = group_output("heads", layer, wide(x), clean.results[layer], ablated.results[layer])
        patched_senders(graph.head_sender(layer, 0), x, (clean if keep is None else ablated).results[layer])
        return None

    def mid(x: torch.Tensor, point: Any) -> torch.Tensor:  # [rows, pos, d]
        """The feed-forward reads the clean stream plus its own change (the residual branch it also feeds
        is held to the clean run at the block's output)."""
        layer = point.layer
        change = single(receiver_change("mlp", layer, graph.mlp_receiver(layer), 1, (layer, 1)))  # [rows or 1, pos, d]
        out = (clean.resid_mid[layer] + change).expand(rows, pos, d)
        return (out + leaf(f"{layer}.mlp", out)).to(x.dtype)

    def mlp_out(x: torch.Tensor, point: Any) -> None:  # [rows, pos, d]
        layer = point.layer
        x = group_output("mlp", layer, wide(x), clean.mlp_out[layer], ablated.mlp_out[layer])
        base = (clean if keep is None else ablated).mlp_out[layer]  # [pos, d]
        patched_senders(graph.mlp_sender(layer), x[:, :, None], base[:, None])
        return None

    def post(x: torch.Tensor, point: Any) -> torch.Tensor:  # [rows, pos, d]
        layer = point.layer
        out = clean.resid_post[layer].expand(rows, pos, d)  # the next block carries its own LayerNorm through
        if layer == n_layers - 1:
            out = out + single(receiver_change("end", layer, graph.logits_receiver, 1, (layer, 2))) + leaf("logits", out)
        return out.to(x.dtype)

    hooks: dict[str, Any] = {}
    for layer in range(n_layers):
        hooks[f"blocks.{layer}.hook_resid_pre"] = pre
        for which in "qkv":
            hooks[f"blocks.{layer}.attn.hook_{which}"] = qkv(which)
        hooks[f"blocks.{layer}.attn.hook_result"] = result
        hooks[f"blocks.{layer}.hook_resid_mid"] = mid
        hooks[f"blocks.{layer}.hook_mlp_out"] = mlp_out
        hooks[f"blocks.{layer}.hook_resid_post"] = post
    feed = repeat_feed(pair.prepared.clean_feed, rows)
    output = lm.run(feed, hooks=hooks, grad=None, encoder_only=where == MASK)
    return decision(lm, output, pair.prepared, where)
