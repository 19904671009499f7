"""The causal check of a model diff (``features.diff_causal``) on tiny models reading the shipped held-out sides:
a base and a tagger (or a classifier) of one vocabulary and width, a random crosscoder over both. Each edit's
accuracy equals the same edit done by hand, one sentence at a time; the controls are drawn as the docstring says;
bad requests are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import BertScopeError
from bertscope.features.activations import resid_post
from bertscope.features.active import layer_output
from bertscope.features.crosscoder import BatchTopKCrosscoder, CrosscoderInfo
from bertscope.features.diff_causal import EDITS, diff_effect, task_side
from bertscope.training.task_objective import IGNORE, encode
from tests.conftest import bert_tokenizer, save_model, tiny_bert_config

UPOS = ("ADJ", "ADP", "ADV", "AUX", "CONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT", "SCONJ",
        "SYM", "VERB", "X")  # EWT's UD v1 tags, as bundled-upos has them
SENTIMENT = ("negative", "neutral", "positive")
SILENT = 5  # a latent built never to fire


def _task_model(folder, cls, labels):
    from bertscope.core.models import load_model

    torch.manual_seed(1)
    model = cls(tiny_bert_config(num_labels=len(labels), id2label=dict(enumerate(labels)),
                                 label2id={t: i for i, t in enumerate(labels)}))
    return load_model(str(save_model(model, bert_tokenizer(), folder)), device="cpu")


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    from transformers import BertForTokenClassification

    return _task_model(tmp_path_factory.mktemp("tiny-tagger"), BertForTokenClassification, UPOS)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from transformers import BertForSequenceClassification

    return _task_model(tmp_path_factory.mktemp("tiny-classifier"), BertForSequenceClassification, SENTIMENT)


@pytest.fixture(scope="module")
def base(tiny_bert_dir):
    from bertscope.core.models import load_model

    return load_model(str(tiny_bert_dir), device="cpu")  # another model of the same vocabulary and width


def _crosscoder(layer: int = 0, positions: str = "pieces") -> BatchTopKCrosscoder:
    extra = {} if positions == "pieces" else {"positions": positions}
    cc = BatchTopKCrosscoder(32, 64, 4, CrosscoderInfo(("tiny", "tiny-task"), f"blocks.{layer}.hook_resid_post", extra),
                             seed=0)
    with torch.no_grad():
        cc.W_dec.mul_(3.0)  # long enough decoders that taking latents out moves predictions
        cc.b_dec.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
        cc.W_enc[:, :, SILENT] = 0
        cc.b_enc[SILENT] = -1.0  # z = ReLU(-1) = 0 on every token
        cc.threshold.fill_(0.0)
    return cc


def _by_hand(base, tuned, cc, layer, examples, seed, edit) -> float:
    """Accuracy with ``edit(x_base, x_tuned) -> x'`` applied at the word pieces (or [CLS], for a crosscoder of
    [CLS]), one example at a time."""
    side = task_side(tuned, layer, examples, seed, positions=cc.info.positions)
    enc = encode(tuned.tokenizer, side.task, side.side, side.labels, tuned.max_length)
    right = total = 0
    tok = tuned.tokenizer
    for ids, gold in zip(enc.ids, enc.labels):
        feed = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        pieces = ~torch.isin(feed["input_ids"], torch.tensor([tok.cls_token_id, tok.sep_token_id]))
        if cc.info.positions == "cls":
            pieces = feed["input_ids"] == tok.cls_token_id
        x_base = layer_output(base, feed, layer)

        def hook(x, _hook, _b=x_base, _p=pieces):
            out = x.clone()
            out[_p] = edit(_b[_p], x[_p])
            return out

        with torch.no_grad():
            predicted = tuned.run(feed, hooks={resid_post(layer): hook}).logits.argmax(-1)[0]
        gold = torch.tensor(gold)
        keep = gold != IGNORE
        right += int((predicted[keep] == gold[keep]).sum())
        total += int(keep.sum())
    return right / total


def _codes(cc, x_base, x_tuned):
    return cc.encode(torch.stack([x_base, x_tuned], dim=1), use_threshold=True)


@pytest.mark.parametrize("kind", ["tag", "classify", "classify at [CLS]"])
def test_every_edit_is_the_same_edit_done_by_hand(request, base, kind):
    tuned = request.getfixturevalue("tagger" if kind == "tag" else "classifier")
    cc, layer, n, seed = _crosscoder(), 0, 24, 3
    if kind == "classify at [CLS]":  # the last layer, which the head reads through [CLS]
        layer = tuned.num_layers - 1
        cc = _crosscoder(layer, "cls")
    delta = np.full(64, 0.5)
    off = [11, 17, 23, 40]
    effect = diff_effect(base, tuned, cc, layer, off, delta, examples=n, seed=seed)
    assert set(effect.accuracy) == set(EDITS) and effect.task == kind.split()[0] and effect.examples == n
    assert effect.confusion["intact"].sum() == effect.scored and (effect.scored > n if kind == "tag" else
                                                                  effect.scored == n)
    slack = 2 / effect.scored  # a batch of padded rows against single rows: a near-tie may flip, rarely
    edits = {
        "intact": lambda xb, xt: xt,
        "spliced": lambda xb, xt: cc.decode(_codes(cc, xb, xt))[:, 1],
        "removed": lambda xb, xt: xt - _codes(cc, xb, xt)[:, off] @ cc.W_dec[1, off],
        "control": lambda xb, xt: xt - _codes(cc, xb, xt)[:, list(effect.controls)] @ cc.W_dec[1, list(effect.controls)],
        "base read": lambda xb, xt: xb,
    }
    for name, edit in edits.items():
        assert effect.accuracy[name] == pytest.approx(_by_hand(base, tuned, cc, layer, n, seed, edit), abs=slack), name
    assert np.trace(effect.confusion["removed"]) / effect.scored == pytest.approx(effect.accuracy["removed"])
    if kind == "tag":  # the tiny random classifier says "negative" whatever it reads: nothing to move there
        assert not np.array_equal(effect.confusion["removed"], effect.confusion["intact"])  # the removal moved some
        assert effect.accuracy["base read"] != effect.accuracy["intact"]  # another model's output: other predictions


def test_controls_are_written_by_both_and_remove_about_as_much(base, tagger):
    cc = _crosscoder(1)
    delta = np.linspace(0, 1, 64, endpoint=False)  # latents 0-6 base-only, 58-63 fine-tuned-only
    chosen = [60, 61, SILENT]
    effect = diff_effect(base, tagger, cc, 1, chosen, delta, examples=30, seed=1)
    removed = _removals(base, tagger, cc, 1, 30, 1)  # [d_sae] by hand
    for j in chosen + list(effect.controls):
        assert effect.removed[j] == pytest.approx(removed[j], rel=1e-4, abs=1e-4)
    assert len(effect.controls) == 3 and not set(effect.controls) & set(chosen)
    assert all(0.1 <= delta[c] < 0.9 for c in effect.controls)  # neither base-only nor fine-tuned-only
    assert effect.fires[SILENT] == 0 and effect.removed[SILENT] == 0
    eligible = [k for k in range(64) if 0.1 <= delta[k] < 0.9 and k not in chosen and removed[k] > 0]
    nearest = min(eligible, key=lambda k: abs(removed[k] - removed[60]))
    assert abs(removed[effect.controls[0]] - removed[60]) == pytest.approx(abs(removed[nearest] - removed[60]),
                                                                          abs=1e-3)
    # every latent that fired has its strongest pieces, strongest first, and the gold tags where it fired
    assert effect.contexts[60] and sum(effect.gold_counts[60].values()) == effect.fires[60]
    acts = [c.activation for c in effect.contexts[60]]
    assert acts == sorted(acts, reverse=True) and acts[0] > 0 and len(acts) <= 5
    assert SILENT not in effect.contexts


def _removals(base, tuned, cc, layer, n, seed) -> np.ndarray:
    """[d_sae] Σ f ‖W_dec[ft]‖ of every latent over the task's pieces, one example at a time."""
    side = task_side(tuned, layer, n, seed)
    enc = encode(tuned.tokenizer, side.task, side.side, side.labels, tuned.max_length)
    total = torch.zeros(cc.d_sae, dtype=torch.float64)
    tok = tuned.tokenizer
    for ids in enc.ids:
        feed = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        pieces = ~torch.isin(feed["input_ids"][0], torch.tensor([tok.cls_token_id, tok.sep_token_id]))
        xb, xt = layer_output(base, feed, layer)[0][pieces], layer_output(tuned, feed, layer)[0][pieces]
        with torch.no_grad():
            total += (_codes(cc, xb, xt).sum(0) * cc.W_dec[1].norm(dim=-1)).double()
    return total.numpy()


def test_bad_requests_are_refused_in_one_line(base, tagger, classifier):
    cc, delta = _crosscoder(1), np.full(64, 0.5)
    cases = [((base, tagger, _crosscoder(0), 1, [3], delta), r"reads layer 0 \(blocks.0.hook_resid_post\), not layer 1"),
             ((tagger, base, cc, 1, [3], delta), "no classification or tagging head"),
             ((base, tagger, _crosscoder(1, "cls"), 1, [3], delta), "tags words, which a crosscoder of \\[CLS\\] never"),
             ((base, classifier, cc, 1, [3], delta), r"classifies from \[CLS\] at its last layer"),
             ((base, tagger, cc, 1, [64], delta), "latents 0 to 63"),
             ((base, tagger, cc, 1, [], delta), "between 1 and 64"),
             ((base, tagger, cc, 1, [3], delta[:10]), "10 relative norms given for 64"),
             ((base, tagger, cc, 9, [3], delta), "layer")]
    for args, words in cases:
        with pytest.raises(BertScopeError, match=words) as caught:
            diff_effect(*args, examples=5)
        assert "\n" not in str(caught.value)
    with pytest.raises(BertScopeError, match="1 to 2,000"):
        diff_effect(base, tagger, cc, 1, [3], delta, examples=2001)


def test_the_task_data_can_be_the_users_own(classifier, tmp_path):
    """A fine-tuned model BertScope does not ship is scored on its own task data (its held-out side, 10% by seed 0,
    as fine-tuning splits it); a file whose labels the model lacks is one line."""
    rows = [("the food was good .", "positive"), ("the food was bad .", "negative"), ("it is tuesday .", "neutral")]
    data = tmp_path / "mine.csv"
    data.write_text("text,label\n" + "\n".join(f"{t} {i},{label}" for i in range(20) for t, label in rows) + "\n")
    side = task_side(classifier, 0, 100, data=str(data))
    assert side.source == "mine.csv" and side.task == "classify" and len(side.side) == 6  # 10% of 60, stratified
    assert set(side.side.labels) == set(SENTIMENT)
    assert task_side(classifier, 0, 100).source == "sentiment"  # by default, the tweets
    other = tmp_path / "other.csv"
    other.write_text("text,label\n" + "\n".join(f"text {i},{'happy' if i % 2 else 'sad'}" for i in range(20)) + "\n")
    with pytest.raises(BertScopeError, match=r"do not cover other.csv's \(happy, sad\)") as caught:
        task_side(classifier, 0, 100, data=str(other))
    assert "\n" not in str(caught.value)
    with pytest.raises(BertScopeError, match="give the task data it was fine-tuned on"):
        _uncovered_default(classifier)


def _uncovered_default(classifier):
    """The default data (the tweets) with a classifier whose labels are others: the line names --data."""
    import dataclasses

    from bertscope.core.task_head import TaskHead

    other = dataclasses.replace(classifier, task=TaskHead(classifier.task.kind, ("happy", "sad", "calm")))
    return task_side(other, 0, 100)
