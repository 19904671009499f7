"""``python -m bertscope``: JSON output and one error style (one stderr line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bertscope.cli import main
from tests.conftest import ROOT


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_json(capsys, tiny_bert_dir):
    code, out, err = run_cli(capsys, "info", str(tiny_bert_dir), "--json")
    assert code == 0 and err == ""
    card = json.loads(out)
    assert card["layers"] == 2 and card["heads"] == 4 and card["hidden_size"] == 32
    assert card["outputs_present"] == card["heads_present"] == ["mlm", "nsp"]  # the old key stays
    assert card["architecture"] == "BertForPreTraining"
    assert card["parameters"] > card["encoder_parameters"] > 0


def test_info_text(capsys, tiny_encoder_dir):
    code, out, _ = run_cli(capsys, "info", str(tiny_encoder_dir))
    assert code == 0
    assert "layers 2, heads 4, hidden 32" in out and "none (encoder only)" in out


def test_inspect_json(capsys, tiny_bert_dir):
    code, out, _ = run_cli(capsys, "inspect", str(tiny_bert_dir), "the bank", "--pair", "a river", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["tokens"] == ["[CLS]", "the", "bank", "[SEP]", "a", "river", "[SEP]"]
    assert result["shapes"]["attentions"] == [2, 4, 7, 7]
    assert result["shapes"]["hidden_states"] == [3, 7, 32]
    assert result["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["inspect", "{tiny}", "   "], "empty"),
        (["info", "./missing/model"], "No model folder"),
        (["info", "{gpt2}"], "not a BERT-family encoder"),
        (["info", "nobody-xyz/no-such-model"], "hub is unreachable"),
        (["info", "{tiny}", "--device", "tpu"], "Unknown device"),
        (["info", "{tiny}", "--device", "cpu", "--dtype", "float16"], "needs a GPU"),  # any machine
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tiny_bert_dir, gpt2_dir, argv, message):
    argv = [a.format(tiny=tiny_bert_dir, gpt2=gpt2_dir) for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("bertscope: error: ") and message in err
    assert err.count("\n") == 1


def test_module_entry_point(tiny_bert_dir):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bertscope", "info", str(tiny_bert_dir), "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model_type"] == "bert"
    bad = subprocess.run(
        [sys.executable, "-m", "bertscope", "inspect", str(tiny_bert_dir), ""],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip().startswith("bertscope: error:")


def test_attention_json_all_and_one_head(capsys, tiny_bert, tiny_bert_dir):
    from bertscope import inspect

    code, out, _ = run_cli(capsys, "attention", str(tiny_bert_dir), "the bank", "--json")
    assert code == 0
    result = json.loads(out)
    r = inspect(tiny_bert, "the bank")
    assert result["tokens"] == r.tokens
    np.testing.assert_allclose(result["attentions"], r.attentions, atol=1e-6)
    code, out, _ = run_cli(capsys, "attention", str(tiny_bert_dir), "the bank", "--layer", "1",
                           "--head", "2", "--json")
    assert code == 0
    np.testing.assert_allclose(json.loads(out)["attentions"], r.attentions[1, 2], atol=1e-6)


def test_head_stats_json(capsys, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the bank of the river .\n\na dog , a cat .\n", encoding="utf-8")
    code, out, _ = run_cli(capsys, "head-stats", str(tiny_bert_dir), "--corpus", str(corpus), "--json")
    assert code == 0
    result = json.loads(out)
    assert (result["layers"], result["heads"], result["sentences"]) == (2, 4, 2)
    assert set(result["stats"]) == {"entropy", "cls", "sep", "punct", "prev", "next", "self", "distance"}
    assert np.array(result["stats"]["cls"]).shape == (2, 4)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["attention", "{tiny}", "the bank", "--layer", "1"], "both --layer and --head"),
        (["attention", "{tiny}", "the bank", "--layer", "7", "--head", "0"], "does not exist"),
        (["head-stats", "{tiny}", "--corpus", "/no/such/file.txt"], "No corpus file"),
        (["head-stats", "{tiny}", "--corpus", "{binary}"], "not UTF-8"),
        (["head-stats", "{tiny}", "--corpus", "{empty}"], "corpus is empty"),
    ],
)
def test_attention_bad_input(capsys, tiny_bert_dir, tmp_path, argv, message):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "empty.txt").write_text("\n \n")
    argv = [a.format(tiny=tiny_bert_dir, binary=tmp_path / "bin.txt", empty=tmp_path / "empty.txt")
            for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_fill_mask_recipe_and_nsp_json(capsys, tiny_bert_dir):
    code, out, _ = run_cli(capsys, "fill-mask", str(tiny_bert_dir), "the [MASK] of the [MASK] .",
                           "--top-k", "3", "--json")
    assert code == 0
    result = json.loads(out)
    assert len(result) == 2 and all(len(m) == 3 for m in result)
    assert set(result[0][0]) == {"token", "token_id", "score"}
    assert result[0][0]["score"] >= result[0][1]["score"] >= result[0][2]["score"]
    code, out, _ = run_cli(capsys, "mlm-recipe", str(tiny_bert_dir), "the man walked along the river .",
                           "--seed", "2", "--json")
    assert code == 0
    recipe = json.loads(out)
    assert recipe["positions"] and 0 <= recipe["accuracy"] <= 1 and recipe["mean_loss"] > 0
    code, out, _ = run_cli(capsys, "nsp", str(tiny_bert_dir), "the man walked .", "he sat .", "--json")
    assert code == 0
    nsp = json.loads(out)
    assert abs(nsp["is_next"] + nsp["not_next"] - 1) < 1e-6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fill-mask", "{tiny}", "no mask here"], "no mask"),
        (["fill-mask", "{encoder}", "the [MASK]"], "no masked-LM head"),
        (["nsp", "{encoder}", "a", "b"], "no next-sentence head"),
        (["mlm-recipe", "{tiny}", "the man", "--mask-rate", "0.9", "--random-rate", "0.5"], "add up"),
    ],
)
def test_masked_bad_input(capsys, tiny_bert_dir, tiny_encoder_dir, argv, message):
    argv = [a.format(tiny=tiny_bert_dir, encoder=tiny_encoder_dir) for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_help_of_the_top_level_and_of_every_command(capsys):
    """`python -m bertscope --help` crashed on the % in mlm-recipe's help while every subcommand's
    own --help worked: each is run here, the top level first."""
    from bertscope.cli import COMMANDS

    for argv in (["--help"], *([name, "--help"] for name in COMMANDS)):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0, argv
        out = capsys.readouterr().out
        assert out.startswith("usage: bertscope"), argv
    assert "15% / 80-10-10" in main.__globals__["build_parser"]().format_help()


def test_every_entry_point_answers(tmp_path):
    """The ways a user starts BertScope from a shell: `python -m bertscope` (help and a bad call),
    the headless probe scripts, and the three commands the Makefile and Dockerfile use."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, code in ((["-m", "bertscope", "--help"], 0), (["-m", "bertscope"], 2),
                       (["-m", "bertscope", "pretrain", "--help"], 0), (["-m", "bertscope", "corpus", "--help"], 0),
                       (["-m", "bertscope", "assets", "--help"], 0), (["-m", "bertscope", "corpus", "remove"], 2),
                       (["-m", "probes.layerwise", "--help"], 0), (["-m", "probes.sweep", "--help"], 0)):
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == code, (argv, done.stderr[-500:])
        assert "Traceback" not in done.stderr, argv


def test_a_long_input_is_cut_without_transformers_misleading_warning(tiny_bert_dir):
    """The text is truncated correctly, so "Running this sequence through the model will result in
    indexing errors" must not be printed; BertScope's own one-line warning says what was cut."""
    text = " ".join(["the bank of the river ."] * 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bertscope", "inspect", str(tiny_bert_dir), text, "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "indexing errors" not in done.stderr and "longer than" not in done.stderr
    assert "only the first 40" in json.loads(done.stdout)["warnings"][0]


def test_similarity_search_and_embed_from_the_command_line(tiny_bert_dir, tmp_path, capsys):
    from bertscope.cli import main

    assert main(["similarity", str(tiny_bert_dir), "--a", "the dog ate", "--b", "a man is eating", "--steps", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "method", "score", "baseline_score", "a_tokens", "b_tokens", "pairs", "a_scores", "b_scores",
            "error"} <= set(out)
    assert len(out["pairs"]) == len(out["a_tokens"]) and len(out["pairs"][0]) == len(out["b_tokens"])
    docs = tmp_path / "docs.txt"
    docs.write_text("the dog ate the bread .\nthe bank of the river .\na man is eating food .\n")
    assert main(["search", str(tiny_bert_dir), "--data", str(docs), "--query", "the river", "--top-k", "2",
                 "--explain", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["documents"] == 3 and [r["rank"] for r in found["results"]] == [1, 2]
    assert found["results"][0]["why"]["method"] == "first-order"
    assert main(["embed", str(tiny_bert_dir), "a dog", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["vectors"][0]) == 32
    for argv, said in ((["similarity", str(tiny_bert_dir), "--a", " ", "--b", "x"], "Text 1 is empty"),
                       (["search", str(tiny_bert_dir), "--corpus", "nowhere", "--query", "x"], "No corpus 'nowhere'"),
                       (["search", str(tiny_bert_dir), "--query", " "], "--query is empty"),
                       (["retrieval-eval", str(tiny_bert_dir), "--corpus", "brown"], "reads SQuAD"),
                       (["search", str(tiny_bert_dir), "--data", str(docs), "--query", "x", "--index", "hnsw"],
                        "buys nothing"),
                       (["rerank", str(tiny_bert_dir), "--query", "x", "--passages", "y"], "is not a reranker")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1


def test_sparse_and_maxsim_from_the_command_line(tiny_mlm_dir, tiny_encoder_dir, capsys):
    from bertscope.cli import main

    assert main(["sparse", str(tiny_mlm_dir), "--a", "the dog ate", "--b", "a dog ate the bread .", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "method", "score", "terms", "a_top", "b_top", "pairs", "a_tokens", "b_tokens", "error"} <= set(out)
    assert sum(t["share"] for t in out["terms"]) == pytest.approx(out["score"], rel=1e-9)
    assert main(["sparse", str(tiny_mlm_dir), "--a", "the dog ate", "--b", "a dog", "--top", "3"]) == 0
    said = capsys.readouterr().out
    assert "strongest shared terms" in said and "not trained for retrieval" in said
    assert main(["maxsim", str(tiny_encoder_dir), "--query", "the dog ate", "--passage", "a dog ate .", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "token vectors" and out["score"] == pytest.approx(sum(out["contributions"]))
    for argv, said in ((["sparse", str(tiny_encoder_dir), "--a", "x", "--b", "y"], "has no masked-LM head"),
                       (["sparse", str(tiny_mlm_dir), "--a", "x", "--b", " "], "text b is empty"),
                       (["maxsim", str(tiny_encoder_dir), "--query", "the", "--passage", ". ,"], "is left out")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1


def test_rerank_from_the_command_line(capsys, tmp_path):
    from bertscope.cli import main

    assert main(["rerank", "bundled-reranker", "--query", "Where was Super Bowl 50 played?", "--passages",
                 "The Broncos won the game 24-10.", "Super Bowl 50 was played at Levi's Stadium in Santa Clara.",
                 "--explain", "--steps", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"][0]["text"].startswith("Super Bowl 50 was played") and out["results"][0]["rank"] == 1
    why = out["why"]
    assert len(why["ig"]["tokens"]) == len(why["ig"]["scores"]) and why["interactions"]["method"] == "archdetect"
    assert main(["search", "bundled", "--data", str(_docs(tmp_path)), "--query", "Where was Super Bowl 50 played?",
                 "--rerank", "bundled-reranker", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["reranker"] == "bundled-reranker" and found["index"] == "exact"
    assert found["results"][0]["text"].startswith("Super Bowl 50 was played")


def _docs(tmp_path):
    file = tmp_path / "games.txt"
    file.write_text("The Broncos won the game 24-10.\nSuper Bowl 50 was played at Levi's Stadium in Santa Clara.\n"
                    "The halftime show featured Coldplay.\n")
    return file
