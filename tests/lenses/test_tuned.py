"""The tuned lens against what does not share its code: the untrained lens against the logit lens of
``mlm.logit_lens`` and ``tasks.layer_lens``, the translator against ``h + Linear(h)`` (the tuned-lens
package's ``transform_hidden``), training against the logit lens on held-out text, the files against
tampering, and bad input in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.cli import main
from bertscope.errors import BertScopeError
from bertscope.lenses import shipped
from bertscope.lenses.readings import lens_readings
from bertscope.lenses.tuned import TunedLens, lens_quality, load_lens, train_tuned_lens
from tests.conftest import labels, task_checkpoint

SENTENCES = [f"{d} {a} {b} {v} {c} ." for d in ("the", "a") for a in ("old", "big", "red", "small", "dark")
             for b in ("river", "house", "dog", "city", "road", "tree") for v in ("was", "is")
             for c in ("muddy", "quiet", "long", "near")]
_ORDER = np.random.default_rng(0).permutation(len(SENTENCES))
TEXTS = [SENTENCES[i] for i in _ORDER[:360]]  # trained on
HELD = [SENTENCES[i] for i in _ORDER[360:]]  # 120 sentences of the same kind the lens never saw


@pytest.fixture(scope="module")
def classifier(tiny_bert_dir, tmp_path_factory):
    folder = task_checkpoint(tiny_bert_dir, tmp_path_factory.mktemp("cls"), "AutoModelForSequenceClassification", 3,
                             num_labels=3, **labels(["negative", "neutral", "positive"]))
    return load_model(str(folder))


def _stirred(lm, seed: int = 0):
    """``lm`` with its blocks' weights drawn wide (σ 0.3): a random tiny model's layers barely change its states
    (σ 0.02), so every layer would read as the last and no lens would have anything to learn."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in lm.model.named_parameters():
            if ".layer." in name and name.endswith("weight") and p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return lm


def test_the_untrained_lens_is_the_logit_lens(tiny_mlm_dir, classifier):
    from bertscope.mlm.fill_mask import fill_mask
    from bertscope.mlm.logit_lens import layerwise_predictions
    from bertscope.tasks.layer_lens import layer_decisions

    lm = load_model(str(tiny_mlm_dir))
    text = "the bank of the [MASK] was muddy ."
    got = lens_readings(lm, TunedLens.identity(lm), text, top_k=5)
    reference = layerwise_predictions(lm, fill_mask(lm, text, top_k=5), 0, top_k=5)
    assert [r.layer for r in got.layers][0] == "embeddings" and len(got.layers) == len(reference)
    for mine, theirs in zip(got.layers, reference):
        assert [t for t, _ in mine.tuned] == [t for t, _ in mine.logit] == [p.token for p in theirs.top]
        np.testing.assert_allclose([p for _, p in mine.logit], [p.score for p in theirs.top], atol=1e-5)
        assert mine.kl_tuned == pytest.approx(mine.kl_logit, abs=1e-6) and mine.final_rank_logit == theirs.final_rank
    assert got.layers[-1].kl_logit == pytest.approx(0, abs=1e-6)
    decisions = layer_decisions(classifier, "a good film .")
    read = lens_readings(classifier, TunedLens.identity(classifier), "a good film .")
    for s, r in enumerate(read.layers):
        probs = dict(r.logit)
        np.testing.assert_allclose([probs[label] for label in decisions.labels], decisions.scores[s], atol=1e-5)


def test_the_translator_is_the_packages_transform(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    lens = TunedLens.identity(lm)
    torch.manual_seed(0)
    linear = torch.nn.Linear(lm.hidden_size, lm.hidden_size)
    lens.weight[1], lens.bias[1] = linear.weight.detach(), linear.bias.detach()
    h = torch.randn(3, 7, lm.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(lens.translate(h, 1), h + linear(h))  # tuned_lens.nn.TunedLens.transform_hidden
    torch.testing.assert_close(lens.translate(h, 0), h)  # untrained: the identity
    torch.testing.assert_close(lens.translate(h, lm.num_layers), h)  # the last state has no translator


@pytest.mark.parametrize("which", ["mlm", "class"])
def test_training_beats_the_logit_lens_on_held_out_text(tiny_mlm_dir, classifier, which, tmp_path):
    lm = _stirred(load_model(str(tiny_mlm_dir)) if which == "mlm" else load_model(classifier.source))
    seen = []
    lens = train_tuned_lens(lm, TEXTS, steps=40, batch_size=16, trained_on="templates",
                            progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (40, 40) and lens.meta.kind == which and len(lens.meta.losses) == 40
    assert np.mean(lens.meta.losses[-5:]) < np.mean(lens.meta.losses[:5])
    quality = lens_quality(lm, lens, HELD)
    for s in range(lm.num_layers):  # every state with a translator: closer to the final layer than the logit lens
        assert quality.kl["tuned"][s] < quality.kl["logit"][s], (s, quality.kl)
    assert quality.kl["tuned"][-1] == pytest.approx(0, abs=1e-5) == quality.kl["logit"][-1]
    out = json.loads(json.dumps(quality.to_json()))
    assert {"layer", "kl_tuned", "kl_logit", "bias_tuned", "ece_logit"} <= set(out["layers"][0])
    again = load_lens(lens.save(tmp_path / "lens"), lm)
    torch.testing.assert_close(again.weight, lens.weight)
    assert again.meta == lens.meta and not list((tmp_path / "lens").glob("*.pt"))  # safetensors, no pickle


def test_a_lens_is_found_trained_or_refused_in_one_line(tiny_mlm_dir, tiny_encoder_dir, tmp_path, monkeypatch,
                                                       capsys):
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "cache"))
    lm = load_model(str(tiny_mlm_dir))
    with pytest.raises(BertScopeError, match="train-tuned-lens"):
        shipped.find_lens(lm)
    assert main(["tuned-lens", str(tiny_mlm_dir), "the [MASK] ."]) == 2
    assert "train-tuned-lens" in capsys.readouterr().err
    train_tuned_lens(lm, TEXTS, steps=2, batch_size=8).save(shipped.trained_folder(lm.name))
    assert main(["tuned-lens", str(tiny_mlm_dir), "the bank of the [MASK] .", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["layers"]) == lm.num_layers + 1 and {"layer", "top", "kl_to_final", "logit_lens_kl_to_final"} <= \
        set(out["layers"][0]) and out["position"] == 5
    for bad in (["no mask here ."], ["the [MASK] .", "--mask", "2"],
                ["the [MASK] .", "--lens", str(tmp_path / "none")]):  # --top-k 0: the option's own type
        assert main(["tuned-lens", str(tiny_mlm_dir), *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1, err
    # a tampered file, a model without a head the lens reads: one line each
    folder = shipped.trained_folder(lm.name)
    (folder / "lens.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(BertScopeError, match="not a tuned lens"):
        load_lens(folder, lm)
    with pytest.raises(BertScopeError, match="neither a masked-LM head"):
        train_tuned_lens(load_model(str(tiny_encoder_dir)), TEXTS)
