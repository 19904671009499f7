"""BertScope's patching grids against nnsight 0.8's interventions on the same model: every (hidden state,
position) and every (layer, head) of the clean run put into the corrupted run, the logit difference read at
[MASK]. nnsight's side is written from its documentation (one trace per row, one invoke per cell)."""

from __future__ import annotations

import numpy as np

from bertscope import patch
from peers.references import CANDIDATES, CLEAN, CORRUPT, nnsight_head_grid, nnsight_hidden_grid, nnsight_metrics


def _recovered(mlm, ours, raw: np.ndarray) -> np.ndarray:
    """nnsight's logit differences as recovered fractions, by its own clean and corrupted runs (held to ours)."""
    m_clean, m_corrupt = nnsight_metrics(mlm)
    assert abs(m_clean - ours.m_clean) < 1e-5 and abs(m_corrupt - ours.m_corrupt) < 1e-5
    return (raw - m_corrupt) / (m_clean - m_corrupt)


def test_the_hidden_state_grid_equals_nnsights(mlm):
    ours = patch(mlm, CLEAN, CORRUPT, list(CANDIDATES), what="hidden")
    theirs = _recovered(mlm, ours, nnsight_hidden_grid(mlm))
    np.testing.assert_allclose(ours.recovered, theirs, atol=1e-5)
    mask = mlm.tokenizer(CORRUPT)["input_ids"].index(mlm.tokenizer.mask_token_id)
    assert abs(theirs[-1, mask] - 1) < 1e-5  # the last layer's output at [MASK] carries all of it
    differs = np.array(mlm.tokenizer(CLEAN)["input_ids"]) != np.array(mlm.tokenizer(CORRUPT)["input_ids"])
    assert np.abs(theirs[0, ~differs]).max() < 1e-5  # the embeddings of tokens both runs share carry nothing
    assert np.abs(theirs[0, differs] - 1).max() < 1e-5  # the differing token's carries all of it


def test_the_head_grid_equals_nnsights(mlm):
    ours = patch(mlm, CLEAN, CORRUPT, list(CANDIDATES), what="heads")
    theirs = _recovered(mlm, ours, nnsight_head_grid(mlm))
    np.testing.assert_allclose(ours.recovered, theirs, atol=1e-5)
    assert np.abs(theirs).max() > 0.05
