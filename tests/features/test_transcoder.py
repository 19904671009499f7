"""Transcoders (``features.transcoder``, ``features.transcoder_training``): the pass is its definition, the file is
circuit-tracer's layout, training finds a synthetic feed-forward's sparse code (skip path included) and resumes,
the feed-forward's input and output are read row for row, and the replacement model replaces what it says."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet, points_activations
from bertscope.features.trainer import SaeTrainConfig
from bertscope.features.transcoder import Transcoder, TranscoderInfo, layer_file, load_transcoder, save_transcoder
from bertscope.features.transcoder_training import (
    replacement_hooks,
    replacement_quality,
    train_transcoder,
    transcoder_figures,
)


def _random(skip: bool, seed: int = 0) -> Transcoder:
    tc = Transcoder(8, 6, 32, 4, skip, TranscoderInfo("m", 1), seed=seed)
    with torch.no_grad():
        for p in tc.parameters():
            p.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed + p.numel()))
    return tc


@pytest.mark.parametrize("skip", [False, True])
def test_the_pass_is_the_definition(skip):
    tc = _random(skip)
    x = torch.randn(5, 8)
    pre = x @ tc.W_enc + tc.b_enc
    top = pre.topk(4, dim=-1)
    z = torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))
    want = z @ tc.W_dec + tc.b_dec + (x @ tc.W_skip.T if skip else 0)
    torch.testing.assert_close(tc(x), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tc.encode(x), z)


def test_circuit_tracers_file_layout_round_trips(tmp_path):
    tc = _random(True)
    tc.info.extra["corpus"] = "x"
    save_transcoder(tc, tmp_path)
    with safe_open(str(layer_file(tmp_path, 1)), "pt") as f:
        shapes = {k: tuple(f.get_tensor(k).shape) for k in f.keys()}  # noqa: SIM118
    assert shapes == {"W_enc": (32, 8), "W_dec": (32, 6), "b_enc": (32,), "b_dec": (6,), "W_skip": (6, 8), "k": ()}
    config = (tmp_path / "config.yaml").read_text()
    assert "feature_input_hook: hook_resid_mid" in config and "feature_output_hook: hook_mlp_out" in config
    assert "activation: topk" in config and "k: 4" in config
    back = load_transcoder(tmp_path, 1)
    x = torch.randn(3, 8)
    torch.testing.assert_close(back(x), tc(x))
    assert back.info.model_name == "m" and back.info.layer == 1 and back.info.extra["corpus"] == "x"
    with pytest.raises(BertScopeError, match="no transcoder for layer 0.*train-transcoders"):
        load_transcoder(tmp_path, 0)


def _synthetic_ffn(n: int = 12_000, seed: int = 0):
    """x [n, 16]; y = a sparse ReLU code of x through 48 atoms (each fires on ~2 % of rows) plus a linear part (what a
    skip path should take)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 16)).astype(np.float32)
    w = rng.normal(size=(16, 48)).astype(np.float32)
    w /= np.linalg.norm(w, axis=0, keepdims=True)
    z = np.maximum(x @ w - 2.0, 0)  # [n, 48]
    y = z @ rng.normal(size=(48, 16)).astype(np.float32) + 0.2 * x @ rng.normal(size=(16, 16)).astype(np.float32)
    return x.astype(np.float16), y.astype(np.float16)


def _sets(x, y, tmp_path):
    where = np.stack([np.arange(len(x)), np.zeros(len(x))], 1).astype(np.int32)
    return ActivationSet(tmp_path / "x", 0, x, where, ()), ActivationSet(tmp_path / "y", 0, y, where, ())


def test_training_finds_the_code_the_skip_path_takes_the_linear_part_and_resumes(tmp_path):
    inputs, outputs = _sets(*_synthetic_ffn(), tmp_path)
    cfg = SaeTrainConfig(expansion=4, k=6, epochs=10, batch_tokens=256, dead_tokens=3_000, block_bytes=64 * 1024,
                         lr=1e-2)
    plain, _ = train_transcoder(inputs, outputs, cfg, tmp_path / "plain", TranscoderInfo("m", 0))
    skip, state = train_transcoder(inputs, outputs, cfg, tmp_path / "skip", TranscoderInfo("m", 0), skip=True)
    fve_plain, fve_skip = transcoder_figures(plain, inputs, outputs).fve, transcoder_figures(skip, inputs, outputs).fve
    assert fve_skip > 0.85 and fve_skip > fve_plain + 0.05, (fve_plain, fve_skip)
    assert state.history[-1]["nmse"] < state.history[0]["nmse"]
    assert load_transcoder(tmp_path / "skip", 0).info.extra["epochs"] == 10
    steps = iter(range(10_000))
    per_epoch = inputs.tokens // cfg.batch_tokens
    train_transcoder(inputs, outputs, cfg, tmp_path / "cut", TranscoderInfo("m", 0), skip=True,
                     stop=lambda: next(steps) >= per_epoch + 3)
    resumed, _ = train_transcoder(inputs, outputs, cfg, tmp_path / "cut", TranscoderInfo("m", 0), skip=True)
    for name in ("W_enc", "W_dec", "b_enc", "b_dec", "W_skip"):
        torch.testing.assert_close(getattr(resumed, name), getattr(skip, name))
    shifted = ActivationSet(outputs.folder, 0, outputs.rows, outputs.where[::-1].copy(), ())
    with pytest.raises(BertScopeError, match="different tokens"):
        train_transcoder(inputs, shifted, cfg, tmp_path / "bad", TranscoderInfo("m", 0))


TEXTS = ["the bank of the river was muddy .", "she put her money in the bank .", "a man is eating food ."] * 4


def test_a_layers_input_and_output_are_read_row_for_row(tmp_path, tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    got = points_activations(lm, TEXTS, [1], ("hook_resid_mid", "hook_mlp_out"), root=tmp_path)
    x, y = got[(1, "hook_resid_mid")], got[(1, "hook_mlp_out")]
    assert np.array_equal(x.where, y.where) and x.tokens == y.tokens > 0
    _, cache = lm.run_with_cache(dict(lm.tokenizer(TEXTS[:1], return_tensors="pt")),
                                 ["blocks.1.hook_resid_mid", "blocks.1.hook_mlp_out"], encoder_only=True)
    n = int((x.where[:, 0] == 0).sum())  # the first text's word pieces, [CLS] and [SEP] left out
    np.testing.assert_allclose(x.rows[:n], cache["blocks.1.hook_resid_mid"][0, 1:n + 1].numpy(), atol=2e-3)
    np.testing.assert_allclose(y.rows[:n], cache["blocks.1.hook_mlp_out"][0, 1:n + 1].numpy(), atol=2e-3)
    meta = json.loads((y.folder / "meta.json").read_text())
    assert meta["hook_name"] == "blocks.1.hook_mlp_out" and meta["layer"] == 1


def test_masked_reading_is_bert_s_corruption_row_for_row(tmp_path, tiny_mlm_dir):
    """``masking``: the rows are the pass over the seeded 80/10/10 corruption of the texts (the replacement model's
    own inputs), kept apart from the plain reading, and the same seed reads the same rows."""
    from bertscope.interventions.importance import masked_batches

    lm = load_model(str(tiny_mlm_dir))
    texts = TEXTS * 3  # enough word pieces that some are chosen
    point = ("hook_resid_mid",)
    plain = points_activations(lm, texts, [1], point, root=tmp_path)[(1, point[0])]
    masked = points_activations(lm, texts, [1], point, root=tmp_path, masking=3)[(1, point[0])]
    again = points_activations(lm, texts, [1], point, root=tmp_path / "again", masking=3)[(1, point[0])]
    assert masked.folder != plain.folder and np.array_equal(masked.where, plain.where)
    assert json.loads((masked.folder / "meta.json").read_text())["masking"] == 3
    np.testing.assert_array_equal(np.asarray(masked.rows), np.asarray(again.rows))
    want = {}
    for rows, feed, chosen, _ in masked_batches(lm, texts, 32, 3):
        _, cache = lm.run_with_cache(feed, ["blocks.1.hook_resid_mid"], encoder_only=True)
        for i, row in enumerate(rows):
            want[row] = (cache["blocks.1.hook_resid_mid"][i].numpy(), chosen[i].numpy())
    expected = np.stack([want[s][0][t] for s, t in masked.where])
    np.testing.assert_allclose(np.asarray(masked.rows, np.float32), expected, atol=2e-3)
    changed = np.array([want[s][1][t] for s, t in masked.where])
    assert 0 < changed.mean() < 0.5
    np.testing.assert_array_equal(masked.chosen, changed)  # the rows chosen for prediction are kept with the set
    assert plain.chosen is None
    subset = masked.of_sentences([1, 4])
    np.testing.assert_array_equal(subset.chosen, masked.chosen[np.isin(masked.where[:, 0], [1, 4])])
    differs = np.abs(np.asarray(masked.rows, np.float32) - np.asarray(plain.rows, np.float32)).max(axis=1) > 1e-2
    assert differs[changed].mean() > 0.5  # the chosen positions read another input
    # under masking every point is read in one pass: a set whose partner is gone is read again with it
    both = ("hook_resid_mid", "hook_mlp_out")
    first = points_activations(lm, texts, [1], both, root=tmp_path / "pair", masking=3)
    import shutil
    shutil.rmtree(first[(1, "hook_mlp_out")].folder)
    again_both = points_activations(lm, texts, [1], both, root=tmp_path / "pair", masking=3)
    assert all((s.folder / "meta.json").is_file() for s in again_both.values())
    np.testing.assert_array_equal(np.asarray(again_both[(1, "hook_resid_mid")].rows), np.asarray(masked.rows))
    (masked.folder / "chosen.npy").unlink()  # a set kept before the chosen rows were: read again, with them
    read_again = points_activations(lm, texts, [1], point, root=tmp_path, masking=3)[(1, point[0])]
    np.testing.assert_array_equal(read_again.chosen, changed)


def test_the_chosen_rows_weigh_more_in_the_error_when_asked(tmp_path):
    """``chosen_weight``: rows chosen for prediction follow another map than the rest, from inputs alike; weighed 20
    times, the transcoder's compromise moves toward them, and their error falls."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8_000, 16)).astype(np.float32)
    chosen = rng.random(len(x)) < 0.1
    a, b = rng.normal(size=(16, 16)).astype(np.float32), rng.normal(size=(16, 16)).astype(np.float32)
    y = np.where(chosen[:, None], x @ b, x @ a).astype(np.float16)
    where = np.stack([np.arange(len(x)), np.zeros(len(x))], 1).astype(np.int32)
    inputs = ActivationSet(tmp_path / "x", 0, x.astype(np.float16), where, (), chosen)
    outputs = ActivationSet(tmp_path / "y", 0, y, where, ())
    errors = {}
    for weight in (1.0, 20.0):
        cfg = SaeTrainConfig(expansion=2, k=2, epochs=4, batch_tokens=256, lr=1e-2, chosen_weight=weight)
        tc, _ = train_transcoder(inputs, outputs, cfg, tmp_path / f"w{weight:g}", TranscoderInfo("m", 0), skip=True)
        with torch.no_grad():
            made = tc(torch.from_numpy(x)).numpy()
        errors[weight] = [float(((made - y)[rows] ** 2).sum(1).mean()) for rows in (chosen, ~chosen)]
    assert errors[20.0][0] < 0.6 * errors[1.0][0] and errors[20.0][1] > errors[1.0][1], errors
    assert load_transcoder(tmp_path / "w20", 0).info.extra["chosen_weight"] == 20.0
    assert "chosen_weight" not in load_transcoder(tmp_path / "w1", 0).info.extra
    with pytest.raises(BertScopeError, match="read as pretraining read it"):
        train_transcoder(outputs, outputs, cfg, tmp_path / "bad", TranscoderInfo("m", 0))
    with pytest.raises(BertScopeError, match="between 1 and 1,000"):
        SaeTrainConfig(chosen_weight=0.5).check(16, 10_000)


def test_the_replacement_model_replaces_what_it_says(tiny_mlm_dir, monkeypatch):
    lm = load_model(str(tiny_mlm_dir))
    d = lm.hidden_size
    tcs = {layer: Transcoder(d, d, 4 * d, 8, True, TranscoderInfo(lm.name, layer), seed=layer) for layer in (0, 1)}
    feed = dict(lm.tokenizer(TEXTS[:2], padding=True, return_tensors="pt"))
    # the last layer alone: its input is the real one, so its output is the transcoder of the real input
    _, cache = lm.run_with_cache(feed, ["blocks.1.hook_resid_mid"], encoder_only=True)
    with torch.no_grad():
        made = tcs[1](cache["blocks.1.hook_resid_mid"])
    want = lm.run(feed, hooks={"blocks.1.hook_mlp_out": lambda y, _: made}).logits
    got = lm.run(feed, hooks=replacement_hooks(lm, {1: tcs[1]})).logits
    torch.testing.assert_close(got, want)
    nowhere = torch.zeros(feed["input_ids"].shape, dtype=torch.bool)
    torch.testing.assert_close(lm.run(feed, hooks=replacement_hooks(lm, tcs, nowhere)).logits, lm.run(feed).logits)
    q = replacement_quality(lm, tcs, TEXTS)
    assert q["positions"] > 0 and 0 <= q["top1_agreement"] <= 1 and q["kl"] >= 0
    with pytest.raises(BertScopeError, match="missing: 1"):
        replacement_quality(lm, {0: tcs[0]}, TEXTS)
    # one layer alone (the other real): as the hooks of that layer alone; every layer named: the replacement model
    from bertscope.features import transcoder_training

    seen = []
    real_hooks = transcoder_training.replacement_hooks

    def spy(lm_, replaced, keep=None, error_scale=1.0):
        seen.append(sorted(replaced))
        return real_hooks(lm_, replaced, keep, error_scale)

    with monkeypatch.context() as m:
        m.setattr(transcoder_training, "replacement_hooks", spy)
        alone = replacement_quality(lm, {0: tcs[0]}, TEXTS, layers=[0])
    assert seen and all(layers == [0] for layers in seen) and alone["positions"] == q["positions"]
    assert replacement_quality(lm, tcs, TEXTS, layers=[0, 1]) == q
    for layers, words in (([2], "layers, 0 to 1"), ([], "1 or more"), ([1], "No transcoder for layer 1")):
        with pytest.raises(BertScopeError, match=words):
            replacement_quality(lm, {0: tcs[0]}, TEXTS, layers=layers)
    # each error shrunk: at 0 the real model (agreement 1, KL 0), at 1 the replacement model, outside refused
    nothing = replacement_quality(lm, tcs, TEXTS, error_scale=0.0)
    assert nothing["top1_agreement"] == 1 and nothing["kl"] == pytest.approx(0, abs=1e-6)
    assert replacement_quality(lm, tcs, TEXTS, error_scale=1.0) == q
    half = replacement_quality(lm, tcs, TEXTS, error_scale=0.5)
    assert half["positions"] == q["positions"] and 0 < half["kl"] < q["kl"]
    with pytest.raises(BertScopeError, match="between 0 and 1"):
        replacement_quality(lm, tcs, TEXTS, error_scale=1.5)
    # one layer's error shrunk alone: layer 0 real and layer 1 replaced is layer 1 alone replaced; none named, all 1
    assert replacement_quality(lm, tcs, TEXTS, error_scale={0: 0.0}) == replacement_quality(lm, tcs, TEXTS, layers=[1])
    assert replacement_quality(lm, tcs, TEXTS, error_scale={}) == q
    with pytest.raises(BertScopeError, match="between 0 and 1; got -1"):
        replacement_quality(lm, tcs, TEXTS, error_scale={1: -1})


def test_a_classifiers_replacement_model_is_scored_on_its_class(tmp_path, tiny_bert_dir, monkeypatch):
    """A sequence classifier's replacement model: the same class as the real one over the texts, and the KL of the
    class distributions; with nothing replaced (hooks that change nothing) agreement 1 and KL 0."""
    from bertscope.features import transcoder_training
    from tests.conftest import task_checkpoint

    folder = task_checkpoint(tiny_bert_dir, tmp_path / "clf", "AutoModelForSequenceClassification", 2, num_labels=3)
    lm = load_model(str(folder))
    d = lm.hidden_size
    tcs = {layer: Transcoder(d, d, 4 * d, 8, True, TranscoderInfo(lm.name, layer), seed=layer)
           for layer in range(lm.num_layers)}
    q = replacement_quality(lm, tcs, TEXTS)
    assert q["examples"] == len(TEXTS) and 0 <= q["top1_agreement"] <= 1 and q["kl"] > 0
    monkeypatch.setattr(transcoder_training, "replacement_hooks", lambda *_: {})
    same = replacement_quality(lm, tcs, TEXTS)
    assert same["top1_agreement"] == 1 and same["kl"] == pytest.approx(0, abs=1e-6)
    multi = task_checkpoint(tiny_bert_dir, tmp_path / "multi", "AutoModelForSequenceClassification", 2, num_labels=3,
                            problem_type="multi_label_classification")
    with pytest.raises(BertScopeError, match="sigmoid, not one class"):
        replacement_quality(load_model(str(multi)), tcs, TEXTS)
