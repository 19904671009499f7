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
        state = {"patched": empty_buffer(scratch, "kept", (rows, pos, len(ablated_c.index), d), ablated.embed)}
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
                empty_buffer(scratch, "read", (rows, pos, len(readers[1]), d), kept)  # read before the next carry
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
