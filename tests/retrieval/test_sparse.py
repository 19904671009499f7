"""The sparse view (SPLADE) equals sentence-transformers' ``SparseEncoder.encode`` (the reference, pinned in
requirements-test.txt) on tiny random sparse encoders of every pooling and activation, and its explanation is
exact: the shared terms' shares and the token-pair map each sum to the score."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.retrieval.settings import read_settings
from bertscope.retrieval.sparse import (
    evaluate_sparse_squad,
    explain_sparse,
    read_splade,
    sparse_embed,
    sparse_scores,
    splade_settings,
)

TEXTS = ["the dog ate the bread .", "she deposited the money in the bank .", "a man rode a horse",
         "the bank of the river was muddy and steep ." * 3]


def _splade_folder(tiny_mlm_dir, folder, pooling: str, activation: str):
    shutil.copytree(tiny_mlm_dir, folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
        {"idx": 1, "name": "1", "path": "1_SpladePooling",
         "type": "sentence_transformers.sparse_encoder.models.SpladePooling"}]))
    (folder / "1_SpladePooling").mkdir()
    (folder / "1_SpladePooling" / "config.json").write_text(json.dumps({"pooling_strategy": pooling,
                                                                        "activation_function": activation}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20, "do_lower_case": False}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "SparseEncoder",
                                                                          "similarity_fn_name": "dot"}))
    return folder


@pytest.mark.parametrize(("pooling", "activation"), [("max", "relu"), ("sum", "relu"), ("max", "log1p_relu")])
def test_sparse_vectors_equal_sentence_transformers_sparse_encoder(tiny_mlm_dir, tmp_path, pooling, activation):
    from sentence_transformers import SparseEncoder

    folder = _splade_folder(tiny_mlm_dir, tmp_path / "splade", pooling, activation)
    reference = SparseEncoder(str(folder), device="cpu", local_files_only=True)
    expected = reference.encode(TEXTS, convert_to_tensor=True, batch_size=2).to_dense().numpy()
    lm = load_model(str(folder))
    settings = splade_settings(lm)
    assert settings.declared and (settings.pooling, settings.activation, settings.max_seq_length) == (pooling,
                                                                                                      activation, 20)
    ours = sparse_embed(lm, TEXTS, settings)
    np.testing.assert_allclose(ours.weights.toarray(), expected, atol=1e-5)
    assert ours.truncated.tolist() == [False, False, False, True]  # max_seq_length 20 cuts the long one
    x = explain_sparse(lm, TEXTS[1], TEXTS[3])
    assert x.score == pytest.approx(float(reference.similarity(expected[1:2], expected[3:4])[0, 0]), rel=1e-5)
    assert sum(t.share for t in x.terms) == pytest.approx(x.score, rel=1e-12)  # exact by construction
    assert x.pairs.shape == (len(x.a_tokens), len(x.b_tokens)) and x.error < 1e-9
    assert x.pairs.sum() == pytest.approx(x.score, rel=1e-12)
    assert [t.share for t in x.terms] == sorted((t.share for t in x.terms), reverse=True)
    assert all(t.share == pytest.approx(t.a_weight * t.b_weight) for t in x.terms)
    if pooling == "max":  # each term's share sits at the pair of tokens it came from
        t = x.terms[0]
        assert x.pairs[t.a_token, t.b_token] >= t.share - 1e-12
    listed = {term: weight for term, weight, _ in x.a_top}  # a term reads the same in both lists, to the last bit
    both = [t for t in x.terms if t.term in listed]
    assert both and all(listed[t.term] == t.a_weight for t in both)
    json.dumps(x.to_json())


def test_a_masked_lm_is_read_with_splade_v2_defaults_and_its_expansion_terms_flagged(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    settings = splade_settings(lm)
    assert not settings.declared and (settings.pooling, settings.activation) == ("max", "relu")
    assert "not trained for retrieval" in settings.note
    x = explain_sparse(lm, "the dog ate", "a dog sat", top=8)
    held = {t for t, _, in_text in x.a_top if in_text}
    assert held <= {"[CLS]", "the", "dog", "ate", "[SEP]"}
    assert any(not in_text for _, _, in_text in x.a_top)  # a random head expands to terms the text lacks
    assert x.a_active == int((sparse_embed(lm, ["the dog ate"]).weights.toarray() > 0).sum())


def test_the_evaluation_scores_squad_as_the_dense_one_does(tiny_mlm_dir, monkeypatch):
    from bertscope.retrieval import search

    passages = ("the dog ate the bread .", "she deposited the money in the bank .", "a man rode a horse")
    monkeypatch.setattr(search, "squad_retrieval", lambda limit=None: (
        search.Corpus("squad", ("0", "1", "2"), passages), list(passages), np.array([0, 1, 2])))
    lm = load_model(str(tiny_mlm_dir))
    scores = evaluate_sparse_squad(lm)
    assert scores.questions == 3 and scores.passages == 3 and "untrained head" in scores.system
    vectors = sparse_embed(lm, list(passages))
    first = np.argmax(sparse_scores(vectors, vectors), axis=1)  # each question's best passage by the dot product
    assert scores.recall_at_1 == pytest.approx(float(np.mean(first == np.arange(3))))
    assert scores.mrr_at_10 >= scores.recall_at_1 and scores.recall_at_10 == 1.0


def test_bad_inputs_are_one_line(tiny_encoder_dir, tiny_mlm_dir, tmp_path):
    with pytest.raises(BertScopeError, match="has no masked-LM head"):
        explain_sparse(load_model(str(tiny_encoder_dir)), "the dog", "a dog")
    lm = load_model(str(tiny_mlm_dir))
    with pytest.raises(BertScopeError, match="empty"):
        explain_sparse(lm, "   ", "a dog")
    with pytest.raises(BertScopeError, match="empty"):
        sparse_embed(lm, ["the dog", ""])
    folder = _splade_folder(tiny_mlm_dir, tmp_path / "splade", "max", "relu")
    with pytest.raises(BertScopeError, match="is a sparse encoder .*bertscope sparse"):
        read_settings(folder)  # the dense views say where its view is
    (folder / "1_SpladePooling" / "config.json").write_text(json.dumps({"pooling_strategy": "mean"}))
    with pytest.raises(BertScopeError, match="pooling max or sum"):
        read_splade(folder)
    (folder / "1_SpladePooling" / "config.json").write_text("{")
    with pytest.raises(BertScopeError, match="cannot be read"):
        read_splade(folder)
    (folder / "1_SpladePooling" / "config.json").write_text(json.dumps({"pooling_strategy": "max"}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"max_active_dims": 64,
                                                                          "prompts": {"query": "q: "}}))
    with pytest.raises(BertScopeError, match="max_active_dims, prompts set"):
        read_splade(folder)
    with pytest.raises(BertScopeError, match="list"):
        explain_sparse(lm, "the dog", "a dog", top=-1)
    long = explain_sparse(load_model(str(_splade_folder(tiny_mlm_dir, tmp_path / "cut", "max", "relu"))), "the dog",
                          "the bank of the river was muddy and steep ." * 4)
    assert long.truncated == (False, True)  # max_seq_length 20
