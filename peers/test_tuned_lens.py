"""The tuned lens against EleutherAI's ``tuned-lens`` 0.2.0 (in ``.venv-tunedlens``), on bundled-mlm at its masks.

tuned-lens reads a decoder's states through its final norm and unembedding (``Unembed``) and has no BERT mapping
(``model_surgery.get_final_norm`` raises for BERT). Its ``Unembed`` is given what reads an encoder's state at a
mask: the masked-LM head's transform (dense, GELU, LayerNorm) as the "final norm" and its decoder as the
unembedding. Then:

- **outputs**: the shipped lens's translators loaded into the package's ``TunedLens``: its logits at every state
  equal BertScope's (``lenses.tuned``) to 1e-4;
- **training**: two steps of the package's recipe, written as its ``train_loop`` runs it (each translator's
  KL(final ‖ lens) backpropagated on its own, gradients clipped to norm 1, its ``Optimizer().create_optim`` and
  ``create_scheduler``) on the batches BertScope's ``train_tuned_lens`` draws, give the translators BertScope's
  training gives, to 1e-5. The package computes the loss under bfloat16 autocast; both sides run float32 here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

tl = pytest.importorskip("tuned_lens")

from tuned_lens.nn.lenses import TunedLens as TheirLens  # noqa: E402
from tuned_lens.nn.lenses import TunedLensConfig  # noqa: E402
from tuned_lens.nn.unembed import Unembed  # noqa: E402


def _without_dataloader2() -> None:
    """tuned-lens 0.2.0's ``scripts.ingredients`` imports torchdata's ``dataloader2`` and ``datapipes``, gone since
    torchdata 0.10 (no torchdata that has them installs beside torch 2.13); only its data ingredient uses them, which
    is not used here, so the two names stand in as empty modules and the optimizer's own code is the package's."""
    import sys
    import types

    import torchdata

    for name in ("dataloader2", "datapipes"):
        if not hasattr(torchdata, name):
            stub = types.ModuleType(f"torchdata.{name}")
            stub.DataLoader2 = stub.DistributedReadingService = object  # type: ignore[attr-defined]
            setattr(torchdata, name, stub)
            sys.modules[f"torchdata.{name}"] = stub


_without_dataloader2()
from tuned_lens.scripts.ingredients import Optimizer  # noqa: E402

from bertscope.lenses.shipped import find_lens  # noqa: E402
from bertscope.lenses.tuned import make_batch, train_tuned_lens, training_batches, vocabulary_readout  # noqa: E402
from bertscope.mlm.logit_lens import mlm_head  # noqa: E402
from peers.conftest import SENTENCES  # noqa: E402


def their_unembed(lm) -> Unembed:
    """tuned-lens's ``Unembed`` reading a state at a mask: the head's transform, then its decoder."""
    head = lm.model.cls.predictions  # BertForMaskedLM's head: transform (dense, GELU, LayerNorm), then decoder
    unembed = Unembed.__new__(Unembed)
    torch.nn.Module.__init__(unembed)
    unembed.final_norm = head.transform
    unembed.unembedding = head.decoder
    h = torch.randn(3, lm.hidden_size)
    assert torch.allclose(unembed(h), mlm_head(lm)(h), atol=1e-5)  # the same head BertScope reads
    return unembed


def their_lens(lm, weight=None, bias=None) -> TheirLens:
    config = TunedLensConfig(base_model_name_or_path=lm.name, d_model=lm.hidden_size,
                             num_hidden_layers=lm.num_layers, bias=True)
    lens = TheirLens(their_unembed(lm), config)
    if weight is not None:
        with torch.no_grad():
            for i, t in enumerate(lens.layer_translators):
                t.weight.copy_(torch.as_tensor(weight[i]))
                t.bias.copy_(torch.as_tensor(bias[i]))
    return lens


def test_the_shipped_lens_reads_as_the_packages(mlm):
    ours = find_lens(mlm)
    assert ours is not None
    lens = their_lens(mlm, ours.weight.float(), ours.bias.float())
    batch = make_batch(mlm, SENTENCES, "mlm", np.random.default_rng(0))
    read = vocabulary_readout(mlm)
    with torch.no_grad():
        for state in range(mlm.num_layers):
            h = batch.states[state][batch.where[:, 0], batch.where[:, 1]]  # [n, d]
            mine = read(ours.translate(h, state), state)
            theirs = lens(h, idx=state)
            assert torch.allclose(mine, theirs, atol=1e-4), (state, (mine - theirs).abs().max())


def test_two_training_steps_equal_the_packages_recipe(mlm):
    texts = SENTENCES * 2
    steps, size, seed = 2, 4, 3
    ours = train_tuned_lens(mlm, texts, steps=steps, batch_size=size, seed=seed)
    lens = their_lens(mlm)
    recipe = Optimizer()
    params = list(lens.layer_translators.parameters())
    opt = recipe.create_optim(params)
    scheduler = recipe.create_scheduler(opt, steps)
    rng = np.random.default_rng(seed)
    for chunk in training_batches(texts, size, steps, seed):  # the batches and masks BertScope drew
        batch = make_batch(mlm, chunk, "mlm", rng)
        labels = batch.target  # [n, V] the final layer's log-probabilities
        for i, h in enumerate(batch.states[:-1]):  # train_loop's body, float32
            logits = lens(h[batch.where[:, 0], batch.where[:, 1]], idx=i)
            loss = torch.sum(labels.exp() * (labels - logits.log_softmax(-1)), dim=-1).mean()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        scheduler.step()
    for i, t in enumerate(lens.layer_translators):
        assert torch.allclose(ours.weight[i].float(), t.weight.detach(), atol=1e-5), i
        assert torch.allclose(ours.bias[i].float(), t.bias.detach(), atol=1e-5), i
    assert float(ours.weight.abs().max()) > 1e-4  # it moved
