"""Embedding shift: word location across tokenizers, metrics on hand-made vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

from bertscope import BertScopeError, inspect, load_model
from bertscope.analysis.projection import pca_2d, umap_2d
from bertscope.analysis.shift import (
    ShiftResult,
    _pair_means,
    centroid_accuracy,
    collect,
    cosine_matrix,
    intra_sentence_similarity,
    layer_metrics,
    locate,
    word_pattern,
)
from bertscope.cli import main
from bertscope.corpora.senses import read_labelled_csv, sense_presets


def pieces(r, positions):
    return [r.tokens[i] for i in positions]


def test_locate_wordpiece_case_punctuation_repeats(tiny_bert):
    r = inspect(tiny_bert, "Bank, the BANK. banks? riverbank the bank!")
    found = locate(r, word_pattern("bank"))
    assert [pieces(r, p) for p in found] == [["bank"], ["bank"], ["bank"]]  # not "banks"
    assert len(locate(r, word_pattern("bank"), "first")) == 1
    r = inspect(tiny_bert, "Unbelievably, it was unbelievably muddy.")
    found = locate(r, word_pattern("unbelievably"))
    assert [pieces(r, p) for p in found] == [["un", "##bel", "##ie", "##va", "##bly"]] * 2


def test_locate_byte_level_bpe(tiny_roberta_dir):
    lm = load_model(str(tiny_roberta_dir))
    r = inspect(lm, "The Bank, unbelievably; the bank.")
    found = locate(r, word_pattern("bank"))
    assert len(found) == 2
    assert ["".join(t.removeprefix("##") for t in pieces(r, p)).lower() for p in found] == ["bank", "bank"]
    (p,) = locate(r, word_pattern("unbelievably"))
    assert "".join(t.removeprefix("##") for t in pieces(r, p)) == "unbelievably"


def test_locate_sentencepiece(tiny_xlmr_dir):
    lm = load_model(str(tiny_xlmr_dir))
    r = inspect(lm, "The riverside was calm.")
    (p,) = locate(r, word_pattern("calm"))
    assert "".join(t.removeprefix("##") for t in pieces(r, p) if t != "▁") == "calm"


def test_collect_skips_rows_without_the_word(tiny_bert):
    rows = [("the bank of the river .", "river"), ("no such word here", "river"),
            ("the bank and the bank .", "money"), ("", "money")]
    result = collect(tiny_bert, "bank", rows)
    assert result.skipped == [2, 4]
    assert [o.row for o in result.occurrences] == [1, 3, 3]
    assert result.vectors.shape == (3, 3, 32)
    first_only = collect(tiny_bert, "bank", rows, occurrences="first")
    assert [o.row for o in first_only.occurrences] == [1, 3]
    r = inspect(tiny_bert, "the bank of the river .")
    assert_allclose(result.vectors[0], r.hidden_states[:, 2], rtol=1e-5)  # one piece: its vector
    with pytest.raises(BertScopeError, match="No sentence contains"):
        collect(tiny_bert, "crane", rows)
    with pytest.raises(BertScopeError, match="one target word"):
        collect(tiny_bert, "river bank", rows)


def test_metrics_on_hand_made_vectors():
    x = np.array([[1, 0], [1, 0.1], [0, 1], [0.1, 1]], dtype=np.float32)
    labels = ["a", "a", "b", "b"]
    sim = cosine_matrix(x)
    c = 1 / np.sqrt(1.01)  # cos between (1, 0) and (1, 0.1)
    d = 0.1 / np.sqrt(1.01)  # cos between (1, 0) and (0.1, 1)
    overall, within, across = _pair_means(sim, labels)
    assert_allclose(within, c, rtol=1e-6)
    assert_allclose(across, (0 + d + d + 0.2 / 1.01) / 4, rtol=1e-5)
    assert_allclose(overall, (2 * within + 4 * across) / 6, rtol=1e-5)
    assert centroid_accuracy(x, labels) == 1.0
    assert centroid_accuracy(x, ["a", "b", "a", "b"]) == 0.0  # mislabelled: every point lands wrong
    assert np.isnan(centroid_accuracy(x, ["a"] * 4))


def test_intra_sentence_similarity_by_hand():
    words = np.array([[1.0, 0.0], [0.0, 1.0]])[:, None, :]  # [word, layer=1, dim]
    # mean (0.5, 0.5): each word has cosine 1/sqrt(2) with it
    assert_allclose(intra_sentence_similarity([words], 0), 1 / np.sqrt(2), rtol=1e-6)


def test_layer_metrics_shapes_and_baseline_adjustment():
    rng = np.random.default_rng(0)
    result = ShiftResult("w", [], rng.normal(size=(6, 3, 8)).astype(np.float32), [],
                         [rng.normal(size=(4, 3, 8))])
    object.__setattr__(result, "occurrences", [type("O", (), {"label": lab})() for lab in "aaabbb"])
    metrics = layer_metrics(result, np.array([0.1, 0.2, 0.3]))
    assert [m.layer for m in metrics] == [0, 1, 2]
    assert_allclose(metrics[1].self_similarity_adjusted, metrics[1].self_similarity - 0.2)


def test_projections():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(0, 0.1, (10, 16)) + 3, rng.normal(0, 0.1, (10, 16)) - 3])
    coords = pca_2d(x)
    assert coords.shape == (20, 2)
    assert np.sign(coords[:10, 0]).tolist() != np.sign(coords[10:, 0]).tolist()  # clusters split
    assert umap_2d(x[:6], seed=0).shape == (6, 2)  # tiny input works
    assert_allclose(umap_2d(x, seed=0), umap_2d(x, seed=0))  # seeded
    with pytest.raises(BertScopeError, match="at least 4"):
        umap_2d(x[:3])


def test_presets_and_csv():
    presets = sense_presets()
    assert len(presets) >= 8
    for word, rows in presets.items():
        senses = {}
        for sentence, label in rows:
            assert word_pattern(word).search(sentence), sentence
            senses[label] = senses.get(label, 0) + 1
        assert len(senses) == 2 and min(senses.values()) >= 10, word
    assert read_labelled_csv("sentence,label\na bank,river\nb bank,\n") == [("a bank", "river"), ("b bank", None)]
    with pytest.raises(BertScopeError, match="'sentence' column"):
        read_labelled_csv("text,label\na,b\n")
    with pytest.raises(BertScopeError, match="Line 3"):
        read_labelled_csv("sentence,label\na,b\nc,d,e\n")


def test_cli_shift_json(capsys, tiny_bert_dir, tmp_path):
    data = tmp_path / "bank.csv"
    data.write_text("sentence,label\nthe bank of the river .,river\nthe river bank .,river\n"
                    "she deposited money in the bank .,money\nthe bank has cash .,money\nhello world,money\n")
    assert main(["shift", str(tiny_bert_dir), "--word", "bank", "--data", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["word"] == "bank" and out["skipped"] == [5] and len(out["layers"]) == 3
    assert {"layer", "within", "across", "gap", "centroid_accuracy", "self_similarity",
            "anisotropy"} <= set(out["layers"][0])
    assert main(["shift", str(tiny_bert_dir), "--word", "bank", "--data", "/no/file.csv"]) == 2
    assert "No data file" in capsys.readouterr().err


def test_pooled_on_the_device_equals_pooling_the_models_hidden_states(tiny_bert):
    """collect pools on the model's device (fast kernel); the reference pools an eager pass."""
    text = "the bank was unbelievably muddy ."
    r = inspect(tiny_bert, text)
    pieces = [i for i, t in enumerate(r.tokens) if t in {"un", "##bel", "##ie", "##va", "##bly"}]
    assert len(pieces) == 5
    mean = collect(tiny_bert, "unbelievably", [(text, None)])
    assert_allclose(mean.vectors[0], r.hidden_states[:, pieces].mean(1), atol=1e-5)
    first = collect(tiny_bert, "unbelievably", [(text, None)], pooling="first")
    assert_allclose(first.vectors[0], r.hidden_states[:, pieces[0]], atol=1e-5)
    words = mean.sentence_word_vectors[0]  # [word, layer+1, dim]: the, bank, was, unbelievably, muddy, .
    assert words.shape[0] == 6
    assert_allclose(words[3], r.hidden_states[:, pieces].mean(1), atol=1e-5)
    assert_allclose(words[1], r.hidden_states[:, 2], atol=1e-5)


def test_shift_figures_fit_the_scale_and_tell_senses_apart(tiny_bert):
    import plotly.io as pio

    from bertscope.analysis.projection import pca_2d
    from bertscope.analysis.shift import cosine_matrix
    from bertscope.figures.shift import projection_scatter, similarity_heatmap

    rows = [("the bank of the river", "river"), ("the muddy bank", "river"),
            ("money in the bank", "money"), ("the bank had cash", "money")]
    result = collect(tiny_bert, "bank", rows)
    heat = similarity_heatmap(result, 2).data[0]
    sim = cosine_matrix(result.vectors[:, 2])
    off = sim[~np.eye(4, dtype=bool)]
    assert heat.zmin == pytest.approx(off.min(), abs=1e-6) and heat.zmax == pytest.approx(off.max(), abs=1e-6)
    scatter = projection_scatter(result, pca_2d(result.vectors[:, 2]), "PCA", "PCA")
    colours = {t.marker.color for t in scatter.data}
    assert len(colours) == 2 and colours <= {"#E41A1C", "#377EB8", "rgb(228,26,28)", "rgb(55,126,184)"}
    layout = pio.to_json(scatter)
    assert '"PCA 1"' in layout and '"PCA 2"' in layout


def test_two_occurrences_give_one_value_and_the_title_says_so():
    """Two sentences: one cosine off the diagonal; the title must not claim a range around it."""
    from bertscope.analysis.shift import Occurrence
    from bertscope.figures.shift import similarity_heatmap

    vectors = np.array([[[1.0, 0.0]], [[0.8, 0.6]]], np.float32)  # [occurrence, layer, dim]: cosine 0.8
    result = ShiftResult("bank", [Occurrence(1, "a bank", "river", (1,)), Occurrence(2, "the bank", "money", (1,))],
                         vectors, [])
    title = similarity_heatmap(result, 0).layout.title.text
    assert "one value off the diagonal, 0.80" in title and " to " not in title.split("(")[-1]
