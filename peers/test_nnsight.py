"""BertScope's patching grids against nnsight 0.8's interventions on the same model: every (hidden state,
position) and every (layer, head) of the clean run put into the corrupted run, the logit difference read at
[MASK]. nnsight's side is written from its documentation (one trace per row, one invoke per cell)."""

from __future__ import annotations

import numpy as np

from bertscope import patch
from peers.references import CANDIDATES, CLEAN, CORRUPT, nnsight_head_grid, nnsight_hidden_grid


def test_the_hidden_state_grid_equals_nnsights(mlm):
    ours = patch(mlm, CLEAN, CORRUPT, list(CANDIDATES), what="hidden")
    theirs = (nnsight_hidden_grid(mlm) - ours.m_corrupt) / (ours.m_clean - ours.m_corrupt)
    np.testing.assert_allclose(ours.recovered, theirs, atol=1e-5)
    assert np.abs(theirs).max() > 0.5  # a grid with something in it: the last layer at [MASK] recovers all


def test_the_head_grid_equals_nnsights(mlm):
    ours = patch(mlm, CLEAN, CORRUPT, list(CANDIDATES), what="heads")
    theirs = (nnsight_head_grid(mlm) - ours.m_corrupt) / (ours.m_clean - ours.m_corrupt)
    np.testing.assert_allclose(ours.recovered, theirs, atol=1e-5)
    assert np.abs(theirs).max() > 0.05
