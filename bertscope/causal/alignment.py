"""DAS as a user asks for it (``bertscope das``, the Interventions page, notebooks): a shipped causal model or a
file of counterfactual pairs, one layer or every one, and the layer × position map of IIA.

    >>> from bertscope import load_model
    >>> from bertscope.causal import align
    >>> result = align(load_model("bundled-mlm"), task="agreement", layer=1)  # doctest: +SKIP
    >>> result.iia, result.iia_random_rotation, result.iia_neurons           # doctest: +SKIP
    (0.95, 0.49, 0.49)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from bertscope.causal.das import (
    DEFAULT_PAIRS,
    IIA_BATCH,
    DasResult,
    Progress,
    TrainSettings,
    counterfactuals_for,
    das,
    das_units,
    iia,
    split,
    train,
    train_units,
)
from bertscope.causal.interchange import Prepared, prepare_pairs
from bertscope.causal.subspaces import Rotation
from bertscope.causal.variables import MAX_PAIRS, Counterfactual, model_for
from bertscope.circuits.pairs import reads
from bertscope.core.hook_points import blocks
from bertscope.core.layers import Layer, hidden_index, hidden_label
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.runtime.progress import within

MAX_MAP_CELLS = 400
MIN_PAIRS = 40  # drawn: about half are kept (the network right on both, as many same as different)
MAX_EPOCHS = 50  # (states × positions) a map trains: each is a training run


def pairs_for(lm: LoadedModel, task: str | None = None, data: Sequence[Counterfactual] | None = None,
              positions: Sequence[int] | None = None, n: int = DEFAULT_PAIRS, seed: int = 0,
              progress: Progress | None = None) -> tuple[str, Prepared]:
    """(the pairs' name, the pairs prepared): a shipped causal model's (``task``: drawn, kept where the network
    gets them right, aligned at the variable's word unless ``positions`` are given) or the user's ``data``
    (aligned at ``positions``). ``progress(done, total)`` after each batch of a task's pairs is read."""
    if (task is None) == (data is None):
        raise BertScopeError("Give a causal task (--task) or a file of counterfactual pairs (--data), one of them.")
    if data is not None:
        if positions is None:
            raise BertScopeError("Say which token positions the pairs' variable is aligned to (--positions 2; "
                                 "0 is [CLS]).")
        return "pairs", prepare_pairs(lm, data, positions=positions)
    model = model_for(str(task))
    where = reads(lm)
    if model.reads != where:
        raise BertScopeError(f"The {model.name} task reads {model.reads} decisions, which {lm.name} does not make; "
                             f"run it on {model.model}.")
    kept, _ = counterfactuals_for(lm, model, n, seed, progress)
    return model.name, prepare_pairs(lm, kept, positions=positions, slot=None if positions else model.slot)


def check_run(pairs: int, settings: TrainSettings) -> None:
    """One line when a run asks for pairs or epochs out of range (``align``, the map's every cell alike)."""
    if not MIN_PAIRS <= pairs <= MAX_PAIRS:
        raise BertScopeError(f"A task draws {MIN_PAIRS} to {MAX_PAIRS:,} pairs; {pairs:,} was asked.")
    if not 1 <= settings.epochs <= MAX_EPOCHS:
        raise BertScopeError(f"Training runs 1 to {MAX_EPOCHS} epochs; {settings.epochs} was asked.")


def align(lm: LoadedModel, *, task: str | None = None, data: Sequence[Counterfactual] | None = None,
          layer: Layer | str = 0, positions: Sequence[int] | None = None, dim: int | None = 1,
          pairs: int = DEFAULT_PAIRS, settings: TrainSettings = TrainSettings(),
          progress: Progress | None = None) -> DasResult:
    """Distributed alignment search on a shipped causal model's pairs or the user's.

    Args:
        lm: the network (a masked LM, a sequence classifier or a tagger).
        task: a shipped causal model (``causal.variables.MODELS``: agreement, negation, tagging); or
        data: counterfactual pairs (``read_counterfactuals``), aligned at ``positions``.
        layer: a block from 0, "embeddings", or "all" (every state searched without controls, then the best one
            with them; ``by_layer`` holds each state's IIA).
        positions: token indices aligned in every pair (0 is [CLS]); a task's default is its variable's word.
        dim: the subspace's width; None learns it (boundless DAS).
        pairs: how many pairs a task draws before those the network gets wrong are dropped.
        settings: epochs, learning rate, batch, seed.
        progress: called with (done, total) passes: the drawn pairs read (a total of their own), then each
            training step and scoring batch of the search (one total).

    Returns:
        A ``DasResult``: IIA on the held-out pairs beside its controls, the learned basis [d_model, dim].
    """
    check_run(pairs, settings)
    name, prepared = pairs_for(lm, task, data, positions, pairs, settings.seed, progress)
    return search_prepared(lm, name, prepared, layer, dim, settings, progress)


def search_prepared(lm: LoadedModel, name: str, prepared: Prepared, layer: Layer | str, dim: int | None = 1,
                    settings: TrainSettings = TrainSettings(), progress: Progress | None = None) -> DasResult:
    """``align`` on pairs already prepared (``pairs_for``)."""
    n_layers = len(blocks(lm.model))
    if str(layer).strip().lower() != "all":
        hidden_index(layer, n_layers)  # one line for a layer the model lacks
        return das(lm, prepared, layer, dim=dim, task=name, settings=settings, progress=progress)
    states = list(range(n_layers + 1))
    light = das_units(prepared, settings, controls=False)  # a state searched; the best again with its controls
    total = len(states) * light + das_units(prepared, settings)
    by_layer = []
    for i, state in enumerate(states):
        found = das(lm, prepared, hidden_label(state), dim=dim, task=name, settings=settings, controls=False,
                    progress=within(progress, i * light, total))
        by_layer.append({"layer": found.layer, "iia": found.iia})
    best = max(range(len(states)), key=lambda i: (by_layer[i]["iia"], -i))
    result = das(lm, prepared, hidden_label(states[best]), dim=dim, task=name, settings=settings,
                 progress=within(progress, len(states) * light, total))
    return replace(result, by_layer=by_layer)


@dataclass(frozen=True)
class IiaMap:
    """IIA of a ``dim``-wide subspace trained at each (state, position) of pairs of one token count."""

    model: str
    task: str
    tokens: list[str]  # the first pair's base tokens (the positions' labels)
    layers: list[Layer]  # "embeddings", 0, 1, …
    iia: np.ndarray  # [state, position]
    dim: int

    def to_json(self) -> dict:
        return {"model": self.model, "task": self.task, "dim": self.dim, "tokens": self.tokens,
                "layers": self.layers, "iia": [[round(float(x), 4) for x in row] for row in self.iia]}


def iia_map(lm: LoadedModel, prepared: Prepared, *, task: str = "pairs", dim: int = 1,
            layers: Sequence[Layer] | None = None, settings: TrainSettings = TrainSettings(),
            progress: Progress | None = None) -> IiaMap:
    """Where the variable lives: for every state and every token position, DAS trained on the pairs' training
    share aligned at that one position, scored on the held-out share.

    Args:
        lm: the network.
        prepared: pairs of one token count (``pairs_for``).
        task: the pairs' name, for titles.
        dim: the subspace's width at every cell.
        layers: the states mapped (default every one: "embeddings", 0, …).
        settings: epochs, learning rate, batch, seed.
        progress: called with (done, total) passes over all cells (each cell's training, then its scoring).

    Returns:
        An ``IiaMap``: ``iia`` [state, position] beside the first pair's tokens.
    """
    lengths = {row.length for row in prepared.rows}
    if len(lengths) > 1:
        raise BertScopeError(f"A map aligns every pair at the same token positions: the pairs have {len(lengths)} "
                             f"token counts ({', '.join(map(str, sorted(lengths)))}); give pairs of one length.")
    n_layers = len(blocks(lm.model))
    states = [hidden_index(x, n_layers) for x in layers] if layers is not None else list(range(n_layers + 1))
    length = lengths.pop()
    if len(states) * length > MAX_MAP_CELLS:
        raise BertScopeError(f"A map of {len(states)} layers × {length} positions is {len(states) * length} "
                             f"trainings; the limit is {MAX_MAP_CELLS}: choose fewer layers.")
    train_rows, held_rows = split(len(prepared.rows), settings.seed)
    out = np.zeros((len(states), length))
    cells = len(states) * length
    trained = train_units(prepared, train_rows, settings)
    unit = trained + len(prepared.batches(held_rows, IIA_BATCH))  # a cell's passes: its training, then its IIA
    for i, state in enumerate(states):
        for position in range(length):
            start = (i * length + position) * unit
            at = replace(prepared, positions=[(position,)] * len(prepared.rows))
            swap = Rotation(lm.hidden_size, dim, settings.seed)
            train(lm, at, state, train_rows, swap, settings, within(progress, start, cells * unit))
            out[i, position] = iia(lm, at, state, held_rows, swap, progress=within(progress, start + trained,
                                                                                   cells * unit))
    return IiaMap(lm.name, task, list(prepared.rows[0].tokens), [hidden_label(s) for s in states], out, dim)
