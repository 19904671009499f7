"""``train-sae`` and ``features`` from a shell: JSON, the SAELens folders, one-line errors (exit 2)."""

import json

from bertscope.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_train_then_read_features(capsys, tmp_path, tiny_mlm_dir):
    out = tmp_path / "saes"
    code, stdout, err = run_cli(capsys, "train-sae", tiny_mlm_dir, "--layers", "1", "--tokens", 600, "--held-out", 12,
                                "--expansion", 2, "--k", 4, "--epochs", 1, "--batch-tokens", 64, "--out", out, "--json")
    assert code == 0, err
    report = json.loads(stdout)
    (layer,) = report["layers"]
    assert layer["layer"] == 1 and layer["hook_name"] == "blocks.1.hook_resid_post" and layer["trained_tokens"] == 600
    assert 0 <= layer["dead_share"] <= 1 and layer["l0"] <= 4 and layer["positions"] > 0
    assert {"fve", "recovered", "recovered_context", "loss_intact", "loss_sae", "loss_mean"} <= set(layer)
    assert (out / "layer_01" / "cfg.json").is_file() and (out / "layer_01" / "sae_weights.safetensors").is_file()
    assert json.loads((out / "layer_01" / "quality.json").read_text())["layer"] == 1
    code, stdout, err = run_cli(capsys, "features", tiny_mlm_dir, "--sae", out, "--layer", 1, "--text",
                                "the bank of the river", "--json")
    assert code == 0, err
    found = json.loads(stdout)
    assert found["sae"]["hook"] == "blocks.1.hook_resid_post" and found["sae"]["d_sae"] == 64
    assert found["sae"]["path"] == str((out / "layer_01").resolve())
    assert found["tokens"][0]["token"] == "[CLS]" and all(len(t["features"]) <= 4 for t in found["tokens"])
    code, stdout, _ = run_cli(capsys, "features", tiny_mlm_dir, "--sae", out, "--layer", 1, "--text", "the bank")
    assert code == 0 and "blocks.1.hook_resid_post" in stdout.splitlines()[0]
    code, stdout, err = run_cli(capsys, "features", tiny_mlm_dir, "--sae", out, "--layer", 1, "--feature", 5, "--json")
    assert code == 0, err
    one = json.loads(stdout)
    assert one["feature"] == 5 and len(one["nearest"]) == 5 and 5 not in [n["feature"] for n in one["nearest"]]
    assert len(one["logit_weights"]["promoted"]) == 5 and len(one["logit_weights"]["suppressed"]) == 5
    code, _, err = run_cli(capsys, "features", tiny_mlm_dir, "--sae", out, "--layer", 1, "--feature", 64)
    assert code == 2 and "Feature 64 does not exist" in err
    code, _, err = run_cli(capsys, "features", tiny_mlm_dir, "--sae", out, "--layer", 1)
    assert code == 2 and "--text" in err and "--feature" in err


def test_bad_input_is_one_line(capsys, tmp_path, tiny_mlm_dir):
    for argv, said in (
        (["train-sae", tiny_mlm_dir, "--layers", "5", "--out", tmp_path], "Layer 5 does not exist"),
        (["train-sae", tiny_mlm_dir, "--expansion", "2", "--k", "64", "--out", tmp_path], "k must be between 1 and 63"),
        (["features", tiny_mlm_dir, "--sae", tmp_path, "--layer", "0", "--text", "x"], "is not an SAE folder"),
    ):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, (argv, err)
