"""``bertscope erase``: the JSON the issue names, the table, and every bad input in one line with exit 2."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import run_cli


def test_erase_json_and_the_table(capsys, tiny_mlm_dir, tmp_path):
    out_file = tmp_path / "erased.json"
    code, out, err = run_cli(capsys, "erase", str(tiny_mlm_dir), "--concept", "ewt-upos", "--layers", "embeddings,1",
                             "--size", "40", "--test-size", "20", "--json", "--out", str(out_file))
    assert code == 0, err
    data = json.loads(out)
    assert data == json.loads(out_file.read_text())
    assert data["concept"] == "ewt-upos" and data["method"] == "leace"
    assert [row["layer"] for row in data["layers"]] == ["embeddings", 1]
    first = data["layers"][0]
    for key in ("rank", "majority", "probe_before", "probe_after", "probe_random_after"):
        assert isinstance(first[key], (int, float))
    assert set(first["mlm_top1"]) == {"before", "after", "random_after"}
    assert [x["layer"] for x in first["later_layers"]] == [0, 1]
    assert data["layers"][1]["later_layers"] == []  # the last layer: nothing after it
    code, out, err = run_cli(capsys, "erase", str(tiny_mlm_dir), "--concept", "ewt-upos", "--layers", "0",
                             "--size", "40", "--test-size", "20", "--method", "inlp")
    assert code == 0, err
    assert out.startswith("ewt-upos erased by inlp") and "random erasure of the same rank" in out
    assert "not measured: task accuracy" in out


def test_erase_a_concept_file(capsys, tiny_mlm_dir):
    from bertscope.corpora.suites import DATA

    code, out, err = run_cli(capsys, "erase", str(tiny_mlm_dir), "--concept", str(DATA / "pos.conllu"),
                             "--layers", "0", "--size", "60", "--test-size", "20", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["concept"] == "pos" and data["test_sentences"] == 20 and data["train_sentences"] == 60
    assert data["layers"][0]["uuas"] is None and any("no trees" in n for n in data["notes"])


@pytest.mark.parametrize("argv, message", [
    (["--concept", "ewt-upos", "--layers", "7"], "Layer '7' does not exist"),
    (["--concept", "ewt-upos", "--layers", ","], "names no layer"),
    (["--concept", "ewt-upos", "--method", "pca"], "No erasure method 'pca'"),
    (["--concept", "nothing-here"], "No concept 'nothing-here'"),
    (["--concept", "ewt-upos", "--size", "0"], "at least 1"),
    (["--concept", "ewt-upos", "--out", "/no/such/folder/erased.json"], "its folder does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tiny_mlm_dir, argv, message):
    code, out, err = run_cli(capsys, "erase", str(tiny_mlm_dir), *argv)
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize("content, message", [
    (b'tokens,tags\n"a b","X X"\n"c d","X X"\n"e f","X X"\n"g h","X X"\n', "has one label"),
    (b'tokens,tags\n"a b c","X Y"\n', "3 tokens but 2 tags"),
    ('tokens,tags\n"caf\xe9 b","X Y"\n'.encode("latin-1"), "not UTF-8"),
])
def test_bad_concept_files(capsys, tiny_mlm_dir, tmp_path, content, message):
    path = tmp_path / "concept.csv"
    path.write_bytes(content)
    code, out, err = run_cli(capsys, "erase", str(tiny_mlm_dir), "--concept", str(path))
    assert code == 2 and message in err and err.count("\n") == 1
