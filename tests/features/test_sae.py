"""TopK SAEs: the definitions (Gao et al. 2024), SAELens's format, training and its resume, the
spliced-in loss, the features on a text; bad input in one line."""

import json
from dataclasses import asdict, replace

import numpy as np
import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.corpora.mixture import Mixture
from bertscope.features.activations import ActivationSet, layer_activations, layers_activations, row_mean
from bertscope.features.active import active_features
from bertscope.features.quality import domain_qualities, reconstruction_figures, sae_quality
from bertscope.features.sae import SaeInfo, TopKSAE, load_sae, save_sae
from bertscope.features.trainer import SaeTrainConfig, geometric_median, train_sae

TEXTS = ["the bank of the river was muddy and steep .", "she deposited the money in the bank .",
         "he walked along the river with his dog .", "the man walked to the bank ."] * 6


def identity_sae(d: int, info: SaeInfo | None = None) -> TopKSAE:
    """[I, -I] in, [I; -I] out, k = d: ReLU(x) - ReLU(-x) = x exactly (a perfect reconstruction)."""
    sae = TopKSAE(d, 2 * d, d, info=info)
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], dim=1))
        sae.W_dec.copy_(torch.cat([eye, -eye], dim=0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


def test_topk_follows_the_definition_and_the_sparse_decode_equals_the_dense_one():
    torch.manual_seed(0)
    sae = TopKSAE(8, 32, 5, seed=1)
    with torch.no_grad():
        sae.b_dec.normal_()
        sae.b_enc.normal_()
    x = torch.randn(6, 8)
    pre = ((x - sae.b_dec) @ sae.W_enc + sae.b_enc).detach().numpy()  # by hand, as the paper writes it
    expected = np.zeros_like(pre)
    for row, values in enumerate(pre):
        top = np.argsort(values)[-5:]
        expected[row, top] = np.maximum(values[top], 0)
    latents = sae.encode(x)
    np.testing.assert_allclose(latents.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    assert int((latents > 0).sum(1).max()) <= 5
    values, indices = sae.encode_topk(x)
    torch.testing.assert_close(sae.decode_topk(values, indices), sae.decode(latents))
    torch.testing.assert_close(sae(x), sae.decode(latents))
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(32))  # unit-norm latent directions


def test_identity_sae_reconstructs_exactly():
    x = torch.randn(10, 6)
    torch.testing.assert_close(identity_sae(6)(x), x)


def test_saelens_format_round_trip(tmp_path):
    sae = TopKSAE(8, 32, 4, info=SaeInfo("bundled-mlm", "blocks.2.hook_resid_post", {"corpus": "brown"}), seed=3)
    folder = save_sae(sae, tmp_path / "sae")
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and cfg["k"] == 4 and (cfg["d_in"], cfg["d_sae"]) == (8, 32)
    assert cfg["apply_b_dec_to_input"] is True and cfg["normalize_activations"] == "none"
    assert cfg["metadata"]["model_name"] == "bundled-mlm" and cfg["metadata"]["hook_name"] == "blocks.2.hook_resid_post"
    from safetensors.torch import load_file

    weights = load_file(str(folder / "sae_weights.safetensors"))
    assert {k: tuple(v.shape) for k, v in weights.items()} == {
        "W_enc": (8, 32), "b_enc": (32,), "W_dec": (32, 8), "b_dec": (8,)}
    back = load_sae(folder)
    assert back.info.layer == 2 and back.k == 4 and back.info.extra == {"corpus": "brown"}
    x = torch.randn(5, 8)
    torch.testing.assert_close(back(x), sae(x))
    half = save_sae(sae, tmp_path / "half", torch.float16)
    assert (half / "sae_weights.safetensors").stat().st_size < 0.6 * (folder / "sae_weights.safetensors").stat().st_size


def test_saelens_relu_and_jumprelu_files_load(tmp_path):
    from safetensors.torch import save_file

    for architecture in ("standard", "jumprelu"):
        folder = tmp_path / architecture
        folder.mkdir()
        tensors = {"W_enc": torch.randn(4, 6), "b_enc": torch.zeros(6), "W_dec": torch.randn(6, 4),
                   "b_dec": torch.zeros(4)}
        if architecture == "jumprelu":
            tensors["threshold"] = torch.full((6,), 0.5)
        save_file(tensors, str(folder / "sae_weights.safetensors"))
        (folder / "cfg.json").write_text(json.dumps({"architecture": architecture, "d_in": 4, "d_sae": 6,
                                                     "metadata": {"model_name": "m", "hook_name": "blocks.0.hook_resid_post"}}))
        sae = load_sae(folder)
        x = torch.randn(3, 4)
        pre = x @ tensors["W_enc"]
        expected = torch.relu(pre) * (pre > 0.5) if architecture == "jumprelu" else torch.relu(pre)
        torch.testing.assert_close(sae.encode(x), expected)


def test_bad_sae_input_is_one_line(tmp_path, tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    with pytest.raises(BertScopeError, match="k must be between 1 and 31"):
        TopKSAE(8, 32, 32)
    with pytest.raises(BertScopeError, match="not an SAE folder"):
        load_sae(tmp_path)
    with pytest.raises(BertScopeError, match=r"vectors of 8 numbers; .* 32 wide"):
        TopKSAE(8, 32, 4).check_for(lm)
    with pytest.raises(BertScopeError, match="made for bert-base-uncased, not"):
        TopKSAE(32, 64, 4, info=SaeInfo("bert-base-uncased", "blocks.0.hook_resid_post")).check_for(lm)
    import os

    other_spelling = os.path.relpath(tiny_mlm_dir)  # the same folder, as the user may type it
    assert other_spelling != lm.name
    TopKSAE(32, 64, 4, info=SaeInfo(other_spelling, "blocks.0.hook_resid_post")).check_for(lm)
    with pytest.raises(BertScopeError, match="made for"):
        TopKSAE(32, 64, 4, info=SaeInfo(str(tmp_path), "blocks.0.hook_resid_post")).check_for(lm)  # another folder
    with pytest.raises(BertScopeError, match="Feature 64 does not exist: this SAE has features 0 to 63"):
        TopKSAE(32, 64, 4).check_feature(64)
    with pytest.raises(BertScopeError, match="Layer 2 does not exist"):
        layer_activations(lm, TEXTS, 2, root=tmp_path)
    acts = layer_activations(lm, TEXTS[:2], 0, max_tokens=1000, root=tmp_path)
    with pytest.raises(BertScopeError, match="fewer than one batch"):
        train_sae(acts, SaeTrainConfig(batch_tokens=4096), tmp_path / "run", SaeInfo(lm.name, "blocks.0.hook_resid_post"))


def test_layer_activations_are_every_real_word_piece_and_are_kept(tmp_path, tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    acts = layer_activations(lm, TEXTS[:4], 1, root=tmp_path)
    expected = []
    for text in TEXTS[:4]:
        _, cache = lm.run_with_cache(text, ["blocks.1.hook_resid_post"], encoder_only=True)
        expected.append(cache["blocks.1.hook_resid_post"][0, 1:-1])  # without [CLS] and [SEP]
    expected = torch.cat(expected).numpy()
    assert acts.rows.dtype == np.float16 and acts.rows.shape == expected.shape
    np.testing.assert_allclose(np.asarray(acts.rows, np.float32), expected, atol=2e-2, rtol=1e-2)
    assert acts.where[0].tolist() == [0, 1] and acts.where[-1, 0] == 3
    again = layer_activations(lm, TEXTS[:4], 1, root=tmp_path)  # read back, not run
    assert again.folder == acts.folder and np.array_equal(np.asarray(again.rows), np.asarray(acts.rows))
    capped = layer_activations(lm, TEXTS[:4], 1, max_tokens=7, root=tmp_path)
    assert capped.tokens == 7
    # [CLS] alone, one row a text (what a classifier reads at its last layer), in another folder
    cls = layer_activations(lm, TEXTS[:4], 1, root=tmp_path, positions="cls")
    first = torch.stack([lm.run_with_cache(t, ["blocks.1.hook_resid_post"], encoder_only=True)[1][
        "blocks.1.hook_resid_post"][0, 0] for t in TEXTS[:4]]).numpy()
    assert cls.folder != acts.folder and cls.where.tolist() == [[i, 0] for i in range(4)]
    np.testing.assert_allclose(np.asarray(cls.rows, np.float32), first, atol=2e-2, rtol=1e-2)
    assert layer_activations(lm, TEXTS[:4], 1, max_tokens=2, root=tmp_path, positions="cls").tokens == 2
    with pytest.raises(BertScopeError, match="Positions 'sep'"):
        layer_activations(lm, TEXTS[:4], 1, root=tmp_path, positions="sep")


def synthetic(tokens: int = 12_000, d: int = 16, atoms: int = 24, active: int = 2, seed: int = 0) -> np.ndarray:
    """Sparse sums of unit directions: what an SAE should find."""
    rng = np.random.default_rng(seed)
    dictionary = rng.normal(size=(atoms, d))
    dictionary /= np.linalg.norm(dictionary, axis=1, keepdims=True)
    rows = np.zeros((tokens, d))
    for r in range(tokens):
        chosen = rng.choice(atoms, active, replace=False)
        rows[r] = (rng.uniform(0.5, 2.0, active)[:, None] * dictionary[chosen]).sum(0)
    return (rows + 0.01 * rng.normal(size=rows.shape)).astype(np.float16)


def as_set(rows: np.ndarray, tmp_path) -> ActivationSet:
    return ActivationSet(tmp_path, 0, rows, np.zeros((len(rows), 2), np.int32), ())


def test_training_finds_a_sparse_dictionary_and_resumes_where_it_stopped(tmp_path):
    acts = as_set(synthetic(), tmp_path)
    cfg = SaeTrainConfig(expansion=4, k=4, epochs=6, batch_tokens=256, dead_tokens=2_000, block_bytes=64 * 1024)
    info = SaeInfo("m", "blocks.0.hook_resid_post")
    sae, state = train_sae(acts, cfg, tmp_path / "whole", info)
    fve, l0, dead, _ = reconstruction_figures(sae, acts)
    assert fve > 0.9 and l0 <= 4 and dead < 0.5, (fve, l0, dead)
    assert state.history[-1]["nmse"] < state.history[0]["nmse"]
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(sae.d_sae), atol=1e-5)
    assert (tmp_path / "whole" / "cfg.json").is_file() and load_sae(tmp_path / "whole").info.extra["epochs"] == 6
    # killed during the second epoch: the first epoch's checkpoint is whole; resuming ends where the whole run did
    steps = iter(range(10_000))
    per_epoch = acts.tokens // cfg.batch_tokens
    train_sae(acts, cfg, tmp_path / "cut", info, stop=lambda: next(steps) >= per_epoch + 3)
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["state"]["epoch"] == 1
    resumed, _ = train_sae(acts, cfg, tmp_path / "cut", info)
    for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
        torch.testing.assert_close(getattr(resumed, name), getattr(sae, name))
    with pytest.raises(BertScopeError, match="made with other settings"):
        train_sae(acts, replace(cfg, k=5), tmp_path / "cut", info)


def test_an_epoch_reads_every_whole_batch_of_the_corpus(tmp_path):
    """Blocks of 1,024 rows and batches of 384: what a block leaves (256 rows) opens the next, so an epoch
    is 12,000 // 384 = 31 steps (one block at a time, whole batches of each, would make 23)."""
    acts = as_set(synthetic(), tmp_path)
    cfg = SaeTrainConfig(expansion=4, k=4, epochs=2, batch_tokens=384, dead_tokens=2_000, block_bytes=64 * 1024)
    assert 64 * 1024 // (acts.rows.shape[1] * 4) == 1024
    totals: list[int] = []
    _, state = train_sae(acts, cfg, tmp_path / "run", SaeInfo("m", "blocks.0.hook_resid_post"),
                         progress=lambda step, total, _: totals.append(total))
    assert state.step == 2 * 31 and set(totals) == {2 * 31}


def test_a_checkpoint_left_mid_replace_is_read_and_leftovers_are_swept(tmp_path):
    import os

    acts = as_set(synthetic(), tmp_path)
    cfg = SaeTrainConfig(expansion=4, k=4, epochs=2, batch_tokens=256, dead_tokens=2_000, block_bytes=64 * 1024)
    info = SaeInfo("m", "blocks.0.hook_resid_post")
    whole, _ = train_sae(acts, cfg, tmp_path / "whole", info)
    steps = iter(range(10_000))
    train_sae(acts, cfg, tmp_path / "cut", info, stop=lambda: next(steps) >= 60)  # 46 steps an epoch: into the second
    checkpoint = tmp_path / "cut" / "checkpoint"
    os.replace(checkpoint, tmp_path / "cut" / "checkpoint.old-0123")  # killed between replace_folder's renames
    (tmp_path / "cut" / ".checkpoint.half").mkdir()  # and a checkpoint killed while written (an earlier version)
    (tmp_path / "cut" / ".checkpoint.tmp-999999999-x").mkdir()  # and one of a writer no longer running
    resumed, state = train_sae(acts, cfg, tmp_path / "cut", info)
    assert state.history[0]["epoch"] == 1 and len(state.history) == 2
    torch.testing.assert_close(resumed.W_dec, whole.W_dec)
    assert sorted(p.name for p in (tmp_path / "cut").iterdir() if "checkpoint" in p.name) == ["checkpoint"]
    with pytest.raises(BertScopeError, match="holds a run on other data"):
        train_sae(acts, cfg, tmp_path / "cut", SaeInfo("m", "blocks.1.hook_resid_post"))


def test_rows_are_put_in_the_texts_order_a_block_at_a_time(tmp_path):
    from bertscope.features.activations import _save_in_order

    rows = np.arange(40, dtype=np.float16).reshape(10, 4)
    order = np.array([3, 1, 4, 0, 9, 2, 6])
    _save_in_order(rows, order, tmp_path / "out.npy", block=3)  # three blocks, the last one short
    assert np.array_equal(np.load(tmp_path / "out.npy"), rows[order])


def test_a_model_name_from_another_machine_is_not_a_folder_here():
    from bertscope.features.sae import same_model

    assert same_model("bundled-mlm", "bundled-mlm") and not same_model("bundled", "bundled-mlm")
    assert not same_model("~no-such-user-here/base", "bundled") and not same_model("x" * 300, "bundled")


def test_geometric_median_resists_an_outlier():
    x = torch.zeros(11, 2)
    x[-1] = torch.tensor([1000.0, 1000.0])
    assert geometric_median(x).norm() < 1.0 < x.mean(0).norm()


def test_spliced_loss_of_a_perfect_reconstruction_recovers_everything(tmp_path, tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    held = layer_activations(lm, TEXTS, 0, root=tmp_path)
    sae = identity_sae(lm.hidden_size, SaeInfo(lm.name, "blocks.0.hook_resid_post"))
    quality = sae_quality(lm, sae, held, TEXTS, np.asarray(held.rows, np.float32).mean(0))
    assert quality.fve == pytest.approx(1.0, abs=1e-6) and quality.dead_share == 0.0
    assert quality.loss_sae == pytest.approx(quality.loss_intact, abs=1e-5)
    assert quality.loss_sae_context == pytest.approx(quality.loss_intact, abs=1e-5)
    assert quality.recovered == pytest.approx(1.0, abs=1e-4) and quality.positions > 0
    assert quality.loss_mean != pytest.approx(quality.loss_intact, abs=1e-4)  # the reference moves the loss
    assert quality.to_json()["hook_name"] == "blocks.0.hook_resid_post"


def test_several_layers_read_in_one_pass_are_each_layer_read_alone(tmp_path, tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    together = layers_activations(lm, TEXTS[:6], [1, 0, 1], max_tokens=40, root=tmp_path / "together")
    assert list(together) == [1, 0]
    for layer in (0, 1):
        alone = layer_activations(lm, TEXTS[:6], layer, max_tokens=40, root=tmp_path / "alone")
        both = together[layer]
        assert both.folder.name == alone.folder.name and both.tokens == alone.tokens == 40
        assert np.array_equal(np.asarray(both.rows), np.asarray(alone.rows))
        assert np.array_equal(both.where, alone.where)
        assert json.loads((both.folder / "meta.json").read_text())["hook_name"] == f"blocks.{layer}.hook_resid_post"
    assert not np.array_equal(np.asarray(together[0].rows), np.asarray(together[1].rows))
    np.testing.assert_allclose(row_mean(together[1].rows, block=7),
                               np.asarray(together[1].rows, np.float64).mean(0), rtol=1e-12, atol=1e-12)


def test_quality_by_source_is_each_sources_texts_alone(tmp_path, tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    news, river = TEXTS[1:2] + TEXTS[3:4], TEXTS[0:1] + TEXTS[2:3]
    held = Mixture((news[0], river[0], news[1], river[1]), ("bbc", "brown", "bbc", "brown"), ())
    sae = TopKSAE(lm.hidden_size, 4 * lm.hidden_size, 6, info=SaeInfo(lm.name, "blocks.0.hook_resid_post"), seed=1)
    mean = np.zeros(lm.hidden_size, np.float32)
    every = layer_activations(lm, held.texts, 0, max_tokens=10**9)
    by_source = domain_qualities(lm, sae, every, held, mean)
    assert list(by_source) == ["bbc", "brown"]
    for source, texts in (("bbc", news), ("brown", river)):
        own = layer_activations(lm, texts, 0, max_tokens=10**9)
        taken = every.of_sentences([i for i, s in enumerate(held.sources) if s == source])
        assert taken.texts == tuple(texts) and np.array_equal(taken.where, own.where)
        np.testing.assert_allclose(taken.rows, own.rows, atol=2e-3, rtol=2e-3)  # float16, batched with other texts
        alone = sae_quality(lm, sae, own, texts, mean)
        for name, value in asdict(by_source[source]).items():
            assert value == pytest.approx(getattr(alone, name), rel=1e-3, abs=1e-4), name
    assert by_source["bbc"].tokens != by_source["brown"].tokens
    with pytest.raises(BertScopeError, match="other texts than the mixture's held-out side"):
        domain_qualities(lm, sae, layer_activations(lm, news, 0, max_tokens=10**9), held, mean)
    with pytest.raises(BertScopeError, match="stop before the last held-out text"):
        domain_qualities(lm, sae, layer_activations(lm, held.texts, 0, max_tokens=5), held, mean)


def test_features_of_a_text(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    sae = TopKSAE(lm.hidden_size, 4 * lm.hidden_size, 3, info=SaeInfo(lm.name, "blocks.1.hook_resid_post"), seed=2)
    out = active_features(lm, sae, "the bank of the river", 1, "/saes/layer_01")
    assert out["sae"] == {"path": "/saes/layer_01", "hook": "blocks.1.hook_resid_post", "d_in": 32, "d_sae": 128, "k": 3}
    assert [t["token"] for t in out["tokens"]][0] == "[CLS]" and out["tokens"][-1]["token"] == "[SEP]"
    for token in out["tokens"]:
        acts = [f["activation"] for f in token["features"]]
        assert len(acts) <= 3 and acts == sorted(acts, reverse=True) and all(a > 0 for a in acts)
    with pytest.raises(BertScopeError, match="reads blocks.1.hook_resid_post, not blocks.0.hook_resid_post"):
        active_features(lm, sae, "the bank", 0)


def test_the_pass_stops_at_the_layer_and_leaves_no_hook_behind(tiny_mlm_dir):
    from bertscope.features.active import layer_output

    lm = load_model(str(tiny_mlm_dir))
    feed = {k: v for k, v in lm.tokenizer("the bank of the river", return_tensors="pt").items()}
    before = lm.run(feed, encoder_only=True).last_hidden_state
    _, cache = lm.run_with_cache(feed, ["blocks.0.hook_resid_post"], encoder_only=True)
    torch.testing.assert_close(layer_output(lm, feed, 0), cache["blocks.0.hook_resid_post"])
    torch.testing.assert_close(lm.run(feed, encoder_only=True).last_hidden_state, before)  # nothing left behind


def test_nearest_features_by_decoder_cosine():
    from bertscope.features.directions import nearest_features

    sae = TopKSAE(4, 8, 2, seed=0)
    with torch.no_grad():
        sae.W_dec[3] = sae.W_dec[0] + 0.1 * sae.W_dec[5]
        sae.normalise_decoder()
    near = nearest_features(sae, 0, 3)
    assert near[0][0] == 3 and 0 not in [f for f, _ in near]
    expected = float(torch.nn.functional.cosine_similarity(sae.W_dec[0], sae.W_dec[3], dim=0).detach())
    assert near[0][1] == pytest.approx(expected, abs=1e-5) and [c for _, c in near] == sorted([c for _, c in near], reverse=True)
    with pytest.raises(BertScopeError, match="Feature 8 does not exist"):
        nearest_features(sae, 8)


def test_logit_weights_are_the_heads_reading_of_the_direction(tiny_mlm_dir, tiny_encoder_dir):
    from bertscope.features.directions import logit_weights
    from bertscope.mlm.logit_lens import mlm_head

    lm = load_model(str(tiny_mlm_dir))
    sae = TopKSAE(lm.hidden_size, 64, 4, info=SaeInfo(lm.name, "blocks.1.hook_resid_post"), seed=4)
    with torch.no_grad():
        sae.b_dec.normal_()
    weights = logit_weights(lm, sae, 7, scale=2.0, top=5)
    with torch.no_grad():
        head = mlm_head(lm)
        change = head(sae.b_dec + 2.0 * sae.W_dec[7]) - head(sae.b_dec)
    best = lm.tokenizer.convert_ids_to_tokens(change.topk(5).indices.tolist())
    assert [t for t, _ in weights.promoted] == best
    assert weights.promoted[0][1] == pytest.approx(float(change.max()), abs=1e-5)
    assert weights.suppressed[0][1] == pytest.approx(float(change.min()), abs=1e-5)
    assert logit_weights(lm, sae, 7).scale == pytest.approx(float(sae.b_dec.detach().norm()))  # default: a typical step
    with torch.no_grad():
        sae.W_dec[7] *= 3.0  # a row stored longer than unit (a SAELens file may): the same reading
    longer = logit_weights(lm, sae, 7, scale=2.0, top=5).promoted
    assert [t for t, _ in longer] == best and [v for _, v in longer] == pytest.approx([v for _, v in weights.promoted],
                                                                                     abs=1e-5)
    encoder = load_model(str(tiny_encoder_dir))
    with pytest.raises(BertScopeError, match="no masked-LM head"):
        logit_weights(encoder, TopKSAE(encoder.hidden_size, 64, 4), 0)


def test_the_rate_is_constant_then_falls_linearly_to_zero_over_the_last_share():
    cfg = SaeTrainConfig(lr=1e-3, lr_decay=0.25)
    assert [cfg.rate_at(64, step, 100) for step in (0, 74, 75, 90, 99)] == pytest.approx([1e-3, 1e-3, 1e-3, 4e-4, 4e-5])
    assert SaeTrainConfig(lr=1e-3).rate_at(64, 99, 100) == 1e-3  # no decay: constant to the end
    assert [SaeTrainConfig(resample_every=10).resamples_at(s, 100) for s in (10, 15, 50, 60)] == [True, False, True,
                                                                                                   False]
    for bad in ({"lr_decay": 1.5}, {"resample_every": -1}, {"lr": 0.0}, {"lr": -1e-3}):
        with pytest.raises(BertScopeError, match="share of the steps|restart every|rate is above 0"):
            SaeTrainConfig(**bad).check(16, 10_000)


def test_a_restarted_latent_fires_on_its_row_and_writes_its_error():
    """``restart_dead``: the latent reads the drawn row at the row's k-th largest pre-activation and 0 at the batch's
    mean, writes that row's error (unit norm), and Adam forgets what it knew of it; the other latents are untouched."""
    from bertscope.features.trainer import restart_dead
    from bertscope.features.transcoder import Transcoder

    torch.manual_seed(0)
    tc = Transcoder(8, 6, 32, 3)
    optimizer = torch.optim.Adam(tc.parameters())
    x, y = torch.randn(50, 8), torch.randn(50, 6)
    (tc(x) - y).pow(2).sum().backward()
    optimizer.step()
    dead = torch.zeros(32, dtype=torch.bool)
    dead[[3, 7, 30]] = True
    before = tc.W_enc.detach().clone()
    kept = {"b_enc": tc.b_enc.detach().clone(), "W_dec": tc.W_dec.detach().clone()}
    moments = {(p, m): optimizer.state[p][m].clone() for p in (tc.W_enc, tc.b_enc, tc.W_dec)
               for m in ("exp_avg", "exp_avg_sq")}
    pre = tc.pre_activations(x).detach()
    error = torch.zeros(50, 6)
    error[[5, 9, 40]] = torch.randn(3, 6)  # only three rows are rebuilt badly: the three latents go to them
    restarted = restart_dead(tc, optimizer, dead, x, error, pre, 3, seed=1)
    assert sorted(restarted.tolist()) == [3, 7, 30]
    after = tc.pre_activations(x).detach()
    rows = {int(r) for r in (after[:, restarted] - pre.topk(3, dim=-1).values[:, -1:]).abs().argmin(0)}
    assert rows == {5, 9, 40}
    assert tc.pre_activations(x.mean(0, keepdim=True))[0, restarted].detach() == pytest.approx([0.0] * 3, abs=1e-5)
    for latent in restarted.tolist():
        row = int((after[:, latent] - pre.topk(3, dim=-1).values[:, -1]).abs().argmin())
        assert after[row, latent] == pytest.approx(float(pre[row].topk(3).values[-1]), rel=1e-5)
        assert torch.allclose(tc.W_dec[latent].detach(), error[row] / error[row].norm(), atol=1e-6)
        assert optimizer.state[tc.W_dec]["exp_avg"][latent].abs().sum() == 0
        assert optimizer.state[tc.W_enc]["exp_avg_sq"][:, latent].abs().sum() == 0
    assert torch.equal(tc.W_enc.detach()[:, ~dead], before[:, ~dead])
    assert torch.equal(tc.b_enc.detach()[~dead], kept["b_enc"][~dead])
    assert torch.equal(tc.W_dec.detach()[~dead], kept["W_dec"][~dead])
    for param in (tc.W_enc, tc.b_enc, tc.W_dec):
        for moment in ("exp_avg", "exp_avg_sq"):
            state = optimizer.state[param][moment]
            restarted_part, other_part = (state[:, dead], state[:, ~dead]) if param is tc.W_enc else (state[dead],
                                                                                                       state[~dead])
            assert restarted_part.abs().sum() == 0 and torch.equal(other_part, moments[param, moment][
                (slice(None), ~dead) if param is tc.W_enc else ~dead])


def test_restarts_revive_latents_auxk_cannot_reach(tmp_path):
    """Half the latents start with an encoder bias of -1,000: they never fire and AuxK's ReLU gives them no gradient,
    so they stay dead without restarts; restarted every 20 steps (of 170), they fire on held-out rows and the rebuild is
    better."""
    from bertscope.features.trainer import train_dictionary
    from bertscope.features.transcoder import Transcoder

    rng = np.random.default_rng(0)
    x = rng.normal(size=(24_000, 16)).astype(np.float32)
    y = np.maximum(x @ rng.normal(size=(16, 16)), 0).astype(np.float32)
    held_x, held_y = torch.from_numpy(x[-2_000:]), torch.from_numpy(y[-2_000:])
    found = {}
    for every in (0, 20):
        tc = Transcoder(16, 16, 64, 4, seed=0)
        with torch.no_grad():
            tc.b_enc[32:] = -1e3
        cfg = SaeTrainConfig(expansion=4, k=4, epochs=2, batch_tokens=256, lr=3e-3, dead_tokens=2_000,
                             resample_every=every)
        tc, _ = train_dictionary(tc, x[:-2_000], y[:-2_000], cfg, tmp_path / str(every), {}, lambda m, f: None,
                                 None, resume=False)
        with torch.no_grad():
            values, indices = tc.encode_topk(held_x)
            fired = set(indices[values > 0].tolist())
            fve = 1 - float((held_y - tc(held_x)).pow(2).sum() / (held_y - held_y.mean(0)).pow(2).sum())
        found[every] = (len(fired & set(range(32, 64))), fve)
    assert found[0][0] == 0, found
    assert found[20][0] >= 24 and found[20][1] > found[0][1] + 0.01, found


def test_a_standardised_transcoder_is_folded_into_the_same_map_of_the_raw_input(tmp_path):
    """``fold_standardiser``: what the transcoder wrote for (x - shift) / scale it writes for x once folded; trained
    with ``standardise`` on inputs with one dimension far off zero, it saves that folded map (it rebuilds the raw
    held-out rows as well as it did the standardised ones while training)."""
    import copy

    from bertscope.features.trainer import fold_standardiser, standardiser, train_dictionary
    from bertscope.features.transcoder import Transcoder

    torch.manual_seed(0)
    tc = Transcoder(8, 6, 32, 3, skip=True)
    with torch.no_grad():
        tc.W_skip.normal_()
        tc.b_enc.normal_()
    x = torch.randn(40, 8) * 3 + 5
    shift, scale = x.mean(0), x.std(0)
    before = tc((x - shift) / scale)
    assert torch.allclose(fold_standardiser(copy.deepcopy(tc), shift, scale)(x), before, atol=1e-5)
    assert fold_standardiser(tc, None, None) is tc
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(20_000, 16)).astype(np.float32)
    raw[:, 3] = raw[:, 3] * 3 + 9  # a LayerNorm output's outlier dimension
    y = np.maximum(raw @ rng.normal(size=(16, 16)) / 4, 0).astype(np.float32)
    cfg = SaeTrainConfig(expansion=4, k=4, epochs=2, batch_tokens=256, lr=3e-3, standardise=True)
    tc, state = train_dictionary(Transcoder(16, 16, 64, 4, skip=True), raw[:-2_000], y[:-2_000], cfg, tmp_path, {},
                                 lambda m, f: None, None, resume=False)
    held_x, held_y = torch.from_numpy(raw[-2_000:]), torch.from_numpy(y[-2_000:])
    with torch.no_grad():
        fve = 1 - float((held_y - tc(held_x)).pow(2).sum() / (held_y - held_y.mean(0)).pow(2).sum())
    assert fve > 1 - 1.5 * state.history[-1]["nmse"] and fve > 0.6, (fve, state.history[-1])
    shift, scale = standardiser(raw[:100], "cpu")
    assert scale.shape == (16,) and float(shift[3]) == pytest.approx(9, abs=1) and float(scale[3]) == pytest.approx(3, abs=0.6)


def test_a_stopped_standardised_run_resumes_to_the_same_transcoder(tmp_path):
    """Stopped after its first epoch and resumed (the checkpoint unfolded, the standardiser read again), a run with
    every new setting ends on the weights of the run that was never stopped; settings that cannot apply are one
    line."""
    from bertscope.features.crosscoder_trainer import CrosscoderTrainConfig
    from bertscope.features.trainer import train_dictionary
    from bertscope.features.transcoder import Transcoder, load_transcoder, save_transcoder

    rng = np.random.default_rng(0)
    x = rng.normal(size=(6_000, 8)).astype(np.float32) + np.float32(4)
    y = np.maximum(x @ rng.normal(size=(8, 8)), 0).astype(np.float32)
    cfg = SaeTrainConfig(expansion=4, k=3, epochs=2, batch_tokens=200, lr=3e-3, dead_tokens=400, lr_decay=0.3,
                         resample_every=5, standardise=True)

    def run(folder, stop=None):
        return train_dictionary(Transcoder(8, 8, 32, 3, skip=True), x, y, cfg, folder, {"data": 1},
                                lambda m, f: save_transcoder(m, f), lambda f, d: load_transcoder(f, 0, d),
                                stop=stop)[0]

    whole = run(tmp_path / "whole")
    calls = iter(range(10**6))
    run(tmp_path / "stopped", stop=lambda: next(calls) == 30)  # the first batch of the second epoch (30 a epoch)
    resumed = run(tmp_path / "stopped")
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip"):
        assert torch.allclose(getattr(resumed, name), getattr(whole, name), atol=1e-6), name
    with pytest.raises(BertScopeError, match="never restart one"):
        train_dictionary(Transcoder(8, 8, 32, 3), x, y, replace(cfg, resample_every=40), tmp_path / "never", {},
                         lambda m, f: None, None, resume=False)
    acts = ActivationSet(tmp_path, 0, x, np.zeros((len(x), 2), np.int32), ())
    with pytest.raises(BertScopeError, match="standardise is for transcoders"):
        train_sae(acts, SaeTrainConfig(expansion=2, k=2, batch_tokens=200, standardise=True), tmp_path / "sae",
                  SaeInfo("m", "blocks.0.hook_resid_post"))
    with pytest.raises(BertScopeError, match="lr_decay are a transcoder's"):
        from bertscope.features.crosscoder import CrosscoderInfo
        from bertscope.features.crosscoder_trainer import train_crosscoder

        train_crosscoder(acts, acts, CrosscoderTrainConfig(expansion=2, k=2, batch_tokens=200, lr_decay=0.2),
                         tmp_path / "cc", CrosscoderInfo(("a", "b"), "blocks.0.hook_resid_post"))
