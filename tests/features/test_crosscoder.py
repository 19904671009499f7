"""The BatchTopK crosscoder against its definition (science-of-finetuning/dictionary_learning's
``BatchTopKCrossCoder`` and trainer), Latent Scaling against least squares solved directly, and the whole
pipeline on planted data whose shared, base-only and fine-tuned-only directions are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import BertScopeError
from bertscope.features.activations import ActivationSet
from bertscope.features.crosscoder import BatchTopKCrosscoder, CrosscoderInfo, load_crosscoder, save_crosscoder
from bertscope.features.crosscoder_trainer import (
    CrosscoderTrainConfig,
    calibrate_threshold,
    crosscoder_loss,
    paired,
    train_crosscoder,
)
from bertscope.features.model_diff import CLASSES, classify, diff_models, relative_norms


def _cc(d_in=8, d_sae=24, k=3, seed=0) -> BatchTopKCrosscoder:
    cc = BatchTopKCrosscoder(d_in, d_sae, k, CrosscoderInfo(("base", "tuned"), "blocks.1.hook_resid_post"), seed=seed)
    with torch.no_grad():  # decoder norms that differ per latent and per model
        cc.W_dec.mul_(torch.rand(2, d_sae, 1, generator=torch.Generator().manual_seed(seed)) * 2)
        cc.b_enc.normal_(0, 0.1, generator=torch.Generator().manual_seed(seed + 1))
        cc.b_dec.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed + 2))  # a bias a mistake would show
    return cc


def test_the_encoder_sums_both_models_and_batchtopk_keeps_the_largest_weighted_codes():
    cc = _cc()
    x = torch.randn(5, 2, 8, generator=torch.Generator().manual_seed(2))
    z = torch.relu(x[:, 0] @ cc.W_enc[0] + x[:, 1] @ cc.W_enc[1] + cc.b_enc)
    torch.testing.assert_close(cc.pre_activations(x), z)
    s = cc.W_dec.norm(dim=-1).sum(0)
    f = cc.encode(x, use_threshold=False)
    chosen = (z * s).flatten().topk(3 * 5).indices  # k x batch over the whole batch, by z·s
    expected = torch.zeros(5 * 24)
    expected[chosen] = z.flatten()[chosen]  # the raw code is decoded, not z·s
    torch.testing.assert_close(f.flatten(), expected)
    assert int((f > 0).sum()) == 15  # k a token on average over the batch; a row may take more or fewer
    assert not torch.equal((z * s).flatten().topk(15).indices.sort().values, z.flatten().topk(15).indices.sort().values)
    recon = cc.decode(f)
    torch.testing.assert_close(recon[:, 1], f @ cc.W_dec[1] + cc.b_dec[1])
    with pytest.raises(BertScopeError, match="threshold"):
        cc.encode(x)  # no θ before training
    cc.threshold.fill_(0.5)
    torch.testing.assert_close(cc.encode(x), z * ((z * s) > 0.5))


def test_the_loss_is_the_references(monkeypatch):
    """mean over tokens and models of ‖e‖ (not squared) + 1/32 AuxK over the dead latents, per token, on the
    detached error, over its variance."""
    cc = _cc()
    x = torch.randn(6, 2, 8, generator=torch.Generator().manual_seed(3))
    since = torch.zeros(24, dtype=torch.long)
    since[:10] = 10**6  # latents 0-9 dead
    loss, parts = crosscoder_loss(cc, x, since, dead_tokens=1000, aux_coef=1 / 32)
    f = cc.encode(x, use_threshold=False)
    e = x - cc.decode(f)
    torch.testing.assert_close(parts["reconstruction"], e.norm(dim=-1).mean())
    z, s = cc.pre_activations(x), cc.latent_weights()
    dead = torch.zeros(24, dtype=torch.bool)
    dead[:10] = True
    dead &= ~(f > 0).any(0)  # a dead latent that fired in this batch comes back to life
    k_aux = min(4, int(dead.sum()))
    idx = (z * s).masked_fill(~dead, float("-inf")).topk(k_aux, dim=-1).indices
    a = torch.zeros_like(z).scatter(-1, idx, z.gather(-1, idx))
    aux_recon = torch.stack([a @ cc.W_dec[0], a @ cc.W_dec[1]], 1).flatten(1)
    r = e.detach().flatten(1)
    expected_aux = (r - aux_recon).pow(2).sum(-1).mean() / (r - r.mean(0)).pow(2).sum(-1).mean()
    torch.testing.assert_close(parts["aux"], expected_aux)
    torch.testing.assert_close(loss, e.norm(dim=-1).mean() + expected_aux / 32)
    fired = (f > 0).any(0)
    assert (since[fired] == 0).all()  # the latents that fired were reset, the others advanced by the batch
    assert (since[10:][~fired[10:]] == 6).all() and (since[:10][~fired[:10]] == 10**6 + 6).all()
    # AuxK rebuilds the detached error with no decoder bias: no gradient reaches b_dec through it
    (grad,) = torch.autograd.grad(parts["aux"], cc.b_dec, allow_unused=True)
    assert grad is None or float(grad.abs().max()) == 0


def test_save_and_load_round_trip_and_bad_folders(tmp_path):
    cc = _cc()
    cc.threshold.fill_(0.25)
    save_crosscoder(cc, tmp_path / "cc")
    back = load_crosscoder(tmp_path / "cc")
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold"):
        torch.testing.assert_close(getattr(back, name), getattr(cc, name))
    assert back.info.models == ("base", "tuned") and back.info.layer == 1 and back.k == 3
    with pytest.raises(BertScopeError, match="not a crosscoder folder"):
        load_crosscoder(tmp_path)
    (tmp_path / "cc" / "cfg.json").write_text('{"architecture": "topk"}')
    with pytest.raises(BertScopeError, match="not a batchtopk_crosscoder"):
        load_crosscoder(tmp_path / "cc")
    (tmp_path / "cc" / "cfg.json").write_text('{"architecture": "batchtopk_crosscoder", "d_in": "eight"}')
    with pytest.raises(BertScopeError, match="not a number"):
        load_crosscoder(tmp_path / "cc")
    (tmp_path / "cc" / "crosscoder.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(BertScopeError, match="Could not read the crosscoder"):
        load_crosscoder(tmp_path / "cc")


def _acts(tmp_path, name: str, rows: np.ndarray) -> ActivationSet:
    path = tmp_path / f"{name}.npy"
    np.save(path, rows.astype(np.float16))
    where = np.stack([np.arange(len(rows)) // 16, np.arange(len(rows)) % 16], 1).astype(np.int32)
    return ActivationSet(tmp_path, 1, np.load(path, mmap_mode="r"), where, ("planted",))


def test_latent_scaling_is_least_squares_solved_directly(tmp_path):
    torch.manual_seed(0)
    cc = _cc(d_in=8, d_sae=24, k=4)
    with torch.no_grad():  # latent 0 never fires: its β is NaN
        cc.W_enc[:, :, 0] = 0
        cc.b_enc[0] = -1
    cc.threshold.fill_(0.05)
    x = torch.randn(400, 2, 8, generator=torch.Generator().manual_seed(5))
    base, tuned = _acts(tmp_path, "b", x[:, 0].numpy()), _acts(tmp_path, "t", x[:, 1].numpy())
    diff = diff_models(cc, base, tuned, batch_tokens=128)
    xs = torch.from_numpy(np.stack([np.asarray(base.rows, np.float32), np.asarray(tuned.rows, np.float32)], 1))
    with torch.no_grad():
        f = cc.encode(xs)
        recon = cc.decode(f)
    checked = [int(i) for i in np.nonzero(diff.fires)[0][:5]]
    assert len(checked) == 5
    for j in checked:
        d = cc.W_dec[1, j].detach()  # the fine-tuned direction, for both models
        for m in range(2):
            target = xs[:, m] - recon[:, m] + f[:, j:j + 1] * cc.W_dec[m, j].detach()  # the error without j
            design = (f[:, j:j + 1] * d).flatten()  # β·f_j·d stacked over tokens and dimensions
            beta = float(design @ target.flatten() / (design @ design))
            assert diff.beta_error[m, j] == pytest.approx(beta, rel=1e-4, abs=1e-6)
            design_r = (f[:, j:j + 1] * d).flatten()
            beta_r = float(design_r @ recon[:, m].flatten() / (design_r @ design_r))
            assert diff.beta_reconstruction[m, j] == pytest.approx(beta_r, rel=1e-4, abs=1e-6)
    assert diff.fires[0] == 0 and np.isnan(diff.beta_error[:, diff.fires == 0]).all()
    assert np.isnan(diff.beta_reconstruction[:, 0]).all() and not np.isnan(diff.beta_error[:, checked]).any()


def test_relative_norms_and_classes():
    cc = _cc(d_sae=6)
    with torch.no_grad():
        cc.W_dec[0] = torch.tensor([1.0, 0.0, 1.0, 0.05, 1.0, 0.6])[:, None] * torch.eye(6, 8)
        cc.W_dec[1] = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.8, 1.0])[:, None] * torch.eye(6, 8)
    delta = relative_norms(cc)
    np.testing.assert_allclose(delta[:3], [0.0, 1.0, 0.5])
    names = [CLASSES[c] for c in classify(delta, np.array([1, 1, 1, 1, 1, 0]))]
    assert names == ["base-only", "fine-tuned-only", "shared", "fine-tuned-only", "shared", "never fires"]


def test_planted_directions_are_found_shared_base_only_and_fine_tuned_only(tmp_path):
    """Activations built from 12 shared directions (the same in both models), 6 the base alone writes and 6 only
    the fine-tuned model writes, each firing sparsely: the trained crosscoder's best latent for each planted
    direction has the planted kind, and the fine-tuned-only ones pass Latent Scaling's test."""
    rng = np.random.default_rng(0)
    d, n = 32, 60_000
    dirs = np.linalg.qr(rng.normal(size=(d, 24)))[0].T  # 24 orthonormal directions
    codes = (rng.random((n, 24)) < 0.06) * rng.exponential(2.0, size=(n, 24))  # ~1.4 active a token
    base = codes[:, :12] @ dirs[:12] + codes[:, 12:18] @ dirs[12:18]
    tuned = codes[:, :12] @ dirs[:12] + codes[:, 18:24] @ dirs[18:24]
    base += rng.normal(scale=0.01, size=base.shape)
    tuned += rng.normal(scale=0.01, size=tuned.shape)
    a, b = _acts(tmp_path, "base", base[:50_000]), _acts(tmp_path, "tuned", tuned[:50_000])
    cfg = CrosscoderTrainConfig(expansion=4, k=2, epochs=8, batch_tokens=1024, lr=1e-2, dead_tokens=20_000)
    cc, state = train_crosscoder(a, b, cfg, tmp_path / "cc", CrosscoderInfo(("base", "tuned"), "blocks.1.hook_resid_post"))
    assert state.history[-1]["mse"] < state.history[0]["mse"] / 3
    held_a, held_b = _acts(tmp_path, "hb", base[50_000:]), _acts(tmp_path, "ht", tuned[50_000:])
    diff = diff_models(load_crosscoder(tmp_path / "cc"), held_a, held_b)
    assert min(diff.fve) > 0.95, diff.fve
    counts = diff.counts()
    assert counts["base-only"] == 6 and counts["fine-tuned-only"] == counts["fine-tuned-only, real"] == 6, counts
    dec = cc.W_dec.detach().numpy()  # [2, d_sae, d]
    for kind, planted, side in (("shared", range(12), 1), ("base-only", range(12, 18), 0),
                                ("fine-tuned-only", range(18, 24), 1)):
        for p in planted:
            cos = dec[side] @ dirs[p] / np.maximum(np.linalg.norm(dec[side], axis=1), 1e-9)
            best = int(np.argmax(cos))
            assert cos[best] > 0.7, (kind, p, cos[best])  # (a direction may split over two latents)
            assert CLASSES[diff.classes[best]] == kind, (kind, p, diff.delta[best])
            if kind == "fine-tuned-only":
                assert diff.real_fine_tuned_only[best], (diff.nu_error[best], diff.nu_reconstruction[best])


def test_the_threshold_is_the_mean_smallest_kept_code_and_keeps_about_k(tmp_path):
    cc = _cc(d_in=8, d_sae=24, k=3)
    x = np.random.default_rng(7).normal(size=(4096, 2, 8)).astype(np.float32)
    base, tuned = _acts(tmp_path, "b", x[:, 0]), _acts(tmp_path, "t", x[:, 1])
    theta = calibrate_threshold(cc, base, tuned, batch_tokens=256, batches=16)
    xs = torch.from_numpy(np.stack([np.asarray(base.rows, np.float32), np.asarray(tuned.rows, np.float32)], 1))
    with torch.no_grad():
        cuts = []
        for start in range(0, 4096, 256):  # any 16 batches of 256: the cut barely moves from batch to batch
            f = cc.encode(xs[start:start + 256], use_threshold=False)
            cuts.append(float((f * cc.latent_weights())[f > 0].min()))
        assert theta == pytest.approx(np.mean(cuts), rel=0.1)
        l0 = float((cc.encode(xs) > 0).sum(1).float().mean())
    assert 2 <= l0 <= 4  # about k = 3 a token, row by row, without the batch


def test_two_caches_that_do_not_pair_are_one_line(tmp_path):
    x = np.zeros((32, 8), np.float32)
    with pytest.raises(BertScopeError, match="wide"):
        paired(_acts(tmp_path, "a", x), _acts(tmp_path, "b", np.zeros((32, 16), np.float32)))
    with pytest.raises(BertScopeError, match="same positions|not of the same"):
        paired(_acts(tmp_path, "a", x), _acts(tmp_path, "c", x[:16]))


def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_runs_weights(tmp_path):
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(3072, 2, 8)) * rng.random((3072, 1, 8))).astype(np.float32)
    base, tuned = _acts(tmp_path, "b", x[:, 0]), _acts(tmp_path, "t", x[:, 1])
    cfg = CrosscoderTrainConfig(expansion=8, k=1, epochs=3, batch_tokens=256, lr=1e-2, dead_tokens=1_000,
                                block_bytes=8 * 1024, warmup=0.5)  # the warm-up runs past the kill
    info = CrosscoderInfo(("base", "tuned"), "blocks.1.hook_resid_post")
    whole, state = train_crosscoder(base, tuned, cfg, tmp_path / "whole", info)
    per_epoch = state.step // cfg.epochs

    def killed(step, total, _):  # the process dies mid-way through the second epoch: nothing after it runs
        if step == per_epoch + 5:
            raise KeyboardInterrupt

    assert int(cfg.warmup * state.step) > per_epoch + 5
    with pytest.raises(KeyboardInterrupt):
        train_crosscoder(base, tuned, cfg, tmp_path / "cut", info, progress=killed)
    assert not (tmp_path / "cut" / "cfg.json").exists()  # no crosscoder yet: only the first epoch's checkpoint
    from safetensors.torch import load_file

    kept = load_file(str(tmp_path / "cut" / "checkpoint" / "optimizer.safetensors"))
    assert kept["since_fired"].max() > 0  # counters that a resume must carry on, not zero
    resumed, again = train_crosscoder(base, tuned, cfg, tmp_path / "cut", info)
    assert again.step == state.step and [h["epoch"] for h in again.history] == [1, 2, 3]
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold"):
        assert torch.equal(getattr(resumed, name), getattr(whole, name)), name  # bit for bit
    assert torch.equal(load_crosscoder(tmp_path / "cut").W_dec, load_crosscoder(tmp_path / "whole").W_dec)
    fresh, _ = train_crosscoder(base, tuned, cfg, tmp_path / "cut", info, resume=False)  # from scratch: the same
    assert torch.equal(fresh.W_dec, whole.W_dec)
    with pytest.raises(BertScopeError, match="made with other settings"):
        train_crosscoder(base, tuned, CrosscoderTrainConfig(**{**cfg.__dict__, "k": 3}), tmp_path / "cut", info)
    other = CrosscoderInfo(("base", "another-tuned"), "blocks.1.hook_resid_post")  # the same --out, another pair
    with pytest.raises(BertScopeError, match="holds a run on other data"):
        train_crosscoder(base, tuned, cfg, tmp_path / "cut", other)
    (tmp_path / "f").mkdir()
    fewer = _acts(tmp_path / "f", "b", x[:2048, 0]), _acts(tmp_path / "f", "t", x[:2048, 1])
    with pytest.raises(BertScopeError, match="holds a run on other data"):
        train_crosscoder(*fewer, cfg, tmp_path / "cut", info)


def test_the_sparse_decoding_is_the_dense_one_and_so_are_its_gradients():
    from bertscope.features.crosscoder_trainer import sparse_decode

    cc = _cc(d_in=8, d_sae=24, k=3)
    x = torch.randn(7, 2, 8, generator=torch.Generator().manual_seed(5))
    z = cc.pre_activations(x)
    top = (z * cc.latent_weights()).flatten().topk(cc.k * len(z), sorted=False).indices
    recon, fired = sparse_decode(cc, z, top)
    f = torch.zeros_like(z.flatten()).scatter(0, top, z.flatten()[top]).view_as(z)
    dense = cc.decode(f)
    torch.testing.assert_close(recon, dense)
    assert torch.equal(fired, (f > 0).any(0)) and 0 < int(fired.sum()) < 24
    weights = torch.randn_like(dense)
    sparse_grads = torch.autograd.grad((recon * weights).sum(), [cc.W_dec, cc.W_enc, cc.b_dec], retain_graph=True)
    dense_grads = torch.autograd.grad((dense * weights).sum(), [cc.W_dec, cc.W_enc, cc.b_dec])
    for a, b in zip(sparse_grads, dense_grads):
        torch.testing.assert_close(a, b)
    empty, _ = sparse_decode(cc, z, top[:0])  # no code kept: every row is the bias
    torch.testing.assert_close(empty, cc.b_dec.expand(7, 2, 8))
