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

The pass is one object (``Pass``) with one method per hook point; two strategies supply what differs:
``CircuitPass`` (a circuit per row: each carried sender's own term, the receivers that read it chosen by the
edges kept) and ``GradientPass`` (every change summed, gradient leaves at the receivers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bertscope.circuits.contributions import Columns, Contributions, Scratch, chosen_slice, empty_buffer
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.norm_transport import carry_through_norm_, layer_norm_linear, read_carried
from bertscope.circuits.pairs import MASK, decision
from bertscope.circuits.runs import LayerWeights, RecordedPair, RunRecord
from bertscope.core.models import LoadedModel
from bertscope.core.passes import repeat_feed, wide


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


class Pass:
    """What both passes share: the run's records, the buffer of what senders changed (``patched``), the
    columns senders are written to, and one hook per point of every block. A strategy (``CircuitPass``,
    ``GradientPass``) supplies what a receiver reads beyond the clean run, how a group of senders is kept, how a
    LayerNorm carries what is kept, and the gradient leaves."""

    def __init__(self, lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair,
                 rows: int, active: list[bool], ablated_c: Contributions, base: RunRecord) -> None:
        self.lm, self.graph, self.weights, self.pair, self.rows = lm, graph, weights, pair, rows
        self.clean, self.ablated = pair.clean, pair.ablated
        self.pos, self.d = self.clean.embed.shape
        self.heads = lm.num_heads
        self.ablated_c = ablated_c
        self.base = base  # the run a sender's change is taken against (its outputs [pos, ..., d])
        self.columns = Columns(active)  # the kept buffer's (a gradient pass sums every change into one)
        self.input_column = self.columns.take(1)  # the input node's
        self.patched: torch.Tensor  # what the senders changed, set by the strategy
        self.qkv_change: tuple[torch.Tensor, torch.Tensor | None, list[int]] | None = None  # the block being read

    # -- what a strategy supplies ----------------------------------------------------------------------
    def receiver_change(self, point: str, layer: int, first: int, count: int, norm: tuple[int, int] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        """What receivers first..first+count read beyond the clean run, once every carried quantity has gone
        through the LayerNorm ``norm`` ((layer, 1 | 2)) before them, if one is: (shared [rows or 1, pos, d],
        read by every one of them; extra [rows, pos, chosen, d] or None, read besides by the chosen ones; the
        chosen, counted from ``first``)."""
        raise NotImplementedError

    def keep_senders(self, taken: tuple[slice | list[int], slice] | None, x: torch.Tensor, base: torch.Tensor
                     ) -> None:
        """Record a group of senders' outputs x [rows, pos, sender, d] against ``base`` [pos, sender, d]
        (``taken``: the columns ``Columns.take`` gave the group)."""
        raise NotImplementedError

    def leaf(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """A gradient pass's leaf added at receiver ``name`` (a circuit pass adds 0)."""
        return torch.zeros((), dtype=like.dtype, device=like.device)

    def head_inputs(self, x: torch.Tensor, name: str, changed: bool) -> torch.Tensor | None:
        """The q, k or v a hook returns (None: unchanged)."""
        return x if changed else None

    def group_output(self, kind: str, layer: int, x: torch.Tensor, clean_x: torch.Tensor, ablated_x: torch.Tensor
                     ) -> torch.Tensor:
        """A node group's output as the pass sees it (a gradient pass may move one group along its path)."""
        return x

    # -- the hooks ---------------------------------------------------------------------------------------
    def single(self, change: tuple[torch.Tensor, torch.Tensor | None, list[int]]) -> torch.Tensor:
        """[rows, pos, d] one receiver's change."""
        shared, extra, _ = change
        return shared if extra is None else shared + extra[:, :, 0]

    def senders(self, layer_first: int, x: torch.Tensor, base: torch.Tensor) -> None:
        """A group of senders from ``layer_first`` (pass order) wrote x [rows, pos, sender, d]."""
        assert self.columns.next == layer_first
        self.keep_senders(self.columns.take(x.shape[2]), x, base)

    def pre(self, x: torch.Tensor, point: Any) -> torch.Tensor:  # [rows, pos, d]: block ``layer``'s input
        """The block reads the clean stream plus the change every head's q, k and v share: the projections
        compute it themselves (a receiver's own extra is added at its head)."""
        layer = point.layer
        self.qkv_change = self.receiver_change("attention", layer, self.graph.qkv_receiver(layer, "q", 0),
                                               3 * self.heads, None if layer == 0 else (layer - 1, 2))
        clean_in = self.clean.embed if layer == 0 else self.clean.resid_post[layer - 1]
        return (clean_in + self.qkv_change[0]).expand(self.rows, self.pos, self.d).to(x.dtype)

    def qkv(self, which: str) -> Callable:
        i, heads = "qkv".index(which), self.heads

        def hook(x: torch.Tensor, point: Any) -> torch.Tensor | None:  # [rows, pos, head, d_head]
            layer = point.layer
            assert self.qkv_change is not None
            _, extra, chosen = self.qkv_change
            mine = [(j, c - i * heads) for j, c in enumerate(chosen) if i * heads <= c < (i + 1) * heads]
            if mine:
                assert extra is not None
                own = chosen_slice([h for _, h in mine])
                w = (self.weights[layer].query, self.weights[layer].key, self.weights[layer].value)[i]
                x = x.clone()
                x[:, :, own] += _per_head(extra[:, :, chosen_slice([j for j, _ in mine])], w[own]).to(x.dtype)
            return self.head_inputs(x, f"{layer}.{which}", bool(mine))
        return hook

    def result(self, x: torch.Tensor, point: Any) -> None:  # [rows, pos, head, d]
        layer = point.layer
        x = self.group_output("heads", layer, wide(x), self.clean.results[layer], self.ablated.results[layer])
        self.senders(self.graph.head_sender(layer, 0), x, self.base.results[layer])
        return None

    def mid(self, x: torch.Tensor, point: Any) -> torch.Tensor:  # [rows, pos, d]
        """The feed-forward reads the clean stream plus its own change (the residual branch it also feeds
        is held to the clean run at the block's output)."""
        layer = point.layer
        change = self.single(self.receiver_change("mlp", layer, self.graph.mlp_receiver(layer), 1, (layer, 1)))
        out = (self.clean.resid_mid[layer] + change).expand(self.rows, self.pos, self.d)  # [rows, pos, d]
        return (out + self.leaf(f"{layer}.mlp", out)).to(x.dtype)

    def mlp_out(self, x: torch.Tensor, point: Any) -> None:  # [rows, pos, d]
        layer = point.layer
        x = self.group_output("mlp", layer, wide(x), self.clean.mlp_out[layer], self.ablated.mlp_out[layer])
        self.senders(self.graph.mlp_sender(layer), x[:, :, None], self.base.mlp_out[layer][:, None])
        return None

    def post(self, x: torch.Tensor, point: Any) -> torch.Tensor:  # [rows, pos, d]
        layer = point.layer
        out = self.clean.resid_post[layer].expand(self.rows, self.pos, self.d)  # the next block carries its norm
        if layer == self.lm.num_layers - 1:
            end = self.receiver_change("end", layer, self.graph.logits_receiver, 1, (layer, 2))
            out = out + self.single(end) + self.leaf("logits", out)
        return out.to(x.dtype)

    def hooks(self) -> dict[str, Any]:
        hooks: dict[str, Any] = {}
        for layer in range(self.lm.num_layers):
            hooks[f"blocks.{layer}.hook_resid_pre"] = self.pre
            for which in "qkv":
                hooks[f"blocks.{layer}.attn.hook_{which}"] = self.qkv(which)
            hooks[f"blocks.{layer}.attn.hook_result"] = self.result
            hooks[f"blocks.{layer}.hook_resid_mid"] = self.mid
            hooks[f"blocks.{layer}.hook_mlp_out"] = self.mlp_out
            hooks[f"blocks.{layer}.hook_resid_post"] = self.post
        return hooks

    def run(self, where: str) -> torch.Tensor:
        """[rows] the metric of the pass at ``where`` (the decision's kind)."""
        feed = repeat_feed(self.pair.prepared.clean_feed, self.rows)
        output = self.lm.run(feed, hooks=self.hooks(), grad=None, encoder_only=where == MASK)
        return decision(self.lm, output, self.pair.prepared, where)

    def norm_parts(self, layer: int, which: int) -> tuple[torch.Tensor, torch.Tensor, str]:
        """Block ``layer``'s LayerNorm ``which`` (1: after attention, 2: after the feed-forward): (γ, the clean
        run's σ, the name of the ``Contributions`` step that carries a run through it)."""
        gamma = (self.weights[layer].norm1 if which == 1 else self.weights[layer].norm2)[0]
        sigma_clean = (self.clean.sigma1 if which == 1 else self.clean.sigma2)[layer]
        return gamma, sigma_clean, "after_attention" if which == 1 else "after_mlp"


class CircuitPass(Pass):
    """A circuit a row (``keep`` [rows, sender, receiver], 1 = in the circuit): per carried sender, kept =
    (patched − clean) − (ablated − clean) = patched − ablated as the receivers read it [rows, pos, sender, d]
    (position-major: a receiver's sum is a product per position). Through a LayerNorm it becomes T_clean(kept) +
    (σ_abl/σ_clean − 1) · T_abl(ablated) (T_abl = σ_clean/σ_abl · T_clean, the shift of the LayerNorm's input
    cancelling), so the clean run's contributions are never carried. Both buffers go through a LayerNorm in one
    sweep, the receivers right after it reading them in that sweep (``norm_transport``); a block's LayerNorm after
    its feed-forward is carried when the next block reads. Only senders with an edge in some row's circuit are
    carried."""

    def __init__(self, lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair,
                 keep: torch.Tensor, scratch: Scratch | None) -> None:
        ablated = pair.ablated
        self.keep = keep.to(ablated.embed.dtype)
        active: list[bool] = (self.keep.sum(dim=(0, 2)) > 0).tolist()  # [sender] carried
        if torch.is_grad_enabled():
            scratch = None  # autograd may keep views of these buffers
        elif scratch is None:
            scratch = Scratch()  # this pass's own: what receivers read is written into one buffer, layer by layer
        self.scratch = scratch
        rows = self.keep.shape[0]
        ablated_c = Contributions(ablated, weights, active, position_major=True, scratch=scratch)
        super().__init__(lm, graph, weights, pair, rows, active, ablated_c, base=ablated)
        # only the first ``n`` senders are ever read: no zeros to write
        self.patched = empty_buffer(scratch, "kept", (rows, self.pos, len(ablated_c.index), self.d), ablated.embed)
        if self.input_column is not None:  # the input node: patched = clean embeddings
            self.patched[:, :, 0] = self.clean.embed - ablated.embed
        if scratch is not None:  # what receivers read, held once at its largest (a block's q, k and v inputs)
            scratch.empty("read", (rows, self.pos, 3 * self.heads, self.d), ablated.embed)

    def chosen_readers(self, index: list[int], first: int, count: int) -> tuple[torch.Tensor, list[int]] | None:
        """The receivers first..first+count with an edge in some row's circuit (counted from ``first``) and
        their weights on the carried senders ``index``, [rows, chosen, sender]; None: no such receiver."""
        if not index:
            return None
        k = self.keep[:, index, first:first + count]  # [rows, sender, receiver]
        chosen = torch.nonzero(k.sum(dim=(0, 1))).flatten().tolist()
        return (k[:, :, chosen].transpose(1, 2), chosen) if chosen else None

    def receiver_change(self, point: str, layer: int, first: int, count: int, norm: tuple[int, int] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        total = (_stream(self.ablated, point, layer) - _stream(self.clean, point, layer))[None]  # all ablated
        if norm is not None:
            found = self.through_norm(*norm, (first, count))
        else:
            index = self.ablated_c.carried
            readers = self.chosen_readers(index, first, count)
            found = None if readers is None else (read_carried(self.patched, len(index), readers[0]), readers[1])
        return (total, None, []) if found is None else (total, *found)

    def keep_senders(self, taken: tuple[slice | list[int], slice] | None, x: torch.Tensor, base: torch.Tensor
                     ) -> None:
        """patched − ablated, written straight into the buffer for the senders carried."""
        if taken is None:
            return
        part, into = taken[0], self.patched[:, :, taken[1]]  # [rows, pos, chosen, d]
        if torch.is_grad_enabled():  # autograd writes no product into a given tensor
            into[...] = x[:, :, part] - base[:, part]
        else:
            torch.sub(x[:, :, part], base[:, part], out=into)

    def through_norm(self, layer: int, which: int, receivers: tuple[int, int]) -> tuple[torch.Tensor, list[int]] | None:
        """Every carried quantity through block ``layer``'s LayerNorm ``which``; returns what the chosen ones among
        the ``receivers`` (first, count: those reading right after it) read of the carried senders, [rows, pos,
        chosen, d], summed in the same sweep, and the chosen (None: no edge of theirs in any row)."""
        gamma, sigma_clean, step = self.norm_parts(layer, which)
        if torch.is_grad_enabled():  # autograd keeps the buffer as it was
            self.patched = self.patched.clone()
        kept, n = self.patched, self.columns.n  # [rows, pos, sender, d]: its first n senders carried
        found: tuple[torch.Tensor, list[int]] | None = None

        def carry(c: Contributions, gamma: torch.Tensor, sigma_ablated: torch.Tensor) -> None:
            nonlocal found
            assert c.n == n
            readers = self.chosen_readers(c.carried, *receivers)  # this layer's senders in
            out = None if readers is None or torch.is_grad_enabled() else \
                empty_buffer(self.scratch, "read", (self.rows, self.pos, len(readers[1]), self.d), kept)
            read = carry_through_norm_(kept, c.buffer, n, gamma, sigma_clean, sigma_ablated,
                                       None if readers is None else readers[0], out)
            found = None if readers is None or read is None else (read, readers[1])

        with self.ablated_c.carrying(carry):
            getattr(self.ablated_c, step)(layer)
        return found


class GradientPass(Pass):
    """Every edge in, one summed change [rows, pos, d] carried instead of one per sender; the input node's own
    contributions carried when it moves (``flow.input_shift``), one node group moved along its path
    (``flow.group``); a gradient leaf at every receiver (``flow.grads``)."""

    def __init__(self, lm: LoadedModel, graph: CircuitGraph, weights: list[LayerWeights], pair: RecordedPair,
                 flow: Flow, rows: int) -> None:
        self.flow = flow
        active = [flow.input_shift is not None] + [False] * (graph.n_senders - 1)
        self.clean_c = Contributions(pair.clean, weights, active, position_major=True)
        ablated_c = Contributions(pair.ablated, weights, active, position_major=True)
        super().__init__(lm, graph, weights, pair, rows, active, ablated_c, base=pair.clean)
        self.patched = torch.zeros(rows, self.pos, self.d, dtype=self.clean.embed.dtype, device=lm.device)

    def receiver_change(self, point: str, layer: int, first: int, count: int, norm: tuple[int, int] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        if norm is not None:
            self.through_norm(*norm)
        change = self.patched
        if self.flow.input_shift is not None:  # the input's own term: (1 − shift) of the way back to clean
            shift = self.flow.input_shift.view(self.rows, 1, 1)
            change = change + shift * (self.ablated_c.sender(0) - self.clean_c.sender(0))
        return change, None, []

    def keep_senders(self, taken: tuple[slice | list[int], slice] | None, x: torch.Tensor, base: torch.Tensor
                     ) -> None:
        """patched − clean, summed into the one change."""
        self.patched = self.patched + (x - base).sum(dim=2)

    def through_norm(self, layer: int, which: int) -> None:
        """The summed change and both runs' contributions through block ``layer``'s LayerNorm ``which``, out of
        place (differentiated)."""
        gamma, sigma_clean, step = self.norm_parts(layer, which)
        self.patched = layer_norm_linear(self.patched, gamma, sigma_clean)
        getattr(self.clean_c, step)(layer)
        getattr(self.ablated_c, step)(layer)

    def leaf(self, name: str, like: torch.Tensor) -> torch.Tensor:
        x = torch.zeros_like(like, requires_grad=True)
        self.flow.grads[name] = x
        return x

    def head_inputs(self, x: torch.Tensor, name: str, changed: bool) -> torch.Tensor | None:
        return x + self.leaf(name, x)

    def group_output(self, kind: str, layer: int, x: torch.Tensor, clean_x: torch.Tensor, ablated_x: torch.Tensor
                     ) -> torch.Tensor:
        if self.flow.group != (kind, layer):
            return x
        assert self.flow.group_shift is not None
        shift = self.flow.group_shift.view(self.rows, *([1] * (x.dim() - 1)))
        return (clean_x + shift * (ablated_x - clean_x)).expand_as(x)  # constant: no gradient upstream


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
    made = CircuitPass(lm, graph, weights, pair, keep, scratch) if keep is not None else \
        GradientPass(lm, graph, weights, pair, flow, rows)  # type: ignore[arg-type]
    return made.run(where)
