"""The SAEs shipped for bundled-mlm: one a layer, whole, in SAELens's format, the size the README
states, trained on the mixture of every corpus, their figures at the issue's goal on each source's held-out
text, and they run on the model they were made for."""

import json

import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.features.active import active_features
from bertscope.features.sae import load_sae
from bertscope.features.shipped import SHIPPED, sae_folder, sae_layers, shipped_saes


def test_one_sae_a_layer_within_30_mb_and_at_the_goal():
    folder = shipped_saes("bundled-mlm")
    assert folder == SHIPPED["bundled-mlm"] and sae_layers(folder) == [0, 1, 2, 3, 4, 5]
    shipped = [p for p in folder.rglob("*") if p.is_file() and "checkpoint" not in p.parts]  # a retrain's are not
    assert sum(p.stat().st_size for p in shipped) <= 30 * 2**20
    for layer in range(6):
        cfg = json.loads((sae_folder(folder, layer) / "cfg.json").read_text())
        assert cfg["dtype"] == "float16" and cfg["k"] == 32 and (cfg["d_in"], cfg["d_sae"]) == (384, 3072)
        assert cfg["metadata"]["hook_name"] == f"blocks.{layer}.hook_resid_post"
        assert cfg["metadata"]["model_name"] == "bundled-mlm" and cfg["metadata"]["bertscope"]["seed"] == 0
        assert cfg["metadata"]["bertscope"]["corpus"] == "mixture of brown, ewt, tweets, bbc, squad"
        assert cfg["metadata"]["bertscope"]["trained_tokens"] == 2_000_000
        quality = json.loads((sae_folder(folder, layer) / "quality.json").read_text())
        assert list(quality["domains"]) == ["brown", "ewt", "tweets", "bbc", "squad"]
        for figures in (quality, *quality["domains"].values()):  # the goal, on every source's held-out text
            assert figures["l0"] <= 64 and figures["fve"] >= 0.80 and figures["recovered"] >= 0.90
            assert figures["dead_share"] < 0.01
    assert shipped_saes("bundled") is None  # no SAE for the model without the masked-LM head's training


@pytest.mark.slow
def test_they_run_on_bundled_mlm():
    lm = load_model("bundled-mlm")
    sae = load_sae(sae_folder(shipped_saes("bundled-mlm"), 2))
    result = active_features(lm, sae, "The bank of the river.", 2)
    assert result["tokens"][0]["token"] == "[CLS]" and all(len(t["features"]) <= 32 for t in result["tokens"])
    with pytest.raises(BertScopeError, match="made for bundled-mlm, not bundled"):
        sae.check_for(load_model("bundled"))
    with pytest.raises(BertScopeError, match="has no SAE for layer 6"):
        sae_folder(shipped_saes("bundled-mlm"), 6)


def test_the_crosscoders_shipped_for_the_two_fine_tuned_models_are_small_and_name_their_models():
    from bertscope.features.crosscoder import load_crosscoder
    from bertscope.features.shipped import SHIPPED_CROSSCODERS, shipped_crosscoders

    assert set(SHIPPED_CROSSCODERS) == {("bundled", "bundled-sentiment"), ("bundled", "bundled-upos")}
    # the tagger's at its last layer; the classifier's of word pieces at layer 4 and of [CLS] at its last layer
    expected = {"bundled-upos": {5: "pieces"}, "bundled-sentiment": {4: "pieces", 5: "cls"}}
    for (base, tuned), folder in SHIPPED_CROSSCODERS.items():
        assert shipped_crosscoders(base, tuned) == folder
        assert sae_layers(folder) == sorted(expected[tuned])
        for layer, positions in expected[tuned].items():
            files = [p for p in sae_folder(folder, layer).rglob("*") if p.is_file()]
            assert sum(p.stat().st_size for p in files) <= 5 * 2**20  # float16, 1,536 latents
            assert load_crosscoder(sae_folder(folder, layer)).info.positions == positions
        layer = max(expected[tuned])
        cfg = json.loads((sae_folder(folder, layer) / "cfg.json").read_text())
        assert cfg["dtype"] == "float16" and cfg["metadata"]["models"] == [base, tuned]
        cc = load_crosscoder(sae_folder(folder, layer))
        assert cc.info.hook_name == f"blocks.{layer}.hook_resid_post" and (cc.d_in, cc.d_sae, cc.k) == (384, 1536, 32)
        assert float(cc.threshold) > 0 and cc.W_dec.dtype == torch.float32  # opened in float32
        from safetensors import safe_open

        with safe_open(str(sae_folder(folder, layer) / "crosscoder.safetensors"), "pt") as stored:
            assert {stored.get_tensor(name).dtype for name in ("W_enc", "W_dec", "b_enc", "b_dec")} == {torch.float16}
    assert shipped_crosscoders("bundled-sentiment", "bundled") is None  # the pair's order matters


def test_the_transcoders_shipped_for_both_models_are_whole_small_and_at_the_fve_bar():
    """Every layer of bundled-mlm and bundled-sentiment, float16 in circuit-tracer's layout, 8x its width, and the
    held-out figures their quality.json records: FVE ≥ 0.80 on every layer and every source of the mixture (issue
    70's bar), L0 at most the k each file was trained with, and the replacement model's figures."""
    from safetensors import safe_open

    from bertscope.features.shipped import SHIPPED_TRANSCODERS

    assert set(SHIPPED_TRANSCODERS) == {"bundled-mlm", "bundled-sentiment"}
    for model, folder in SHIPPED_TRANSCODERS.items():
        files = sorted(folder.glob("layer_*.safetensors"))
        assert [f.name for f in files] == [f"layer_{layer}.safetensors" for layer in range(6)]
        assert sum(p.stat().st_size for p in folder.iterdir()) <= 40 * 2**20
        quality = json.loads((folder / "quality.json").read_text())
        assert quality["model"] == model and [row["layer"] for row in quality["layers"]] == list(range(6))
        for path, row in zip(files, quality["layers"]):
            with safe_open(str(path), "pt") as f:
                k = int(f.get_tensor("k"))
                assert f.get_tensor("W_enc").dtype == torch.float16 and f.get_slice("W_enc").get_shape() == [3072, 384]
            assert row["trained_with"]["k"] == k
            assert list(row["domains"]) == ["brown", "ewt", "tweets", "bbc", "squad"]
            assert row["fve"] >= 0.80 and row["l0"] <= k
            for source, figures in row["domains"].items():
                assert figures["fve"] >= 0.80 and figures["l0"] <= k, (model, row["layer"], source)
        assert quality["replacement"]["top1_agreement"] >= {"bundled-mlm": 0.774, "bundled-sentiment": 0.941}[model]


def test_a_set_is_scored_apart_from_the_side_it_was_trained_apart_from():
    """``held_out_seed``: the seed every layer records, None for a set that records none, one line for layers
    trained apart from different held-out sides (each layer's other side holds text another layer was trained on)
    or for some layers recording none."""
    from types import SimpleNamespace

    from bertscope.features.shipped import SHIPPED_TRANSCODERS, held_out_seed
    from bertscope.features.transcoder import load_transcoder

    def layers(*extras):
        return {layer: SimpleNamespace(info=SimpleNamespace(extra=extra)) for layer, extra in enumerate(extras)}

    assert held_out_seed(layers({"seed": 3}, {"seed": 3, "masked": True})) == 3
    assert held_out_seed(layers({}, {})) is None
    with pytest.raises(BertScopeError, match="the seeds 0, 2, apart from different held-out texts") as info:
        held_out_seed(layers({"seed": 2}, {"seed": 0}))
    assert "\n" not in str(info.value)
    with pytest.raises(BertScopeError, match="^Layer 1 of the set records no seed where the others record 1: which "
                                             "texts it was trained apart from is unknown; train it again with --seed 1"):
        held_out_seed(layers({"seed": 1}, {}))
    with pytest.raises(BertScopeError, match="^Layers 0, 2 of the set record no seed .* they were .* train them"):
        held_out_seed(layers({}, {"seed": 1}, {}))
    for folder in SHIPPED_TRANSCODERS.values():  # the shipped sets: the side their figures were measured on
        assert held_out_seed({layer: load_transcoder(folder, layer) for layer in range(6)}) == 0
