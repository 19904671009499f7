"""Distributed alignment search (Geiger, Wu, Potts, Icard & Goodman, CLeaR 2024; boundless DAS, Wu et al.,
NeurIPS 2023): find the subspace of one hidden state, at the positions a causal variable is aligned to,
whose interchange makes the network answer as the causal model does under the same interchange.

Interchange intervention training: for counterfactual pairs (``causal.variables``) the subspace
(``causal.subspaces``) is swapped from source to base (``causal.interchange``) and trained by Adam on the
cross-entropy of the answer against the foil, logit(answer) − logit(foil) being the decision the network
makes (the model's weights frozen). The score is the interchange intervention accuracy (IIA): the share of
held-out pairs where the intervened network prefers the causal model's answer.

Beside it, as the paper and MIB's causal-variable track report them:
- ``iia_random_rotation``: a random subspace of the same width, frozen (what a subspace of that size does
  by chance);
- ``iia_neurons``: the same training on the model's own basis (a mask over neurons, k neurons kept);
- ``iia_full_vector``: the whole state swapped (the most any subspace of it can reach);
- ``iia_base``: no intervention (the answer is the base's own output on half the pairs: about 0.5).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from bertscope.causal.interchange import Prepared, factual, intervened, prepare_pairs, source_states
from bertscope.causal.subspaces import Boundless, FullVector, Neurons, Rotation
from bertscope.causal.variables import CausalModel, Counterfactual, draw_pairs
from bertscope.core.hook_points import blocks
from bertscope.core.layers import Layer, hidden_index, hidden_label
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.runtime.progress import within

DEFAULT_PAIRS = 800  # drawn; those the network gets right are kept
HELD_OUT = 0.3
MAX_DIM = 256
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 4
    lr: float = 1e-2
    batch: int = 32
    seed: int = 0
    boundary_penalty: float = 1.0  # boundless DAS: the loss on the boundary's width (pyvene's tutorial's 1)
    mask_penalty: float = 1e-2  # the neuron control: the loss on the mask's mean, so that few neurons carry it
    mask_lr: float = 0.1  # the neuron control's logits start at 0 (half of every neuron swapped) and must part


@dataclass(frozen=True)
class DasResult:
    model: str
    task: str
    layer: Layer
    positions: tuple[int, ...]  # token indices (0 is [CLS]); each pair's own for a variable's word
    dim: int  # the subspace's width (boundless: learned)
    pairs_train: int
    pairs_held_out: int
    iia: float
    iia_random_rotation: float
    iia_neurons: float
    iia_full_vector: float
    iia_base: float
    seconds: float
    basis: np.ndarray = field(repr=False)  # [d_model, dim] the learned subspace's orthonormal basis
    by_layer: list[dict] = field(default_factory=list)  # [{"layer", "iia"}] when every layer was searched

    def to_json(self) -> dict:
        out: dict[str, object] = {"model": self.model, "task": self.task, "layer": self.layer, "positions": list(self.positions),
               "dim": self.dim, "pairs_train": self.pairs_train, "pairs_held_out": self.pairs_held_out,
               "iia": self.iia, "iia_random_rotation": self.iia_random_rotation, "iia_neurons": self.iia_neurons,
               "iia_full_vector": self.iia_full_vector, "iia_base": self.iia_base, "seconds": self.seconds}
        if self.by_layer:
            out["by_layer"] = self.by_layer
        return out


IIA_BATCH = 64


def _sources(lm: LoadedModel, prepared: Prepared, state: int, batches: Sequence[list[int]],
             progress: Progress | None = None) -> dict[int, torch.Tensor]:
    """{batch: [rows, position, d_model] the sources' states}; ``progress(done, len(batches))`` after each."""
    out = {}
    for i, chosen in enumerate(batches):
        out[i] = source_states(lm, prepared, state, chosen)
        if progress:
            progress(i + 1, len(batches))
    return out


def iia(lm: LoadedModel, prepared: Prepared, state: int, chosen: Sequence[int], swap: torch.nn.Module | None,
        batch: int = IIA_BATCH, progress: Progress | None = None) -> float:
    """The share of ``chosen`` pairs whose intervened decision prefers the answer; ``progress(done, total)``
    after each batch."""
    right = 0
    batches = prepared.batches(chosen, batch)
    with torch.no_grad():
        for done, rows in enumerate(batches, 1):
            right += int((intervened(lm, prepared, state, rows, swap) > 0).sum())
            if progress:
                progress(done, len(batches))
    return right / max(1, len(chosen))


def train_units(prepared: Prepared, chosen: Sequence[int], settings: TrainSettings) -> int:
    """The passes ``train`` reports: each batch's sources once, then every step."""
    return len(prepared.batches(chosen, settings.batch)) * (1 + settings.epochs)


def _run_units(prepared: Prepared, settings: TrainSettings) -> tuple[int, int]:
    """(the passes a training reports, those a scoring of the held-out pairs reports)."""
    train_rows, held_rows = split(len(prepared.rows), settings.seed)
    return train_units(prepared, train_rows, settings), len(prepared.batches(held_rows, IIA_BATCH))


def das_units(prepared: Prepared, settings: TrainSettings, controls: bool = True) -> int:
    """The passes ``das`` reports over ``prepared``: the subspace's training and three scorings, and with the
    controls a second training and two more scorings."""
    trained, scored = _run_units(prepared, settings)
    return (2 if controls else 1) * trained + (5 if controls else 3) * scored


def train(lm: LoadedModel, prepared: Prepared, state: int, chosen: Sequence[int], swap: torch.nn.Module,
          settings: TrainSettings = TrainSettings(), progress: Progress | None = None) -> list[float]:
    """Interchange intervention training of ``swap``'s parameters on the ``chosen`` pairs; the losses.
    ``progress(done, total)`` after each source batch is read and after each step (``train_units`` in all)."""
    batches = prepared.batches(chosen, settings.batch)
    total = train_units(prepared, chosen, settings)
    sources = _sources(lm, prepared, state, batches, within(progress, 0, total))
    params = [p for p in swap.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=settings.mask_lr if isinstance(swap, Neurons) else settings.lr)
    steps = settings.epochs * len(batches)
    order = list(range(len(batches)))
    rng = random.Random(settings.seed)
    losses, step = [], 0
    for _ in range(settings.epochs):
        rng.shuffle(order)
        for b in order:
            if isinstance(swap, Boundless):  # pyvene's tutorial: 50 -> 0.1 over training
                swap.temperature = float(np.geomspace(50.0, 0.1, max(2, steps))[step])
            margins = intervened(lm, prepared, state, batches[b], swap, sources[b], grad=True)  # [rows]
            loss = torch.nn.functional.softplus(-margins).mean()  # cross-entropy of the answer vs the foil
            if isinstance(swap, Boundless):
                loss = loss + settings.boundary_penalty * swap.boundary.clamp(1e-3, 1.0).sum()
            if isinstance(swap, Neurons):
                loss = loss + settings.mask_penalty * swap.mask().sum() / swap.mask().numel()
            optimizer.zero_grad(set_to_none=True)
            loss.backward(inputs=params)
            optimizer.step()
            losses.append(float(loss.detach()))
            step += 1
            if progress:
                progress(len(batches) + step, total)
    return losses


def counterfactuals_for(lm: LoadedModel, model: CausalModel, n: int = DEFAULT_PAIRS, seed: int = 0,
                        progress: Progress | None = None) -> tuple[list[Counterfactual], int]:
    """(the drawn pairs the network gets right, how many were drawn): the base's decision agrees with the
    causal model's output for the base, and the source's with its own; as many pairs whose variable has one
    value in both as pairs where it differs. ``progress(done, total)`` after each batch read."""
    pairs = list(dict.fromkeys(draw_pairs(model, n, seed)))  # once each: a held-out pair is not a training pair
    prepared = prepare_pairs(lm, pairs, slot=model.slot)
    base, source = factual(lm, prepared, progress)
    right = [p for p, b, s in zip(pairs, base, source) if (b > 0) == p.same and s > 0]
    same, different = [p for p in right if p.same], [p for p in right if not p.same]
    n_each = min(len(same), len(different))  # as many of each, so that no intervention scores 0.5
    kept = [p for p in right if p in same[:n_each] or p in different[:n_each]]
    if len(kept) < 10:
        raise BertScopeError(f"{lm.name} gets {len(kept)} of {n} {model.name} pairs right on its own; DAS needs at "
                             f"least 10 (it aligns the network's own behaviour): run it on {model.model}.")
    return kept, n


def split(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = max(1, round(n * HELD_OUT))
    return sorted(order[held:]), sorted(order[:held])


def check_pair_count(n: int, seed: int = 0) -> None:
    """One line unless ``n`` pairs leave at least 5 to train on once a share is held out (read before a job)."""
    if len(split(n, seed)[0]) < 5:
        raise BertScopeError(f"{n} pairs are too few to train on and hold some out: give at least 8.")


def check_dim(lm: LoadedModel, dim: int | None) -> None:
    if dim is not None and not 1 <= dim <= min(MAX_DIM, lm.hidden_size):
        raise BertScopeError(f"The subspace's width is 1 to {min(MAX_DIM, lm.hidden_size)}; {dim} was asked.")


def das(lm: LoadedModel, prepared: Prepared, layer: Layer, *, dim: int | None = 1, task: str = "pairs",
        settings: TrainSettings = TrainSettings(), controls: bool = True, progress: Progress | None = None
        ) -> DasResult:
    """DAS at hidden state ``layer`` ("embeddings" or a block number) over ``prepared`` pairs (a held-out
    share kept aside): the learned subspace's IIA, and the controls' (``controls=False`` skips them).
    ``dim=None`` learns the width (boundless DAS)."""
    check_dim(lm, dim)
    n_layers = len(blocks(lm.model))
    state = hidden_index(layer, n_layers)
    check_pair_count(len(prepared.rows), settings.seed)
    train_rows, held_rows = split(len(prepared.rows), settings.seed)
    start = time.perf_counter()
    d = lm.hidden_size
    swap: Rotation | Boundless = Rotation(d, dim, settings.seed) if dim is not None else Boundless(d, settings.seed)
    trained, scored = _run_units(prepared, settings)
    total = das_units(prepared, settings, controls)  # every pass: Stop waits for one at most
    offset = [0]

    def part(units: int) -> Progress | None:  # the next ``units`` of ``total``
        offset[0] += units
        return within(progress, offset[0] - units, total)
    train(lm, prepared, state, train_rows, swap, settings, part(trained))
    if isinstance(swap, Boundless):
        swap.temperature = 0.1
    width = swap.dim
    basis = swap.weight.detach()[:, :width] if isinstance(swap, Boundless) else swap.weight.detach()
    scores = {key: iia(lm, prepared, state, held_rows, how, progress=part(scored))
              for key, how in (("iia", swap), ("iia_base", None), ("iia_full_vector", FullVector()))}
    if controls:
        frozen = Rotation(d, max(1, width), settings.seed + 1)
        scores["iia_random_rotation"] = iia(lm, prepared, state, held_rows, frozen, progress=part(scored))
        neurons = Neurons(d, max(1, width))
        train(lm, prepared, state, train_rows, neurons, settings, part(trained))
        neurons.hard = True
        scores["iia_neurons"] = iia(lm, prepared, state, held_rows, neurons, progress=part(scored))
    positions = prepared.positions[0] if len(set(prepared.positions)) == 1 else ()
    return DasResult(lm.name, task, hidden_label(state), positions, width, len(train_rows), len(held_rows),
                     scores["iia"], scores.get("iia_random_rotation", float("nan")),
                     scores.get("iia_neurons", float("nan")), scores["iia_full_vector"], scores["iia_base"],
                     time.perf_counter() - start, basis.cpu().numpy())
