"""Feature-based probes (the BERT paper's Table 7 combinations) on states whose labels are written
into known layers: each mix reads the layers it names, the concatenation is four times as wide,
the learned weighted sum puts its weight where the labels are."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.analysis.frozen_layers import MIXES, _states, frozen_layer_probes
from bertscope.errors import BertScopeError


class States:
    """A stand-in for ``CachedStates``: labels, and [word, dim] arrays for the embeddings and 6 layers."""

    def __init__(self, labels, arrays):
        self.labels = labels
        self._arrays = arrays
        self.layers = tuple(range(len(arrays)))

    def layer(self, i):
        return self._arrays[i]


def synthetic(n: int, informative: set[int], seed: int) -> States:
    centres = np.random.default_rng(99).normal(0, 1, (3, 16)) * 3  # one class's place, on both sides
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    arrays = []
    for s in range(7):
        x = rng.normal(0, 1, (n, 16)).astype(np.float32)
        if s in informative:
            x += centres[y].astype(np.float32)
        arrays.append(x)
    return States([f"c{v}" for v in y], arrays)


def test_each_mix_reads_its_layers_and_the_weighted_sum_finds_the_informative_one():
    train, held = synthetic(3000, {6}, 0), synthetic(600, {6}, 1)
    out = {r.name: r for r in frozen_layer_probes(train, held, seed=0, lr=1e-2, min_steps=300)}
    assert list(out) == list(MIXES)
    assert out["last"].accuracy > 0.95 and out["embeddings"].accuracy < 0.5  # the labels live in the last layer only
    assert out["second_to_last"].accuracy < 0.5 and out["concat_last_four"].accuracy > 0.95
    assert out["concat_last_four"].width == 4 * 16 and out["sum_last_four"].width == 16
    weights = out["weighted_sum"].weights
    assert len(weights) == 7 and sum(weights) == pytest.approx(1.0) and int(np.argmax(weights)) == 6
    assert out["weighted_sum"].accuracy > 0.95
    assert _states(train, "sum_last_four") == [3, 4, 5, 6] and _states(train, "second_to_last") == [5]


def test_bad_mixes_and_shallow_models_are_one_line():
    train = synthetic(100, {6}, 0)
    with pytest.raises(BertScopeError, match="Unknown features 'middle'"):
        frozen_layer_probes(train, train, mixes=["middle"])
    shallow = States(train.labels, train._arrays[:3])
    with pytest.raises(BertScopeError, match="at least four layers"):
        frozen_layer_probes(shallow, shallow, mixes=["last"])
