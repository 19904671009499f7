"""Switching a feature off and steering with it, through the hook point its SAE reads; the features
that promote a word agree with each feature's own logit weights; bad input in one line."""

import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.features.activations import resid_post
from bertscope.features.directions import features_promoting, logit_weights
from bertscope.features.edits import FeatureEdit, edit_features, feature_edit, parse_feature_edits
from bertscope.features.sae import SaeInfo, TopKSAE

TEXT = "the man walked to the [MASK] ."


@pytest.fixture(scope="module")
def lm(tiny_mlm_dir):
    return load_model(str(tiny_mlm_dir))


def sae_for(lm, layer=1, d_sae=32, k=4):
    sae = TopKSAE(lm.hidden_size, d_sae, k, info=SaeInfo(lm.name, resid_post(layer)), seed=3)
    with torch.no_grad():
        sae.b_enc.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    return sae


def layer_after_edit(lm, saes, edits, places=None):
    enc = lm.tokenizer(TEXT, return_tensors="pt")
    with feature_edit(lm, saes, edits, places):
        _, cache = lm.run_with_cache(dict(enc), [resid_post(1)], encoder_only=True)
    return enc, cache[resid_post(1)][0]  # [token, d_model]


def test_remove_takes_out_exactly_the_features_contribution(lm):
    sae = sae_for(lm)
    enc, intact = layer_after_edit(lm, {1: sae}, [FeatureEdit(1, 0, "steer", 0.0)])  # a no-op edit
    z = sae.encode(intact)  # [token, d_sae]
    feature = int((z > 0).sum(0).argmax())
    _, removed = layer_after_edit(lm, {1: sae}, [FeatureEdit(1, feature, "remove")])
    expected = intact - z[:, feature:feature + 1] * sae.W_dec[feature]
    torch.testing.assert_close(removed, expected, rtol=1e-5, atol=1e-5)
    silent = [f for f in range(sae.d_sae) if not (z[:, f] > 0).any()]
    if silent:  # a feature that fires nowhere: nothing changes
        _, same = layer_after_edit(lm, {1: sae}, [FeatureEdit(1, silent[0], "remove")])
        torch.testing.assert_close(same, intact)


def test_steering_adds_the_direction_where_asked(lm):
    sae = sae_for(lm)
    enc, intact = layer_after_edit(lm, {1: sae}, [FeatureEdit(1, 0, "steer", 0.0)])
    masks = (enc["input_ids"] == lm.tokenizer.mask_token_id)  # [1, token]
    _, steered = layer_after_edit(lm, {1: sae}, [FeatureEdit(1, 5, "steer", 3.0, "masks")], {"masks": masks})
    change = steered - intact
    at = int(masks[0].nonzero()[0, 0])
    torch.testing.assert_close(change[at], 3.0 * sae.W_dec[5].detach(), rtol=1e-4, atol=1e-5)
    others = [t for t in range(len(change)) if t != at]
    assert change[others].abs().max() < 1e-6


def test_the_decision_before_and_after(lm):
    sae = sae_for(lm)
    result = edit_features(lm, TEXT, {1: sae}, [FeatureEdit(1, 5, "steer", 50.0)], top_k=3)
    (mask,) = result.masks
    assert len(mask.before) == len(mask.after) == 3
    assert [p.token for p in mask.before] != [p.token for p in mask.after] or \
        [p.score for p in mask.before] != [p.score for p in mask.after]
    out = result.to_json()
    assert out["features"] == [{"layer": 1, "feature": 5, "mode": "steer", "strength": 50.0, "at": "masks"}]
    assert out["masks"][0]["before"][0]["probability"] == pytest.approx(mask.before[0].score)


def test_features_promoting_a_word_agree_with_their_logit_weights(lm):
    from bertscope.features import directions

    sae = sae_for(lm, layer=0)
    word = "bank"
    found = features_promoting(lm, sae, word, top=3)
    assert len(found) == 3 and found[0][1] >= found[1][1] >= found[2][1]
    best, change = found[0]
    weights = logit_weights(lm, sae, best, top=lm.tokenizer.vocab_size)
    by_token = dict(weights.promoted)
    assert by_token[word] == pytest.approx(change, abs=1e-4)
    with torch.no_grad():  # rows stored at other lengths (a SAELens file may): both read the unit direction
        sae.W_dec.mul_(torch.linspace(0.5, 3.0, sae.d_sae)[:, None])
    seen = []
    real = directions.mlm_head

    def watched(model):
        head = real(model)
        return lambda *a, **k: seen.append(torch.is_grad_enabled()) or head(*a, **k)

    directions.mlm_head = watched  # every chunk of decoder rows read without a graph (they are parameters)
    try:
        again = features_promoting(lm, sae, word, top=3)
    finally:
        directions.mlm_head = real
    assert seen and not any(seen)
    assert [f for f, _ in again] == [f for f, _ in found]
    assert [v for _, v in again] == pytest.approx([v for _, v in found], abs=1e-5)


def test_bad_input_is_one_line(lm):
    sae = sae_for(lm)
    for edits, said in (
        ([FeatureEdit(1, 32)], "Feature 32 does not exist"),
        ([FeatureEdit(0, 1)], "No SAE for layer 0"),
        ([FeatureEdit(7, 1)], "Layer 7 does not exist"),
        ([FeatureEdit(1, 1, "steer", 1e6)], "out of range"),
        ([FeatureEdit(1, 1, "steer", 1.0, "everywhere")], "Steer at 'everywhere'"),
    ):
        with pytest.raises(BertScopeError, match=said):
            edit_features(lm, TEXT, {1: sae}, edits)
    with pytest.raises(BertScopeError, match="needs a \\[MASK\\] in the text"):
        edit_features(lm, "the man walked .", {1: sae}, [FeatureEdit(1, 1, "steer", 1.0)])
    twice = edit_features(lm, TEXT, {1: sae}, [FeatureEdit(1, 2), FeatureEdit(1, 2)])
    once = edit_features(lm, TEXT, {1: sae}, [FeatureEdit(1, 2)])
    assert [p.score for p in twice.masks[0].after] == [p.score for p in once.masks[0].after]  # one edit, not two
    with pytest.raises(BertScopeError, match="not LAYER:FEATURE"):
        parse_feature_edits("1-5")
    assert parse_feature_edits("1:5, 2:7", steer=2.0) == [FeatureEdit(1, 5, "steer", 2.0), FeatureEdit(2, 7, "steer", 2.0)]
    with pytest.raises(BertScopeError, match="word pieces|not in"):
        features_promoting(lm, sae_for(lm, layer=0), "bankriverman")
    with pytest.raises(BertScopeError, match="word pieces"):
        features_promoting(lm, sae_for(lm, layer=0), "bank river")
    with pytest.raises(BertScopeError, match="reads blocks.1.hook_resid_post, not blocks.0"):
        edit_features(lm, TEXT, {0: sae}, [FeatureEdit(0, 1)])


def test_feature_patching_cells_and_the_whole_state_agree_with_hidden_state_patching(lm):
    from bertscope.features.patching import patch_features
    from bertscope.interventions.patching import patch

    sae = sae_for(lm, layer=0)
    clean, corrupt = "the man walked to the [MASK] .", "the dog walked to the [MASK] ."
    result = patch_features(lm, sae, 0, clean, corrupt, ("bank", "river"))
    assert sorted(result.whole) == [2, 6]  # where the texts differ, and the mask
    reference = patch(lm, clean, corrupt, ("bank", "river"), "hidden", [2, 6])
    for position, recovered in result.whole.items():  # hidden state 1 = layer 0's output
        assert recovered == pytest.approx(reference.recovered[1, position], abs=1e-4)
    assert result.cells and all(c.position in (2, 6) and c.clean != c.corrupt for c in result.cells)
    assert [abs(c.recovered) for c in result.cells] == sorted((abs(c.recovered) for c in result.cells), reverse=True)
    out = result.to_json(top=3)
    assert out["hook"] == "blocks.0.hook_resid_post" and len(out["features"]) == min(3, len(result.cells))
    with pytest.raises(BertScopeError, match="token positions 0-"):
        patch_features(lm, sae, 0, clean, corrupt, ("bank", "river"), positions=[99])
