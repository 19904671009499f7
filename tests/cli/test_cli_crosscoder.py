"""``bertscope train-crosscoder``: a base and a model "fine-tuned" from it (its last layer's weights moved), the mixture
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
    args = ["train-crosscoder", str(tiny_mlm_dir), str(tuned_dir), "--per-source", "40", "--held-out", "10",
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


def test_a_crosscoder_of_cls_reads_one_row_a_text_and_says_when_the_text_runs_short(capsys, tiny_mlm_dir, tuned_dir,
                                                                                     tmp_path):
    args = ["train-crosscoder", str(tiny_mlm_dir), str(tuned_dir), "--per-source", "40", "--held-out", "10",
            "--tokens", "100000", "--batch-tokens", "64", "--expansion", "2", "--k", "4", "--epochs", "2",
            "--positions", "cls"]
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "cc"), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["positions"] == "cls" and data["corpus_too_small"] and data["asked_tokens"] == 100_000
    assert data["trained_tokens"] == sum(data["sources"].values())  # one [CLS] a training text
    assert load_crosscoder(tmp_path / "cc").info.positions == "cls"
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "cc"))  # the same run: resumed, then read
    assert code == 0, err
    assert f"the text gave {data['trained_tokens']:,} of the 100,000 texts asked for" in out


@pytest.mark.parametrize("extra, message", [
    (["--layer", "7"], "Layer 7 does not exist"),
    (["--k", "0"], "k must be between"),
    (["--lr", "0"], "--lr must be above 0"),
    (["--tokens", "10"], "--tokens must hold one batch"),
    (["--seed", "-1"], "a seed is a whole number from 0"),
    (["--top", "-1"], "--top takes a number from 0"),
])
def test_bad_input_is_one_line(capsys, tiny_mlm_dir, tuned_dir, tmp_path, extra, message):
    try:
        code, out, err = run_cli(capsys, "train-crosscoder", str(tiny_mlm_dir), str(tuned_dir), "--out",
                                 str(tmp_path / "cc"), *extra)
    except SystemExit as exit_:  # a type's refusal, from the parser
        code, err = exit_.code, capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_an_out_that_is_a_file_is_refused_before_any_work(capsys, tiny_mlm_dir, tuned_dir, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "train-crosscoder", str(tiny_mlm_dir), str(tuned_dir), "--out",
                           str(tmp_path / "file"))
    assert code == 2 and "is a file" in err


def test_two_models_that_split_text_differently_are_refused(capsys, tiny_mlm_dir, tiny_roberta_dir, tmp_path):
    code, _, err = run_cli(capsys, "train-crosscoder", str(tiny_mlm_dir), str(tiny_roberta_dir), "--out",
                           str(tmp_path / "cc"))
    assert code == 2 and "split text differently" in err


@pytest.fixture(scope="module")
def tiny_crosscoder(tiny_mlm_dir, tuned_dir, tmp_path_factory):
    from bertscope.cli import main

    out = tmp_path_factory.mktemp("tiny-cc") / "cc"
    assert main(["train-crosscoder", str(tiny_mlm_dir), str(tuned_dir), "--per-source", "40", "--held-out", "10",
                 "--tokens", "2048", "--batch-tokens", "256", "--expansion", "2", "--k", "4", "--epochs", "1",
                 "--out", str(out), "--json"]) == 0
    return out


def test_diff_features_reads_a_trained_crosscoder_and_says_why_no_causal_check_ran(capsys, tiny_mlm_dir, tuned_dir,
                                                                                  tiny_crosscoder):
    args = ["diff-features", str(tiny_mlm_dir), str(tuned_dir), "--crosscoder", str(tiny_crosscoder), "--held-out",
            "10"]
    code, out, err = run_cli(capsys, *args, "--json", "--all-latents")
    assert code == 0, err
    data = json.loads(out)
    assert {k: data["crosscoder"][k] for k in ("path", "layer", "d_sae", "k")} == {
        "path": str(tiny_crosscoder), "layer": 1, "d_sae": 64, "k": 4}
    assert len(data["latents"]) == 64 and [r["latent"] for r in data["latents"]] == list(range(64))
    assert {r["class"] for r in data["latents"]} <= {"shared", "base", "finetuned", "other", "silent"}
    for row in data["latents"]:
        n_b, n_f = row["norm_base"], row["norm_finetuned"]
        assert row["relative_norm"] == pytest.approx(0.5 * ((n_f - n_b) / max(n_b, n_f, 1e-12) + 1), abs=1e-5)
    assert all(row["top_contexts"] == [] for row in data["latents"])  # no task text was read
    assert data["causal"] is None and "no classification or tagging head" in data["causal_note"]  # a masked LM
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "causal check: not run" in out, err


@pytest.mark.parametrize("extra, message", [
    (["--layer", "0"], "has no crosscoder for layer 0: it has layers 1"),
    (["--latents", "1,x"], "give latent numbers from 0"),
    (["--examples", "0"], "--examples takes 1 to 2,000"),
    (["--max-latents", "65"], "--max-latents takes 1 to 64"),
    (["--latents", "²"], "give latent numbers from 0"),
    (["--latents", "70"], "numbered 0 to 63"),
])
def test_diff_features_bad_input_is_one_line(capsys, tiny_mlm_dir, tuned_dir, tiny_crosscoder, extra, message):
    code, _, err = run_cli(capsys, "diff-features", str(tiny_mlm_dir), str(tuned_dir), "--crosscoder",
                           str(tiny_crosscoder), *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_diff_features_refuses_a_crosscoder_of_other_models_and_a_pair_with_none_shipped(capsys, tiny_mlm_dir,
                                                                                         tuned_dir, tiny_crosscoder):
    code, _, err = run_cli(capsys, "diff-features", str(tuned_dir), str(tiny_mlm_dir), "--crosscoder",
                           str(tiny_crosscoder))
    assert code == 2 and "was made for" in err, err
    code, _, err = run_cli(capsys, "diff-features", str(tiny_mlm_dir), str(tuned_dir))
    assert code == 2 and "No crosscoder is shipped" in err and "train-crosscoder" in err, err


def test_diff_features_on_the_shipped_upos_pair_offline(capsys):
    """The shipped crosscoder of bundled and bundled-upos, with no --crosscoder: the tagger loses accuracy when its
    fine-tuned-only latents are switched off, and far less when as many controls of matched firing are."""
    code, out, err = run_cli(capsys, "diff-features", "bundled", "bundled-upos", "--held-out", "20", "--examples", "60",
                             "--max-latents", "16", "--all-latents", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["crosscoder"]["layer"] == 5 and data["crosscoder"]["path"].endswith("bundled_upos/layer_05")
    causal = data["causal"]
    assert len(causal["finetuned_only"]["latents"]) == 16 and len(causal["control"]["latents"]) == 16
    assert not set(causal["finetuned_only"]["latents"]) & set(causal["control"]["latents"])
    listed = {row["latent"]: row for row in data["latents"]}
    assert len(listed) == 1536 and all("top_contexts" in row for row in listed.values())
    assert all(listed[j]["class"] == "finetuned" and listed[j]["top_contexts"] for j in causal["finetuned_only"]["latents"])
    assert all(listed[j]["class"] in ("shared", "other") for j in causal["control"]["latents"])  # both models write them
    before, after, control = (causal["finetuned_only"]["accuracy_before"], causal["finetuned_only"]["accuracy_after"],
                              causal["control"]["accuracy_after"])
    assert before > 0.9 and before - after > 0.02 and before - after > 2 * (before - control)
    assert causal["accuracy"]["spliced"] > 0.9  # the dictionary carries the tagger's decision


def test_diff_features_on_the_shipped_sentiment_pair_reads_its_cls_at_the_last_layer(capsys):
    """bundled-sentiment's shipped crosscoder of [CLS] at its last layer (the pair's default): its fine-tuned-only
    latents off cost the classifier accuracy and move it toward the base read; as many controls cost nothing."""
    code, out, err = run_cli(capsys, "diff-features", "bundled", "bundled-sentiment", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["crosscoder"]["layer"] == 5 and data["crosscoder"]["positions"] == "cls"
    causal = data["causal"]
    before, after, control = (causal["finetuned_only"]["accuracy_before"], causal["finetuned_only"]["accuracy_after"],
                              causal["control"]["accuracy_after"])
    assert len(causal["finetuned_only"]["latents"]) == 4 and before > 0.75
    assert before - after > 0.02 and control > after + 0.02  # 0.804 → 0.762; controls 0.812 (500 tweets)
    agree = causal["agreement_with_base"]
    assert agree["removed"] > agree["intact"] > agree["control"] - 0.02  # toward the base's predictions
