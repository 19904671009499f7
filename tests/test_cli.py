"""``python -m bertscope``: JSON output and one error style (one stderr line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bertscope.cli import main

from .conftest import ROOT


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_json(capsys, tiny_bert_dir):
    code, out, err = run_cli(capsys, "info", str(tiny_bert_dir), "--json")
    assert code == 0 and err == ""
    card = json.loads(out)
    assert card["layers"] == 2 and card["heads"] == 4 and card["hidden_size"] == 32
    assert card["heads_present"] == ["mlm", "nsp"]
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
        (["info", "{tiny}", "--dtype", "float16"], "needs a GPU"),
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
