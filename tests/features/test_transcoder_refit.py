"""The writes refitted by least squares (``features.transcoder_refit``): an exactly linear target is recovered, no
row fits worse than the trained decoder, every feature fires as it fired, rare features keep their rows, the set it
started from is left alone, a stop returns None, and a set too wide for the budget is one line."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertscope.errors import BertScopeError
from bertscope.features import transcoder_refit
from bertscope.features.transcoder import Transcoder, TranscoderInfo
from bertscope.features.transcoder_refit import check_refittable, refit_writes


def rows(array: torch.Tensor, chosen: torch.Tensor | None = None) -> SimpleNamespace:
    """An ``ActivationSet``'s fields the refit reads, float16 as on disk (``chosen``: the rows masking chose)."""
    return SimpleNamespace(rows=array.numpy().astype(np.float16), tokens=len(array),
                           chosen=None if chosen is None else chosen.numpy())


def half(t: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(t.numpy().astype(np.float16).astype(np.float32))


def setup(n: int = 6000, d: int = 16, skip: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    tc = Transcoder(d, d, 64, 4, skip, TranscoderInfo("m", 2, {"masked": True}), seed=seed).eval()
    x = half(torch.randn(n, d))
    return tc, x


def test_an_exactly_linear_write_is_recovered_and_every_feature_fires_as_it_fired():
    tc, x = setup()
    truth = Transcoder(16, 16, 64, 4, True, seed=5)
    with torch.no_grad():
        truth.load_state_dict({**truth.state_dict(), "W_enc": tc.W_enc, "b_enc": tc.b_enc,
                               "W_skip": torch.randn(16, 16)})
        truth.b_dec.copy_(torch.randn(16))
        y = truth(x)
    fitted = refit_writes(tc, rows(x), rows(y))  # no stop: never None
    with torch.no_grad():
        error = float(((fitted(x) - y) ** 2).mean() / y.var(0).sum() * 16)
        assert error < 1e-4, error  # float16 rows: the target is linear in the features to 3 digits
        torch.testing.assert_close(fitted.encode(x), tc.encode(x))  # the same features, the same activations
    assert torch.equal(fitted.W_enc, tc.W_enc) and torch.equal(fitted.b_enc, tc.b_enc)
    assert fitted.info.extra["refit"]["rows"] == 6000 and fitted.info.extra["masked"] is True
    assert "refit" not in tc.info.extra  # the transcoder it started from is left as it was


def test_no_fit_worse_than_the_trained_decoder_and_rare_features_keep_their_rows(monkeypatch):
    tc, x = setup(skip=False, seed=1)
    y = half(torch.tanh(x @ torch.randn(16, 16)) + 0.1 * torch.randn(len(x), 16))  # not in the transcoder's reach
    start = {n: p.detach().clone() for n, p in tc.named_parameters()}
    with torch.no_grad():
        before = float(((tc(x) - y) ** 2).sum())
    fired = torch.bincount(tc.encode_topk(x)[1].reshape(-1), minlength=64)
    monkeypatch.setattr(transcoder_refit, "MIN_ROWS", int(fired[fired > 0].median()))
    fitted = refit_writes(tc, rows(x), rows(y))  # no stop: never None
    with torch.no_grad():
        after = float(((fitted(x) - y) ** 2).sum())
    assert after < before
    rare = fired < transcoder_refit.MIN_ROWS
    assert 0 < int(rare.sum()) < 64 and fitted.info.extra["refit"]["kept_as_trained"] == int(rare.sum())
    assert torch.equal(fitted.W_dec[rare], tc.W_dec[rare]) and not torch.equal(fitted.W_dec[~rare], tc.W_dec[~rare])
    assert all(torch.equal(p, start[n]) for n, p in tc.named_parameters())


def test_a_stop_and_bad_input_are_one_line_each(monkeypatch):
    tc, x = setup(n=20000)
    asked = []
    assert refit_writes(tc, rows(x), rows(x), stop=lambda: asked.append(1) or len(asked) > 1) is None
    assert len(asked) == 2  # one block read, then stopped
    with pytest.raises(BertScopeError, match="different tokens"):
        refit_writes(tc, rows(x), rows(x[:10]))
    monkeypatch.setattr(transcoder_refit, "SOLVE_BYTES", 2**15)
    with pytest.raises(BertScopeError, match=r"past the 0 GiB budget: refit a set of at most (\d+) features") as err:
        check_refittable(tc)
    most = int(err.value.args[0].split("at most ")[1].split(" ")[0].replace(",", ""))
    wide = Transcoder(16, 16, most, 4, True)
    check_refittable(wide)  # the largest set the message names fits
    with pytest.raises(BertScopeError):
        check_refittable(Transcoder(16, 16, most + 1, 4, True))
    assert str(err.value).count("\n") == 0


def test_the_chosen_rows_weighed_w_times_are_those_rows_counted_w_times(monkeypatch):
    """A weight of 3 on the rows masking chose solves what the unweighted refit solves with each chosen row thrice
    (least squares: G = Aᵀ W A, H = Aᵀ W Y), read over several blocks, and differs from the unweighted solve; a
    weight on text read without masking, or out of [1, 1000], is one line."""
    monkeypatch.setattr(transcoder_refit, "BLOCK_ROWS", 1000)  # the chosen rows sliced block by block
    tc, x = setup(n=3000, seed=2)
    y = half(torch.tanh(x @ torch.randn(16, 16)))
    chosen = torch.rand(len(x)) < 0.15
    weighed = refit_writes(tc, rows(x, chosen), rows(y, chosen), chosen_weight=3.0)
    thrice = torch.cat([x, x[chosen], x[chosen]]), torch.cat([y, y[chosen], y[chosen]])
    counted = refit_writes(tc, rows(thrice[0]), rows(thrice[1]))
    plain = refit_writes(tc, rows(x, chosen), rows(y, chosen))
    assert [f.info.extra["refit"]["kept_as_trained"] for f in (weighed, counted, plain)] == [0, 0, 0]  # all solved
    for name in ("W_dec", "W_skip", "b_dec"):
        torch.testing.assert_close(getattr(weighed, name), getattr(counted, name), atol=2e-4, rtol=1e-3)
    assert not torch.allclose(weighed.W_dec, plain.W_dec, atol=1e-3)
    assert weighed.info.extra["refit"]["chosen_weight"] == 3.0 and plain.info.extra["refit"]["chosen_weight"] == 1
    with pytest.raises(BertScopeError, match="read without masking"):
        refit_writes(tc, rows(x), rows(y), chosen_weight=3.0)
    with pytest.raises(BertScopeError, match="between 1 and 1,000"):
        refit_writes(tc, rows(x, chosen), rows(y, chosen), chosen_weight=0.5)


def test_a_feature_whose_fit_a_few_heavy_rows_carry_keeps_its_trained_row():
    """The rarely-firing rule counts rows as weighed, (Σw)² / Σw²: with 20 chosen rows of 3,000 at weight 1,000, the
    features that fired on one of them are fitted by it alone and keep their trained rows; the others are solved, as
    they are without weights, and unweighted the effective count is the count."""
    tc, x = setup(n=3000, seed=3)
    y = half(torch.tanh(x @ torch.randn(16, 16)))
    chosen = torch.zeros(len(x), dtype=torch.bool)
    chosen[:20] = True
    plain = refit_writes(tc, rows(x, chosen), rows(y, chosen))
    heavy = refit_writes(tc, rows(x, chosen), rows(y, chosen), chosen_weight=1000.0)
    on_chosen = torch.unique(tc.encode_topk(x[:20])[1][tc.encode_topk(x[:20])[0] > 0])
    assert plain.info.extra["refit"]["kept_as_trained"] == 0
    assert heavy.info.extra["refit"]["kept_as_trained"] == len(on_chosen) > 0
    assert torch.equal(heavy.W_dec[on_chosen], tc.W_dec[on_chosen].float())
    support = torch.tensor([[4.0, 2.0, 0.0], [4.0, 2.0, 0.0]])  # unweighted: Σw = Σw² = the count
    assert transcoder_refit.effective_rows(support).tolist() == [4.0, 2.0, 0.0]
