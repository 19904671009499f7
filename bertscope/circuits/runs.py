"""The runs a circuit pass reads (``circuits.decomposed``): each block's weights as the pass uses them, one
run of one input recorded (what each sender wrote, each LayerNorm's scale, the stream between), a mean
ablation's basis gathered a run at a time, and a pair's two runs, recorded when first read and let go after."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bertscope.circuits.pairs import PreparedPair
from bertscope.core.block_modules import reads_blocks
from bertscope.core.hook_points import blocks, hook_point, model_family
from bertscope.core.models import LoadedModel
from bertscope.core.passes import wide
from bertscope.errors import BertScopeError


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
