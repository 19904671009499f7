"""Train a TopK SAE on a layer's activations kept on disk (Gao et al. 2024, §2.3-2.4 and Appendix A-B).

- Loss: the reconstruction's squared error over the data's variance (the normalised MSE the paper
  reports), plus AuxK: the k_aux = d_in / 2 largest *dead* latents reconstruct the remaining error,
  weighted 1/32 and scaled down while fewer than k_aux latents are dead (SAELens's
  ``calculate_topk_aux_loss``; EleutherAI's sparsify). A latent is dead when it has not fired in the
  last ``dead_tokens`` tokens.
- b_dec starts at the geometric median of a sample (Weiszfeld's iterations), W_enc at W_dec's
  transpose; each decoder row stays at unit norm (the gradient's part along the row is removed
  before the step, the norm reset after it: openai/sparse_autoencoder's train loop).
- Adam (β 0.9 / 0.999, ε 6.25e-10), learning rate 2e-4 / sqrt(d_sae / 2^14) by default (the paper's
  scaling law for the rate), gradient norm clipped at 1.
- ``lr_decay`` (0 by default): the rate falls linearly to 0 over that share of the last steps (SAELens's
  ``lr_decay_steps``). ``resample_every`` N > 0: every N steps of the run's first half, the dead latents restart
  (``restart_dead``: Bricken et al. 2023's resampling, a latent set to fire on a row the dictionary rebuilds badly
  and to write that row's error), for the latents AuxK cannot reach: a dead latent whose pre-activations are below
  zero on every row gets no gradient through AuxK's ReLU. ``standardise`` (transcoders): the encoder and the skip
  path read each input dimension centred and at unit variance while training, folded into W_enc, b_enc, W_skip and
  b_dec at the end (the same map): BERT's LayerNorm outputs carry a few dimensions of large mean and spread (layer
  3 of all-MiniLM-L6-v2: one dimension's mean 8.6, the rest's spread 0.17-2.8), where Adam's equal steps move every
  pre-activation at once; trained on the raw inputs, half the latents end below zero on every row.
- ``chosen_weight`` w > 1 (a transcoder on text read as pretraining read it): the rows BERT's corruption chose
  for prediction weigh w times the others in the reconstruction's error (the mean is taken over the weights), as
  the replacement model and every graph are read there.
- The rows are streamed from the memory-mapped file in shuffled blocks of at most ``block_bytes``
  (a block's rows shuffled again), so memory stays bounded by bytes whatever the corpus.
- A checkpoint (the SAE, Adam's state, the epoch and the dead-latent counters) after every epoch;
  ``resume`` goes on from it; ``stop()`` ends the run between steps, keeping the last epoch's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet
from bertscope.features.checkpoints import read_checkpoint, save_checkpoint
from bertscope.features.sae import SaeInfo, TopKSAE, load_sae, save_sae


def check_weight_range(chosen_weight: float) -> None:
    """One line when the weight of the rows chosen for prediction is out of [1, 1000] (the trainer's and the refit's)."""
    if not 1 <= chosen_weight <= 1000:
        raise BertScopeError(f"The chosen rows' weight is between 1 and 1,000; got {chosen_weight}.")


@dataclass
class SaeTrainConfig:
    expansion: int = 8  # latents = expansion x d_in
    k: int = 32  # active latents a token
    epochs: int = 4  # passes over the tokens
    batch_tokens: int = 2048
    lr: float | None = None  # None: 2e-4 / sqrt(d_sae / 2^14)
    aux_coef: float = 1 / 32
    dead_tokens: int = 100_000  # a latent is dead when it has not fired in this many tokens
    block_bytes: int = 64 * 2**20  # rows read from disk at a time
    seed: int = 0
    chosen_weight: float = 1.0  # the weight of the rows chosen for prediction (masked text) in the error
    lr_decay: float = 0.0  # the share of the last steps over which the rate falls linearly to 0 (SAELens's)
    resample_every: int = 0  # steps between restarts of the dead latents (0: never), in the first half of the run
    standardise: bool = False  # a transcoder reads each input dimension centred, at unit variance (folded when saved)

    def check(self, d_in: int, tokens: int) -> None:
        d_sae = self.expansion * d_in
        if self.expansion < 1:
            raise BertScopeError("--expansion must be at least 1.")
        if not 0 < self.k < d_sae:
            raise BertScopeError(f"k must be between 1 and {d_sae - 1} (the latents, {d_sae}, less one); got {self.k}.")
        if self.epochs < 1 or self.batch_tokens < 1:
            raise BertScopeError("Epochs and the batch size must be at least 1.")
        if self.lr is not None and not 0 < self.lr < 1:
            raise BertScopeError(f"Adam's rate is above 0 and below 1; got {self.lr}.")
        if not 0 <= self.lr_decay <= 1:
            raise BertScopeError(f"The rate's decay is a share of the steps, 0 to 1; got {self.lr_decay}.")
        if self.resample_every < 0:
            raise BertScopeError(f"Dead latents restart every N steps, N at least 1 (0: never); got {self.resample_every}.")
        check_weight_range(self.chosen_weight)
        if tokens < self.batch_tokens:
            raise BertScopeError(f"The corpus gave {tokens:,} tokens, fewer than one batch ({self.batch_tokens:,}): "
                                 "give it more sentences or a smaller batch.")

    def rate(self, d_sae: int) -> float:
        return self.lr if self.lr is not None else 2e-4 / math.sqrt(d_sae / 2**14)

    def departures(self) -> dict:
        """The settings of the rows' weights, the rate's decay, the restarts and the standardised inputs that are not
        their defaults (what a saved dictionary's facts name besides k, expansion and epochs)."""
        plain = {f.name: f.default for f in fields(self)}
        return {name: getattr(self, name) for name in ("chosen_weight", "lr_decay", "resample_every", "standardise")
                if getattr(self, name) != plain[name]}

    def rate_at(self, d_sae: int, step: int, total: int) -> float:
        """The rate at ``step`` (from 0) of ``total``: constant, then falling linearly to 0 over the last
        ``lr_decay`` share of the steps."""
        decay = self.lr_decay * total
        return self.rate(d_sae) * (1.0 if decay <= 0 else min(1.0, (total - step) / decay))

    def resamples_at(self, step: int, total: int) -> bool:
        """Whether the dead latents restart after ``step`` (from 1): every ``resample_every`` steps, in the
        first half of the run (the second lets the restarted ones settle)."""
        return self.resample_every > 0 and step % self.resample_every == 0 and step <= total // 2


@dataclass
class SaeTrainState:
    epoch: int = 0
    step: int = 0
    history: list[dict] = field(default_factory=list)  # per epoch: loss, normalised MSE, aux loss, dead share


def geometric_median(x: torch.Tensor, iterations: int = 32) -> torch.Tensor:
    """Weiszfeld's iterations on the rows of ``x`` ([n, d]), from their mean."""
    median = x.mean(dim=0)
    for _ in range(iterations):
        weights = 1 / (x - median).norm(dim=1).clamp_min(1e-8)  # [n]
        median = (weights[:, None] * x).sum(dim=0) / weights.sum()
    return median


def blocks_of(rows: np.ndarray, block_rows: int, generator: np.random.Generator, targets: np.ndarray | None = None,
              chosen: np.ndarray | None = None, weight: float = 1.0):
    """[rows, d] float32 blocks in a shuffled order, each block's rows shuffled; with ``targets`` (the same rows of
    another point, a transcoder's output), each row is [d + d_target]: the input then its target; with ``chosen``
    ([rows] bool, memory-mapped: read a block at a time) and a ``weight`` other than 1, one column more, last: each
    row's weight in the error (``row_weights``)."""
    starts = np.arange(0, len(rows), block_rows)
    for start in generator.permutation(starts):
        parts = [np.asarray(rows[start:start + block_rows], np.float32)]
        if targets is not None:
            parts.append(np.asarray(targets[start:start + block_rows], np.float32))
        weights = row_weights(None if chosen is None else chosen[start:start + block_rows], weight)
        if weights is not None:
            parts.append(weights[:, None])
        block = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        yield block[generator.permutation(len(block))]


def batches_of(blocks: Iterator[np.ndarray], batch: int, device: str) -> Iterator[torch.Tensor]:
    """Every whole batch of the blocks' rows, in order, on ``device``: the rows a block leaves past its last whole
    batch open the next block's first (an epoch reads every row but fewer than one batch's), and no block is
    copied to join them."""
    left = None  # [rows, d] the last block's rows past its last whole batch
    for block in blocks:
        x = torch.from_numpy(block).to(device)  # [block, d]
        start = 0
        if left is not None:
            need = batch - len(left)
            if len(x) < need:
                left = torch.cat([left, x])
                continue
            yield torch.cat([left, x[:need]])
            start = need
        whole = start + (len(x) - start) // batch * batch
        for first in range(start, whole, batch):
            yield x[first:first + batch]
        left = x[whole:].clone() if whole < len(x) else None  # a copy: the block goes


def row_weights(chosen: np.ndarray | None, weight: float) -> np.ndarray | None:
    """[rows] float32: ``weight`` at the ``chosen`` rows, 1 elsewhere (None when every row weighs the same)."""
    if chosen is None or weight == 1:
        return None
    return np.where(chosen, np.float32(weight), np.float32(1))


@torch.no_grad()
def restart_dead(model, optimizer: torch.optim.Optimizer, dead: torch.Tensor, x: torch.Tensor, error: torch.Tensor,
                 pre: torch.Tensor, k: int, seed: int = 0, w: torch.Tensor | None = None) -> torch.Tensor:
    """Bricken et al. 2023's resampling, for TopK: each ``dead`` latent ([d_sae] bool; at most one a row of the
    batch) restarts at a row of ``x`` ([batch, d_in]) drawn by its squared ``error`` ([batch, d_out]): its decoder row
    that row's error at unit norm, its encoder column the row less the batch's mean, scaled so that its
    pre-activation is the row's k-th largest (of ``pre`` [batch, d_sae]) there and 0 at the mean; Adam's moments of
    what restarts cleared; the draws from ``seed``, each row's squared error weighed by ``w`` [batch] (the loss's row
    weights; None: alike). Returns the latents restarted ([n] long)."""
    generator = torch.Generator(x.device).manual_seed(seed)
    weight = error.pow(2).sum(1) * (1 if w is None else w)  # [batch]
    latents = dead.nonzero().squeeze(1)  # [dead]
    n = min(len(latents), int((weight > 0).sum()))
    if n == 0:
        return latents[:0]
    latents = latents[torch.randperm(len(latents), generator=generator, device=x.device)[:n]]  # [n]
    rows = torch.multinomial(weight, n, replacement=False, generator=generator)  # [n]
    centre = x.mean(0)  # [d_in]
    direction = x[rows] - centre  # [n, d_in]
    threshold = pre[rows].topk(k, dim=-1).values[:, -1].clamp_min(1e-3)  # [n]: the row's k-th largest
    model.W_enc[:, latents] = (direction * (threshold / direction.pow(2).sum(1).clamp_min(1e-12))[:, None]).T
    model.b_enc[latents] = 0.0
    model.b_enc[latents] = -model.pre_activations(centre[None])[0, latents]
    model.W_dec[latents] = error[rows] / error[rows].norm(dim=1, keepdim=True).clamp_min(1e-12)
    for param, index in ((model.W_enc, (slice(None), latents)), (model.b_enc, latents), (model.W_dec, latents)):
        for moment in ("exp_avg", "exp_avg_sq"):
            if moment in optimizer.state.get(param, {}):
                optimizer.state[param][moment][index] = 0.0
    return latents


def standardiser(sample: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(each input dimension's mean [d_in], its standard deviation [d_in], at least a thousandth of their mean) over
    ``sample`` [n, d_in]."""
    x = torch.from_numpy(np.asarray(sample, np.float32)).to(device)
    std = x.std(0)
    return x.mean(0), std.clamp_min(1e-3 * float(std.mean()) + 1e-12)


@torch.no_grad()
def fold_standardiser(model, shift: torch.Tensor | None, scale: torch.Tensor | None):
    """A transcoder trained on (x - ``shift``) / ``scale`` made to read x itself, the same map: W_enc and W_skip
    divided by the scale along the input, b_enc and b_dec less what the shift gives. Returns it (as is when
    ``shift`` is None)."""
    if shift is None or scale is None:
        return model
    model.W_enc.div_(scale[:, None])  # [d_in, d_sae]
    model.b_enc.sub_(shift @ model.W_enc)
    if getattr(model, "W_skip", None) is not None:
        model.W_skip.div_(scale[None, :])  # [d_out, d_in]
        model.b_dec.sub_(model.W_skip @ shift)
    return model


def batch_loss(model, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None, cfg: SaeTrainConfig, variance: float,
               since_fired: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch's (normalised MSE, AuxK loss, pre-activations [batch, d_sae], error [batch, d_out], dead [d_sae]
    bool) for ``x`` [batch, d_in] → ``y`` [batch, d_out], each row weighing ``w`` [batch] (None: alike); counts the
    batch's tokens into ``since_fired`` [d_sae] (zero for the latents that fired) before the dead are read."""
    pre = model.pre_activations(x)  # [batch, d_sae]
    top = pre.topk(cfg.k, dim=-1, sorted=False)
    values = torch.relu(top.values)
    error = y - model.reconstruct_topk(x, values, top.indices)  # [batch, d_out]
    squared = error.pow(2).sum(1)  # [batch]
    nmse = (squared.mean() if w is None else (w * squared).sum() / w.sum()) / variance
    fired = torch.zeros(len(since_fired), dtype=torch.bool, device=since_fired.device)
    fired[top.indices[values > 0]] = True
    since_fired += len(x)
    since_fired[fired] = 0
    dead = since_fired > cfg.dead_tokens  # [d_sae]
    aux = torch.zeros((), device=x.device)
    n_dead, k_aux = int(dead.sum()), model.W_dec.shape[1] // 2
    if n_dead:
        take = min(k_aux, n_dead)
        dead_pre = pre.masked_fill(~dead[None, :], float("-inf")).topk(take, dim=-1, sorted=False)
        aux_recon = torch.nn.functional.embedding_bag(dead_pre.indices, model.W_dec, mode="sum",
                                                      per_sample_weights=torch.relu(dead_pre.values))
        aux = (error.detach() - aux_recon).pow(2).sum(1).mean() / variance * min(n_dead / k_aux, 1.0)
    return nmse, aux, pre, error, dead


def train_sae(acts: ActivationSet, cfg: SaeTrainConfig, out: str | Path, info: SaeInfo, device: str = "cpu",
              resume: bool = True, progress: Callable[[int, int, dict], None] | None = None,
              stop: Callable[[], bool] | None = None) -> tuple[TopKSAE, SaeTrainState]:
    """Train on ``acts`` into ``out`` (the SAE in SAELens's format at ``out``, the checkpoint in
    ``out/checkpoint``); ``resume`` goes on from a checkpoint made with the same settings.

    Args:
        acts: the activations trained on (``layer_activations``).
        cfg: the SAE's width, k, steps and rates (``SaeTrainConfig``).
        out: the SAE's folder.
        info: what the SAE reads (the model, the hook point), written into its ``cfg.json``.
        device: where it trains.
        resume: go on from a checkpoint made with the same settings.
        progress: called with (step, total steps, info).
        stop: asked between steps.

    Returns:
        (the ``TopKSAE``, its training state: steps, losses, dead features).
    """
    out = Path(out)
    d_in = acts.rows.shape[1]
    cfg.check(d_in, len(acts.rows))
    if cfg.standardise:
        raise BertScopeError("An SAE rebuilds its own input, centred by its decoder bias: standardise is for "
                             "transcoders.")
    torch.manual_seed(cfg.seed)
    sae = TopKSAE(d_in, cfg.expansion * d_in, cfg.k, info=info, seed=cfg.seed)
    identity = {"model": info.model_name, "hook": info.hook_name, "d_in": d_in, "tokens": len(acts.rows),
                "activations": acts.folder.name}  # what the run reads: a checkpoint of other data is refused
    sae, state = train_dictionary(sae, acts.rows, None, cfg, out, identity, lambda m, f: save_sae(m, f),
                                  lambda f, d: load_sae(f, d), device, resume, progress, stop)
    if stop is not None and state.epoch < cfg.epochs:
        return sae, state
    sae.info.extra.update({"trained_tokens": int(len(acts.rows)), "epochs": cfg.epochs, "k": cfg.k,
                           "expansion": cfg.expansion, "seed": cfg.seed, "history": state.history,
                           **cfg.departures()})
    save_sae(sae, out)
    return sae, state


def train_dictionary(model, rows: np.ndarray, targets: np.ndarray | None, cfg: SaeTrainConfig, out: Path,
                     identity: dict, save: Callable, load: Callable, device: str = "cpu", resume: bool = True,
                     progress: Callable[[int, int, dict], None] | None = None,
                     stop: Callable[[], bool] | None = None, chosen: np.ndarray | None = None) -> tuple:
    """The training loop of a TopK dictionary (an SAE: ``targets`` None, it rebuilds its input; a transcoder: the
    same rows of its output point), the module docstring's recipe, checkpointed into ``out/checkpoint`` after every
    epoch (``save(model, folder)`` / ``load(folder, device)``); ``chosen`` ([rows] bool) the rows weighed
    ``cfg.chosen_weight`` times. Returns (the model, its ``SaeTrainState``)."""
    d_in, d_sae = rows.shape[1], model.d_sae
    device = torch.device(device)
    model = model.to(device)
    names = model.parameter_names()
    params = [getattr(model, n) for n in names]
    optimizer = torch.optim.Adam(params, lr=cfg.rate(d_sae), betas=(0.9, 0.999), eps=6.25e-10)
    state, since_fired = SaeTrainState(), torch.zeros(d_sae, dtype=torch.long, device=device)
    checkpoint = out / "checkpoint"
    spread = np.linspace(0, len(rows) - 1, min(len(rows), 8192)).astype(int)
    shift, scale = standardiser(rows[spread], device) if cfg.standardise and targets is not None else (None, None)
    sample = torch.from_numpy(np.asarray((rows if targets is None else targets)[spread], np.float32)).to(device)
    variance = float((sample - sample.mean(0)).pow(2).sum(1).mean())  # the normalised MSE's denominator
    found = read_checkpoint(checkpoint, cfg, optimizer, names, ("since_fired",), identity) if resume else None
    if found is not None:
        model.load_state_dict(load(found[2] / "sae", device).state_dict())
        state, since_fired = SaeTrainState(**found[0]), found[1]["since_fired"].to(device)
    else:
        with torch.no_grad():
            model.b_dec.copy_(geometric_median(sample))  # [d_out]: where the reconstruction starts
    weighed = chosen is not None and cfg.chosen_weight != 1  # as row_weights decides
    width = d_in + (0 if targets is None else targets.shape[1]) + int(weighed)
    block_rows = max(cfg.batch_tokens, cfg.block_bytes // (width * 4))
    steps_per_epoch = len(rows) // cfg.batch_tokens
    total = steps_per_epoch * cfg.epochs
    if 0 < total // 2 < cfg.resample_every:
        raise BertScopeError(f"Dead latents restart in the run's first half ({total // 2:,} of {total:,} steps): "
                             f"--resample-every {cfg.resample_every:,} would never restart one; give fewer steps.")
    for epoch in range(state.epoch, cfg.epochs):
        generator = np.random.default_rng(cfg.seed * 1_000 + epoch)
        sums = {"loss": 0.0, "nmse": 0.0, "aux": 0.0}
        started, steps = time.perf_counter(), 0
        blocks = blocks_of(rows, block_rows, generator, targets, chosen, cfg.chosen_weight)
        for both in batches_of(blocks, cfg.batch_tokens, device):
            if stop is not None and stop():
                return fold_standardiser(model, shift, scale), state
            w, both = (both[:, -1], both[:, :-1]) if weighed else (None, both)  # w [batch]: each row's weight
            x, y = (both, both) if targets is None else (both[:, :d_in], both[:, d_in:])  # [batch, d_in], [batch, d_out]
            x = x if shift is None or scale is None else (x - shift) / scale
            nmse, aux, pre, error, dead = batch_loss(model, x, y, w, cfg, variance, since_fired)
            n_dead = int(dead.sum())
            loss = nmse + cfg.aux_coef * aux
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            model.remove_parallel_gradient()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            for group in optimizer.param_groups:
                group["lr"] = cfg.rate_at(d_sae, state.step, total)
            optimizer.step()
            model.normalise_decoder()
            state.step += 1
            if n_dead and cfg.resamples_at(state.step, total):
                since_fired[restart_dead(model, optimizer, dead, x, error.detach(), pre.detach(), cfg.k,
                                         cfg.seed * 1_000_003 + state.step, w)] = 0
            steps += 1
            for key, value in (("loss", loss), ("nmse", nmse), ("aux", aux)):
                sums[key] += float(value.detach())
            if progress is not None:
                progress(state.step, total, {"epoch": epoch + 1, "nmse": float(nmse.detach()), "dead": n_dead / d_sae})
        state.epoch = epoch + 1
        state.history.append({"epoch": epoch + 1, **{k: v / max(steps, 1) for k, v in sums.items()},
                              "dead_share": float((since_fired > cfg.dead_tokens).float().mean()),
                              "seconds": time.perf_counter() - started,
                              "tokens_per_s": steps * cfg.batch_tokens / max(time.perf_counter() - started, 1e-9)})
        save_checkpoint(checkpoint, lambda tmp: save(model, tmp / "sae"), optimizer, names, state,
                        {"since_fired": since_fired}, cfg, identity)
    return fold_standardiser(model, shift, scale), state
