"""Every family record (``runtime.families``) through what BertScope does with a model, at tiny random
size built from the record's own shipped config: load, every hook point against the Hugging Face
tensors, LoRA on every attention and feed-forward projection, one pretraining step with LoRA and one
in full (with the family's sentence-pair head where it has one), one fine-tuning step, and the
fine-tuned model's prediction. A new record is tested by being added."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertscope import load_model
from bertscope.core.hook_points import EMBED, block_suffixes, blocks, state_hook
from bertscope.core.random_models import save_random_model
from bertscope.runtime.families import FAMILIES, Family
from bertscope.training.config import FinetuneConfig, RecipeConfig

TEXT = ["the man walked along the river bank with his dog .", "she deposited the money in the bank .",
        "the dog sat on the grass by the river .", "he ate bread and fish on the boat ."]


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def family(request, tmp_path_factory) -> tuple[Family, Path]:
    record = request.param
    folder = tmp_path_factory.mktemp(record.name.replace("/", "-"))
    return record, Path(save_random_model(record.config, folder, heads="pretraining", seed=0, size="tiny"))


def test_loads_with_every_hook_point_reading_the_models_own_states(family):
    record, folder = family
    lm = load_model(str(folder), device="cpu")
    assert lm.model_type in record.model_types and lm.num_layers == 3
    assert ("mlm" in lm.outputs) and (record.pair_head is None or record.pair_head in lm.outputs)
    expected = {f"blocks.{layer}.{suffix}" for layer in range(3) for suffix in block_suffixes(record)}
    assert expected <= set(lm.hook_names) and lm.hook_names[0] == EMBED
    out, cache = lm.run_with_cache(TEXT[0], names=lambda name: True, attentions=True, hidden_states=True)
    for state, hidden in enumerate(out.hidden_states):  # every hidden state has its hook point
        torch.testing.assert_close(cache[state_hook(lm.model, state)], hidden, rtol=0, atol=0)
    for layer, weights in enumerate(out.attentions):
        torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pattern"], weights, rtol=0, atol=0)
    _, alone = lm.run_with_cache(TEXT[0], names=["blocks.0.attn.hook_pattern"])  # no attentions=True asked
    torch.testing.assert_close(alone["blocks.0.attn.hook_pattern"], out.attentions[0], rtol=0, atol=0)
    n_tokens = out.hidden_states[0].shape[1]
    for layer, block in enumerate(blocks(lm.model)):  # the tokens' queries, keys and values
        for which, path in zip("qkv", (record.query, record.key, record.value)):
            got = cache[f"blocks.{layer}.attn.hook_{which}"]
            assert got.shape[:2] == (1, n_tokens), (which, got.shape)  # DeBERTa: never its positions' projection
            if path and record.post_layernorm:
                expected = block.get_submodule(path)(cache[f"blocks.{layer}.hook_resid_pre"])
                torch.testing.assert_close(got.flatten(-2), expected, rtol=0, atol=0)


def _lora_layers(model) -> set[int]:
    from peft.tuners.lora import LoraLayer

    return {id(m) for m in model.modules() if isinstance(m, LoraLayer)}


def _projections(model, record: Family) -> list:
    paths = [record.qkv] if record.qkv else [record.query, record.key, record.value]
    paths += [record.out_proj, record.mlp_in, record.mlp_out]
    inner = model.get_base_model()
    return [block.get_submodule(path) for block in blocks(inner) for path in paths]


def test_lora_wraps_every_attention_and_feed_forward_projection_in_both_stages(family):
    from bertscope.training.model import build_model
    from bertscope.training.task_model import build_task_model

    record, folder = family
    pretraining = build_model(str(folder), True, RecipeConfig(lora_rank=4, pair_task=record.pair_head or "none"))
    tagger = build_task_model(str(folder), True, "tag", ["A", "B"], 4, 8, seed=0)
    for model in (pretraining, tagger):
        wrapped = _lora_layers(model)
        assert all(id(m) in wrapped for m in _projections(model, record))
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        norms = {f"{name}.{p}" for name, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)
                 for p, _ in m.named_parameters()}
        assert norms <= trainable  # every LayerNorm trained in full beside the adapters
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        assert not any("lora_" in n for n in frozen)
    assert any("classifier" in n for n, p in tagger.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("lora", [4, 0], ids=["lora", "full"])
def test_one_pretraining_step(family, lora, tmp_path):
    from bertscope.training.recipe import train

    record, folder = family
    cfg = RecipeConfig(seq_len=32, epochs=1, batch_size=4, lr=1e-3, lora_rank=lora, seed=0, max_chunks=8,
                       pair_task=record.pair_head or "none")
    state = train(str(folder), [TEXT * 3, TEXT[::-1] * 3], [TEXT * 2], tmp_path / "run", cfg, device="cpu")
    epoch = state.history[-1]
    assert torch.isfinite(torch.tensor(epoch["train_loss"])) and epoch["held_out"]["positions"] > 0
    if record.pair_head:
        assert epoch["held_out"]["pairs"] > 0
    after = load_model(str(tmp_path / "run" / "model"), device="cpu")
    assert "mlm" in after.outputs


def test_one_fine_tuning_step_then_a_prediction(family, tmp_path):
    from bertscope.corpora.labelled import LabelledTexts
    from bertscope.tasks.classify import classify
    from bertscope.training.fine_tuning import finetune
    from bertscope.training.task_data import TaskData

    record, folder = family
    texts = ["the food was good", "a good dog", "the food was bad", "a bad dog"] * 3
    labels = ["positive", "positive", "negative", "negative"] * 3
    side = LabelledTexts("toy", texts, labels)
    data = TaskData("classify", "toy", side, LabelledTexts("held", texts[:4], labels[:4]), None, "given")
    cfg = FinetuneConfig(task="classify", seq_len=32, epochs=1, batch_size=4, lr=1e-3, lora_rank=4, seed=0)
    state = finetune(str(folder), data, tmp_path / "run", cfg, device="cpu")
    assert torch.isfinite(torch.tensor(state.history[-1]["train_loss"]))
    tuned = load_model(str(tmp_path / "run" / "model"), device="cpu")
    assert tuned.task is not None and set(tuned.task.labels) == {"negative", "positive"}
    decided = classify(tuned, ["a good horse"])
    assert decided[0].predicted in ("negative", "positive") and abs(sum(decided[0].scores) - 1) < 1e-5


def test_a_random_model_with_a_smaller_vocabulary_keeps_its_generated_pieces(tmp_path):
    """ALBERT's 30,000 pieces cannot hold bert-base-uncased's 30,522: the generated vocabulary is saved
    whole, so BERT's 10% random replacements have ordinary pieces to draw from."""
    from transformers import AutoTokenizer

    from bertscope.mlm.masking import replacement_ids

    folder = save_random_model("albert-base-v2", tmp_path / "albert", heads="none")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert len(tokenizer) == 30_000 and len(replacement_ids(tokenizer, 30_000)) > 100
    assert "[UNK]" not in tokenizer.tokenize("the bank of the river")


def test_modernbert_counts_its_published_parameters_layer_by_layer():
    from bertscope.analysis.params import count_parameters

    b = count_parameters("answerdotai/ModernBERT-base")
    assert b.total == 149_014_272 and set(b.group_totals()) == {"embeddings", "encoder"}
    assert len(b.layer_totals()) == 22 and sum(b.layer_totals().values()) == 110_330_112
    first = {c.name for c in b.components if c.layer == 1}
    assert first == {"QKV", "attention output", "attention LayerNorm", "FFN in", "FFN out", "FFN LayerNorm"}


def test_a_masked_predictions_score_is_the_models_own_log_probability(family):
    """Integrated gradients and gradient × input read log p(token) at [MASK] with the masked-LM head applied at
    that position alone: the same number as the whole model's logits there."""
    from bertscope import inspect
    from bertscope.attribution.gradients import input_embeddings, score_function
    from bertscope.attribution.targets import Target

    record, folder = family
    lm = load_model(str(folder), device="cpu")
    text = f"the man walked along the {lm.tokenizer.mask_token} bank ."
    ins = inspect(lm, text)
    pos = list(ins.tokens).index(lm.tokenizer.mask_token)
    item = len(lm.tokenizer) // 2
    f, target = score_function(lm, ins, Target("token", pos, lm.tokenizer.convert_ids_to_tokens(item), item))
    assert target.token_id == item
    x, _ = input_embeddings(lm, ins)
    with torch.no_grad():
        out = lm.model(**lm.tokenizer(text, return_tensors="pt"))
        logits = getattr(out, "prediction_logits", None)
        expected = torch.log_softmax((out.logits if logits is None else logits)[0, pos].float(), -1)[item]
        torch.testing.assert_close(f(x)[0], expected, rtol=0, atol=1e-5)


def test_integrated_jacobians_carry_every_tokens_tangent_on_one_pass(family):
    """A pair's integrated Jacobians (``retrieval.similarity``: ``torch.func.jvp`` under ``vmap``, the pass at each
    point run once for every token's tangent) equal one dual-number pass per (token, point), computed here apart,
    on every family; and the pairs sum to the score less the references' share."""
    import torch.autograd.forward_ad as forward_ad

    from bertscope.retrieval.embedding import settings_of
    from bertscope.retrieval.similarity import _encoder, _state, explain_pair, reference_ids, token_contributions

    record, folder = family
    lm = load_model(str(folder), device="cpu")
    steps, text = 4, TEXT[2]
    ours = token_contributions(lm, text, steps=steps)
    ids = torch.tensor(lm.tokenizer(text)["input_ids"])
    encode = _encoder(lm, settings_of(lm), ids, 0, 0)
    x, r = _state(lm, ids, 0), _state(lm, reference_ids(lm, ids), 0)
    expected = torch.zeros(ours.contributions.shape, dtype=torch.float64)
    with torch.no_grad():
        for i in range(len(ids)):
            for k in range(1, steps + 1):
                tangent = torch.zeros_like(x)[None]
                tangent[0, i] = x[i] - r[i]
                with forward_ad.dual_level():
                    dual = forward_ad.make_dual((r + k / steps * (x - r))[None], tangent)
                    expected[:, i] += forward_ad.unpack_dual(encode(dual)).tangent[0].double() / steps
    torch.testing.assert_close(torch.from_numpy(ours.contributions), expected, rtol=0, atol=1e-5)
    pair = explain_pair(lm, TEXT[2], TEXT[3], steps=steps)
    assert abs(pair.pairs.sum() - (pair.score - pair.baseline_score)) == pytest.approx(pair.error)
