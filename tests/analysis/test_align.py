"""Cross-lingual alignment: data, pooling, retrieval, centring, token links, CLI."""

from __future__ import annotations

import json
import re
import unicodedata

import numpy as np
import pytest
from numpy.testing import assert_allclose

from bertscope import BertScopeError, load_model
from bertscope.analysis.align import (
    centre,
    embed_parallel,
    pair_names,
    retrieval,
    retrieval_accuracy,
    token_alignment,
    tokenizer_coverage,
)
from bertscope.analysis.projection import project, umap_2d, warm_umap
from bertscope.cli import main
from bertscope.core.forward import inspect
from bertscope.corpora.parallel import CARRIERS, read_parallel_tsv, shipped_parallel

SCRIPTS = {  # a letter of each cell must come from this Unicode script name
    "ru": ("CYRILLIC",), "zh": ("CJK",), "ar": ("ARABIC",), "hi": ("DEVANAGARI",),
    "ja": ("CJK", "HIRAGANA", "KATAKANA"),
}


@pytest.fixture(scope="module")
def tiny_ml(tiny_multilingual_dir):
    return load_model(str(tiny_multilingual_dir))


def small_data(kind="sentences"):
    text = "en\tde\tru\nThe cat sleeps.\tDie Katze schläft.\tКошка спит.\nIt rains.\tEs regnet.\tИдёт дождь.\n" \
           "I drink tea.\tIch trinke Tee.\tЯ пью чай.\n"
    if kind == "words":
        text = "en\tde\tru\nwater\tWasser\tвода\nfire\tFeuer\tогонь\nsun\tSonne\tсолнце\n"
    return read_parallel_tsv(text, kind)


# --------------------------------------------------------------------------- shipped data


@pytest.mark.parametrize("kind, minimum", [("sentences", 100), ("words", 150)])
def test_shipped_data_is_complete_distinct_and_in_script(kind, minimum):
    data = shipped_parallel(kind)
    assert data.languages == ("en", "de", "fr", "es", "ru", "zh", "ar", "hi", "ja")
    assert data.n_items >= minimum and not data.incomplete
    for language in data.languages:
        cells = data.texts(language)
        assert len(set(cells)) == len(cells), f"{language} repeats a cell"
        for cell in cells:
            letters = [unicodedata.name(c, "") for c in cell if c.isalpha()]
            assert letters, (language, cell)
            wanted = SCRIPTS.get(language, ("LATIN",))
            if language in SCRIPTS:
                assert any(n.startswith(wanted) for n in letters), (language, cell)
            else:
                assert all(n.startswith("LATIN") for n in letters), (language, cell)


def test_every_shipped_language_has_a_carrier_with_one_slot():
    for language in shipped_parallel("words").languages:
        assert CARRIERS[language].count("{}") == 1


# --------------------------------------------------------------------------- reading files


def test_missing_cells_are_reported_by_line_not_fatal():
    data = read_parallel_tsv("en\tde\tzh\n\nhello\tHallo\t你好\nbye\t\t再见\nyes\tja\n"
                             "thanks\tDanke\t谢谢\n", "words")
    assert data.n_items == 2 and data.texts("de") == ["Hallo", "Danke"]
    assert data.incomplete == [(4, ["de"]), (5, ["zh"])]
    assert data.select(["en", "zh"]).n_items == 3  # the row without German counts for en-zh


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("en,de\nhello,Hallo\n", "comma-separated"),
    ("en\ten\nhi\thi\nyo\tyo\n", "twice"),
    ("en\t1x\nhi\thi\n", "not a language code"),
    ("en\tde\nhi\tHallo\textra\n", "Line 2 has 3 fields"),
    ("en\tde\nhello\t\nbye\tTschüss\n", "Fewer than 2 rows"),
])
def test_malformed_files_get_one_line(text, message):
    with pytest.raises(BertScopeError, match=message) as err:
        read_parallel_tsv(text)
    assert "\n" not in str(err.value)


def test_select_checks_languages():
    with pytest.raises(BertScopeError, match="No column for xx"):
        small_data().select(["en", "xx"])
    with pytest.raises(BertScopeError, match="at least two"):
        small_data().select(["en"])


# --------------------------------------------------------------------------- retrieval and centring


def test_identical_translations_retrieve_perfectly():
    rng = np.random.default_rng(0)
    meaning = rng.normal(size=(50, 3, 16))  # [item, layer, dim]
    vectors = np.stack([meaning] * 4)  # [language, item, layer, dim]
    acc = retrieval_accuracy(vectors)
    off = ~np.eye(4, dtype=bool)
    assert acc.shape == (3, 4, 4)
    assert np.all(acc[:, off] == 1.0) and np.all(np.isnan(acc[:, ~off]))


def test_random_vectors_retrieve_at_chance():
    rng = np.random.default_rng(1)
    acc = retrieval_accuracy(rng.normal(size=(4, 400, 2, 32)))
    assert np.nanmean(acc) < 0.02  # chance is 1/400; 0.02 is eight times chance


def test_centring_removes_each_languages_offset_and_recovers_retrieval():
    rng = np.random.default_rng(2)
    n_lang, n_items, dim = 5, 120, 48
    meaning = rng.normal(size=(1, n_items, 1, dim))
    offsets = rng.normal(size=(n_lang, 1, 1, dim)) * 8.0  # a strong per-language direction
    vectors = meaning + offsets + 0.6 * rng.normal(size=(n_lang, n_items, 1, dim))
    centred = centre(vectors)
    assert_allclose(centred.mean(axis=1), 0.0, atol=1e-9)
    assert_allclose(centred, vectors - vectors.mean(axis=1, keepdims=True))
    raw, fixed = np.nanmean(retrieval_accuracy(vectors)), np.nanmean(retrieval_accuracy(centred))
    assert raw < 0.5 < 0.95 < fixed  # the offsets hide the shared meaning until removed


def test_retrieval_agrees_with_a_plain_loop():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(3, 30, 2, 8)) + rng.normal(size=(1, 30, 2, 8))
    acc = retrieval_accuracy(vectors)
    for layer in range(2):
        for s in range(3):
            for t in range(3):
                if s == t:
                    continue
                hits = 0
                for i in range(30):
                    q = vectors[s, i, layer]
                    cos = [q @ vectors[t, j, layer] / np.linalg.norm(q) / np.linalg.norm(vectors[t, j, layer])
                           for j in range(30)]
                    hits += int(np.argmax(cos) == i)
                assert acc[layer, s, t] == pytest.approx(hits / 30)


def test_report_has_every_ordered_pair():
    names = [n for _, _, n in pair_names(("en", "de", "zh"))]
    assert names == ["en-de", "en-zh", "de-en", "de-zh", "zh-en", "zh-de"]


# --------------------------------------------------------------------------- pooling on a model


def test_sentence_vectors_are_the_mean_of_non_special_tokens(tiny_ml):
    data = small_data()
    av = embed_parallel(tiny_ml, data, batch_size=2)  # padded, length-sorted batches
    assert av.vectors.shape == (3, 3, 3, 32)  # [language, item, layer+1, dim]
    for g, language in enumerate(data.languages):
        for i, text in enumerate(data.texts(language)):
            r = inspect(tiny_ml, text)
            expected = r.hidden_states[:, ~r.special_mask].mean(axis=1)  # [layer+1, dim]
            assert_allclose(av.vectors[g, i], expected, atol=1e-5)
    cls = embed_parallel(tiny_ml, data, pooling="cls")
    r = inspect(tiny_ml, data.texts("ru")[1])
    assert_allclose(cls.vectors[2, 1], r.hidden_states[:, 0], atol=1e-5)


def test_words_alone_and_in_carriers(tiny_ml):
    data = small_data("words")
    alone = embed_parallel(tiny_ml, data, context="alone")
    r = inspect(tiny_ml, "Feuer")
    assert_allclose(alone.vectors[1, 1], r.hidden_states[:, ~r.special_mask].mean(axis=1), atol=1e-5)
    carrier = embed_parallel(tiny_ml, data, context="carrier")
    sentence = CARRIERS["ru"].format("солнце")
    r = inspect(tiny_ml, sentence)
    start = sentence.index("солнце")
    pieces = [i for i, (s, e) in enumerate(r.offsets) if not r.special_mask[i] and s < start + 6 and e > start]
    assert [r.tokens[i] for i in pieces] == ["с", "##о", "##л", "##н", "##ц", "##е"]
    assert_allclose(carrier.vectors[2, 2], r.hidden_states[:, pieces].mean(axis=1), atol=1e-5)
    assert not np.allclose(carrier.vectors, alone.vectors)  # the context changes the vectors
    with pytest.raises(BertScopeError, match="No carrier sentence for 'xx'"):
        embed_parallel(tiny_ml, read_parallel_tsv("en\txx\na\tb\nc\td\n", "words"), context="carrier")


def test_retrieval_on_a_model_and_its_json(tiny_ml):
    scores = retrieval(embed_parallel(tiny_ml, shipped_parallel("sentences").select(["en", "de", "zh"])))
    report = scores.to_json()
    assert report["languages"] == ["en", "de", "zh"] and report["items"] == 105
    assert len(report["layers"]) == 3
    for entry in report["layers"]:
        assert set(entry["p_at_1"]) == set(entry["p_at_1_centered"]) == {
            "en-de", "en-zh", "de-en", "de-zh", "zh-en", "zh-de"}
        assert all(0.0 <= v <= 1.0 for v in entry["p_at_1"].values())


def test_token_alignment_links(tiny_ml):
    al = token_alignment(tiny_ml, "The cat sleeps.", "Die Katze schläft.", layer=2)
    assert al.similarity.shape == (len(al.source_tokens), len(al.target_tokens))
    assert np.all(al.similarity <= 1.0 + 1e-5)
    assert all(al.similarity[i, al.forward[i]] == al.similarity[i].max() for i in range(len(al.forward)))
    assert all(al.backward[j] == i for i, j in al.mutual)
    same = token_alignment(tiny_ml, "Кошка спит.", "Кошка спит.", layer=1)
    assert same.mutual == [(i, i) for i in range(len(same.source_tokens))]  # identical text: the diagonal
    with pytest.raises(BertScopeError, match="Hidden state 9 does not exist"):
        token_alignment(tiny_ml, "a", "b", layer=9)


def test_coverage_sees_unknown_scripts(tiny_ml, tiny_bert):
    data = shipped_parallel("words").select(["en", "zh"])
    assert all(c.unknown_share == 0 for c in tokenizer_coverage(tiny_ml, data))
    english_only = {c.language: c for c in tokenizer_coverage(tiny_bert, data)}
    assert english_only["zh"].unknown_share > 0.9


# --------------------------------------------------------------------------- projections


def test_projection_is_memoised_seeded_and_works_on_tiny_inputs():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 8)).astype(np.float32)
    first = project(x, "umap", seed=0)
    assert project(x.copy(), "umap", seed=0) is first  # same bytes, same settings: no recompute
    assert project(x, "pca").shape == (30, 2)
    assert umap_2d(x[:5], seed=0).shape == (5, 2)  # n_neighbors below n, random init
    assert warm_umap() >= 0.0 and warm_umap() == 0.0  # once per process
    with pytest.raises(BertScopeError, match="'pca' or 'umap'"):
        project(x, "tsne")


# --------------------------------------------------------------------------- CLI


def test_cli_align_json(tiny_multilingual_dir, tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("en\tde\tja\nThe cat sleeps.\tDie Katze schläft.\t猫は寝ています。\n"
                    "It rains.\tEs regnet.\t\nI drink tea.\tIch trinke Tee.\t私はお茶を飲みます。\n", encoding="utf-8")
    assert main(["align", str(tiny_multilingual_dir), "--data", str(data), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["languages"] == ["en", "de", "ja"] and out["items"] == 2
    assert out["left_out"] == [{"line": 3, "missing": ["ja"]}]
    assert [e["layer"] for e in out["layers"]] == ["embeddings", 0, 1]  # named as every layer (core.layers)
    assert set(out["layers"][0]["p_at_1"]) == {"en-de", "en-ja", "de-en", "de-ja", "ja-en", "ja-de"}
    assert main(["align", str(tiny_multilingual_dir), "--kind", "words", "--languages", "en,hi",
                 "--context", "carrier"]) == 0
    assert re.search(r"209 items x 2 languages", capsys.readouterr().out)


def test_cli_align_bad_input(tiny_multilingual_dir, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("en,de\nhello,Hallo\n", encoding="utf-8")
    for argv in (["--data", str(bad)], ["--data", str(tmp_path / "none.tsv")], ["--languages", "en,xx"]):
        assert main(["align", str(tiny_multilingual_dir), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1


def test_progress_counts_the_cells_word_pieces(tiny_multilingual_dir):
    from bertscope.analysis.align import embed_parallel
    from bertscope.analysis.hidden_cache import count_pieces
    from bertscope.corpora.parallel import shipped_parallel

    lm = load_model(str(tiny_multilingual_dir))
    data = shipped_parallel("sentences").select(["en", "de"])
    seen: list[tuple[int, int]] = []
    embed_parallel(lm, data, batch_size=4, progress=lambda d, t: seen.append((d, t)))
    total = count_pieces(lm, [cell for language in data.languages for cell in data.texts(language)])
    assert seen[-1] == (total, total) and all(a[0] < b[0] for a, b in zip(seen, seen[1:]))
    steps = np.diff([0] + [d for d, _ in seen])
    assert steps[-1] > steps[0]  # the batches run shortest first: the last costs more than the first


def test_vectors_are_kept_on_disk_and_read_back(tiny_multilingual_dir, tmp_path):
    from bertscope.analysis.align import embed_parallel
    from bertscope.corpora.parallel import shipped_parallel

    lm = load_model(str(tiny_multilingual_dir))
    data = shipped_parallel("words").select(["en", "de"])
    first = embed_parallel(lm, data, cache=tmp_path)
    files = list(tmp_path.glob("*.npz"))
    assert len(files) == 1
    calls = []
    again = embed_parallel(lm, data, cache=tmp_path, progress=lambda d, t: calls.append(d))
    assert not calls  # read from disk: no batch ran
    np.testing.assert_array_equal(again.vectors, first.vectors)
    assert (again.truncated, again.empty) == (first.truncated, first.empty)
    other = embed_parallel(lm, data, context="carrier", cache=tmp_path)  # another key, another file
    assert len(list(tmp_path.glob("*.npz"))) == 2 and not np.array_equal(other.vectors, first.vectors)
    files[0].write_bytes(b"damaged")
    rebuilt = embed_parallel(lm, data, cache=tmp_path)
    np.testing.assert_array_equal(rebuilt.vectors, first.vectors)


def test_token_link_accuracy_is_measured_per_layer(tiny_multilingual_dir):
    """Where a word's pieces link inside its translation (the carrier sentence gives the right
    link): one share per hidden state, above its chance level on the embeddings of identical
    spellings, and the sentences data refused in one line."""
    from bertscope.analysis.align import token_link_accuracy
    from bertscope.corpora.parallel import ParallelData

    lm = load_model(str(tiny_multilingual_dir))
    words = shipped_parallel("words")
    r = token_link_accuracy(lm, words, items=30)
    assert r.accuracy.shape == r.chance.shape == (lm.num_layers + 1,)
    assert ((0 <= r.accuracy) & (r.accuracy <= 1)).all() and (r.chance < 0.5).all()
    assert r.pairs == 30 * (len(words.languages) - 1) and 0 <= r.best <= lm.num_layers
    same = ParallelData("words", ("en", "de"), tuple((w, w) for w in words.texts("en")[:30]), tuple(range(2, 32)))
    exact = token_link_accuracy(lm, same, items=30)
    assert exact.accuracy[0] > exact.chance[0]  # the same pieces meet themselves, even in a random model
    with pytest.raises(BertScopeError, match="words in carrier sentences"):
        token_link_accuracy(lm, shipped_parallel("sentences"))
