"""The causal check of a model diff (``features.diff_causal``) on a tiny tagger reading EWT's dev side: the
intact reading is the tagger's own accuracy, the base read of a model against itself changes nothing, a latent
that never fires changes nothing when switched off, the controls fire as often and are never fine-tuned-only,
and bad requests are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import BertScopeError
from bertscope.features.crosscoder import BatchTopKCrosscoder, CrosscoderInfo
from bertscope.features.diff_causal import EDITS, diff_effect
from bertscope.features.model_diff import CLASSES
from tests.conftest import bert_tokenizer, save_model, tiny_bert_config

UPOS = ("ADJ", "ADP", "ADV", "AUX", "CONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT", "SCONJ",
        "SYM", "VERB", "X")  # EWT's UD v1 tags, as bundled-upos has them
SILENT = 5  # a latent built never to fire


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    from transformers import BertForTokenClassification

    from bertscope.core.models import load_model

    torch.manual_seed(0)
    model = BertForTokenClassification(tiny_bert_config(num_labels=len(UPOS), id2label=dict(enumerate(UPOS)),
                                                        label2id={t: i for i, t in enumerate(UPOS)}))
    return load_model(str(save_model(model, bert_tokenizer(), tmp_path_factory.mktemp("tiny-tagger"))), device="cpu")


def _crosscoder() -> BatchTopKCrosscoder:
    cc = BatchTopKCrosscoder(32, 64, 4, CrosscoderInfo(("tiny", "tiny-tagger"), "blocks.1.hook_resid_post"), seed=0)
    with torch.no_grad():
        cc.W_enc[:, :, SILENT] = 0
        cc.b_enc[SILENT] = -1.0  # z = ReLU(-1) = 0 on every token
        cc.threshold.fill_(0.0)
    return cc


def _own_accuracy(lm, examples: int, seed: int) -> float:
    """The tagger's accuracy on the same sample, scored by a plain loop over the rows (first pieces only)."""
    from bertscope.training.task_data import load_task_data
    from bertscope.training.task_objective import IGNORE, encode

    side = load_task_data("tag", "ewt-upos").held_out
    side = side.take(sorted(np.random.default_rng(seed).choice(len(side), examples, replace=False).tolist()))
    enc = encode(lm.tokenizer, "tag", side, list(UPOS), lm.max_length)
    right = total = 0
    with torch.no_grad():
        for ids, gold in zip(enc.ids, enc.labels):
            predicted = lm.model(input_ids=torch.tensor([ids])).logits[0].argmax(-1)
            keep = torch.tensor(gold) != IGNORE
            right += int((predicted[keep] == torch.tensor(gold)[keep]).sum())
            total += int(keep.sum())
    return right / total


def test_against_itself_the_base_read_and_a_silent_latent_change_nothing(tagger):
    classes = np.full(64, CLASSES.index("shared"))
    classes[[7, 8]] = CLASSES.index("fine-tuned-only")  # never chosen as controls
    effect = diff_effect(tagger, tagger, _crosscoder(), 1, [SILENT, 3], classes, examples=40, seed=1)
    assert set(effect.accuracy) == set(EDITS) and effect.task == "tag" and effect.examples == 40
    assert effect.accuracy["intact"] == pytest.approx(_own_accuracy(tagger, 40, 1), abs=1e-12)
    assert effect.accuracy["base read"] == effect.accuracy["intact"]  # the model's own output put back
    assert effect.agreement_with_base["intact"] == 1.0
    assert effect.confusion["intact"].sum() == effect.scored and effect.scored > 40  # words, not sentences
    assert np.trace(effect.confusion["intact"]) / effect.scored == pytest.approx(effect.accuracy["intact"])
    assert effect.fires[SILENT] == 0 and effect.fires[3] > 0
    assert len(effect.controls) == 2 and not set(effect.controls) & {SILENT, 3, 7, 8}
    assert all(effect.fires[c] > 0 for c in effect.controls)
    assert effect.contexts[SILENT] == [] and effect.contexts[3]
    top = effect.contexts[3][0]
    assert top.activation > 0 and top.token and top.text
    out = effect.to_json()
    assert out["finetuned_only"]["latents"] == [SILENT, 3] and out["control"]["latents"] == list(effect.controls)
    assert out["finetuned_only"]["accuracy_before"] == out["control"]["accuracy_before"]


def test_the_silent_latent_alone_removed_leaves_every_prediction(tagger):
    classes = np.full(64, CLASSES.index("shared"))
    effect = diff_effect(tagger, tagger, _crosscoder(), 0, [SILENT], classes, examples=20, seed=2)
    assert effect.accuracy["removed"] == effect.accuracy["intact"]
    assert effect.agreement_with_base["removed"] == 1.0
    assert np.array_equal(effect.confusion["removed"], effect.confusion["intact"])
    # the control fires as close to never as any latent that fires at all
    fired = effect.fires[effect.controls[0]]
    assert fired > 0


def test_bad_requests_are_refused_in_one_line(tagger, tiny_bert_dir):
    from bertscope.core.models import load_model

    cc, classes = _crosscoder(), np.full(64, CLASSES.index("shared"))
    base = load_model(str(tiny_bert_dir), device="cpu")
    cases = [((tagger, base, cc, 1, [3], classes), "no classification or tagging head"),
             ((tagger, tagger, cc, 1, [64], classes), "latents 0 to 63"),
             ((tagger, tagger, cc, 1, [], classes), "between 1 and 64"),
             ((tagger, tagger, cc, 1, [3], classes[:10]), "10 classes given for 64"),
             ((tagger, tagger, cc, 9, [3], classes), "layer")]
    for args, words in cases:
        with pytest.raises(BertScopeError, match=words) as caught:
            diff_effect(*args, examples=5)
        assert "\n" not in str(caught.value)
