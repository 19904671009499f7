"""The model's own embedding equals sentence-transformers' ``SentenceTransformer.encode`` (the reference, pinned in
requirements-test.txt) within 1e-5, on the shipped embedding models and on tiny models with every pooling mode,
a dense layer and a prompt."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import embed, scores, settings_of
from bertscope.retrieval.settings import read_settings

TEXTS = ["A man is eating food.", "  The bank of the river was muddy.  ", "She deposited the money in the bank.",
         "Un café près de la rivière, très calme.", "the dog ate the bread ." * 40]


def _reference(folder, texts, prompt_name=None):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    return model, model.encode(texts, prompt_name=prompt_name, convert_to_numpy=True, batch_size=2)


@pytest.mark.slow
def test_bundled_is_all_minilm_l6_v2_as_sentence_transformers_embeds_it():
    lm = load_model("bundled")
    settings = settings_of(lm)
    assert settings.declared and settings.pooling == "mean" and settings.normalize and settings.max_seq_length == 256
    model, expected = _reference(lm.source, TEXTS)
    ours = embed(lm, TEXTS)
    np.testing.assert_allclose(ours.vectors, expected, atol=1e-5)
    assert ours.truncated.tolist() == [False, False, False, False, False]
    np.testing.assert_allclose(scores(settings, ours.vectors[:1], ours.vectors[1:]),
                               model.similarity(expected[:1], expected[1:]).numpy(), atol=1e-5)


def _tiny_sentence_model(tiny_bert_dir, folder, pooling: str, dense: bool, normalize: bool, prompts: dict):
    import torch
    from safetensors.torch import save_file

    shutil.copytree(tiny_bert_dir, folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (folder / "1_Pooling").mkdir()
    flags = {f"pooling_mode_{m}": m == pooling for m in ("cls_token", "mean_tokens", "max_tokens",
                                                          "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **flags,
                                                                  "include_prompt": not prompts}))
    if dense:
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "2_Dense").mkdir()
        (folder / "2_Dense" / "config.json").write_text(json.dumps({
            "in_features": 32, "out_features": 16, "bias": True,
            "activation_function": "torch.nn.modules.activation.Tanh"}))
        generator = torch.Generator().manual_seed(0)
        save_file({"linear.weight": torch.randn(16, 32, generator=generator), "linear.bias": torch.randn(16, generator=generator)},
                  str(folder / "2_Dense" / "model.safetensors"))
    if normalize:
        modules.append({"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 24, "do_lower_case": False}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts,
                                                                          "similarity_fn_name": "dot"}))
    return folder


@pytest.mark.parametrize(("pooling", "dense", "normalize", "prompts"), [
    ("mean_tokens", False, True, {}), ("cls_token", True, False, {}), ("max_tokens", False, False, {}),
    ("mean_sqrt_len_tokens", True, True, {}), ("weightedmean_tokens", False, False, {}),
    ("lasttoken", False, True, {}), ("mean_tokens", False, True, {"query": "query: ", "passage": "passage: "}),
])
def test_every_pooling_mode_dense_layers_and_prompts_as_sentence_transformers(tiny_bert_dir, tmp_path, pooling,
                                                                               dense, normalize, prompts):
    folder = _tiny_sentence_model(tiny_bert_dir, tmp_path / "st", pooling, dense, normalize, prompts)
    lm = load_model(str(folder))
    texts = ["the dog ate the bread .", "the bank of the river was muddy and steep and the water was very good ." * 2,
             "a man sat"]
    kind = "query" if prompts else None
    _, expected = _reference(folder, texts, kind)
    ours = embed(lm, texts, kind)
    np.testing.assert_allclose(ours.vectors, expected, atol=1e-5)
    assert ours.truncated.tolist() == [False, True, False]  # max_seq_length 24 cuts the long one
    assert settings_of(lm).similarity == "dot"


def test_a_checkpoint_without_settings_gets_the_stated_default(tiny_bert_dir):
    settings = settings_of(load_model(str(tiny_bert_dir)))
    assert not settings.declared and settings.pooling == "mean" and "stated default" in settings.note


def test_bad_inputs_are_one_line(tiny_bert_dir, tmp_path):
    lm = load_model(str(tiny_bert_dir))
    with pytest.raises(BertScopeError, match="Text 2 is empty"):
        embed(lm, ["the dog", "   "])
    with pytest.raises(BertScopeError, match="at least one text"):
        embed(lm, [])
    folder = _tiny_sentence_model(tiny_bert_dir, tmp_path / "st", "mean_tokens", False, True, {"query": "q: "})
    with pytest.raises(BertScopeError, match="no 'passage' prompt; its prompts: query"):
        embed(load_model(str(folder)), ["the dog"], "passage")
    (folder / "2_Dense").mkdir()
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32, "out_features": 4,
                                                                "activation_function": "torch.nn.modules.activation.Tanh"}))
    (folder / "2_Dense" / "pytorch_model.bin").write_bytes(b"a pickle")
    with pytest.raises(BertScopeError, match="never opens pickled weights"):
        read_settings(folder)


@pytest.mark.slow
def test_bundled_multilingual_is_multilingual_e5_small_with_its_prefixes():
    lm = load_model("bundled-multilingual")
    settings = settings_of(lm)
    assert settings.prompts == {"query": "query: ", "passage": "passage: "} and settings.max_seq_length == 512
    texts = ["Where is the bank of the river?", "Wo ist das Flussufer?", "川岸はどこですか"]
    for kind in ("query", "passage"):
        _, expected = _reference(lm.source, texts, kind)
        np.testing.assert_allclose(embed(lm, texts, kind).vectors, expected, atol=1e-5)


def test_an_engine_runs_the_planned_batches_and_their_rows_land_where_they_belong(tiny_bert_dir):
    """``embed(engine=...)`` hands the engine the batches planned here and puts what comes back, in any order, in
    each text's row: the same bytes as this process's pass (the Ray engine's own test runs a cluster)."""
    from bertscope.retrieval.embedding import embed_batch, embedding_plan, prepared

    lm = load_model(str(tiny_bert_dir))
    texts = [("the bank of the river was muddy . " * (1 + i % 5)).strip() for i in range(23)]
    settings = settings_of(lm)
    plan, lengths = embedding_plan(lm, prepared(lm, texts, None, settings), settings, 4)
    assert sorted(i for batch in plan for i in batch) == list(range(23)) and all(len(b) <= 4 for b in plan)
    assert [lengths[b[0]] for b in plan] == sorted((lengths[b[0]] for b in plan), reverse=True)  # longest first
    handed = []

    class Backwards:  # an engine that finishes the batches last first
        def embedding_rows(self, lm_, inputs, plan_, kind, settings_):
            handed.append((plan_, settings_))
            for rows in reversed(plan_):
                yield rows, embed_batch(lm_, [inputs[i] for i in rows], settings_, kind)

    here = embed(lm, texts, batch_size=4)
    there = embed(lm, texts, batch_size=4, engine=Backwards())
    assert handed == [(plan, settings)] and there.vectors.tobytes() == here.vectors.tobytes()
    # a Ray actor whose copy of the model declares other settings stops in one line instead of pooling otherwise
    from dataclasses import replace

    from bertscope.engines.ray_actor import _same_settings

    assert _same_settings(lm, settings) == settings
    with pytest.raises(BertScopeError, match="other embedding settings") as caught:
        _same_settings(lm, replace(settings, pooling="cls", declared=True))
    assert "\n" not in str(caught.value)
