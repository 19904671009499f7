"""``bertscope circuit``: the JSON the issue names, the table, and every bad input in one line with exit 2."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import run_cli

ROWS = [{"clean": "the man [MASK] here .", "corrupted": "the dog [MASK] here .", "answer": "is", "foil": "was"},
        {"clean": "the dog sat by the [MASK] .", "corrupted": "the man sat by the [MASK] .", "answer": "river",
         "foil": "bank"}]


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS))
    return path


def test_circuit_json_and_the_table(capsys, tiny_mlm_dir, pairs_file, tmp_path):
    out_file = tmp_path / "circuit.json"
    code, out, err = run_cli(capsys, "circuit", str(tiny_mlm_dir), "--data", str(pairs_file), "--method",
                             "eap-ig-inputs", "--steps", "3", "--top-n", "12", "--json", "--out", str(out_file))
    assert code == 0, err
    data = json.loads(out)
    assert data == json.loads(out_file.read_text())
    assert {"graph", "circuit", "faithfulness", "random_faithfulness", "cpr", "cmd", "clean_metric",
            "corrupted_metric"} <= set(data)
    names = {n["name"] for n in data["graph"]["nodes"]}
    assert {"embed", "blocks.1.attn.hook_result[3]", "blocks.0.hook_mlp_out", "logits"} <= names
    assert all(e["source"] in names for e in data["circuit"]["edges"]) and len(data["circuit"]["edges"]) <= 12
    assert [f["share"] for f in data["faithfulness"]][-1] == 1.0 and data["faithfulness"][-1]["value"] == 1.0
    assert data["method"] == "eap-ig-inputs" and data["steps"] == 3
    order = [n["name"] for n in data["graph"]["nodes"]]  # the circuit's nodes in the graph's order
    assert [order.index(n) for n in data["circuit"]["nodes"]] == sorted(order.index(n) for n in data["circuit"]["nodes"])
    code, out, err = run_cli(capsys, "circuit", str(tiny_mlm_dir), "--data", str(pairs_file), "--ablation", "mean")
    assert code == 0, err
    assert out.startswith("eap (mean ablation) on ") and "CPR" in out and "faithfulness  random" in out
    assert "1 pair scored the edges, 1 held out tested the circuits;" in out
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(ROWS[0]))
    code, out, err = run_cli(capsys, "circuit", str(tiny_mlm_dir), "--data", str(one))
    assert code == 0, err
    assert "1 pair both scored the edges and tested the circuits (too few to hold any out" in out


@pytest.mark.parametrize("extra, message", [
    ([], "Give --task"),
    (["--task", "gender", "--data", "x.csv"], "Give --task"),
    (["--data", "missing.csv"], "No pairs file"),
    (["--data", "PAIRS", "--method", "acdc"], "Unknown method 'acdc'"),
    (["--data", "PAIRS", "--ablation", "zero"], "Unknown ablation"),
    (["--data", "PAIRS", "--top-n", "0"], "at least one edge"),
    (["--data", "PAIRS", "--top-n", "999999"], "A circuit has 1 to"),
    (["--data", "PAIRS", "--steps", "0", "--method", "eap-ig-inputs"], "1 to 100 steps"),
    (["--task", "negation"], "reads a sentiment classifier's labels"),
    (["--data", "BAD"], "Pair 1 has"),
    (["--data", "PAIRS", "--out", "DIR"], "give a file in a folder that exists"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tiny_mlm_dir, pairs_file, tmp_path, extra, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("clean,corrupted,answer,foil\nthe man [MASK] here .,the big dog [MASK] here .,is,was\n")
    extra = [str(pairs_file) if e == "PAIRS" else str(bad) if e == "BAD" else str(tmp_path) if e == "DIR" else e
             for e in extra]
    code, out, err = run_cli(capsys, "circuit", str(tiny_mlm_dir), *extra)
    assert code == 2 and out == ""
    assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and message in err, err
