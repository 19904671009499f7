"""Transcoders tuned end to end: every feed-forward replaced at once, the set trained on the real model's own output
(Braun et al., "Identifying Functionally Important Features with End-to-End Sparse Dictionary Learning", 2024:
their e2e + downstream loss, here with each layer's own reconstruction as the local term).

Each transcoder was trained alone, on its layer's input → output. In the replacement model every layer reads what
the replaced layers before it wrote, so each one's small error moves the next one's input, and the errors add up by
the output: layer by layer the transcoders explain 0.80-0.97 of their feed-forward's variance, but the replacement
model picks the real model's token at only 0.70 of the masked positions. Tuning the set together on

    loss = KL(real ‖ replacement) at BERT's 15 % positions  +  λ · mean over layers of NMSE_l

(NMSE_l: layer l's transcoder on the *real* run's feed-forward input, against its real output, over the output's
variance: what the graph's error nodes are) moves each transcoder toward what the layers after it need, while the
local term keeps it a replacement of its own feed-forward. ``TuneConfig.parts="writes"`` moves what each
layer writes (decoder rows, free of unit norm, skip path and output bias) with every encoder as trained, so each
feature fires where it fired and a graph's features and their top contexts keep their meaning (a set refitted by
``features.transcoder_refit`` is tuned so); ``parts="skip"`` moves each skip transcoder's skip path and output bias
alone. The model's weights stay frozen; the gradient reaches
the transcoders through the replacement run's later layers. The masked positions are BERT's seeded 80/10/10
corruption of the training texts (``interventions.importance.masked_batches``), a new seed each batch.

Measured (BENCHMARKS.md): on the k = 32 set shipped first, 600 steps of 8 texts at 2e-5 lowered the held-out KL by a
sixth (0.216 → 0.178 nats) and lifted top-1 agreement from 0.697 to 0.714, for FVE 0.001-0.006 below the set's own
FVE a layer (scored on 500 of the 1,500 held-out texts); at 1e-4 the held-out KL rose a little (0.221), at 3e-4 by
more than half. The set shipped now is the k = 48 set as trained, its writes refitted, then tuned
``parts="writes"`` for 8,000 steps in all: agreement 0.739 → 0.774, KL 0.145 → 0.106 on the 1,500 held-out texts,
every encoder as trained.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import count

import torch

from bertscope.core.models import LoadedModel
from bertscope.core.passes import wide
from bertscope.errors import BertScopeError
from bertscope.features.transcoder import Transcoder
from bertscope.features.transcoder_training import replaced_positions, replacement_hooks

PARTS = {"all": ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip"),
         "writes": ("W_dec", "b_dec", "W_skip"),  # every encoder stays: each feature fires where it fired
         "skip": ("b_dec", "W_skip")}  # the features' encoder and decoder rows stay: a graph's features mean the same


@dataclass(frozen=True)
class TuneConfig:
    """The end-to-end run's settings."""

    steps: int = 600  # optimiser steps
    batch_size: int = 8  # texts a step
    lr: float = 2e-5  # Adam's rate: the set is already trained (1e-4 and more made it worse, BENCHMARKS.md)
    local: float = 1.0  # λ: the layers' own reconstruction beside the KL
    pieces: int = 128  # each text cut to its first word pieces (a step's cost grows with them)
    seed: int = 0
    parts: str = "all"  # what moves: "all", "writes" (decoder rows, skip path, b_dec) or "skip" (skip path, b_dec)

    def check(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.pieces < 8:
            raise BertScopeError("--steps and --batch-size must be at least 1, --pieces at least 8.")
        if self.parts not in PARTS:
            raise BertScopeError(f"--parts is one of {', '.join(PARTS)}, not {self.parts!r}.")
        if not (self.lr > 0 and math.isfinite(self.lr) and 0 <= self.local < math.inf):
            raise BertScopeError("--lr must be a number above 0 and --local a number, 0 or more.")


def check_tunable(lm: LoadedModel, transcoders: Mapping[int, Transcoder], parts: str = "all") -> None:
    """One line when a set cannot be tuned end to end on ``lm``: no masked-LM head, a layer without its transcoder,
    decoder rows not of unit norm when the decoders move (the tuning keeps them unit, as the layer-wise trainer does;
    another tool's set would be rescaled at its first step), or ``parts="skip"`` on transcoders without a skip
    path.

    Args:
        lm: the model the set replaces the feed-forwards of.
        transcoders: {layer: transcoder}.
        parts: what the tuning moves (``PARTS``).
    """
    if parts == "skip" and not all(tc.skip for tc in transcoders.values()):
        raise BertScopeError("--parts skip tunes the skip path: these transcoders have none (train them with --skip), "
                             "or tune --parts all.")
    if "mlm" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has no masked-LM head: the end-to-end tuning follows masked-token "
                             "predictions (bundled-mlm).")
    if sorted(transcoders) != list(range(lm.num_layers)):
        raise BertScopeError("The end-to-end tuning replaces every feed-forward at once: give a transcoder for every "
                             "layer.")
    for layer, tc in transcoders.items():
        if parts != "all":
            break  # the decoder rows stay as they are
        norms = tc.W_dec.detach().float().norm(dim=1)  # [d_sae]
        if not bool(((norms - 1).abs() < 1e-2).all()):
            raise BertScopeError(f"Layer {layer}'s transcoder has decoder rows of norm {float(norms.min()):.3g} to "
                                 f"{float(norms.max()):.3g}; the tuning keeps them at 1, as BertScope trains them: "
                                 "tune a set made by `bertscope train-transcoders`.")


def _real_points(lm: LoadedModel, transcoders: Mapping[int, Transcoder]) -> tuple[dict, dict[int, list]]:
    """Hooks that keep each layer's feed-forward input and output of the real run, and where they go."""
    kept: dict[int, list] = {layer: [] for layer in transcoders}
    hooks = {}
    for layer, tc in transcoders.items():
        hooks[tc.info.input_hook] = lambda x, _, layer=layer: kept[layer].append(x.detach())
        hooks[tc.info.output_hook] = lambda y, _, layer=layer: kept[layer].append(y.detach())
    return hooks, kept


def _local_nmse(transcoders: Mapping[int, Transcoder], kept: dict[int, list], keep: torch.Tensor) -> torch.Tensor:
    """Mean over layers of ‖tc(x) − y‖² / ‖y − ȳ‖² at the replaced positions of the real run."""
    terms = []
    for layer, tc in transcoders.items():
        x, y = (t[keep].float() for t in kept[layer])  # [n, d_in], [n, d_out]
        terms.append((tc(x) - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum().clamp_min(1e-12))
    return torch.stack(terms).mean()


def _step(lm: LoadedModel, transcoders: Mapping[int, Transcoder], feed: dict, chosen: torch.Tensor,
          cfg: TuneConfig) -> tuple[torch.Tensor, float, float, float]:
    """(the loss to step on, its KL, its local NMSE, top-1 agreement) on one batch."""
    from bertscope.interventions.importance import chosen_logits

    keep = replaced_positions(lm, feed)  # [batch, token]
    hooks, kept = _real_points(lm, transcoders)
    with torch.no_grad():
        real = wide(chosen_logits(lm, feed, chosen, hooks)).log_softmax(-1)  # [chosen, vocab]
    made = wide(chosen_logits(lm, feed, chosen, replacement_hooks(lm, transcoders, keep), grad=True)
                ).log_softmax(-1)  # [chosen, vocab]
    kl = (real.exp() * (real - made)).sum(-1).mean()
    local = _local_nmse(transcoders, kept, keep)
    agree = float((real.argmax(-1) == made.argmax(-1)).float().mean())
    return kl + cfg.local * local, float(kl.detach()), float(local.detach()), agree


def tune_end_to_end(lm: LoadedModel, transcoders: Mapping[int, Transcoder], texts: Sequence[str],
                    cfg: TuneConfig = TuneConfig(), progress: Callable[[int, int], None] | None = None,
                    stop: Callable[[], bool] | None = None) -> list[dict]:
    """Every layer's transcoder tuned together, in place, so the replacement model's masked-token predictions
    follow the real model's.

    Args:
        lm: a masked LM (its weights stay as they are).
        transcoders: {layer: transcoder} for every layer, trained layer by layer first.
        texts: training texts (never the held-out ones the replacement model is scored on).
        cfg: steps, texts a step, rate, the local term's weight, seed, what moves (``parts``).
        progress: called with (step, steps).
        stop: asked between steps; the transcoders keep the steps taken.

    Returns:
        The history, one row every 50 steps and one at the last step taken (also after a Stop): {"step", "kl",
        "local_nmse", "agreement"}, each the mean since the row before.
    """
    cfg.check()
    check_tunable(lm, transcoders, cfg.parts)
    if not texts:
        raise BertScopeError("No training texts for the end-to-end tuning.")
    params = [p for tc in transcoders.values() for name, p in tc.named_parameters() if name in PARTS[cfg.parts]]
    for tc in transcoders.values():
        tc.train()
        for name, p in tc.named_parameters():
            p.requires_grad_(name in PARTS[cfg.parts])
    optimiser = torch.optim.Adam(params, lr=cfg.lr)
    history: list[dict] = []
    unit = cfg.parts == "all"  # unit decoder rows, as the layer-wise trainer keeps them; with the encoders held
    sums = [0.0, 0.0, 0.0, 0]  # ("writes") a row's length is what its feature writes
    step = 0
    try:
        for feed, chosen in _random_batches(lm, texts, cfg):
            loss, kl, local, agree = _step(lm, transcoders, feed, chosen, cfg)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            for tc in transcoders.values():
                if unit:
                    tc.remove_parallel_gradient()
            optimiser.step()
            for tc in transcoders.values():
                if unit:
                    tc.normalise_decoder()
            step += 1
            sums = [sums[0] + kl, sums[1] + local, sums[2] + agree, sums[3] + 1]
            if step % 50 == 0 or step == cfg.steps:
                history.append({"step": step, "kl": sums[0] / sums[3], "local_nmse": sums[1] / sums[3],
                                "agreement": sums[2] / sums[3]})
                sums = [0.0, 0.0, 0.0, 0]
            if progress:
                progress(step, cfg.steps)
            if step == cfg.steps or (stop is not None and stop()):
                break
        if sums[3]:  # stopped between rows: the steps since the last one
            history.append({"step": step, "kl": sums[0] / sums[3], "local_nmse": sums[1] / sums[3],
                            "agreement": sums[2] / sums[3]})
    finally:
        for tc in transcoders.values():
            tc.eval().requires_grad_(False)
    return history


def _cut(lm: LoadedModel, texts: Sequence[str], pieces: int) -> list[str]:
    """Each text up to the end of its ``pieces``-th word piece (the tokenizer's offsets; a text without offsets kept
    whole)."""
    enc = lm.tokenizer(list(texts), add_special_tokens=False, truncation=True, max_length=pieces,
                       return_offsets_mapping=True)
    out = []
    for text, offsets in zip(texts, enc["offset_mapping"]):
        out.append(text[:offsets[-1][1]] if offsets else text)
    return out


def _random_batches(lm: LoadedModel, texts: Sequence[str], cfg: TuneConfig) -> Iterator[tuple[dict, torch.Tensor]]:
    """(feed with BERT's corruption, chosen [batch, token] bool) for ever: each pass over ``texts`` in a new seeded
    order, ``cfg.batch_size`` texts a batch, each batch masked with its own seed."""
    from bertscope.interventions.importance import masked_batches

    order = torch.Generator().manual_seed(cfg.seed)
    texts = _cut(lm, texts, cfg.pieces)
    for epoch in count():
        taken = 0
        rows = torch.randperm(len(texts), generator=order).tolist()
        for start in range(0, len(rows), cfg.batch_size):
            chunk = [texts[i] for i in rows[start:start + cfg.batch_size]]
            seed = cfg.seed * 1_000_003 + epoch * 100_003 + start
            for _, feed, chosen, _ in masked_batches(lm, chunk, cfg.batch_size, seed):
                if bool(chosen.any()):
                    taken += 1
                    yield feed, chosen
        if not taken:
            raise BertScopeError("The training texts give no masked position (too short): give longer texts.")
