"""Train a BatchTopK crosscoder on two models' activations of the same text, kept on disk (the reference's
``BatchTopKCrossCoderTrainer``, science-of-finetuning/dictionary_learning ``trainers/crosscoder.py``).

- Loss: the reconstruction error's Euclidean norm (not squared), averaged over tokens and both models, plus
  AuxK: for each token the k_aux = min(d_in / 2, dead latents) largest dead latents (by z · s) rebuild the
  detached error of both models (no decoder bias), its squared error over the error's variance, weighted 1/32.
- b_dec starts at each model's geometric median; the decoder rows are never normalised; Adam (0.9 / 0.999),
  gradient norm clipped at 1.

Where this differs from the reference, and why (its runs are ~100k steps on 100M tokens; ours a few thousand on
a few hundred thousand):

- θ, the inference threshold: the reference follows the smallest z · s BatchTopK keeps with a running mean
  (0.999) from step 1000; here the same statistic is computed once from the final weights, averaged over 16
  shuffled batches (``calibrate_threshold``), since a short run's running mean would keep early weights' scale.
- A latent is dead after ``dead_tokens`` = 100,000 tokens without firing (the reference's 10M).
- The warm-up is the first ``warmup`` share of the steps (the reference's 1,000 steps); b_dec's geometric median
  is over 8,192 rows spread over the cache (the reference's first batch).
- The learning rate defaults to the reference's rule 2e-4 / sqrt(d_sae / 2^14); ``bertscope train-crosscoder`` passes
  2e-3, which short runs need (BENCHMARKS.md).

Rows stream from the two memory-mapped caches in the same shuffled blocks (whole batches of them), so memory stays
bounded by bytes. A checkpoint after every epoch (``features.checkpoints``: the crosscoder, Adam's state, the
dead-latent counters, the step) in ``out/checkpoint``; a run killed and started again with the same settings goes
on from it and ends with the uninterrupted run's weights, bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet
from bertscope.features.checkpoints import read_checkpoint, save_checkpoint
from bertscope.features.crosscoder import BatchTopKCrosscoder, CrosscoderInfo, load_crosscoder, save_crosscoder
from bertscope.features.trainer import SaeTrainConfig, geometric_median


@dataclass
class CrosscoderTrainConfig(SaeTrainConfig):
    """An SAE's settings and their checks (``features.trainer.SaeTrainConfig``), plus a warm-up."""

    warmup: float = 0.05  # share of the steps with a linear warm-up


@dataclass
class CrosscoderTrainState:
    epoch: int = 0
    step: int = 0
    history: list[dict] = field(default_factory=list)


def paired(base: ActivationSet, tuned: ActivationSet) -> None:
    """One line unless the two caches hold the same positions of the same text, row for row, equally wide. (Which
    word pieces a position holds is the tokenizer's: ``bertscope train-crosscoder`` checks both models split alike.)"""
    if base.rows.shape[1] != tuned.rows.shape[1]:
        raise BertScopeError(f"The two models are {base.rows.shape[1]} and {tuned.rows.shape[1]} wide: a crosscoder "
                             "reads two models of one width (a model and one fine-tuned from it).")
    if base.texts != tuned.texts or base.layer != tuned.layer or base.tokens != tuned.tokens or \
            not np.array_equal(base.where, tuned.where):
        raise BertScopeError("The two models' activations are not of the same word pieces (different text, layer or "
                             "tokenizer): a crosscoder reads both models on the same tokens.")


def paired_blocks(base: np.ndarray, tuned: np.ndarray, block_rows: int, generator: np.random.Generator):
    """(a [rows, 2, d] float32 block of both caches' same rows, its shuffled order [rows]), blocks in a shuffled
    order. The rows are read once into one array; a batch takes ``block[order[i:j]]`` (the same rows, in the same
    order, as shuffling the whole block first, without that copy)."""
    starts = np.arange(0, len(base), block_rows)
    for start in generator.permutation(starts):
        n = min(block_rows, len(base) - start)
        block = np.empty((n, 2, base.shape[1]), np.float32)
        block[:, 0] = base[start:start + n]
        block[:, 1] = tuned[start:start + n]
        yield block, generator.permutation(n)


def sparse_decode(cc: BatchTopKCrosscoder, z: torch.Tensor, top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the decoding [batch, 2, d_in] of z [batch, d_sae] kept at the flat positions ``top`` and zero elsewhere, the
    latents that fired [d_sae] bool): ``cc.decode`` of that sparse code, as a sum of the kept latents' decoder rows
    (``embedding_bag``), k·batch rows where the dense product reads d_sae·batch; the same up to float rounding."""
    rows, latents = top // cc.d_sae, top % cc.d_sae
    rows, order = rows.sort()
    latents = latents[order]
    values = z.flatten()[top[order]]  # [k x batch] the kept codes, grouped by row
    offsets = torch.searchsorted(rows, torch.arange(len(z), device=z.device))  # [batch] each row's first kept code
    table = cc.W_dec.transpose(0, 1).reshape(cc.d_sae, -1)  # [d_sae, 2 d_in]: both models' rows side by side
    recon = torch.nn.functional.embedding_bag(latents, table, offsets, mode="sum", per_sample_weights=values)
    fired = torch.zeros(cc.d_sae, dtype=torch.bool, device=z.device)
    fired[latents[values.detach() > 0]] = True
    return recon.view(len(z), 2, cc.d_in) + cc.b_dec, fired


def crosscoder_loss(cc: BatchTopKCrosscoder, x: torch.Tensor, since_fired: torch.Tensor, dead_tokens: int,
                    aux_coef: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, parts) of one batch x [batch, 2, d_in] in BatchTopK mode; ``since_fired`` [d_sae] is advanced."""
    z = cc.pre_activations(x)  # [batch, d_sae]
    s = cc.latent_weights()  # [d_sae]
    scaled = z * s
    top = scaled.flatten().topk(min(cc.k * len(z), z.numel()), sorted=False).indices  # [k x batch]
    recon, fired = sparse_decode(cc, z, top)  # [batch, 2, d_in], [d_sae]
    error = x - recon
    reconstruction = error.norm(dim=-1).mean()  # ‖e‖ per token and model, averaged: the reference's (not squared)
    since_fired += len(x)
    since_fired[fired] = 0
    dead = since_fired >= dead_tokens
    aux = torch.zeros((), device=x.device)
    n_dead = int(dead.sum())
    if n_dead:
        k_aux = min(cc.d_in // 2, n_dead)
        chosen = scaled.masked_fill(~dead[None, :], float("-inf")).topk(k_aux, dim=-1, sorted=False)  # per token
        a = torch.zeros_like(z).scatter(-1, chosen.indices, z.gather(-1, chosen.indices))
        aux_recon = torch.einsum("bf,mfd->bmd", a, cc.W_dec).flatten(1)  # [batch, 2 d_in], no bias
        e = error.detach().flatten(1)  # [batch, 2 d_in]
        variance = (e - e.mean(0)).pow(2).sum(-1).mean()
        aux = torch.nan_to_num((e - aux_recon).pow(2).sum(-1).mean() / variance)
    parts = {"reconstruction": reconstruction, "aux": aux, "dead": torch.tensor(n_dead / cc.d_sae),
             "mse": error.pow(2).sum(-1).mean().detach()}
    return reconstruction + aux_coef * aux, parts


@torch.no_grad()
def calibrate_threshold(cc: BatchTopKCrosscoder, base: ActivationSet, tuned: ActivationSet, batch_tokens: int,
                        batches: int = 16, seed: int = 0) -> float:
    """θ from the final weights: the smallest z · s BatchTopK keeps in a batch, averaged over up to ``batches``
    shuffled batches (shaped as training's). Sets and returns θ."""
    device = cc.W_dec.device
    cuts: list[float] = []
    block_rows = batch_tokens * batches
    for block, order in paired_blocks(base.rows, tuned.rows, block_rows, np.random.default_rng(seed)):
        for start in range(0, len(block) - batch_tokens + 1, batch_tokens):
            f = cc.encode(torch.from_numpy(block[order[start:start + batch_tokens]]).to(device), use_threshold=False)
            kept = (f * cc.latent_weights())[f > 0]
            if kept.numel():
                cuts.append(float(kept.min()))
        if len(cuts) >= batches:
            break
    cc.threshold.fill_(float(np.mean(cuts[:batches])) if cuts else 0.0)
    return float(cc.threshold)


def train_crosscoder(base: ActivationSet, tuned: ActivationSet, cfg: CrosscoderTrainConfig, out: str | Path,
                     info: CrosscoderInfo, device: str = "cpu", resume: bool = True,
                     progress: Callable[[int, int, dict], None] | None = None,
                     stop: Callable[[], bool] | None = None) -> tuple[BatchTopKCrosscoder, CrosscoderTrainState]:
    """Train on the two caches (rows aligned: ``paired``) and save the crosscoder at ``out``; ``resume`` goes on from
    ``out/checkpoint`` when it was made with the same settings (one line when with others).

    Args:
        base: the base model's activations at the hook point (``layer_activations``).
        tuned: the fine-tuned model's at the same point, on the same word pieces, row for row.
        cfg: width (expansion), k, epochs, batch, rates and the warm-up share.
        out: the crosscoder's folder (``cfg.json``, ``crosscoder.safetensors``; the checkpoint in ``out/checkpoint``).
        info: the two models (base, fine-tuned) and the hook point it reads.
        device: where it trains.
        resume: go on from ``out/checkpoint`` (written after every epoch).
        progress: called with (step, total steps, {"epoch", "reconstruction", "dead"}) after every step.
        stop: asked before every step; once it says True, the crosscoder so far gets its threshold and is saved.

    Returns:
        (the ``BatchTopKCrosscoder``, its threshold set, its training state: epochs and steps done, each epoch's mean
            losses, dead share and speed).
    """
    paired(base, tuned)
    d_in = base.rows.shape[1]
    cfg.check(d_in, base.tokens)
    if cfg.departures():
        raise BertScopeError(f"A crosscoder trains with its warm-up and a constant rate, every row alike: "
                             f"{', '.join(cfg.departures())} are a transcoder's or an SAE's settings.")
    d_sae = cfg.expansion * d_in
    device_ = torch.device(device)
    torch.manual_seed(cfg.seed)
    cc = BatchTopKCrosscoder(d_in, d_sae, cfg.k, info, seed=cfg.seed).to(device_)
    names = ["W_enc", "b_enc", "W_dec", "b_dec"]
    params = [getattr(cc, name) for name in names]
    rate = cfg.rate(d_sae)
    optimizer = torch.optim.Adam(params, lr=rate, betas=(0.9, 0.999))
    block_rows = max(1, cfg.block_bytes // (2 * d_in * 4) // cfg.batch_tokens) * cfg.batch_tokens  # whole batches
    steps_per_epoch = sum(len(range(0, min(block_rows, base.tokens - s) - cfg.batch_tokens + 1, cfg.batch_tokens))
                          for s in range(0, base.tokens, block_rows))
    total = max(1, steps_per_epoch * cfg.epochs)
    warmup = max(1, int(cfg.warmup * total))
    checkpoint = Path(out) / "checkpoint"
    identity = {"models": list(info.models), "hook": info.hook_name, "d_in": d_in, "tokens": base.tokens,
                "activations": [base.folder.name, tuned.folder.name]}  # a checkpoint of other data is refused
    found = read_checkpoint(checkpoint, cfg, optimizer, names, ("since_fired",), identity) if resume else None
    if found is not None:
        with torch.no_grad():
            cc.load_state_dict(load_crosscoder(found[2] / "crosscoder", device_).state_dict())
        state, since_fired = CrosscoderTrainState(**found[0]), found[1]["since_fired"].to(device_)
    else:
        sample_rows = np.linspace(0, base.tokens - 1, min(base.tokens, 8192)).astype(int)
        with torch.no_grad():
            for m, rows in enumerate((base.rows, tuned.rows)):
                cc.b_dec[m] = geometric_median(torch.from_numpy(np.asarray(rows[sample_rows], np.float32)).to(device_))
        state, since_fired = CrosscoderTrainState(), torch.zeros(d_sae, dtype=torch.long, device=device_)
    for epoch in range(state.epoch, cfg.epochs):
        generator = np.random.default_rng(cfg.seed * 1_000 + epoch)
        sums, steps, started = {"loss": 0.0, "reconstruction": 0.0, "aux": 0.0, "mse": 0.0}, 0, time.perf_counter()
        for block, order in paired_blocks(base.rows, tuned.rows, block_rows, generator):
            x_block = torch.from_numpy(block).to(device_)  # [block, 2, d_in], in the caches' order
            shuffled = torch.from_numpy(order).to(device_)  # [block]
            for start in range(0, len(x_block) - cfg.batch_tokens + 1, cfg.batch_tokens):
                if stop is not None and stop():  # what was learnt so far, usable and saved
                    return _finish(cc, base, tuned, cfg, out, state), state
                x = x_block[shuffled[start:start + cfg.batch_tokens]]  # [batch, 2, d_in]
                loss, parts = crosscoder_loss(cc, x, since_fired, cfg.dead_tokens, cfg.aux_coef)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.param_groups[0]["lr"] = rate * min((state.step + 1) / warmup, 1.0)  # a linear warm-up
                optimizer.step()
                state.step += 1
                steps += 1
                for key in ("reconstruction", "aux", "mse"):
                    sums[key] += float(parts[key].detach())
                sums["loss"] += float(loss.detach())
                if progress is not None:
                    progress(state.step, total, {"epoch": epoch + 1, "reconstruction": float(parts["reconstruction"].detach()),
                                                 "dead": float(parts["dead"])})
        seconds = time.perf_counter() - started
        state.epoch = epoch + 1
        state.history.append({"epoch": epoch + 1, **{k: v / max(steps, 1) for k, v in sums.items()},
                              "dead_share": float((since_fired >= cfg.dead_tokens).float().mean()),
                              "seconds": seconds, "tokens_per_s": steps * cfg.batch_tokens / max(seconds, 1e-9)})
        save_checkpoint(checkpoint, lambda tmp: save_crosscoder(cc, tmp / "crosscoder"), optimizer, names, state,
                        {"since_fired": since_fired}, cfg, identity)
    return _finish(cc, base, tuned, cfg, out, state), state


def _finish(cc: BatchTopKCrosscoder, base: ActivationSet, tuned: ActivationSet, cfg: CrosscoderTrainConfig,
            out: str | Path, state: CrosscoderTrainState) -> BatchTopKCrosscoder:
    calibrate_threshold(cc, base, tuned, cfg.batch_tokens, seed=cfg.seed)
    cc.info.extra.update({"trained_tokens": int(base.tokens), "steps": state.step, "config": asdict(cfg),
                          "history": state.history})
    save_crosscoder(cc, out)
    return cc
