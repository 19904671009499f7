"""ColBERT's MaxSim as a match map: a checkpoint in PyLate's format read as PyLate reads it (held to PyLate 1.6.0
itself in the peers lane, ``peers/test_pylate.py``), any other encoder as BERTScore's greedy matching; the score
is the sum of each query token's best match, exactly."""

from __future__ import annotations

import json
import shutil
import string

import numpy as np
import pytest
import torch

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.retrieval.late_interaction import colbert_settings, explain_maxsim, read_colbert, token_vectors
from bertscope.retrieval.settings import read_settings


def _colbert_folder(tiny_encoder_dir, folder, attend: bool = False, expansion: bool = True):
    """A tiny checkpoint laid out as PyLate saves one: the prefixes added to the vocabulary, a projection."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    tokenizer.add_tokens(["[Q] ", "[D] "])
    model = BertModel.from_pretrained(tiny_encoder_dir)
    model.resize_token_embeddings(len(tokenizer))
    folder.mkdir()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    (folder / "1_Dense").mkdir()
    (folder / "1_Dense" / "config.json").write_text(json.dumps({
        "in_features": 32, "out_features": 8, "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False}))
    save_file({"linear.weight": torch.randn(8, 32, generator=torch.Generator().manual_seed(0))},
              str(folder / "1_Dense" / "model.safetensors"))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "ColBERT", "similarity_fn_name": "MaxSim", "query_prefix": "[Q] ", "document_prefix": "[D] ",
        "query_length": 10, "document_length": 12, "attend_to_expansion_tokens": attend,
        "do_query_expansion": expansion, "skiplist_words": list(string.punctuation)}))
    return folder


def _variant(folder, to, **settings):
    """A copy of the checkpoint with only its PyLate settings changed: the same weights."""
    shutil.copytree(folder, to)
    config = json.loads((to / "config_sentence_transformers.json").read_text())
    (to / "config_sentence_transformers.json").write_text(json.dumps({**config, **settings}))
    return to


def test_a_colbert_checkpoint_is_read_as_pylate_reads_it(tiny_encoder_dir, tmp_path):
    lm = load_model(str(_colbert_folder(tiny_encoder_dir, tmp_path / "colbert")))
    settings = colbert_settings(lm)
    assert settings.declared and settings.kind == "ColBERT" and (settings.query_length, settings.document_length) \
        == (10, 12) and settings.dense[0].out_features == 8
    q = token_vectors(lm, "the dog ate", True)
    assert [t.lower() for t in q.tokens[:2]] == ["[cls]", "[q] "] and len(q.tokens) == 10  # the prefix, padded to 10
    assert q.tokens[-1] == "[MASK]" and q.expansion.count(True) == 10 - 6 and q.vectors.shape == (10, 8)
    np.testing.assert_allclose(np.linalg.norm(q.vectors, axis=1), 1.0, atol=1e-12)
    d = token_vectors(lm, "the dog , ate the bread . and the cat ate the fish .", False)
    # cut at document_length - 1 = 11 pieces, the prefix inserted (12), then "," and "." dropped
    assert [t.lower() for t in d.tokens] == ["[cls]", "[d] ", "the", "dog", "ate", "the", "bread", "and", "the", "[sep]"]
    assert d.truncated
    m = explain_maxsim(lm, "the dog ate", "the dog , ate the bread .")
    assert m.truncated == (False, False) and "padded to 10 tokens with [MASK]" in m.note
    assert m.score == pytest.approx(float(m.contributions.sum()), abs=1e-12)
    np.testing.assert_allclose(m.contributions, m.similarities.max(1), atol=1e-12)
    assert m.similarities.shape == (len(m.query_tokens), len(m.passage_tokens))
    assert m.matches(3)[0][2] == pytest.approx(m.contributions.max())
    json.dumps(m.to_json())
    unattended = m.similarities
    attend = _variant(tmp_path / "colbert", tmp_path / "attend", attend_to_expansion_tokens=True)
    attended = explain_maxsim(load_model(str(attend)), "the dog ate", "the dog , ate the bread .")
    assert not np.allclose(unattended, attended.similarities)  # the same weights: the pads attended to change it
    assert attended.similarities.shape == unattended.shape
    plain = token_vectors(load_model(str(_variant(tmp_path / "colbert", tmp_path / "plain", do_query_expansion=False))),
                          "the dog ate", True)
    assert len(plain.tokens) == 6 and not any(plain.expansion)  # no query expansion: no pads
    bare = token_vectors(load_model(str(_variant(tmp_path / "colbert", tmp_path / "bare", query_prefix="",
                                                 document_prefix=None))), "the dog ate", True)
    assert [t.lower() for t in bare.tokens[:2]] == ["[cls]", "the"]  # an empty prefix is no prefix
    assert read_colbert(tmp_path / "bare").document_prefix == "[D] "  # null: PyLate's default


def test_any_other_encoder_is_matched_greedily_without_special_tokens(tiny_encoder_dir):
    lm = load_model(str(tiny_encoder_dir))
    m = explain_maxsim(lm, "the dog ate", "a dog ate the bread .")
    assert m.kind == "token vectors" and "BERTScore" in m.note
    assert m.query_tokens == ["the", "dog", "ate"] and m.passage_tokens == ["a", "dog", "ate", "the", "bread"]
    assert m.contributions[1] == pytest.approx(m.similarities[1, 1])  # the same word is among its best matches
    assert m.score == pytest.approx(float(m.contributions.sum()))


def test_bad_inputs_are_one_line(tiny_encoder_dir, tmp_path):
    lm = load_model(str(tiny_encoder_dir))
    with pytest.raises(BertScopeError, match="empty"):
        explain_maxsim(lm, "", "a dog")
    with pytest.raises(BertScopeError, match="Every token of the passage is left out"):
        explain_maxsim(lm, "the dog", ". , !")
    folder = _colbert_folder(tiny_encoder_dir, tmp_path / "colbert")
    with pytest.raises(BertScopeError, match="is a ColBERT model .*bertscope maxsim"):
        read_settings(folder)
    (folder / "1_Dense" / "config.json").write_text(json.dumps({"out_features": 8}))
    with pytest.raises(BertScopeError, match="does not give the projection's in_features"):
        read_colbert(folder)
    shutil.rmtree(folder / "1_Dense")
    (folder / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Transformer"}]))
    with pytest.raises(BertScopeError, match="without its projection"):
        read_colbert(folder)
    (folder / "modules.json").write_text("[{")
    with pytest.raises(BertScopeError, match="is not a list of modules"):
        read_colbert(folder)
