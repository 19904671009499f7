"""The end-to-end tuning (``features.transcoder_tuning``): the replacement model's KL to the real model falls, the
model's own weights do not move, the decoder rows stay unit, a Stop keeps the steps taken, and bad input is one line."""

from __future__ import annotations

import pytest
import torch

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.features.transcoder import Transcoder, TranscoderInfo
from bertscope.features.transcoder_training import replacement_quality
from bertscope.features.transcoder_tuning import TuneConfig, tune_end_to_end

TEXTS = ["the bank of the river was muddy after the rain .", "she put all of her money in the old bank .",
         "a man is eating his food at the table .", "the dog slept under the big oak tree all day ."] * 4


def _set(lm) -> dict[int, Transcoder]:
    d = lm.hidden_size
    return {layer: Transcoder(d, d, 4 * d, 8, True, TranscoderInfo(lm.name, layer), seed=layer)
            for layer in range(lm.num_layers)}


def tuned_parts(lm, tcs: dict[int, Transcoder], parts: str) -> tuple[dict, dict, dict[int, set[str]]]:
    """(the replacement model before, after, {layer: its parameters that moved}) for 40 steps tuning ``parts``."""
    kept = {(layer, n): p.detach().clone() for layer, tc in tcs.items() for n, p in tc.named_parameters()}
    before = replacement_quality(lm, tcs, TEXTS, seed=7)
    tune_end_to_end(lm, tcs, TEXTS, TuneConfig(steps=40, batch_size=8, lr=3e-3, local=0.1, parts=parts))
    after = replacement_quality(lm, tcs, TEXTS, seed=7)
    moved: dict[int, set[str]] = {layer: set() for layer in tcs}
    for (layer, name), start in kept.items():
        if not torch.equal(dict(tcs[layer].named_parameters())[name], start):
            moved[layer].add(name)
    return before, after, moved


def test_tuning_brings_the_replacement_model_to_the_real_one_and_leaves_the_model_alone(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    tcs = _set(lm)
    weights = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    before = replacement_quality(lm, tcs, TEXTS, seed=7)
    steps = []
    history = tune_end_to_end(lm, tcs, TEXTS, TuneConfig(steps=60, batch_size=8, lr=3e-3, local=0.1),
                              progress=lambda done, total: steps.append((done, total)))
    after = replacement_quality(lm, tcs, TEXTS, seed=7)
    assert after["kl"] < 0.5 * before["kl"], (before, after)
    assert steps[-1] == (60, 60) and [h["step"] for h in history] == [50, 60]
    assert all(torch.equal(p, weights[n]) for n, p in lm.model.named_parameters())
    for tc in tcs.values():
        assert not tc.training and not any(p.requires_grad for p in tc.parameters())
        torch.testing.assert_close(tc.W_dec.norm(dim=1), torch.ones(tc.d_sae))


def test_the_local_term_keeps_each_transcoder_a_replacement_of_its_own_layer(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    tcs = _set(lm)
    history = tune_end_to_end(lm, tcs, TEXTS, TuneConfig(steps=50, batch_size=8, lr=3e-3, local=10.0))
    first = tune_end_to_end(lm, _set(lm), TEXTS, TuneConfig(steps=1, batch_size=8, lr=3e-3, local=10.0))
    assert history[-1]["local_nmse"] < first[-1]["local_nmse"]  # trained down from where the random set starts


def test_parts_skip_moves_the_skip_path_alone_and_still_brings_the_kl_down(tiny_mlm_dir):
    """``parts="skip"``: every feature's encoder and decoder stay as trained (a graph's features keep their meaning),
    the skip path and output bias move, and the replacement model still comes nearer the real one."""
    lm = load_model(str(tiny_mlm_dir))
    tcs = _set(lm)
    before, after, moved = tuned_parts(lm, tcs, "skip")
    assert after["kl"] < 0.8 * before["kl"], (before, after)
    assert all(names == {"W_skip", "b_dec"} for names in moved.values()), moved
    assert not any(p.requires_grad for tc in tcs.values() for p in tc.parameters())
    unscaled = _set(lm)
    with torch.no_grad():
        unscaled[1].W_dec.mul_(2.0)  # the decoders stay: their norm is not the tuning's to keep
    tune_end_to_end(lm, unscaled, TEXTS, TuneConfig(steps=1, batch_size=8, parts="skip"))
    plain = {layer: Transcoder(tc.d_in, tc.d_out, tc.d_sae, tc.k, False, tc.info) for layer, tc in _set(lm).items()}
    with pytest.raises(BertScopeError, match="--parts skip tunes the skip path"):
        tune_end_to_end(lm, plain, TEXTS, TuneConfig(parts="skip"))
    with pytest.raises(BertScopeError, match="--parts is one of all, writes, skip"):
        tune_end_to_end(lm, tcs, TEXTS, TuneConfig(parts="decoders"))


def test_parts_writes_moves_what_each_feature_writes_and_never_where_it_fires(tiny_mlm_dir):
    """``parts="writes"``: every encoder as trained (each feature fires on the same tokens with the same activation),
    the decoder rows free of unit norm (a refitted set's are not unit, and stay as long as the KL wants them), and
    the replacement model comes nearer the real one."""
    lm = load_model(str(tiny_mlm_dir))
    tcs = _set(lm)
    with torch.no_grad():
        tcs[1].W_dec.mul_(1.5)  # as a refitted set's rows: not unit, and not refused
    before, after, moved = tuned_parts(lm, tcs, "writes")
    assert after["kl"] < 0.8 * before["kl"], (before, after)
    assert all(names == {"W_dec", "W_skip", "b_dec"} for names in moved.values()), moved
    norms = tcs[1].W_dec.norm(dim=1)
    assert not torch.allclose(norms, torch.ones_like(norms), atol=0.1)  # not brought back to unit


def test_a_stop_keeps_the_steps_taken_and_bad_input_is_one_line(tiny_mlm_dir, tiny_encoder_dir):
    lm = load_model(str(tiny_mlm_dir))
    tcs = _set(lm)
    start = tcs[0].W_enc.detach().clone()
    history = tune_end_to_end(lm, tcs, TEXTS, TuneConfig(steps=500, batch_size=8), stop=lambda: True)
    assert not torch.equal(tcs[0].W_enc, start)  # one step taken, then stopped: its row kept
    assert [h["step"] for h in history] == [1] and history[0]["kl"] >= 0
    with pytest.raises(BertScopeError, match="every layer"):
        tune_end_to_end(lm, {0: tcs[0]}, TEXTS)
    with pytest.raises(BertScopeError, match="at least 1"):
        tune_end_to_end(lm, tcs, TEXTS, TuneConfig(steps=0))
    with pytest.raises(BertScopeError, match="No training texts"):
        tune_end_to_end(lm, tcs, [])
    unscaled = _set(lm)
    with torch.no_grad():
        unscaled[1].W_dec.mul_(2.0)
    with pytest.raises(BertScopeError, match="Layer 1's transcoder has decoder rows of norm 2"):
        tune_end_to_end(lm, unscaled, TEXTS)
    encoder = load_model(str(tiny_encoder_dir))
    with pytest.raises(BertScopeError, match="no masked-LM head"):
        tune_end_to_end(encoder, _set(encoder), TEXTS)


def test_texts_are_cut_at_a_word_piece_and_the_settings_checked(tiny_mlm_dir):
    from bertscope.features.transcoder_tuning import _cut

    lm = load_model(str(tiny_mlm_dir))
    cut = _cut(lm, ["the bank of the river was muddy", "dog", ""], 3)
    assert cut == ["the bank of", "dog", ""]
    assert all(len(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) <= 3 for t in cut)
    for bad in (TuneConfig(pieces=4), TuneConfig(lr=float("nan")), TuneConfig(local=float("inf")),
                TuneConfig(local=-1.0), TuneConfig(batch_size=0)):
        with pytest.raises(BertScopeError, match="must be"):
            bad.check()
