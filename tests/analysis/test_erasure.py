"""Concept erasure (``analysis.erasure``): LEACE as EleutherAI's concept-erasure computes it, its
guarantee, INLP, the random control of the same rank, the hook and the file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from bertscope.analysis.erasure import (
    SVD_TOL,
    Eraser,
    control_for,
    edit_report,
    fit_eraser,
    fit_inlp,
    fit_leace,
    random_eraser,
)
from bertscope.errors import BertScopeError


def concept_data(n: int = 3000, dim: int = 24, classes: int = 4, seed: int = 0):
    """States whose class means differ in a few directions, and their labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    means = rng.normal(size=(classes, dim)) * 1.5
    mix = rng.normal(size=(dim, dim)) / np.sqrt(dim)  # correlated noise: LEACE's whitening matters
    x = (means[y] + rng.normal(size=(n, dim)) @ mix + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    return x, np.array([f"c{i}" for i in y]), y


def held_out_accuracy(x: np.ndarray, y: np.ndarray) -> float:
    cut = len(x) * 2 // 3
    return LogisticRegression(max_iter=500).fit(x[:cut], y[:cut]).score(x[cut:], y[cut:])


def test_leace_is_concept_erasures_own_eraser():
    from concept_erasure import LeaceFitter

    x, labels, y = concept_data()
    ours = fit_leace(x, labels)
    theirs = LeaceFitter.fit(torch.from_numpy(x).double(), torch.nn.functional.one_hot(torch.from_numpy(y)).double(),
                             svd_tol=SVD_TOL, constrain_cov_trace=False).eraser
    expected = theirs(torch.from_numpy(x).double()).numpy()
    assert np.abs(ours.apply(x) - expected).max() < 1e-4
    assert ours.rank == 3 and ours.classes == ("c0", "c1", "c2", "c3")  # k - 1 for k classes


def test_after_leace_no_linear_probe_beats_the_majority():
    x, labels, y = concept_data()
    majority = np.bincount(y).max() / len(y)
    assert held_out_accuracy(x, y) > 0.9
    erased = fit_leace(x, labels).apply(x)
    means = np.stack([erased[y == c].mean(0) for c in range(4)])
    assert np.abs(means - means.mean(0)).max() < 1e-3  # the class-conditional means are one: linear guardedness
    assert held_out_accuracy(erased, y) <= majority + 0.03
    control = control_for(fit_leace(x, labels)).apply(x)
    assert held_out_accuracy(control, y) > 0.85  # three random directions of 24 leave the concept readable


def test_rare_labels_are_erased_too_and_held_out_rows_are_guarded():
    """Imbalanced labels (one class in 200): every contrast goes, so the rank is k - 1, and a probe
    trained and scored on rows the eraser never saw stays at the majority."""
    rng = np.random.default_rng(1)
    n, dim = 6000, 32
    y = rng.choice(5, n, p=[0.6, 0.25, 0.1, 0.045, 0.005])
    x = (rng.normal(size=(5, dim))[y] * 2 + rng.normal(size=(n, dim))).astype(np.float32)
    labels = np.array([f"c{i}" for i in y])
    fit, rest = slice(0, 3000), slice(3000, n)
    eraser = fit_leace(x[fit], labels[fit])
    assert eraser.rank == 4
    report = edit_report(eraser, x[fit], labels[fit])
    assert report.class_mean_gap < 1e-4 and 0 < report.edit < 1
    assert edit_report(control_for(eraser), x[fit], labels[fit]).class_mean_gap > 0.1  # random: the means stay apart
    majority = np.bincount(y[rest]).max() / 3000
    assert held_out_accuracy(x[rest], y[rest]) > 0.9
    assert held_out_accuracy(eraser.apply(x[rest]), y[rest]) <= majority + 0.02


def test_inlp_holds_out_whole_sentences():
    x, labels, _ = concept_data(n=1200)
    sentences = np.repeat(np.arange(100), 12)  # twelve words a sentence
    assert fit_inlp(x, labels, groups=sentences).rank > 0
    with pytest.raises(BertScopeError, match="both sides"):
        fit_inlp(x[:24], labels[:24], groups=sentences[:24])  # two sentences: one side has too few labels


def test_leace_changes_the_states_less_than_inlp_and_both_keep_the_mean():
    x, labels, y = concept_data()
    leace, inlp = fit_eraser(x, labels, "leace"), fit_eraser(x, labels, "inlp")
    assert inlp.rank >= leace.rank  # INLP removes a classifier's directions per round
    for eraser in (leace, inlp):
        assert np.abs(eraser.apply(x).mean(0) - x.mean(0)).max() < 1e-3
    assert ((leace.apply(x) - x) ** 2).sum(1).mean() < ((inlp.apply(x) - x) ** 2).sum(1).mean()
    majority = np.bincount(y).max() / len(y)
    assert held_out_accuracy(inlp.apply(x), y) <= majority + 0.05


def test_inlp_removes_an_orthonormal_span():
    x, labels, _ = concept_data()
    inlp = fit_inlp(x, labels)
    assert np.allclose(inlp.left.T @ inlp.left, np.eye(inlp.rank), atol=1e-4)
    assert np.allclose(inlp.right, inlp.left.T)


def test_the_random_control_has_the_same_rank_and_mean():
    x, labels, _ = concept_data()
    leace = fit_leace(x, labels)
    control = control_for(leace, seed=3)
    assert control.rank == leace.rank and control.method == "random"
    assert np.allclose(control.left.T @ control.left, np.eye(leace.rank), atol=1e-5)
    assert np.allclose(control.bias, leace.bias)
    assert not np.allclose(control_for(leace, seed=4).left, control.left)  # seeded, and the seed matters
    with pytest.raises(BertScopeError, match="does not fit"):
        random_eraser(8, 9, np.zeros(8))


def test_the_hook_erases_every_position_as_apply_does():
    x, labels, _ = concept_data(dim=16)
    eraser = fit_leace(x, labels)
    states = torch.from_numpy(x[:60].reshape(3, 20, 16))  # [batch, pos, dim]
    hooked = eraser.hook()(states, None)
    assert hooked.shape == states.shape and hooked.dtype == states.dtype
    assert np.abs(hooked.numpy() - eraser.apply(x[:60]).reshape(3, 20, 16)).max() < 1e-5
    half = eraser.hook()(states.to(torch.bfloat16), None)
    assert half.dtype == torch.bfloat16  # the pass keeps its dtype


def test_an_eraser_saves_without_pickle(tmp_path):
    x, labels, _ = concept_data(dim=10)
    eraser = fit_leace(x, labels)
    eraser.save(tmp_path / "e.npz")
    back = Eraser.load(tmp_path / "e.npz")
    assert back.rank == eraser.rank and back.classes == eraser.classes and back.method == "leace"
    assert np.array_equal(back.apply(x), eraser.apply(x))


def test_bad_concepts_are_one_line():
    x, _, _ = concept_data(n=50, dim=4)
    with pytest.raises(BertScopeError, match="one label"):
        fit_leace(x, ["a"] * 50)
    with pytest.raises(BertScopeError, match="must align"):
        fit_leace(x, ["a", "b"] * 10)
    with pytest.raises(BertScopeError, match="No erasure method"):
        fit_eraser(x, ["a", "b"] * 25, "svd")
    with pytest.raises(BertScopeError, match="fitted on 4-dimensional"):
        fit_leace(x, ["a", "b"] * 25).apply(np.zeros((2, 5)))
