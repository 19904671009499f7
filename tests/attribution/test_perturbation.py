"""The peers' methods (occlusion, LIME, KernelSHAP, SmoothGrad, VarGrad) against computations that do
not go through captum or shap: occlusion against passes with one token at the baseline, KernelSHAP
against Shapley values enumerated by their definition, and every method against the values an
additive score function must give (where each method's answer is known in closed form)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bertscope.attribution import perturbation
from bertscope.attribution.gradients import Attribution, Target, input_embeddings, score_function
from bertscope.attribution.methods import attribute
from bertscope.core.forward import inspect

TEXT = "the [MASK] was muddy ."  # four content tokens: 16 coalitions, KernelSHAP enumerates them
PEERS = ("occlusion", "lime", "kernelshap", "smoothgrad", "vargrad")


def _setup(lm, text=TEXT):
    ins = inspect(lm, text, None, with_logits=False, with_attentions=False, with_hidden_states=False)
    position = ins.tokens.index("[MASK]")
    f, target = score_function(lm, ins, Target("token", position))
    x, base = input_embeddings(lm, ins)
    content = [i for i in range(ins.n_tokens) if not ins.special_mask[i] and i != position]
    return ins, target, f, x, base, content


def _value(f, x, base, kept: set[int], content: list[int]) -> float:
    e = base.clone()
    for i in kept:
        e[0, i] = x[0, i]
    for i in range(x.shape[1]):  # special and mask tokens are the baseline's as they are
        if i not in content:
            e[0, i] = x[0, i]
    with torch.inference_mode():
        return float(f(e))


def test_occlusion_is_the_fall_of_f_with_each_token_at_the_baseline(tiny_bert):
    ins, target, f, x, base, content = _setup(tiny_bert)
    got = perturbation.occlusion(tiny_bert, ins, target)
    with torch.inference_mode():
        fx = float(f(x))
    for i in range(ins.n_tokens):
        e = x.clone()
        e[0, i] = base[0, i]
        with torch.inference_mode():
            expected = fx - float(f(e))
        assert got.scores[i] == pytest.approx(expected, abs=1e-5)
    assert all(got.scores[i] == pytest.approx(0, abs=1e-6) for i in range(ins.n_tokens) if i not in content)
    assert got.f_input == pytest.approx(fx, abs=1e-5)


def test_kernel_shap_enumerates_short_inputs_into_exact_shapley_values(tiny_bert):
    ins, target, f, x, base, content = _setup(tiny_bert)
    m = len(content)
    assert m == 4
    exact = np.zeros(ins.n_tokens)
    for i in content:
        others = [j for j in content if j != i]
        for r in range(m):
            for s in itertools.combinations(others, r):
                weight = math.factorial(r) * math.factorial(m - r - 1) / math.factorial(m)
                exact[i] += weight * (_value(f, x, base, set(s) | {i}, content) - _value(f, x, base, set(s), content))
    got = perturbation.kernel_shap(tiny_bert, ins, target)
    np.testing.assert_allclose(got.scores, exact, atol=1e-5)
    assert got.completeness_error < 1e-5  # efficiency: they sum to f(x) - f(x')
    assert got.scores.sum() == pytest.approx(got.f_input - got.f_baseline, abs=1e-5)


def _additive(weights: torch.Tensor):
    """A score function that is a sum over tokens, w_t · e_t: every method's answer is known."""
    def fake(lm, ins, target):
        return (lambda e: (e.float() * weights).sum((1, 2))), target
    return fake


def test_each_method_recovers_an_additive_score(tiny_bert, monkeypatch):
    """f(e) = Σ_t w_t · e_t: token t's contribution is w_t · (x_t − x'_t) for occlusion, LIME and
    KernelSHAP alike; SmoothGrad's mean is w_t · x_t; VarGrad's is σ² ‖w_t‖² (the variance of
    w_t · (x_t + ε))."""
    ins, target, _, x, base, content = _setup(tiny_bert, "the bank of the [MASK] was muddy and steep .")
    weights = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))  # [1, token, emb]
    monkeypatch.setattr(perturbation, "score_function", _additive(weights))
    share = ((x - base) * weights).sum(-1)[0].numpy()  # [token]
    share[[i for i in range(ins.n_tokens) if i not in content]] = 0
    np.testing.assert_allclose(perturbation.occlusion(tiny_bert, ins, target).scores, share, atol=1e-4)
    np.testing.assert_allclose(perturbation.kernel_shap(tiny_bert, ins, target).scores, share, atol=1e-4)
    lime = perturbation.lime(tiny_bert, ins, target, samples=400).scores
    np.testing.assert_allclose(lime, share, rtol=0.05, atol=0.05 * np.abs(share).max())  # a ridge: shrunk a little
    smooth = perturbation.noise_tunnel(tiny_bert, ins, target, "smoothgrad", samples=400).scores
    exact = (x * weights).sum(-1)[0].numpy()
    sigma = perturbation.NOISE_FRACTION * float(x.max() - x.min())
    noise = sigma * np.sqrt((weights[0] ** 2).sum(-1).numpy() / 400)  # the mean's standard error per token
    assert (np.abs(smooth - exact) < 5 * noise).all()
    var = perturbation.noise_tunnel(tiny_bert, ins, target, "vargrad", samples=400).scores
    expected = sigma ** 2 * (weights[0] ** 2).sum(-1).numpy()
    np.testing.assert_allclose(var, expected, rtol=0.25)


@pytest.mark.parametrize("method", PEERS)
def test_every_peer_method_through_attribute_is_seeded_and_reports_progress(tiny_bert, method):
    text = "the bank of the [MASK] was muddy ."
    seen: list[tuple[int, int]] = []
    one = attribute(tiny_bert, text, method=method, target=Target("token", 5), progress=lambda d, t: seen.append((d, t)))
    two = attribute(tiny_bert, text, method=method, target=Target("token", 5))
    assert isinstance(one.attribution, Attribution) and one.scores.shape == (len(one.tokens),)
    assert np.isfinite(one.scores).all() and np.array_equal(one.scores, two.scores)  # the same input, the same scores
    assert seen and seen[-1][0] == seen[-1][1] and all(d <= t for d, t in seen)
    if method != "smoothgrad" and method != "vargrad":
        assert one.scores[0] == 0 and one.scores[-1] == 0  # [CLS] and [SEP] are the baseline's too
    if method == "vargrad":
        assert (one.scores >= 0).all()


def test_a_progress_callback_that_raises_stops_the_method(tiny_bert):
    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop

    for method in PEERS:
        with pytest.raises(Stop):
            attribute(tiny_bert, TEXT, method=method, target=Target("token", 2), progress=stop)
