"""Interventions: head ablation, head importance, activation patching — checked against the
model's own outputs, a hand computation from the module weights, finite differences, and the
identities patching must satisfy, on every family the hooks claim."""

from __future__ import annotations

import copy
import dataclasses
import math
import threading

import numpy as np
import pytest
import torch

from bertscope import BertScopeError, inspect, load_model
from bertscope.core.hook_points import every_layer
from bertscope.interventions.ablation import ablate_heads, check_heads, head_edit, mean_head_contexts, parse_heads
from bertscope.interventions.importance import (
    FRACTIONS,
    gated_loss,
    head_importance,
    masked_batches,
    mlm_top1,
    pruning_curve,
)
from bertscope.interventions.patching import capture, patch, patched_metrics, prepare

TEXTS = ["the bank of the river was muddy .", "she deposited the money in the bank .",
         "a man is eating food and a woman is riding a horse .", "the dog sat in the boat on the water ."]
FAMILIES = ["tiny_mlm_dir", "tiny_roberta_dir", "tiny_xlmr_dir", "tiny_electra_dir", "tiny_albert_dir",
            "tiny_distilbert_dir", "tiny_deberta_dir", "tiny_modernbert_dir"]


@pytest.fixture(scope="module")
def mlm(tiny_mlm_dir):
    return load_model(str(tiny_mlm_dir))


def float64(lm):
    """A float64 copy: the identities hold to rounding, and a random model's logit differences are
    small enough that float32 rounding would show in the recovered fraction."""
    return dataclasses.replace(lm, model=copy.deepcopy(lm.model).double(), dtype=torch.float64)


def masked(lm, words: str) -> str:
    return words.replace("[MASK]", lm.tokenizer.mask_token)


def mask_logits(lm, text: str) -> np.ndarray:
    """[mask, vocab] the model's logits at every mask of ``text``."""
    r = inspect(lm, text, with_attentions=False, with_hidden_states=False, logit_positions="masks")
    return np.stack([r.logits_at(p) for p in r.logit_positions])


# --- ablation -------------------------------------------------------------------------------------

def test_no_head_ablated_is_the_models_own_output(mlm):
    text = "the bank of the [MASK] was muddy ."
    own = mask_logits(mlm, text)
    with head_edit(mlm, [], "zero"):
        assert np.array_equal(mask_logits(mlm, text), own)
    with mlm.hooks(every_layer("attn.hook_z", lambda layer, context: context.clone(), mlm.num_layers)):  # the head split and merge is exact
        assert np.array_equal(mask_logits(mlm, text), own)
    r = ablate_heads(mlm, text, [(0, 1)], mode="zero", top_k=3)
    assert r.masks[0].before[0].token == mlm.tokenizer.convert_ids_to_tokens(int(own[0].argmax()))


def _hand_layer(layer, x: torch.Tensor, heads: int, replace: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's block by hand from its weights, for one unpadded input x [token, dim]:
    (the block's output [token, dim], the heads' contexts [token, head, d_head]); ``replace``
    maps a head to the vector its context is replaced by."""
    att, out = layer.attention, layer.output
    t, dim = x.shape
    d = dim // heads

    def split(linear):  # [token, head, d]
        return (x @ linear.weight.T + linear.bias).reshape(t, heads, d)

    q, k, v = split(att.self.query), split(att.self.key), split(att.self.value)
    probs = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d), dim=-1)  # [head, q, k]
    context = torch.einsum("hqk,khd->qhd", probs, v)  # [token, head, d]
    used = context.clone()
    for head, vector in (replace or {}).items():
        used[:, head] = vector
    dense = att.output.dense
    a = att.output.LayerNorm(used.reshape(t, dim) @ dense.weight.T + dense.bias + x)
    inner = torch.nn.functional.gelu(a @ layer.intermediate.dense.weight.T + layer.intermediate.dense.bias)
    y = out.LayerNorm(inner @ out.dense.weight.T + out.dense.bias + a)
    return y, context


def test_mean_ablation_equals_a_hand_computation_from_the_weights(mlm):
    """The mean context of every head over a reference sample (padding left out), and the masked
    prediction with head 1:2 replaced by its mean, computed again from the module weights."""
    bert = mlm.model.bert
    layers = bert.encoder.layer
    with torch.no_grad():
        contexts = [[] for _ in layers]
        for text in TEXTS:
            hidden = inspect(mlm, text, with_attentions=False, with_logits=False).hidden_states  # [state, token, dim]
            for i, layer in enumerate(layers):
                contexts[i].append(_hand_layer(layer, torch.from_numpy(hidden[i]), mlm.num_heads)[1])
        hand_means = torch.stack([torch.cat(c).mean(0) for c in contexts])  # [layer, head, d]
        means = mean_head_contexts(mlm, TEXTS, batch_size=3)  # padded batches of unequal lengths
        assert torch.allclose(means.means.cpu(), hand_means, atol=1e-5)
        assert means.reference == "4 sentences given" and means.tokens == sum(len(h) for h in contexts[0])

        text = "the bank of the [MASK] was muddy ."
        r = inspect(mlm, text, with_attentions=False, logit_positions="masks")
        x = torch.from_numpy(r.hidden_states[1])  # layer 0's output, untouched
        y, _ = _hand_layer(layers[1], x, mlm.num_heads, replace={2: hand_means[1, 2]})
        hand = mlm.model.cls(y)[r.logit_positions[0]].numpy()  # [vocab]
    with head_edit(mlm, [(1, 2)], "mean", means):
        ours = mask_logits(mlm, text)[0]
    assert np.abs(ours - hand).max() < 5e-6
    assert np.abs(ours - r.logits_at(r.logit_positions[0])).max() > 1e-4  # the head mattered
    result = ablate_heads(mlm, text, [(1, 2)], mode="mean", reference=TEXTS, top_k=5).masks[0]
    best = int(np.argmax(hand))
    assert result.after[0].token == mlm.tokenizer.convert_ids_to_tokens(best)
    assert result.after[0].score == pytest.approx(float(np.exp(hand[best] - np.logaddexp.reduce(hand))), rel=1e-4)


def test_ablation_json_and_token_target(mlm):
    from bertscope.attribution.gradients import parse_target

    text = "the bank of the [MASK] was muddy ."
    target = parse_target("5:river")
    r = ablate_heads(mlm, text, [(0, 0), (1, 3)], mode="zero", target=target, top_k=2).to_json()
    assert r["mode"] == "zero" and r["heads"] == [[0, 0], [1, 3]]
    (entry,) = r["masks"]
    assert entry["position"] == 5 and len(entry["before"]) == len(entry["after"]) == 2
    logits = mask_logits(mlm, text)[0]
    river = mlm.tokenizer.convert_tokens_to_ids("river")
    assert entry["token"] == "river"
    assert entry["token_before"] == pytest.approx(float(np.exp(logits[river] - np.logaddexp.reduce(logits))), rel=1e-5)


def test_ablation_of_a_pair_decision(tiny_bert_dir):
    from bertscope.attribution.gradients import parse_target

    lm = load_model(str(tiny_bert_dir))
    r = ablate_heads(lm, "the man sat .", [(0, 0), (0, 1), (0, 2), (0, 3)], pair="he ate food .",
                     target=parse_target("nsp"))
    nsp = inspect(lm, "the man sat .", "he ate food .", with_attentions=False, with_hidden_states=False)
    assert r.decision["before"] == pytest.approx(float(torch.softmax(torch.tensor(nsp.nsp_logits), -1)[0]), rel=1e-5)
    assert r.decision["after"] != pytest.approx(r.decision["before"])


def test_bad_heads_are_one_line(mlm):
    assert parse_heads("3:7, 5:2") == [(3, 7), (5, 2)]
    for spec in ("3", "a:b", "", "3:-1"):
        with pytest.raises(BertScopeError, match="LAYER:HEAD|at least one head"):
            parse_heads(spec)
    with pytest.raises(BertScopeError, match="Layer 2, head 0 does not exist: .* layers 0-1 and heads 0-3"):
        check_heads(mlm, [(2, 0)])
    with pytest.raises(BertScopeError, match="no mask"):
        ablate_heads(mlm, "the bank of the river .", [(0, 0)])


def test_hooks_act_only_in_the_thread_that_set_them(mlm):
    text = "the bank of the [MASK] was muddy ."
    own = mask_logits(mlm, text)
    seen = {}
    with head_edit(mlm, [(layer, head) for layer in range(2) for head in range(4)], "zero"):
        worker = threading.Thread(target=lambda: seen.update(other=mask_logits(mlm, text)))
        worker.start()
        worker.join()
        mine = mask_logits(mlm, text)
    assert np.array_equal(seen["other"], own) and not np.allclose(mine, own)


# --- importance -----------------------------------------------------------------------------------

def test_gate_gradient_equals_a_finite_difference(tiny_mlm_dir):
    """I_h for one batch is |∂L/∂ξ_h|; in float64 a central difference agrees to 1e-6."""
    lm = float64(load_model(str(tiny_mlm_dir)))
    imp = head_importance(lm, TEXTS, batch_size=16, seed=3)
    (rows, feed, chosen, gold), = list(masked_batches(lm, TEXTS, 16, seed=3))  # the same corruption
    tokens = int(feed["attention_mask"].sum())
    eps = 1e-5
    difference = np.zeros((lm.num_layers, lm.num_heads))
    with torch.no_grad():
        for layer in range(lm.num_layers):
            for head in range(lm.num_heads):
                up, down = (torch.ones(lm.num_layers, lm.num_heads, dtype=torch.float64) for _ in range(2))
                up[layer, head] += eps
                down[layer, head] -= eps
                difference[layer, head] = float(gated_loss(lm, up, feed, chosen, gold)
                                                - gated_loss(lm, down, feed, chosen, gold)) / (2 * eps)
    assert np.allclose(imp.raw * tokens, np.abs(difference), rtol=1e-5, atol=1e-8)
    assert np.allclose(np.linalg.norm(imp.importance, axis=1), 1.0)  # ℓ2-normalised per layer
    assert imp.positions == int(chosen.sum()) and imp.sentences == len(TEXTS)


def test_pruning_curve(mlm):
    imp = head_importance(mlm, TEXTS, seed=0)
    curve = pruning_curve(mlm, imp, TEXTS[:2], orders=2, seed=0)
    assert curve.fractions == FRACTIONS and len(curve.importance_order) == len(FRACTIONS) == 11
    assert len(curve.random_orders) == 2 and all(len(c) == 11 for c in curve.random_orders)
    held = [(f, c, g) for _, f, c, g in masked_batches(mlm, TEXTS[:2], 32, 1_000_003)]
    assert curve.intact == mlm_top1(mlm, held)  # nothing removed: the model itself
    every = [(layer, head) for layer in range(2) for head in range(4)]
    last = mlm_top1(mlm, held, every)
    assert all(c[-1] == last for c in [curve.importance_order, *curve.random_orders])
    assert all(c[0] == curve.intact for c in curve.random_orders)
    least = np.unravel_index(imp.order()[0], imp.importance.shape)
    assert imp.importance[least] == imp.importance.min()


# --- patching -------------------------------------------------------------------------------------

def _single_pieces(lm, words=("river", "money", "water", "bank", "fish", "boat", "food", "dog")) -> list[str]:
    """Words that are one vocabulary item each (so any two tokenise to the same count)."""
    ok = [w for w in words if len(lm.tokenizer.tokenize(" " + w)) == 1]
    assert len(ok) >= 2, f"too few single-piece words in {lm.name}"
    return ok


def _setup(lm):
    """A clean/corrupted pair that differs in one word, with the two candidates whose logit
    difference the swap moves most (a random model's differences are small)."""
    words = _single_pieces(lm)
    mask = lm.tokenizer.mask_token
    best, gap = None, -1.0
    for a, b in zip(words, words[1:]):
        for c, d in ((a, b), (words[0], words[-1])):
            setup = prepare(lm, f"the {a} was {mask} and the {a} .", f"the {b} was {mask} and the {b} .", (c, d))
            _, m_clean, m_corrupt = capture(lm, setup, "hidden")
            if abs(m_clean - m_corrupt) > gap:
                best, gap = setup, abs(m_clean - m_corrupt)
    return best


@pytest.mark.parametrize("family", FAMILIES)
def test_patching_identities_on_every_family(family, request):
    lm = float64(load_model(str(request.getfixturevalue(family))))
    setup = _setup(lm)
    assert len(setup.tokens) == len(setup.clean_tokens)
    pieces, m_clean, m_corrupt = capture(lm, setup, "hidden")
    states, n = lm.num_layers + 1, len(setup.tokens)
    assert pieces.shape[:2] == (states, n)
    whole = patched_metrics(lm, setup, "hidden", [(s, range(n)) for s in range(states)], pieces)
    recovered = (whole - m_corrupt) / (m_clean - m_corrupt)
    assert np.allclose(recovered, 1.0, atol=1e-9), recovered  # every position of a state: the clean run
    grid = patch(lm, setup.clean, setup.corrupt, setup.candidates)
    assert grid.recovered.shape == (states, n)
    assert grid.recovered[-1, setup.position] == pytest.approx(1.0, abs=1e-9)  # the last state at the mask
    others = [t for t in range(n) if t != setup.position]
    assert np.allclose(grid.recovered[-1, others], 0.0, atol=1e-9)  # nothing after the last state reads them
    same = [t for t in range(n) if setup.tokens[t] == setup.clean_tokens[t]]
    assert np.allclose(grid.recovered[0, same], 0.0, atol=1e-9)  # identical embeddings change nothing
    heads = patch(lm, setup.clean, setup.corrupt, setup.candidates, what="heads")
    assert heads.recovered.shape == (lm.num_layers, lm.num_heads) and np.isfinite(heads.recovered).all()
    own = mask_logits(lm, setup.corrupt)
    with head_edit(lm, [], "zero"):  # ablation's identities on this family: no head removed is the model
        assert np.array_equal(mask_logits(lm, setup.corrupt), own)
    with head_edit(lm, [(0, 0)], "zero"):  # and a removed head is removed
        assert not np.array_equal(mask_logits(lm, setup.corrupt), own)


def test_patching_in_batches_equals_one_cell_at_a_time(mlm):
    setup = _setup(mlm)
    for what, rows, columns in (("hidden", 3, len(setup.tokens)), ("heads", 2, 4)):
        pieces, _, _ = capture(mlm, setup, what)
        cells = [(r, (c,)) for r in range(rows) for c in range(columns)]
        batched = patched_metrics(mlm, setup, what, cells, pieces)
        single = patched_metrics(mlm, setup, what, cells, pieces, max_batch_bytes=1)  # one row per pass
        assert np.allclose(batched, single, atol=1e-5)


def test_head_patching_equals_a_pass_with_that_head_replaced(mlm):
    setup = _setup(mlm)
    pieces, m_clean, m_corrupt = capture(mlm, setup, "heads")  # [layer, token, head, d]
    grid = patch(mlm, setup.clean, setup.corrupt, setup.candidates, what="heads")

    def put(layer, context):
        if layer != 1:
            return None
        new = context.clone()
        new[:, :, 3] = pieces[1][:, 3]
        return new

    with mlm.hooks(every_layer("attn.hook_z", put, mlm.num_layers)):
        logits = mask_logits(mlm, setup.corrupt)[0]
    a, b = setup.candidate_ids
    assert grid.recovered[1, 3] == pytest.approx((logits[a] - logits[b] - m_corrupt) / (m_clean - m_corrupt), abs=1e-4)
    assert grid.to_json()["layers"] == [0, 1]


def test_patching_json_names_the_hidden_states(mlm):
    setup = _setup(mlm)
    out = patch(mlm, setup.clean, setup.corrupt, setup.candidates).to_json()
    assert out["metric"] == "logit_diff" and out["layers"] == ["embeddings", 0, 1]
    assert out["tokens"] == setup.tokens and len(out["recovered"]) == 3 and len(out["recovered"][0]) == len(out["tokens"])


def test_patching_bad_input_is_one_line(mlm, tiny_encoder_dir):
    with pytest.raises(BertScopeError, match=r"clean text has 6 tokens and the corrupted one 7"):
        prepare(mlm, "the river [MASK] .", "the river bank [MASK] .", ("is", "are"))
    with pytest.raises(BertScopeError, match="not one vocabulary item"):
        prepare(mlm, "the river [MASK] .", "the money [MASK] .", ("is", "zebra"))
    with pytest.raises(BertScopeError, match="no \\[MASK\\]"):
        prepare(mlm, "the river is .", "the money is .", ("is", "are"))
    with pytest.raises(BertScopeError, match="nothing to recover"):
        patch(mlm, "the river [MASK] .", "the river [MASK] .", ("is", "are"))
    with pytest.raises(BertScopeError, match="bundled-mlm"):
        prepare(load_model(str(tiny_encoder_dir)), "the river [MASK] .", "the money [MASK] .", ("is", "are"))
    with pytest.raises(BertScopeError, match="hidden or heads"):
        patch(mlm, "the river [MASK] .", "the money [MASK] .", ("is", "are"), what="mlp")


def test_an_empty_patching_text_is_named_once(mlm):
    with pytest.raises(BertScopeError, match=r"^The clean text is empty: type at least one word\.$"):
        patch(mlm, " ", "the money was [MASK] .", ["muddy", "good"])
