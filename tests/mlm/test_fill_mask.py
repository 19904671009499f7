"""Masked-token predictions: parity with the fill-mask pipeline, the 80/10/10 recipe, NSP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertscope import BertScopeError, load_model
from bertscope.mlm.fill_mask import fill_mask, fill_mask_words, iterative_fill, normalise_masks, words_of
from bertscope.mlm.logit_lens import layerwise_predictions
from bertscope.mlm.masking import IGNORE_INDEX
from bertscope.mlm.nsp import both_orders, next_sentence
from bertscope.mlm.recipe import corrupt, mlm_recipe, ordinary_vocab, recipe_corruption


@pytest.fixture(scope="module")
def pipe(tiny_bert, tiny_bert_dir):
    from transformers import BertForMaskedLM, pipeline

    model = BertForMaskedLM.from_pretrained(tiny_bert_dir).eval()
    return pipeline("fill-mask", model=model, tokenizer=tiny_bert.tokenizer, top_k=7)


@pytest.mark.parametrize("text", ["the bank of the [MASK] .", "the [MASK] of the [MASK] is muddy ."])
def test_parity_with_fill_mask_pipeline(tiny_bert, pipe, text):
    ours = fill_mask(tiny_bert, text, top_k=7).to_json()
    theirs = pipe(text)
    theirs = [theirs] if isinstance(theirs[0], dict) else theirs  # one mask: a flat list
    assert len(ours) == len(theirs)
    for mine, ref in zip(ours, theirs):
        assert [p["token_id"] for p in mine] == [r["token"] for r in ref]
        assert [p["token"] for p in mine] == [r["token_str"] for r in ref]
        np.testing.assert_allclose([p["score"] for p in mine], [r["score"] for r in ref], atol=1e-5)


def test_roberta_mask_spellings(tiny_roberta_dir):
    lm = load_model(str(tiny_roberta_dir))
    a = fill_mask(lm, "The bank of the [MASK] was muddy.").to_json()
    b = fill_mask(lm, "The bank of the <mask> was muddy.").to_json()
    assert a == b


def test_mask_spellings_and_bad_inputs(tiny_bert, tiny_encoder_dir):
    assert normalise_masks(tiny_bert, "a <mask> and a [MASK]") == "a [MASK] and a [MASK]"
    with pytest.raises(BertScopeError, match="no mask"):
        fill_mask(tiny_bert, "the bank of the river .")
    with pytest.raises(BertScopeError, match="empty"):
        fill_mask(tiny_bert, "  ")
    with pytest.raises(BertScopeError, match="at most 20"):
        fill_mask(tiny_bert, " ".join(["[MASK]"] * 21))
    with pytest.raises(BertScopeError, match="not a mask token here"):
        fill_mask(tiny_bert, "the <extra_id_0> of the river")
    with pytest.raises(BertScopeError, match="not a mask token here"):
        fill_mask(tiny_bert, "the [mask] of the river")
    with pytest.raises(BertScopeError, match="beyond the model's 40-token limit"):
        fill_mask(tiny_bert, " ".join(["the river"] * 25) + " [MASK]")
    with pytest.raises(BertScopeError, match="top-k"):
        fill_mask(tiny_bert, "the [MASK]", top_k=0)
    with pytest.raises(BertScopeError, match="no masked-LM head"):
        fill_mask(load_model(str(tiny_encoder_dir)), "the [MASK]")


def test_whole_word_masking_masks_every_piece(tiny_bert):
    _, names = words_of(tiny_bert, "unbelievably the riverside")
    assert names == ["unbelievably", "the", "riverside"]
    r = fill_mask_words(tiny_bert, "unbelievably the riverside", [0, 2], top_k=3)
    assert r.inspection.tokens == ["[CLS]", "[MASK]", "[MASK]", "[MASK]", "[MASK]", "[MASK]", "the",
                                   "[MASK]", "[MASK]", "[SEP]"]
    assert r.mask_positions == [1, 2, 3, 4, 5, 7, 8] and len(r.predictions) == 7
    # identical to typing the masks in: same ids, same predictions
    typed = fill_mask(tiny_bert, "[MASK] [MASK] [MASK] [MASK] [MASK] the [MASK] [MASK]", top_k=3)
    assert r.to_json() == typed.to_json()
    with pytest.raises(BertScopeError, match="Word 9 does not exist"):
        fill_mask_words(tiny_bert, "the bank", [9])


def test_iterative_fill_is_most_confident_first(tiny_bert):
    start = fill_mask(tiny_bert, "the [MASK] of the [MASK] .", top_k=1)
    it = iterative_fill(tiny_bert, start)
    assert len(it.steps) == 2 and "[MASK]" not in it.text
    first = it.steps[0]
    specials = set(tiny_bert.tokenizer.all_special_ids)
    best = {p: max((i for i in range(tiny_bert.vocab_size) if i not in specials),
                   key=lambda i, p=p: start.inspection.logits_at(p)[i]) for p in start.mask_positions}
    assert first.prediction.token_id == best[first.position]
    np.testing.assert_allclose(it.joint_probability, it.steps[0].prediction.score * it.steps[1].prediction.score)


def test_layerwise_predictions(tiny_bert):
    r = fill_mask(tiny_bert, "the bank of the [MASK] .", top_k=3)
    readings = layerwise_predictions(tiny_bert, r)
    assert [x.layer for x in readings] == [0, 1, 2]
    assert readings[-1].final_rank == 1
    assert readings[-1].top[0].token_id == r.predictions[0][0].token_id


def test_layerwise_for_roberta_and_missing_mask(tiny_roberta_dir, tiny_bert):
    lm = load_model(str(tiny_roberta_dir))
    r = fill_mask(lm, "The bank of the <mask>.")
    assert layerwise_predictions(lm, r)[-1].final_rank == 1
    with pytest.raises(BertScopeError, match="Mask 3 does not exist"):
        layerwise_predictions(tiny_bert, fill_mask(tiny_bert, "the [MASK]"), mask_index=2)


def test_recipe_proportions_within_binomial_tolerance():
    n_tokens, draws = 60, 400
    special = [True] + [False] * (n_tokens - 2) + [True]
    vocab = np.arange(10, 100)
    counts = {"mask": 0, "random": 0, "keep": 0}
    chosen_total = 0
    for seed in range(draws):
        c = corrupt(list(range(1, n_tokens + 1)), special, vocab, mask_id=4, seed=seed)
        assert len(c.actions) == round(58 * 0.15) == 9
        assert all(c.labels[i] != IGNORE_INDEX for i in c.actions)
        assert sum(label != IGNORE_INDEX for label in c.labels) == len(c.actions)
        assert not special[0] or 0 not in c.actions
        for i, action in c.actions.items():
            counts[action] += 1
            if action == "mask":
                assert c.input_ids[i] == 4
            elif action == "random":
                assert c.input_ids[i] in vocab
            else:
                assert c.input_ids[i] == i + 1
        chosen_total += len(c.actions)
    for action, p in (("mask", 0.8), ("random", 0.1), ("keep", 0.1)):
        sd = np.sqrt(chosen_total * p * (1 - p))
        assert abs(counts[action] - chosen_total * p) < 4 * sd, (action, counts)


def test_recipe_is_seeded_and_rates_are_checked():
    a = corrupt(list(range(30)), [False] * 30, np.arange(50), 4, seed=3)
    assert a == corrupt(list(range(30)), [False] * 30, np.arange(50), 4, seed=3)
    assert a != corrupt(list(range(30)), [False] * 30, np.arange(50), 4, seed=4)
    with pytest.raises(BertScopeError, match="add up"):
        corrupt([1, 2], [False, False], np.arange(5), 4, mask_rate=0.9, random_rate=0.2)
    with pytest.raises(BertScopeError, match="selection rate"):
        corrupt([1, 2], [False, False], np.arange(5), 4, select_rate=0)


def test_recipe_loss_equals_hand_computation(tiny_bert):
    r = mlm_recipe(tiny_bert, "the man walked along the river bank with his dog .", seed=5, select_rate=0.3)
    assert r.corrupted.logit_positions == tuple(sorted(p.position for p in r.positions))  # chosen rows only
    with torch.no_grad():  # reference: the model's own logits for the corrupted ids, every row
        logits = tiny_bert.model(input_ids=torch.tensor([r.corrupted.input_ids.tolist()], device=tiny_bert.device),
                                 token_type_ids=torch.tensor([r.corrupted.token_type_ids.tolist()], device=tiny_bert.device)
                                 ).prediction_logits[0].float().cpu().numpy()  # [token, vocab]
    losses = []
    for p in r.positions:
        row = logits[p.position].astype(np.float64)
        log_probs = row - row.max() - np.log(np.exp(row - row.max()).sum())
        target = int(r.original.input_ids[p.position])
        losses.append(-log_probs[target])
        np.testing.assert_allclose(p.loss, -log_probs[target], rtol=1e-5)
        assert p.recovered == (p.top[0].token_id == target)
    np.testing.assert_allclose(r.mean_loss, np.mean(losses), rtol=1e-5)
    assert len(r.positions) == round(11 * 0.3)
    assert r.accuracy == np.mean([p.recovered for p in r.positions])
    assert 4 not in ordinary_vocab(tiny_bert)  # [MASK] is never a "random" replacement


def test_next_sentence_both_orders(tiny_bert, tiny_bert_dir, tiny_mlm_dir):
    from transformers import BertForPreTraining

    forward, backward = both_orders(tiny_bert, "the man walked .", "he sat .")
    model = BertForPreTraining.from_pretrained(tiny_bert_dir).eval()
    enc = tiny_bert.tokenizer("the man walked .", "he sat .", return_tensors="pt")
    with torch.no_grad():
        p = F.softmax(model(**enc).seq_relationship_logits[0], -1)
    np.testing.assert_allclose([forward.is_next, forward.not_next], p.numpy(), rtol=1e-5)
    assert backward != forward
    with pytest.raises(BertScopeError, match="no next-sentence head"):
        next_sentence(load_model(str(tiny_mlm_dir)), "a", "b")
    with pytest.raises(BertScopeError, match="Sentence B is empty"):
        next_sentence(tiny_bert, "the man", " ")


def test_recipe_corruption_needs_only_the_tokenizer(tiny_encoder_dir):
    """A model without an MLM head still shows what the recipe feeds it (no forward pass)."""
    lm = load_model(str(tiny_encoder_dir))
    text = "the man walked along the river bank with his dog ."
    view = recipe_corruption(lm, text, seed=5, select_rate=0.3)
    ordinary = [t for t in view.tokens if t not in ("[CLS]", "[SEP]")]
    assert len(view.corruption.actions) == round(len(ordinary) * 0.3)
    assert view.corruption.actions == corrupt(
        lm.tokenizer(text)["input_ids"], [t in ("[CLS]", "[SEP]") for t in view.tokens], ordinary_vocab(lm),
        lm.tokenizer.mask_token_id, 5, 0.3).actions  # the same draw as the recipe with a head
    for row in view.rows():
        assert row["original"] == view.tokens[row["position"]]
        assert (row["model would see"] == "[MASK]") == (row["action"] == "mask")
    with pytest.raises(BertScopeError, match="empty"):
        recipe_corruption(lm, "  ")


def test_require_mlm_suggests_only_what_can_be_loaded(tiny_encoder_dir):
    from bertscope.mlm.fill_mask import require_mlm

    lm = load_model(str(tiny_encoder_dir))
    with pytest.raises(BertScopeError, match="loaded here: bundled-mlm \\(.*need the Hugging Face hub") as err:
        require_mlm(lm, usable=lambda name: name == "bundled-mlm")
    assert "roberta-base" not in str(err.value)
    with pytest.raises(BertScopeError, match="no model with one can be loaded here"):
        require_mlm(lm, usable=lambda name: False)
    with pytest.raises(BertScopeError, match="e.g. bundled-mlm, bert-base-uncased"):
        require_mlm(lm)


def test_albert_sentence_order_head_matches_hugging_face(tiny_albert_pretraining_dir, tiny_albert_dir):
    from transformers import AlbertForPreTraining, AutoTokenizer

    from bertscope.core.forward import inspect
    from bertscope.mlm.nsp import sentence_order

    lm = load_model(str(tiny_albert_pretraining_dir))
    assert lm.outputs == {"mlm", "sop"} and lm.architecture == "AlbertForPreTraining"
    a, b = "the man sat on the grass .", "he ate bread ."
    r = inspect(lm, a, b, with_logits=False)
    hf = AlbertForPreTraining.from_pretrained(tiny_albert_pretraining_dir).eval()
    enc = AutoTokenizer.from_pretrained(tiny_albert_pretraining_dir)(a, b, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**enc).sop_logits[0].numpy()
    np.testing.assert_allclose(r.sop_logits, expected, atol=1e-5)
    order = sentence_order(lm, a, b)
    p = np.exp(expected) / np.exp(expected).sum()
    assert order.in_order == pytest.approx(p[0], abs=1e-5) and order.in_order + order.swapped == pytest.approx(1)
    assert inspect(lm, a, with_logits=False).sop_logits is None  # one segment: the head is not read
    masked_only = load_model(str(tiny_albert_dir))  # a checkpoint without the head: said in one line
    assert masked_only.outputs == {"mlm"}
    with pytest.raises(BertScopeError, match="no sentence-order head"):
        sentence_order(masked_only, a, b)


def test_sop_on_the_command_line_and_as_an_attribution_target(tiny_albert_pretraining_dir, capsys):
    import json

    from bertscope.attribution.gradients import Target
    from bertscope.attribution.methods import attribute
    from bertscope.cli import main

    assert main(["sop", str(tiny_albert_pretraining_dir), "the man sat .", "he ate bread .", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"in_order", "swapped"} and out["in_order"] + out["swapped"] == pytest.approx(1)
    assert main(["sop", str(tiny_albert_pretraining_dir), "the man sat .", " "]) == 2
    assert "Sentence B is empty" in capsys.readouterr().err
    lm = load_model(str(tiny_albert_pretraining_dir))
    ig = attribute(lm, "the man sat .", "he ate bread .", method="ig", target=Target("sop"))
    assert ig.completeness_error < 0.01
    with pytest.raises(BertScopeError, match="needs a pair"):
        attribute(lm, "the man sat .", method="grad", target=Target("sop"))
