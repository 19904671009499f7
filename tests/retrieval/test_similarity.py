"""Integrated Jacobians for a pair of texts (``retrieval.similarity``): the matrix sums to the score less what the
references account for, to an error that shrinks as 1/steps; every entry equals xsbert's formula computed
independently here by reverse-mode autograd (a loop of backward passes over the output dimensions, as
``XSTransformer._compute_integrated_jacobian`` does); words are sums of their pieces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.core.hook_points import state_hook
from bertscope.core.hooked_pass import run
from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import embed
from bertscope.retrieval.similarity import explain_pair, reference_ids, token_contributions

A, B = "the dog ate the bread .", "a man is eating food ."


@pytest.fixture(scope="module")
def lm(tiny_bert_dir):
    return load_model(str(tiny_bert_dir))


def test_the_pairs_sum_to_the_score_less_the_references_share_and_the_error_shrinks(lm):
    errors = [explain_pair(lm, A, B, steps=n).error for n in (5, 20, 80)]
    assert errors[2] < errors[1] < errors[0] and errors[2] < 2e-3
    x = explain_pair(lm, A, B, steps=80)
    np.testing.assert_allclose(x.score, float(embed(lm, [A]).vectors[0] @ embed(lm, [B]).vectors[0]
                                              / np.linalg.norm(embed(lm, [A]).vectors[0])
                                              / np.linalg.norm(embed(lm, [B]).vectors[0])), atol=1e-5)  # cosine
    assert x.pairs.shape == (len(x.a.tokens), len(x.b.tokens))
    np.testing.assert_allclose(x.a_scores, x.pairs.sum(1)) and np.testing.assert_allclose(x.b_scores, x.pairs.sum(0))
    assert not x.pairs[0].any() and not x.pairs[:, -1].any()  # [CLS], [SEP]: the reference keeps them


def _xsbert(lm, text: str, steps: int, at: int) -> np.ndarray:
    """xsbert's integrated Jacobian times the change, by reverse mode: one backward pass per output dimension over
    the batch of interpolation points k/N, k = 1..N, summed over the hidden dimension -> [dim, token]."""
    ids = torch.tensor(lm.tokenizer(text)["input_ids"])
    name = state_hook(lm.model, at)

    def state(i):
        from bertscope.core.hooked_pass import run_with_cache

        _, cache = run_with_cache(lm, {"input_ids": i[None], "attention_mask": torch.ones(1, len(i), dtype=torch.long)},
                                  [name], encoder_only=True)
        return cache[name][0].detach()

    x, r = state(ids), state(reference_ids(lm, ids))
    alphas = torch.arange(1, steps + 1, dtype=torch.float64).div(steps).float()
    g = (r[None] + alphas[:, None, None] * (x - r)[None]).requires_grad_(True)
    feed = {"input_ids": ids[None].expand(steps, -1), "attention_mask": torch.ones(steps, len(ids), dtype=torch.long)}
    hidden = run(lm, feed, encoder_only=True, grad=True, hooks={name: lambda _o, hook: g}).last_hidden_state
    e = torch.nn.functional.normalize(hidden.mean(1), dim=1)  # the default: mean pooling, cosine
    rows = []
    for k in range(e.shape[1]):
        grad = torch.autograd.grad(e[:, k].sum(), g, retain_graph=True)[0]  # [step, token, hidden]
        rows.append(((grad.sum(0) / steps) * (x - r)).sum(-1))
    return torch.stack(rows).double().numpy()


@pytest.mark.parametrize("at", [0, 1])
def test_each_tokens_contribution_equals_xsberts_reverse_mode_computation(lm, at):
    ours = token_contributions(lm, A, steps=7, at=at)
    np.testing.assert_allclose(ours.contributions, _xsbert(lm, A, 7, at), atol=1e-5)


def test_the_byte_budget_changes_the_batches_not_the_numbers(lm, monkeypatch):
    """One tangent and one point a batch (the budget at its floor) or every one at once: the same matrix."""
    from bertscope.retrieval import similarity

    whole = token_contributions(lm, A, steps=5)
    monkeypatch.setattr(similarity, "ROW_BYTES", 1)
    np.testing.assert_allclose(token_contributions(lm, A, steps=5).contributions, whole.contributions, atol=1e-6)


def test_words_are_the_sums_of_their_pieces_and_the_first_order_estimate_says_its_error(lm):
    x = explain_pair(lm, "the riverside was unbelievably playful .", B, steps=20)
    a_words, b_words, pairs, a_scores, _ = x.by_words()
    assert "riverside" in a_words and "unbelievably" in a_words and "playful" in a_words
    assert pairs.shape == (len(a_words), len(b_words))
    np.testing.assert_allclose(pairs.sum(), x.pairs.sum(), atol=1e-9)
    np.testing.assert_allclose(a_scores.sum(), x.a_scores.sum(), atol=1e-9)
    rough = explain_pair(lm, "the riverside was unbelievably playful .", B, method="first-order")
    assert rough.steps == 1 and rough.error > x.error  # cheaper, and it says how far off it is
    ig = explain_pair(lm, A, B, method="ig", steps=40)
    assert ig.pairs is None and ig.error < 5e-3
    json = x.to_json(words=True)
    assert json["units"] == "words" and json["a_tokens"] == a_words


def test_bad_inputs_are_one_line(lm):
    with pytest.raises(BertScopeError, match="Text 1 is empty"):
        explain_pair(lm, "  ", B)
    with pytest.raises(BertScopeError, match="Unknown method 'shap'"):
        explain_pair(lm, A, B, method="shap")
    with pytest.raises(BertScopeError, match="no layer after it"):
        explain_pair(lm, A, B, at=lm.num_layers)
    for method in ("ij", "ig", "first-order"):  # ig's own loop once ran no step and divided by 0 (NaN, exit 0)
        with pytest.raises(BertScopeError, match="at least 1"):
            explain_pair(lm, A, B, method=method, steps=0)


def test_a_text_of_nothing_the_tokenizer_reads_is_one_line(lm):
    """Zero-width spaces leave [CLS] and [SEP] alone: an empty map that raised in the figure, after the job."""
    from bertscope.figures.similarity import pair_map
    from bertscope.retrieval.similarity import pair_cost

    for method in ("ij", "first-order", "ig"):
        with pytest.raises(BertScopeError, match="no word the model reads"):
            explain_pair(lm, A, "\u200b\u200b", method=method, steps=2)
    with pytest.raises(BertScopeError, match="no word the model reads"):
        pair_cost(lm, "\u200b", B)
    pair_map(["[CLS]"], ["[SEP]"], np.zeros((0, 0)), "empty")  # drawn empty, never a ValueError


def test_the_cost_is_what_passes_through_the_model_and_progress_reaches_the_end(lm):
    """The cost a hosted demo caps before the job (steps x tokens² a text for ij), and the bar a Stop acts at:
    every batch of each text reported, and a progress that raises (a Stop) ends the work there."""
    from bertscope.retrieval.similarity import pair_cost, text_tokens

    na, nb = text_tokens(lm, A), text_tokens(lm, B)
    assert pair_cost(lm, A, B, "ij", 7) == 7 * (na * na + nb * nb)
    assert pair_cost(lm, A, B, "first-order", 7) == na * na + nb * nb
    assert pair_cost(lm, A, B, "ig", 7) == 7 * (na + nb)
    for method in ("ij", "ig"):
        reports: list[tuple[int, int, str]] = []
        explain_pair(lm, A, B, method, 6, progress=lambda d, t, s: reports.append((d, t, s)))
        stages = [s for _, _, s in reports]
        assert stages == sorted(stages) and set(stages) == {"Text a, batches", "Text b, batches"}
        for stage in set(stages):
            mine = [(d, t) for d, t, s in reports if s == stage]
            assert [d for d, _ in mine] == sorted(d for d, _ in mine) and mine[-1][0] == mine[-1][1]

    class Stop(Exception):
        pass

    def stop(done, total, stage):
        raise Stop

    with pytest.raises(Stop):
        explain_pair(lm, A, B, "ij", 6, progress=stop)


def test_the_deletion_test_reads_the_pairs_score_first_and_its_batches_change_nothing(lm, monkeypatch):
    from bertscope.retrieval import faithful

    reports: list[str] = []
    curves = faithful.deletion_curves(lm, A, B, steps=4, progress=lambda d, t, s: reports.append(s))
    score = explain_pair(lm, A, B, "first-order", 1).score
    assert [c.method for c in curves] == list(faithful.METHODS)
    for c in curves:
        assert c.scores[0] == pytest.approx(score, abs=1e-5) and len(c.scores) == len(c.removed)
    ordinary = sorted(curves[-1].order)
    assert all(sorted(c.order) == ordinary for c in curves)  # each ranks the same tokens of b
    assert "Deleting b's top tokens, methods" in reports and "Integrated Jacobians: Text b, batches" in reports
    monkeypatch.setattr(faithful, "DEFAULT_BATCH_BYTES", 1)  # a deletion size a pass
    again = faithful.deletion_curves(lm, A, B, steps=4)
    for c, d in zip(curves, again):
        np.testing.assert_allclose(c.scores, d.scores, atol=1e-5)
