"""Interchange interventions against pyvene 0.1.8's, on the same model, pairs, positions and rotation
(``make test-peers``, in ``.venv-pyvene``). pyvene has no BERT mapping (its BERT-family wrappers sit in open
pull requests #237 and #239), but it reaches any module by its path: ``bert.encoder.layer[L].output`` is the
block's output after its LayerNorm, BertScope's ``blocks.L.hook_resid_post`` (hidden state L + 1)."""

from __future__ import annotations

import pytest
import torch

pv = pytest.importorskip("pyvene")

from bertscope.causal.interchange import intervened, prepare_pairs  # noqa: E402
from bertscope.causal.subspaces import Rotation  # noqa: E402
from bertscope.causal.variables import MODELS, draw_pairs  # noqa: E402
from peers.references import pyvene_margins  # noqa: E402


@pytest.mark.parametrize(("layer", "k"), [(0, 1), (2, 4), (4, 16)])
def test_interchange_equals_pyvenes(mlm, layer, k):
    model = MODELS["agreement"]
    prepared = prepare_pairs(mlm, draw_pairs(model, 12, seed=layer), slot=model.slot)
    rows = list(range(len(prepared.rows)))
    rotation = Rotation(mlm.hidden_size, k, seed=layer + 7)
    with torch.no_grad():
        ours = intervened(mlm, prepared, layer + 1, rows, rotation)
        alone = intervened(mlm, prepared, layer + 1, rows, None)
        theirs = pyvene_margins(pv, mlm, prepared, rows, layer, rotation.weight.detach())
    assert (ours - alone).abs().max() > 1e-2  # the intervention does something
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()


def test_the_training_gradient_equals_pyvenes(mlm):
    """The interchange-training loss and its gradient on the rotation, from the same rotation and batch
    (what one step of any optimiser does with them is then the same; the parametrisations' stored bases
    differ, so the gradient is compared on the orthonormal matrix itself)."""
    from torch.nn.utils import parametrize

    model = MODELS["agreement"]
    prepared = prepare_pairs(mlm, draw_pairs(model, 16, seed=3), slot=model.slot)
    rows = list(range(len(prepared.rows)))
    ours = Rotation(mlm.hidden_size, 2, seed=1)
    iv = pv.LowRankRotatedSpaceIntervention(embed_dim=mlm.hidden_size, low_rank_dimension=2)
    iv.rotate_layer.weight = ours.weight.detach().clone()
    with parametrize.cached():
        mine, theirs = ours.weight, iv.rotate_layer.weight  # [d_model, 2] each, computed once in the block
        mine.retain_grad()
        theirs.retain_grad()
        loss = torch.nn.functional.softplus(-intervened(mlm, prepared, 3, rows, ours, grad=True)).mean()
        loss.backward()
        margins = pyvene_margins(pv, mlm, prepared, rows, 2, None, intervention=iv)
        their_loss = torch.nn.functional.softplus(-margins).mean()
        their_loss.backward()
    assert abs(float(loss) - float(their_loss)) < 1e-5
    assert mine.grad.abs().max() > 1e-3
    assert torch.allclose(mine.grad, theirs.grad, atol=1e-5), (mine.grad - theirs.grad).abs().max()
