"""Probe tasks, the hidden-state cache, probes with control tasks, and the headless scripts."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertscope import BertScopeError, load_model
from bertscope.analysis.hidden_cache import CacheKey, HiddenStateCache, hidden_states
from bertscope.analysis.probing import control_labels, probe_layers, sentence_split
from bertscope.cli import main as cli_main
from bertscope.core.forward import inspect
from bertscope.corpora.probe_tasks import read_conllu, read_csv_task, read_jsonl_task, read_task
from bertscope.corpora.suites import SHIPPED, shipped_task

UPOS = {"ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X"}
CONLLU = """# sent_id = 1
# text = the bank of the river .
1\tthe\t_\tDET\t_\t_\t_\t_\t_\t_
2\tbank\t_\tNOUN\t_\t_\t_\t_\t_\t_
3-4\tof the\t_\t_\t_\t_\t_\t_\t_\t_
3\tof\t_\tADP\t_\t_\t_\t_\t_\t_
4\tthe\t_\tDET\t_\t_\t_\t_\t_\t_
4.1\tx\t_\tX\t_\t_\t_\t_\t_\t_
5\triver\t_\tNOUN\t_\t_\t_\t_\t_\t_
6\t.\t_\tPUNCT\t_\t_\t_\t_\t_\t_

1\tthe\t_\tDET\t_\t_\t_\t_\t_\t_
2\tdog\t_\tNOUN\t_\t_\t_\t_\t_\t_
3\tate\t_\tVERB\t_\t_\t_\t_\t_\t_
"""


def tiny_task():
    return read_conllu(CONLLU, "tiny")


# --------------------------------------------------------------------------- tasks


def test_conllu_skips_ranges_and_empty_nodes():
    task = tiny_task()
    assert task.level == "token"
    assert task.words == (("the", "bank", "of", "the", "river", "."), ("the", "dog", "ate"))
    assert task.labels[0] == ("DET", "NOUN", "ADP", "DET", "NOUN", "PUNCT")
    assert task.n_examples == 9


@pytest.mark.parametrize("reader, text, message", [
    (read_conllu, "1\tthe\tDET\n", "Line 1: a CoNLL-U word line has 10"),
    (read_conllu, CONLLU.replace("2\tdog", "x\tdog"), "Line 13: expected a word id"),
    (read_csv_task, "text,label\na,b\n", "Line 1: the CSV header"),
    (read_csv_task, "tokens,tags\nthe dog,DET NOUN\nthe cat,DET\n", "Line 3: 2 tokens but 1 tags"),
    (read_csv_task, "sentence,label\nhello,a\n,b\n", "Line 3: the sentence and the label"),
    (read_jsonl_task, '{"sentence": "a", "label": "x"}\n{"sentence": "b", "label": \n', "line 2: not valid JSON"),
    (read_jsonl_task, '{"sentence": "a", "label": "x"}\n' + "[" * 100_000 + "\n", "line 2: JSON nested too deeply"),
    (read_csv_task, 'sentence,label\n"' + "a" * 200_000 + '",x\n', "line 2: not CSV this reader can use"),
    (read_jsonl_task, '{"sentence": "a", "label": "x"}\n{"tokens": ["b"], "tags": ["y"]}\n', "Line 2: mixes"),
    (read_jsonl_task, '{"sentence": "a", "label": "x"}\n{"sentence": "b", "label": "x"}\n', "two different labels"),
])
def test_malformed_task_files_name_the_line(reader, text, message):
    with pytest.raises(BertScopeError, match=message) as err:
        reader(text)
    assert "\n" not in str(err.value)


def test_csv_and_jsonl_token_and_sentence_tasks():
    tokens = read_csv_task("tokens,tags\nthe dog ran,DET NOUN VERB\nthe cat,DET _\n")
    assert tokens.level == "token" and tokens.n_examples == 4 and tokens.classes == ["DET", "NOUN", "VERB"]
    sentences = read_jsonl_task('{"sentence": "Is it?", "label": "q"}\n\n{"sentence": "It is.", "label": "s"}\n')
    assert sentences.level == "sentence" and sentences.texts == ["Is it?", "It is."]
    with pytest.raises(BertScopeError, match=r"\.conllu, \.csv or \.jsonl"):
        read_task("x", "tags.txt")


def test_shipped_tasks():
    pos = shipped_task("pos")
    assert pos.n_examples >= 1500 and set(pos.classes) <= UPOS and len(pos.classes) >= 14
    # words whose tag depends on the sentence, so that word identity alone does not give the tag
    by_word: dict[str, set[str]] = {}
    for words, tags in zip(pos.words, pos.labels):
        for w, t in zip(words, tags):
            by_word.setdefault(w.lower(), set()).add(t)
    assert sum(len(t) > 1 for t in by_word.values()) >= 10
    for name in SHIPPED:
        task = shipped_task(name)
        assert len(task.classes) >= 2 and task.n_examples >= 150, name
    sense = shipped_task("sense")
    assert all(sum(t != "_" for t in row) == 1 for row in sense.labels)  # one target word per sentence
    with pytest.raises(BertScopeError, match="No shipped task 'nope'"):
        shipped_task("nope")


def test_shipped_suites_are_exactly_the_generators_output(tmp_path):
    """Labels correct by construction: the files are what probes/make_suites.py writes."""
    from bertscope.corpora.suites import DATA
    from probes.make_suites import main as make_suites

    make_suites(tmp_path)
    for made in tmp_path.iterdir():
        assert made.read_bytes() == (DATA / made.name).read_bytes(), made.name


# --------------------------------------------------------------------------- cache


def test_cache_round_trip_and_one_layer_reads(tiny_bert, tmp_path):
    cache = HiddenStateCache(tmp_path)
    task = tiny_task()
    built = hidden_states(tiny_bert, task, "mean", cache)
    assert not built.hit and built.layers == (0, 1, 2)
    again = hidden_states(tiny_bert, task, "mean", cache)
    assert again.hit and again.labels == built.labels and list(again.groups) == [0] * 6 + [1] * 3
    layer = again.layer(1)
    assert isinstance(layer, np.memmap) and layer.shape == (9, 32) and set(again._layers) == {1}
    # the cached vectors are the mean of each word's pieces at that layer
    r = inspect(tiny_bert, "the bank of the river .")
    assert np.allclose(layer[1], r.hidden_states[1, 2], atol=1e-5)  # "bank" is one piece
    assert np.allclose(np.asarray(built.layer(2)), np.asarray(again.layer(2)))
    with pytest.raises(BertScopeError, match="Layer 7 is not in this cache"):
        again.layer(7)


def test_progress_counts_word_pieces_longest_last(tiny_bert, tmp_path):
    """The pass runs shortest first, so progress counts word pieces (a sentence's cost), not sentences
    (issue 54: at 10% of the sentences the estimate was 3x low)."""
    from bertscope.analysis.hidden_cache import count_pieces

    task = tiny_task()
    seen: list[tuple[int, int]] = []
    hidden_states(tiny_bert, task, "mean", HiddenStateCache(tmp_path), batch_size=1,
                  progress=lambda d, t: seen.append((d, t)))
    pieces = [len(tiny_bert.tokenizer(t)["input_ids"]) for t in task.texts]
    assert count_pieces(tiny_bert, task.texts) == sum(pieces)
    assert [d for d, _ in seen] == list(np.cumsum(sorted(pieces)))  # one batch a sentence, shortest first
    assert {t for _, t in seen} == {sum(pieces)}


def test_any_change_of_the_key_is_a_miss(tiny_bert, tiny_mlm_dir, tmp_path):
    cache = HiddenStateCache(tmp_path)
    task = tiny_task()
    first = hidden_states(tiny_bert, task, "mean", cache)
    assert not hidden_states(tiny_bert, task, "first", cache).hit  # pooling
    changed = read_conllu(CONLLU.replace("3\tate\t_\tVERB", "3\tate\t_\tNOUN"))
    assert not hidden_states(tiny_bert, changed, "mean", cache).hit  # dataset
    other = load_model(str(tiny_mlm_dir))  # same tokenizer, other weights
    assert not hidden_states(other, task, "mean", cache).hit
    assert hidden_states(tiny_bert, task, "mean", cache).hit and len(list(tmp_path.iterdir())) == 4
    assert first.key.tokenizer == hidden_states(other, task, "mean", cache).key.tokenizer


def test_words_lost_to_truncation_are_dropped_consistently(tiny_bert, tmp_path):
    long = " ".join(["the dog ate"] * 20).split()  # 60 words; the tiny model takes 40 tokens
    task = read_csv_task("tokens,tags\n" + " ".join(long) + "," + " ".join(["DET", "NOUN", "VERB"] * 20) +
                         "\nthe cat,DET NOUN\n")
    states = hidden_states(tiny_bert, task, "mean", HiddenStateCache(tmp_path))
    n = len(states.labels)
    assert 2 + 30 < n < 62  # the long sentence lost its tail, the short one is whole
    assert states.layer(0).shape == (n, 32) and len(states.types) == n == len(states.groups)
    assert states.labels[-2:] == ["DET", "NOUN"] and list(states.groups[-2:]) == [1, 1]
    assert states.labels[:3] == ["DET", "NOUN", "VERB"]
    r = inspect(tiny_bert, "the cat")
    assert np.allclose(states.layer(2)[-1], r.hidden_states[2, 2], atol=1e-5)


def test_interrupted_write_leaves_nothing(tmp_path):
    cache = HiddenStateCache(tmp_path)
    key = CacheKey("m", "w", "t", "d", "token", "mean", (0, 1))

    def fill(folder):
        np.save(folder / "layer_00.npy", np.zeros((3, 4), np.float32))
        raise KeyboardInterrupt  # the user stops it half-way

    with pytest.raises(KeyboardInterrupt):
        cache.write(key, fill)
    assert list(tmp_path.iterdir()) == [] and cache.read(key) is None


@pytest.mark.parametrize("damage", ["truncate", "pickle", "delete", "meta"])
def test_damaged_entries_are_rebuilt(tiny_bert, tmp_path, damage):
    cache = HiddenStateCache(tmp_path)
    task = tiny_task()
    built = hidden_states(tiny_bert, task, "mean", cache)
    expected = np.array(built.layer(1))
    target = built.folder / "layer_01.npy"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "pickle":  # an object array can only be read with pickle: refused
        np.save(target, np.array([{"x": 1}] * 9, dtype=object), allow_pickle=True)
    elif damage == "delete":
        target.unlink()
    else:
        (built.folder / "meta.json").write_text("{not json")
    assert cache.read(built.key) is None and not built.folder.exists()
    rebuilt = hidden_states(tiny_bert, task, "mean", cache)
    assert not rebuilt.hit and np.allclose(np.asarray(rebuilt.layer(1)), expected)


# --------------------------------------------------------------------------- probes


def synthetic_states(tmp_path, x_by_layer, labels, groups, types):
    cache = HiddenStateCache(tmp_path)
    key = CacheKey("synthetic", "w", "t", "d", "token", "mean", tuple(range(len(x_by_layer))))

    def fill(folder):
        for i, x in enumerate(x_by_layer):
            np.save(folder / f"layer_{i:02d}.npy", x.astype(np.float32))
        return {"labels": list(labels), "groups": [int(g) for g in groups], "types": list(types)}

    return cache.write(key, fill)


def test_probe_is_near_perfect_on_separable_data_and_near_chance_on_noise(tmp_path):
    rng = np.random.default_rng(0)
    n = 600
    labels = rng.choice(["a", "b", "c"], size=n)
    centres = {"a": 0.0, "b": 4.0, "c": 8.0}
    separable = rng.normal(size=(n, 16)) + np.array([centres[c] for c in labels])[:, None]
    noise = rng.normal(size=(n, 16))
    groups = np.arange(n) // 6  # sentences of six words
    states = synthetic_states(tmp_path, [noise, separable], labels, groups, [f"w{i}" for i in range(n)])
    result = probe_layers(states, "synthetic", "mean")
    assert result.layers[1].accuracy > 0.97 and result.layers[1].ci[0] > 0.9
    assert abs(result.layers[0].accuracy - 1 / 3) < 0.12
    assert result.n_train + result.n_test == n
    assert 0.2 < result.majority_baseline < 0.5
    lo, hi = result.layers[0].ci
    assert lo <= result.layers[0].accuracy <= hi


def test_control_task_gives_each_type_one_label():
    types = ["the", "dog", "the", "cat", "dog", "the"] * 50
    labels = ["DET", "NOUN", "DET", "NOUN", "NOUN", "DET"] * 50
    control = control_labels(types, labels, seed=3)
    for t in set(types):
        assert len({c for c, ty in zip(control, types) if ty == t}) == 1
    assert np.array_equal(control, control_labels(types, labels, seed=3))
    assert set(control) <= set(labels)
    many = control_labels([f"w{i}" for i in range(4000)], ["x"] * 3000 + ["y"] * 1000, seed=0)
    assert abs((many == "x").mean() - 0.75) < 0.03  # drawn from the label distribution


def test_no_sentence_on_both_sides():
    groups = np.repeat(np.arange(100), 7)
    train, test = sentence_split(groups, seed=1)
    assert not set(groups[train]) & set(groups[test])
    assert len(train) + len(test) == len(groups) and 0.15 < len(test) / len(groups) < 0.35


def test_control_selectivity_on_type_determined_labels(tmp_path):
    """When each word type always has one label, the control task is as easy as the task."""
    rng = np.random.default_rng(1)
    vocab = [f"w{i}" for i in range(40)]
    tag_of = {w: ["A", "B", "C"][i % 3] for i, w in enumerate(vocab)}
    embedding = {w: rng.normal(size=64) for w in vocab}  # more dimensions than types: any labelling is linear
    types = rng.choice(vocab, size=900)
    x = np.stack([embedding[t] for t in types]) + 0.05 * rng.normal(size=(900, 64))
    states = synthetic_states(tmp_path, [x], [tag_of[t] for t in types], np.arange(900) // 9, list(types))
    result = probe_layers(states, "typed", "mean")
    assert result.layers[0].accuracy > 0.95 and result.layers[0].control_accuracy > 0.9
    assert abs(result.layers[0].selectivity) < 0.1


def test_probe_weights_are_arrays_not_pickles(tmp_path):
    rng = np.random.default_rng(2)
    labels = rng.choice(["a", "b"], size=200)
    x = rng.normal(size=(200, 5)) + (labels == "b")[:, None] * 3
    states = synthetic_states(tmp_path / "cache", [x], labels, np.arange(200) // 4, [str(i) for i in range(200)])
    probe_layers(states, "t", "mean", weights_dir=tmp_path / "weights")
    arrays = np.load(tmp_path / "weights" / "layer_00.npz", allow_pickle=False)
    meta = json.loads((tmp_path / "weights" / "layer_00.json").read_text())
    logits = ((x - arrays["mean"]) / arrays["scale"]) @ arrays["coef"].T + arrays["intercept"]
    predicted = np.where(logits[:, 0] > 0, meta["classes"][1], meta["classes"][0])
    assert (predicted == labels).mean() > 0.9


# --------------------------------------------------------------------------- headless


def test_cli_probe_json(tiny_bert_dir, tmp_path, capsys):
    data = tmp_path / "tags.conllu"
    data.write_text(CONLLU * 3)
    assert cli_main(["probe", str(tiny_bert_dir), "--data", str(data), "--cache", str(tmp_path / "c"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "tags" and [e["layer"] for e in out["layers"]] == ["embeddings", 0, 1]
    assert set(out["layers"][0]) == {"layer", "accuracy", "control_accuracy", "selectivity", "ci"}
    assert cli_main(["probe", str(tiny_bert_dir), "--task", "nope"]) == 2
    assert capsys.readouterr().err.startswith("bertscope: error: No shipped task")


def test_layerwise_and_sweep_scripts_write_their_files(tiny_bert_dir, tiny_encoder_dir, tmp_path, capsys):
    from probes import layerwise, sweep

    out = tmp_path / "results"
    common = ["--cache", str(tmp_path / "cache"), "--out"]
    assert layerwise.main(["--model", str(tiny_bert_dir), "--task", "question", *common, str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads((out / "results.json").read_text()) == printed
    assert {p.name for p in out.iterdir()} >= {"results.json", "results.csv", "layers.png", "layers.html", "weights"}
    assert (out / "layers.png").read_bytes()[:4] == b"\x89PNG"
    assert layerwise.main(["--model", str(tiny_bert_dir), "--data", str(tmp_path / "missing.csv"), *common,
                           str(out)]) == 2
    assert "No data file" in capsys.readouterr().err
    swept = tmp_path / "sweep"
    assert sweep.main(["--models", f"{tiny_bert_dir},{tiny_encoder_dir}", "--tasks", "question,negation",
                       *common, str(swept)]) == 0
    rows = (swept / "summary.csv").read_text().strip().splitlines()
    assert len(rows) == 5 and (swept / "comparison.png").is_file()


@pytest.mark.slow
def test_bundled_model_tags_pos_well_above_the_majority(tmp_path):
    lm = load_model("bundled")
    result = probe_layers(hidden_states(lm, shipped_task("pos"), "mean", HiddenStateCache(tmp_path)), "pos", "mean")
    assert result.best.accuracy > result.majority_baseline + 0.6
    assert result.best.accuracy > 0.9
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_train_here_test_there(tiny_bert, tiny_bert_dir, tmp_path, capsys):
    """The probe trained on a task is also scored on a user's file with the same labels."""
    train_file = tmp_path / "train.csv"
    rows = [("is the dog in the river ?", "question"), ("the dog is in the river .", "statement"),
            ("was the man at the bank ?", "question"), ("the man was at the bank .", "statement")] * 12
    train_file.write_text("sentence,label\n" + "\n".join(f"{s},{lab}" for s, lab in rows) + "\n")
    test_file = tmp_path / "test.jsonl"
    test_file.write_text("\n".join(json.dumps({"sentence": s, "label": lab}) for s, lab in [
        ("is the cat on the boat ?", "question"), ("the cat is on the boat .", "statement"),
        ("were the fish in the water ?", "question"), ("the fish were in the water .", "statement")]) + "\n")
    argv = ["probe", str(tiny_bert_dir), "--data", str(train_file), "--cache", str(tmp_path / "c"), "--json"]
    assert cli_main([*argv, "--test-data", str(test_file)]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert all(0.0 <= entry["external_accuracy"] <= 1.0 for entry in layers)
    # the same figure from the library: the trained probe's predictions on the test file's states
    cache = HiddenStateCache(tmp_path / "c")
    task, other = read_task(train_file.read_text(), "train.csv"), read_task(test_file.read_text(), "test.jsonl")
    result = probe_layers(hidden_states(tiny_bert, task, "mean", cache), task.name, "mean",
                          external=hidden_states(tiny_bert, other, "mean", cache))
    assert [r.external_accuracy for r in result.layers] == [entry["external_accuracy"] for entry in layers]
    assert cli_main(argv) == 0 and "external_accuracy" not in json.loads(capsys.readouterr().out)["layers"][0]
    # labels the task never trains on: one line naming them, exit 2
    test_file.write_text(json.dumps({"sentence": "go to the bank !", "label": "command"}) + "\n" +
                         json.dumps({"sentence": "is it wet ?", "label": "question"}) + "\n")
    assert cli_main([*argv, "--test-data", str(test_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "never trains on: command" in err
    assert cli_main([*argv, "--test-data", str(tmp_path / "nope.csv")]) == 2


def test_per_example_predictions_and_confusion(tiny_bert, tmp_path):
    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
    from bertscope.corpora.suites import shipped_task

    task = shipped_task("pos")
    states = hidden_states(tiny_bert, task, "mean", HiddenStateCache(tmp_path))
    result = probe_layers(states, task.name, "mean")
    layer = result.best.layer
    confusion = result.confusion(layer)
    assert confusion.shape == (len(result.classes),) * 2 and confusion.sum() == result.n_test
    # the diagonal is the accuracy the result reports
    assert np.trace(confusion) / result.n_test == pytest.approx(result.best.accuracy)
    rows = result.examples(layer)
    assert len(rows) == result.n_test and all(0 < r["probability"] <= 1 for r in rows)
    errors = result.examples(layer, errors_only=True)
    assert len(errors) == result.n_test - np.trace(confusion) and all(r["gold"] != r["predicted"] for r in errors)
    # examples point back at their sentence and word
    row = rows[0]["example"]
    sentence = task.texts[states.sentences[row]]
    assert states.types[row] in sentence.lower() and states.labels[row] == rows[0]["gold"]
