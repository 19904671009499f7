"""``bertscope crosscoder``: a base and a model "fine-tuned" from it (its last layer's weights moved), the mixture
of installed corpora through both, the table and the JSON, and every bad input in one line with exit 2."""

from __future__ import annotations

import json

import pytest
import torch

from bertscope.features.crosscoder import load_crosscoder
from tests.cli.test_cli import run_cli
from tests.conftest import bert_tokenizer, save_model


@pytest.fixture(scope="module")
def tuned_dir(tiny_mlm_dir, tmp_path_factory):
    from transformers import BertForMaskedLM

    torch.manual_seed(3)
    model = BertForMaskedLM.from_pretrained(tiny_mlm_dir)
    with torch.no_grad():
        for p in model.bert.encoder.layer[-1].parameters():
            p.add_(0.2 * torch.randn_like(p))
    return save_model(model, bert_tokenizer(), tmp_path_factory.mktemp("tiny-tuned"))


def test_crosscoder_json_and_the_table(capsys, tiny_mlm_dir, tuned_dir, tmp_path):
    args = ["crosscoder", str(tiny_mlm_dir), "--tuned", str(tuned_dir), "--per-source", "40", "--held-out", "10",
            "--tokens", "2048", "--batch-tokens", "256", "--expansion", "2", "--k", "4", "--epochs", "2"]
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "cc"), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["layer"] == 1 and data["hook_name"] == "blocks.1.hook_resid_post" and data["d_sae"] == 64
    assert sum(v for k, v in data["counts"].items() if k in data["classes"]) == 64
    assert all(-1 < data["fve"][side] <= 1 for side in ("base", "tuned")) and data["l0"] > 0  # 2 short epochs
    cc = load_crosscoder(tmp_path / "cc")
    assert cc.info.hook_name == "blocks.1.hook_resid_post" and float(cc.threshold) > 0
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "cc2"))
    assert code == 0, err
    assert out.startswith("BatchTopK crosscoder,") and "fine-tuned-only that Latent Scaling keeps" in out


@pytest.mark.parametrize("extra, message", [
    (["--layer", "7"], "Layer 7 does not exist"),
    (["--k", "0"], "k must be between"),
    (["--lr", "0"], "--lr must be above 0"),
    (["--tokens", "10"], "--tokens must hold one batch"),
    (["--seed", "-1"], "--seed and --top take a number from 0"),
])
def test_bad_input_is_one_line(capsys, tiny_mlm_dir, tuned_dir, tmp_path, extra, message):
    code, out, err = run_cli(capsys, "crosscoder", str(tiny_mlm_dir), "--tuned", str(tuned_dir), "--out",
                             str(tmp_path / "cc"), *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_an_out_that_is_a_file_is_refused_before_any_work(capsys, tiny_mlm_dir, tuned_dir, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "crosscoder", str(tiny_mlm_dir), "--tuned", str(tuned_dir), "--out",
                           str(tmp_path / "file"))
    assert code == 2 and "is a file" in err


def test_two_models_that_split_text_differently_are_refused(capsys, tiny_mlm_dir, tiny_roberta_dir, tmp_path):
    code, _, err = run_cli(capsys, "crosscoder", str(tiny_mlm_dir), "--tuned", str(tiny_roberta_dir), "--out",
                           str(tmp_path / "cc"))
    assert code == 2 and "split text differently" in err
