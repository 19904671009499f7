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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet
from bertscope.features.checkpoints import read_checkpoint, save_checkpoint
from bertscope.features.sae import SaeInfo, TopKSAE, load_sae, save_sae


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

    def check(self, d_in: int, tokens: int) -> None:
        d_sae = self.expansion * d_in
        if self.expansion < 1:
            raise BertScopeError("--expansion must be at least 1.")
        if not 0 < self.k < d_sae:
            raise BertScopeError(f"k must be between 1 and {d_sae - 1} (the latents, {d_sae}, less one); got {self.k}.")
        if self.epochs < 1 or self.batch_tokens < 1:
            raise BertScopeError("Epochs and the batch size must be at least 1.")
        if not 1 <= self.chosen_weight <= 1000:
            raise BertScopeError(f"The chosen rows' weight is between 1 and 1,000; got {self.chosen_weight}.")
        if tokens < self.batch_tokens:
            raise BertScopeError(f"The corpus gave {tokens:,} tokens, fewer than one batch ({self.batch_tokens:,}): "
                                 "give it more sentences or a smaller batch.")

    def rate(self, d_sae: int) -> float:
        return self.lr if self.lr is not None else 2e-4 / math.sqrt(d_sae / 2**14)


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
              weights: np.ndarray | None = None):
    """[rows, d] float32 blocks in a shuffled order, each block's rows shuffled; with ``targets`` (the same rows of
    another point, a transcoder's output), each row is [d + d_target]: the input then its target; with ``weights``
    ([rows], each row's weight in the error) one column more, last."""
    starts = np.arange(0, len(rows), block_rows)
    for start in generator.permutation(starts):
        parts = [np.asarray(rows[start:start + block_rows], np.float32)]
        if targets is not None:
            parts.append(np.asarray(targets[start:start + block_rows], np.float32))
        if weights is not None:
            parts.append(np.asarray(weights[start:start + block_rows], np.float32)[:, None])
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
    torch.manual_seed(cfg.seed)
    sae = TopKSAE(d_in, cfg.expansion * d_in, cfg.k, info=info, seed=cfg.seed)
    identity = {"model": info.model_name, "hook": info.hook_name, "d_in": d_in, "tokens": len(acts.rows),
                "activations": acts.folder.name}  # what the run reads: a checkpoint of other data is refused
    sae, state = train_dictionary(sae, acts.rows, None, cfg, out, identity, lambda m, f: save_sae(m, f),
                                  lambda f, d: load_sae(f, d), device, resume, progress, stop)
    if stop is not None and state.epoch < cfg.epochs:
        return sae, state
    sae.info.extra.update({"trained_tokens": int(len(acts.rows)), "epochs": cfg.epochs, "k": cfg.k,
                           "expansion": cfg.expansion, "seed": cfg.seed, "history": state.history})
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
    sample = torch.from_numpy(np.asarray((rows if targets is None else targets)[spread], np.float32)).to(device)
    variance = float((sample - sample.mean(0)).pow(2).sum(1).mean())  # the normalised MSE's denominator
    found = read_checkpoint(checkpoint, cfg, optimizer, names, ("since_fired",), identity) if resume else None
    if found is not None:
        model.load_state_dict(load(found[2] / "sae", device).state_dict())
        state, since_fired = SaeTrainState(**found[0]), found[1]["since_fired"].to(device)
    else:
        with torch.no_grad():
            model.b_dec.copy_(geometric_median(sample))  # [d_out]: where the reconstruction starts
    weights = row_weights(chosen, cfg.chosen_weight)  # [rows] or None
    weighed = weights is not None
    width = d_in + (0 if targets is None else targets.shape[1]) + int(weighed)
    block_rows = max(cfg.batch_tokens, cfg.block_bytes // (width * 4))
    steps_per_epoch = len(rows) // cfg.batch_tokens
    total = steps_per_epoch * cfg.epochs
    k_aux = model.W_dec.shape[1] // 2
    for epoch in range(state.epoch, cfg.epochs):
        generator = np.random.default_rng(cfg.seed * 1_000 + epoch)
        sums = {"loss": 0.0, "nmse": 0.0, "aux": 0.0}
        started, steps = time.perf_counter(), 0
        for both in batches_of(blocks_of(rows, block_rows, generator, targets, weights), cfg.batch_tokens, device):
            if stop is not None and stop():
                return model, state
            w, both = (both[:, -1], both[:, :-1]) if weighed else (None, both)  # w [batch]: each row's weight
            x, y = (both, both) if targets is None else (both[:, :d_in], both[:, d_in:])  # [batch, d_in], [batch, d_out]
            pre = model.pre_activations(x)  # [batch, d_sae]
            top = pre.topk(cfg.k, dim=-1, sorted=False)
            values = torch.relu(top.values)
            recon = model.reconstruct_topk(x, values, top.indices)
            error = y - recon
            squared = error.pow(2).sum(1)  # [batch]
            nmse = (squared.mean() if w is None else (w * squared).sum() / w.sum()) / variance
            fired = torch.zeros(d_sae, dtype=torch.bool, device=device)
            fired[top.indices[values > 0]] = True
            since_fired += len(x)
            since_fired[fired] = 0
            dead = since_fired > cfg.dead_tokens
            aux = torch.zeros((), device=device)
            n_dead = int(dead.sum())
            if n_dead:
                take = min(k_aux, n_dead)
                dead_pre = pre.masked_fill(~dead[None, :], float("-inf")).topk(take, dim=-1, sorted=False)
                aux_recon = torch.nn.functional.embedding_bag(dead_pre.indices, model.W_dec, mode="sum",
                                                              per_sample_weights=torch.relu(dead_pre.values))
                aux = (error.detach() - aux_recon).pow(2).sum(1).mean() / variance * min(n_dead / k_aux, 1.0)
            loss = nmse + cfg.aux_coef * aux
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            model.remove_parallel_gradient()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            model.normalise_decoder()
            state.step += 1
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
    return model, state
