"""Which attribution to trust: the deletion test, Value Zeroing and the items, checked against
hand computations from the model's own outputs, a direct loop, and the shortened sequence that
removal by the attention mask stands for."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from bertscope import BertScopeError, load_model
from bertscope.attribution.deletion import target_probabilities
from bertscope.attribution.faithfulness import (
    FRACTIONS,
    bootstrap,
    check_methods,
    deletion_test,
    faithfulness,
    method_scores,
    top_k_counts,
)
from bertscope.attribution.items import CONTENT_TAGS, MAX_ITEM_TOKENS, brown_items, text_items
from bertscope.attribution.methods import attribute
from bertscope.attribution.value_zeroing import value_zeroing, value_zeroing_composed
from bertscope.core.block_modules import block_parts
from bertscope.core.forward import inspect
from tests.conftest import bert_tokenizer, save_model, tiny_bert_config

LINES = ["the bank of the [MASK] was muddy .", "she deposited the money in the [MASK] .",
         "a man is [MASK] food and a woman is riding a horse ."]
LEXICON = {"bank": "NOUN", "river": "NOUN", "muddy": "ADJ", "money": "NOUN", "deposited": "VERB", "dog": "NOUN",
           "sat": "VERB", "boat": "NOUN", "water": "NOUN"}


def float64(lm):
    return dataclasses.replace(lm, model=copy.deepcopy(lm.model).double(), dtype=torch.float64)


@pytest.fixture(scope="module")
def mlm(tiny_mlm_dir):
    return float64(load_model(str(tiny_mlm_dir)))


@pytest.fixture(scope="module")
def one_layer_dir(tmp_path_factory):
    from transformers import BertForMaskedLM

    torch.manual_seed(11)
    model = BertForMaskedLM(tiny_bert_config(num_hidden_layers=1))
    return save_model(model, bert_tokenizer(), tmp_path_factory.mktemp("tiny-bert-one-layer"))


def p_target(lm, ids: list[int], position: int, target: int, **extra) -> float:
    """p(target) at ``position`` from a plain pass of the whole masked LM (no BertScope code)."""
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids]), **extra).logits[0, position].double()
    return float(torch.softmax(logits, -1)[target])


# --- removal ---------------------------------------------------------------------------------------

def test_removal_by_attention_mask_is_the_shortened_sequence_with_its_positions(mlm):
    """Excluding tokens as keys in every layer = running the sequence without them, each kept token
    at its original position (and segment)."""
    (item,), _ = text_items(mlm, [LINES[0]], lexicon=LEXICON)
    ids, n, position = item.input_ids, item.inspection.n_tokens, item.mask_position
    changed = []
    for removed in ([1], [2, 3], [1, 2, 6, 7]):
        keep = np.ones(n, bool)
        keep[removed] = False
        got = target_probabilities(mlm, ids, item.inspection.token_type_ids, keep[None], position, item.target_id)
        kept = np.flatnonzero(keep)
        short = p_target(mlm, ids[kept].tolist(), int(np.searchsorted(kept, position)), item.target_id,
                         position_ids=torch.from_numpy(kept[None]), token_type_ids=torch.zeros(1, len(kept), dtype=torch.long))
        assert got[0] == pytest.approx(short, rel=1e-9)
        changed.append(abs(short - item.p_full) > 1e-9 * item.p_full)
    assert all(changed)  # each removal did something (a random model's p moves little)


def test_removal_by_mask_replaces_the_ids(mlm):
    (item,), _ = text_items(mlm, [LINES[1]], lexicon=LEXICON)
    keep = np.ones(item.inspection.n_tokens, bool)
    keep[[2, 3]] = False
    got = target_probabilities(mlm, item.input_ids, item.inspection.token_type_ids, keep[None], item.mask_position,
                               item.target_id, removal="mask")
    ids = item.input_ids.tolist()
    ids[2] = ids[3] = mlm.tokenizer.mask_token_id
    assert got[0] == pytest.approx(p_target(mlm, ids, item.mask_position, item.target_id), rel=1e-9)
    with pytest.raises(BertScopeError, match="cannot be removed"):
        keep[item.mask_position] = False
        target_probabilities(mlm, item.input_ids, item.inspection.token_type_ids, keep[None], item.mask_position,
                             item.target_id)


# --- comprehensiveness, sufficiency, leave-one-out ---------------------------------------------------

def test_comprehensiveness_and_sufficiency_by_hand(mlm):
    """Every figure of one item recomputed from plain passes of the shortened sequences."""
    (item,), _ = text_items(mlm, [LINES[2]], lexicon=LEXICON)
    ids, n, position, y = item.input_ids, item.inspection.n_tokens, item.mask_position, item.target_id
    candidates = item.candidates()
    assert 0 not in candidates and n - 1 not in candidates and position not in candidates
    scores = {"mine": np.arange(n, dtype=float)[::-1].copy(), "theirs": np.random.default_rng(3).random(n)}
    result = deletion_test(mlm, item, scores)

    def p_without(removed) -> float:
        kept = np.array([i for i in range(n) if i not in set(removed)])
        return p_target(mlm, ids[kept].tolist(), int(np.searchsorted(kept, position)), y,
                        position_ids=torch.from_numpy(kept[None]), token_type_ids=torch.zeros(1, len(kept), dtype=torch.long))

    p_full = p_target(mlm, ids.tolist(), position, y)
    assert result.p_full == pytest.approx(p_full, rel=1e-9) and item.p_full == pytest.approx(p_full, rel=1e-6)
    counts = top_k_counts(len(candidates))
    assert counts == [max(1, math.ceil(f * len(candidates))) for f in FRACTIONS]
    for name, s in scores.items():
        order = sorted(candidates.tolist(), key=lambda c: -s[c])
        comp = [p_full - p_without(order[:k]) for k in counts]
        suff = [p_full - p_without(order[k:]) for k in counts]
        np.testing.assert_allclose(result.comprehensiveness(name), comp, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(result.sufficiency(name), suff, rtol=1e-7, atol=1e-12)
        assert result.aopc(name, "comprehensiveness") == pytest.approx(np.mean(comp))
        drop = np.array([p_full - p_without([c]) for c in candidates])
        np.testing.assert_allclose(result.loo_drop, drop, rtol=1e-7, atol=1e-12)
        assert result.spearman[name] == pytest.approx(spearmanr(s[candidates], drop).statistic)


def test_top_k_counts_round_up_and_keep_one():
    assert top_k_counts(1) == [1, 1, 1, 1, 1]
    assert top_k_counts(10) == [1, 1, 1, 2, 5]
    assert top_k_counts(41) == [1, 3, 5, 9, 21]


def test_bootstrap_interval_holds_the_mean_and_skips_undefined():
    out = bootstrap([0.1, 0.2, float("nan"), 0.3, 0.4], seed=1)
    assert out["n"] == 4 and out["mean"] == pytest.approx(0.25) and out["low"] <= out["mean"] <= out["high"]
    assert bootstrap([float("nan")])["mean"] is None


# --- Value Zeroing ---------------------------------------------------------------------------------

def value_zeroing_loop(lm, text: str) -> np.ndarray:
    """[query, key] Value Zeroing of a 1-layer model, token by token: the whole model run once per
    key with that key's value vectors zeroed in every head (a hook on the value projection)."""
    ids = lm.tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        original = lm.model.base_model(**ids).last_hidden_state[0]  # [token, dim]
    n = original.shape[0]
    value = block_parts(lm)[0].value
    out = np.zeros((n, n))
    for j in range(n):
        def zero(module, args, output, j=j):
            output = output.clone()
            output[:, j] = 0
            return output

        handle = value.register_forward_hook(zero)
        try:
            with torch.inference_mode():
                changed = lm.model.base_model(**ids).last_hidden_state[0]
        finally:
            handle.remove()
        for i in range(n):
            out[i, j] = 1 - float(torch.nn.functional.cosine_similarity(changed[i], original[i], dim=0))
    out = np.clip(out, 0, None)
    return out / out.sum(-1, keepdims=True)


def test_value_zeroing_equals_a_direct_loop(one_layer_dir):
    lm = float64(load_model(str(one_layer_dir)))
    text = "the bank of the river was muddy ."
    ins = inspect(lm, text, with_attentions=False, with_hidden_states=False, with_logits=False)
    expected = value_zeroing_loop(lm, text)
    got = value_zeroing(lm, ins)
    assert got.shape == (1, ins.n_tokens, ins.n_tokens)
    np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-6)
    one_row = value_zeroing(lm, ins, max_batch_bytes=1)  # a variant per batch: the same numbers
    np.testing.assert_allclose(one_row, got, atol=1e-6)


@pytest.mark.parametrize("family", ["tiny_mlm_dir", "tiny_roberta_dir", "tiny_electra_dir", "tiny_albert_dir",
                                    "tiny_distilbert_dir"])
def test_value_zeroing_on_every_family(family, request):
    lm = load_model(str(request.getfixturevalue(family)))
    text = "the bank of the river was muddy ."
    m = attribute(lm, text, method="valuezeroing")
    assert m.matrices.shape[0] == lm.num_layers and np.isfinite(m.matrices).all()
    np.testing.assert_allclose(m.matrices.sum(-1), 1, atol=1e-4)
    ins = inspect(lm, text, with_attentions=False, with_hidden_states=False, with_logits=False)
    per_layer = value_zeroing(lm, ins)
    product = np.eye(ins.n_tokens)
    for m in per_layer:  # rollout without residual: M_L … M_1
        product = m.astype(np.float64) @ product
    np.testing.assert_allclose(value_zeroing_composed(lm, ins)[-1], product, atol=1e-5)
    first = attribute(lm, text, method="valuezeroing", layers=[0])  # only layer 0 is computed
    np.testing.assert_allclose(first.matrices[0], per_layer[0], atol=1e-6)


# --- items -----------------------------------------------------------------------------------------

def test_items_from_lines_keep_a_mask_or_mask_a_content_word(mlm):
    items, skipped = text_items(mlm, [LINES[0], "the dog sat in the boat .", "of the and", "   "], seed=0,
                                lexicon=LEXICON)
    assert len(items) == 2 and skipped == 1  # "of the and" has no content word; blank lines are not lines
    first, second = items
    assert first.inspection.tokens[first.mask_position] == mlm.tokenizer.mask_token and first.source == "line 1"
    assert second.word in ("dog", "sat", "boat") and second.tag == LEXICON[second.word]
    assert second.masked_piece == second.word and second.source == "line 2"
    r = inspect(mlm, "the dog sat in the boat .".replace(second.word, "[MASK]"), with_attentions=False,
                with_hidden_states=False, logit_positions="masks")
    assert second.target_id == int(np.argmax(r.logits_at(second.mask_position)))
    again, _ = text_items(mlm, ["the dog sat in the boat ."], seed=0, lexicon=LEXICON)
    assert again[0].mask_position == second.mask_position  # seeded


def test_bad_input_gets_one_line(mlm):
    cases = [
        (lambda: text_items(mlm, ["of the and", "in a"], lexicon=LEXICON), "No line has a content word"),
        (lambda: text_items(mlm, ["", " "], lexicon=LEXICON), "no sentences"),
        (lambda: brown_items(mlm, 0), "between 1 and"),
        (lambda: check_methods(["alti", "shapley"]), "Unknown method 'shapley'"),
        (lambda: check_methods([" ", ""]), "at least one method"),
    ]
    for call, message in cases:
        with pytest.raises(BertScopeError, match=message) as err:
            call()
        assert "\n" not in str(err.value)
    items, _ = text_items(mlm, LINES[:1], lexicon=LEXICON)
    with pytest.raises(BertScopeError, match="Unknown removal"):
        faithfulness(mlm, items, ["random"], removal="blank")
    with pytest.raises(BertScopeError, match="masked-LM head|masked-language-model head|no masked"):
        text_items(load_model("bundled"), LINES[:1], lexicon=LEXICON)


# --- the whole protocol ------------------------------------------------------------------------------

def test_scoreboard_on_a_tiny_model(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    items, _ = text_items(lm, LINES, lexicon=LEXICON)
    board = faithfulness(lm, items, ["attention", "alti", "valuezeroing", "grad", "random"], steps=8)
    out = json.loads(json.dumps(board.to_json()))  # plain JSON
    assert list(out["methods"]) == ["attention", "alti", "valuezeroing", "grad", "random"]
    for entry in out["methods"].values():
        for metric in ("comprehensiveness", "sufficiency", "loo_spearman"):
            assert set(entry[metric]) == {"mean", "low", "high", "n"}
            assert entry[metric]["low"] <= entry[metric]["mean"] <= entry[metric]["high"]
        assert entry["seconds_per_item"] > 0
    assert len(out["items"]) == 3
    for item, json_item in zip(items, out["items"]):
        assert json_item["input_ids"] == item.input_ids.tolist() and json_item["mask_position"] == item.mask_position
        assert json_item["target_id"] == item.target_id and 0 < json_item["p_full"] <= 1
        assert len(json_item["comprehensiveness"]["alti"]) == len(FRACTIONS)
        assert len(json_item["scores"]["grad"]) == item.inspection.n_tokens
    # the matrix methods read the mask's row after the last layer
    alti = attribute(lm, items[0].text.replace("[MASK]", lm.tokenizer.mask_token), method="alti")
    np.testing.assert_allclose(board.results[0].scores["alti"], alti.matrices[-1][items[0].mask_position], atol=1e-6)
    # the random floor is seeded
    np.testing.assert_array_equal(method_scores(lm, items[0], "random", seed=4), method_scores(lm, items[0], "random",
                                                                                               seed=4))
    assert len(board.disagreement()) == 3
    curves = board.curves()
    assert len(curves["alti"]["without_top"]) == len(FRACTIONS)


@pytest.mark.slow
def test_brown_items_are_content_words_over_the_genres():
    lm = load_model("bundled-mlm")
    items = brown_items(lm, 30, seed=0)
    assert len(items) == 30
    genres = {it.source.split("(")[1] for it in items}
    assert len(genres) >= 8  # spread over the corpus, not one document
    for it in items:
        assert it.tag in CONTENT_TAGS and it.inspection.n_tokens <= MAX_ITEM_TOKENS and len(it.candidates()) >= 3
        assert it.inspection.tokens[it.mask_position] == "[MASK]" and it.masked_piece.lstrip("#") in it.word.lower()
    again = brown_items(lm, 30, seed=0)
    assert [it.text for it in again] == [it.text for it in items]
    assert [it.mask_position for it in again] == [it.mask_position for it in items]


# --- the command line --------------------------------------------------------------------------------

def test_cli_json_and_bad_input(tiny_mlm_dir, tmp_path, capsys):
    from bertscope.cli import main

    data = tmp_path / "lines.txt"
    data.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert main(["faithfulness", str(tiny_mlm_dir), "--data", str(data), "--methods", "attention,random",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["methods"]) == {"attention", "random"} and out["removal"] == "attention"
    assert set(out["methods"]["attention"]) == {"comprehensiveness", "sufficiency", "loo_spearman",
                                                "seconds_per_item"}
    first = out["items"][0]
    assert {"text", "input_ids", "mask_position", "target_id", "p_full", "scores", "comprehensiveness",
            "sufficiency"} <= set(first)
    assert len(first["comprehensiveness"]["attention"]) == len(FRACTIONS)
    assert main(["faithfulness", str(tiny_mlm_dir), "--data", str(data), "--methods", "random",
                 "--removal", "mask"]) == 0
    text = capsys.readouterr().out
    assert "replaced by [MASK]" in text and "random" in text
    empty = tmp_path / "empty.txt"
    empty.write_text("of the and\nin a\n", encoding="utf-8")
    for bad, message in ((["--corpus", "brown:0"], "between 1 and"),
                         (["--methods", "alti,shapley"], "Unknown method 'shapley'"),
                         (["--data", str(empty)], "No line has a content word"),
                         (["--data", str(tmp_path / "missing.txt")], "No data file"),
                         (["--corpus", "wiki:3"], "use --corpus brown:N"),
                         (["--corpus", "brown:3", "--data", str(data)], "not both"),
                         (["--steps", "0"], "at least 1")):
        assert main(["faithfulness", str(tiny_mlm_dir), *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and message in err, err
