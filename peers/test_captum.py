"""Integrated gradients, gradient × input and layer integrated gradients against captum's own, on the same
model, target, baseline and steps (captum's Gauss-Legendre rule, its default). captum's side is written from
its documentation on the Hugging Face model alone; only the text is shared."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr import InputXGradient, IntegratedGradients, LayerIntegratedGradients

from bertscope import inspect
from bertscope.attribution.gradients import gradient_x_input, integrated_gradients
from bertscope.attribution.targets import Target
from peers.references import ANSWER, MASKED, captum_setup


def ours(lm, method: str, steps: int = 50):
    ins = inspect(lm, MASKED)
    target = Target("token", int(list(ins.tokens).index("[MASK]")), ANSWER)
    if method == "grad":
        return gradient_x_input(lm, ins, target).scores
    return integrated_gradients(lm, ins, target, steps=steps).scores


@pytest.mark.parametrize("steps", [20, 50])
def test_integrated_gradients_equal_captums(mlm, steps):
    f, _, ids, base_ids, _ = captum_setup(mlm)
    table = mlm.model.get_input_embeddings()
    with torch.no_grad():
        x, base = table(ids), table(base_ids)
    theirs = IntegratedGradients(f).attribute(x, baselines=base, n_steps=steps, method="gausslegendre")
    theirs = theirs.sum(-1)[0].detach().numpy()
    mine = ours(mlm, "ig", steps)
    np.testing.assert_allclose(mine, theirs, atol=1e-5 * np.abs(theirs).max())


def test_gradient_times_input_equals_captums(mlm):
    f, _, ids, _, _ = captum_setup(mlm)
    with torch.no_grad():
        x = mlm.model.get_input_embeddings()(ids)
    theirs = InputXGradient(f).attribute(x).sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(ours(mlm, "grad"), theirs, atol=1e-5 * np.abs(theirs).max())


def test_layer_integrated_gradients_on_the_word_embeddings_equal_ours(mlm):
    """captum's LayerIntegratedGradients on the word-embedding table, fed ids: BertScope's IG is over the
    word-piece embeddings (positions and segments added inside the model, the same for both ends)."""
    _, f, ids, base_ids, _ = captum_setup(mlm)
    lig = LayerIntegratedGradients(f, mlm.model.get_input_embeddings())
    theirs = lig.attribute(ids, baselines=base_ids, n_steps=50, method="gausslegendre")
    theirs = theirs.sum(-1)[0].detach().numpy()
    np.testing.assert_allclose(ours(mlm, "ig", 50), theirs, atol=1e-5 * np.abs(theirs).max())
