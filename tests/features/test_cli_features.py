"""``train-sae`` and ``features`` from a shell: JSON, the SAELens folders, one-line errors (exit 2)."""

import json

import pytest

from bertscope.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_train_then_read_features(capsys, tmp_path, tiny_mlm_dir):
    out = tmp_path / "saes"
    code, stdout, err = run_cli(capsys, "train-sae", tiny_mlm_dir, "--layers", "1", "--tokens", 600, "--held-out", 12,
                                "--expansion", 2, "--k", 4, "--epochs", 1, "--batch-tokens", 64, "--lr-decay", 0.1,
                                "--out", out, "--json")
    assert code == 0, err
    report = json.loads(stdout)
    (layer,) = report["layers"]
    assert layer["layer"] == 1 and layer["hook_name"] == "blocks.1.hook_resid_post" and layer["trained_tokens"] == 600
    assert 0 <= layer["dead_share"] <= 1 and layer["l0"] <= 4 and layer["positions"] > 0
    assert {"fve", "recovered", "recovered_context", "loss_intact", "loss_sae", "loss_mean"} <= set(layer)
    assert (out / "layer_01" / "cfg.json").is_file() and (out / "layer_01" / "sae_weights.safetensors").is_file()
    assert json.loads((out / "layer_01" / "quality.json").read_text())["layer"] == 1
    sources = ["brown", "ewt", "tweets", "bbc", "squad"]  # every installed corpus, the mixture's default
    assert report["corpus"] == f"mixture of {', '.join(sources)}" and report["missing_sources"] == []
    assert list(layer["domains"]) == sources and list(layer["tokens_by_source"]) == sources
    assert sum(layer["tokens_by_source"].values()) == 600 and min(layer["tokens_by_source"].values()) > 0
    assert sum(d["tokens"] for d in layer["domains"].values()) == layer["tokens"]
    assert all(d["positions"] > 0 and d["l0"] <= 4 for d in layer["domains"].values())
    facts = json.loads((out / "layer_01" / "cfg.json").read_text())["metadata"]["bertscope"]
    assert facts["tokens_by_source"] == layer["tokens_by_source"] and facts["lr_decay"] == 0.1
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


def test_brown_alone_and_the_table(capsys, tmp_path, tiny_mlm_dir):
    code, stdout, err = run_cli(capsys, "train-sae", tiny_mlm_dir, "--layers", "0", "--tokens", 300, "--held-out", 8,
                                "--corpus", "brown", "--expansion", 2, "--k", 4, "--epochs", 1, "--batch-tokens", 64,
                                "--out", tmp_path / "saes")
    assert code == 0, err
    lines = stdout.splitlines()
    assert "trained on the brown (training documents)" in lines[0]
    assert lines[2].split()[:2] == ["0", lines[3].split()[1]] and lines[3].split()[0] == "brown"  # one source
    assert "trained on 300 word pieces (brown 300)" in stdout


def test_bad_input_is_one_line(capsys, tmp_path, tiny_mlm_dir):
    (tmp_path / "a-file").write_text("kept")
    for argv, said in (
        (["train-sae", tiny_mlm_dir, "--layers", "5", "--out", tmp_path], "Layer 5 does not exist"),
        (["train-sae", tiny_mlm_dir, "--out", tmp_path / "a-file"], "is a file"),
        (["train-sae", tiny_mlm_dir, "--expansion", "2", "--k", "64", "--out", tmp_path], "k must be between 1 and 63"),
        (["features", tiny_mlm_dir, "--sae", tmp_path, "--layer", "0", "--text", "x"], "holds no SAE"),
    ):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_a_feature_over_brown_search_and_the_corpus_pass(capsys, tiny_mlm_dir, tiny_saes_dir):
    common = ["--sae", tiny_saes_dir, "--layer", 1, "--corpus", "brown", "--sentences", 200]
    code, stdout, err = run_cli(capsys, "features", tiny_mlm_dir, *common, "--feature", 3, "--contexts", 4, "--json")
    assert code == 0, err
    one = json.loads(stdout)
    assert one["corpus"] == {"name": "brown-200", "sentences": 200, "word_pieces": one["corpus"]["word_pieces"]}
    assert 0 <= one["firing_rate"] <= 1 and set(one["labels"]) == {"universal", "brown"}
    assert len(one["histogram"]["edges"]) == len(one["histogram"]["counts"]) + 1
    assert sum(one["histogram"]["counts"]) == one["fires"]
    assert len(one["contexts"]) <= 4 and all(c["tokens"] for c in one["contexts"])
    code, stdout, err = run_cli(capsys, "features", tiny_mlm_dir, *common, "--tag", "NOUN", "--top", 3, "--json")
    assert code == 0, err
    found = json.loads(stdout)
    assert found["tagset"] == "universal" and len(found["features"]) <= 3
    assert all({"feature", "precision", "recall", "f1", "firing_rate"} <= set(f) for f in found["features"])
    code, stdout, err = run_cli(capsys, "features", tiny_mlm_dir, "--sae", tiny_saes_dir, "--layer", 0, "--token",
                                "bank", "--top", 4, "--json")
    assert code == 0, err
    assert [f["logit_change"] for f in json.loads(stdout)["features"]] == sorted(
        [f["logit_change"] for f in json.loads(stdout)["features"]], reverse=True)
    code, stdout, err = run_cli(capsys, "feature-stats", tiny_mlm_dir, "--sae", tiny_saes_dir, "--sentences", 200,
                                "--json")
    assert code == 0, err
    report = json.loads(stdout)
    assert [r["layer"] for r in report["layers"]] == [0, 1] and report["corpus"] == "brown-200"
    code, _, err = run_cli(capsys, "features", tiny_mlm_dir, *common, "--tag", "NOPE")
    assert code == 2 and "No tag 'NOPE' in universal" in err
    code, _, err = run_cli(capsys, "features", tiny_mlm_dir, "--layer", 0, "--text", "x")
    assert code == 2 and "ships no SAEs" in err


def test_ablate_switches_features_off_and_steers(capsys, tiny_mlm_dir, tiny_saes_dir):
    base = ["ablate", tiny_mlm_dir, "the man walked to the [MASK] .", "--sae", tiny_saes_dir, "--json"]
    code, stdout, err = run_cli(capsys, *base, "--features", "1:3,0:5")
    assert code == 0, err
    out = json.loads(stdout)
    assert out["features"] == [{"layer": 1, "feature": 3, "mode": "remove"}, {"layer": 0, "feature": 5, "mode": "remove"}]
    assert len(out["masks"]) == 1 and out["masks"][0]["before"]
    code, stdout, err = run_cli(capsys, *base, "--features", "1:3", "--steer", 40, "--steer-at", "all")
    assert code == 0, err
    out = json.loads(stdout)
    assert out["features"][0] == {"layer": 1, "feature": 3, "mode": "steer", "strength": 40.0, "at": "all"}
    assert out["masks"][0]["before"] != out["masks"][0]["after"]
    for extra, said in ((["--features", "1:64"], "Feature 64 does not exist"),
                        (["--features", "1:3", "--heads", "0:0"], "Give --heads"),
                        (["--features", "4:1"], "Layer 4 does not exist"),
                        (["--features", "1:3", "--mode", "mean"], "--mode and --reference are for heads")):
        code, _, err = run_cli(capsys, *base, *extra)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, (extra, err)


def test_patch_features_json(capsys, tiny_mlm_dir, tiny_saes_dir):
    base = ["patch", tiny_mlm_dir, "--clean", "the man walked to the [MASK] .", "--corrupt",
            "the dog walked to the [MASK] .", "--target", "bank,river", "--sae", tiny_saes_dir]
    code, stdout, err = run_cli(capsys, *base, "--features", 1, "--top", 5, "--json")
    assert code == 0, err
    out = json.loads(stdout)
    assert out["hook"] == "blocks.1.hook_resid_post" and [w["position"] for w in out["whole_state"]] == [2, 6]
    assert len(out["features"]) <= 5 and all({"position", "feature", "clean", "corrupt", "recovered"} <= set(f)
                                             for f in out["features"])
    code, stdout, _ = run_cli(capsys, *base, "--features", 1)
    assert code == 0 and "patched one at a time" in stdout.splitlines()[0]
    code, _, err = run_cli(capsys, *base, "--features", 1, "--what", "heads")
    assert code == 2 and "leave out --what" in err


def test_train_transcoders_from_a_shell(capsys, tmp_path, tiny_mlm_dir):
    out = tmp_path / "tcs"
    code, stdout, err = run_cli(capsys, "train-transcoders", tiny_mlm_dir, "--skip", "--tokens", 600, "--held-out", 6,
                                "--expansion", 2, "--k", 4, "--epochs", 1, "--batch-tokens", 64, "--out", out, "--json")
    assert code == 0, err
    report = json.loads(stdout)
    assert [q["layer"] for q in report["layers"]] == [0, 1] and report["skip"] is True
    for q in report["layers"]:
        assert q["trained_tokens"] == 600 and q["l0"] <= 4 and 0 <= q["dead_share"] <= 1 and q["fve"] <= 1
        assert list(q["domains"]) == ["brown", "ewt", "tweets", "bbc", "squad"]
    r = report["replacement"]
    assert r["positions"] > 0 and 0 <= r["top1_agreement"] <= 1 and r["kl"] >= 0
    assert (out / "layer_0.safetensors").is_file() and (out / "layer_1.safetensors").is_file()
    assert json.loads((out / "quality.json").read_text())["replacement"] == r
    code, _, err = run_cli(capsys, "train-transcoders", tiny_mlm_dir, "--layers", "7", "--out", out)
    assert code == 2 and "Layer 7 does not exist" in err and err.count("\n") == 1
    weighed = tmp_path / "weighed"
    code, stdout, err = run_cli(capsys, "train-transcoders", tiny_mlm_dir, "--skip", "--masked", "--chosen-weight", 5,
                                "--layers", "1", "--tokens", 600, "--held-out", 6, "--expansion", 2, "--k", 4,
                                "--epochs", 1, "--batch-tokens", 64, "--lr-decay", 0.2, "--resample-every", 2,
                                "--standardise", "--lr", 2e-3, "--out", weighed, "--json")
    assert code == 0, err
    assert json.loads(stdout)["config"]["lr"] == 2e-3  # the rate given, not the width's default
    from bertscope.features.transcoder import load_transcoder
    extra = load_transcoder(weighed, 1).info.extra
    assert (extra["chosen_weight"], extra["lr_decay"], extra["resample_every"], extra["standardise"]) == (5.0, 0.2, 2,
                                                                                                         True)
    assert not {"lr_decay", "resample_every", "standardise"} & set(load_transcoder(out, 1).info.extra)  # defaults
    for argv, said in ((["--chosen-weight", "5"], "it needs --masked"),
                       (["--masked", "--chosen-weight", "0.5"], "between 1 and 1,000"),
                       (["--masked", "--chosen-weight", "2000"], "between 1 and 1,000"),
                       (["--lr-decay", "2"], "a share of the steps"),
                       (["--lr", "0"], "Adam's rate is above 0"),
                       (["--layers", ","], "names no layer"),
                       (["--lr", "3"], "Adam's rate is above 0"),
                       (["--resample-every", "-3"], "restart every N steps"),
                       (["--resample-every", "900", "--tokens", "600", "--batch-tokens", "64"], "never restart one")):
        code, _, err = run_cli(capsys, "train-transcoders", tiny_mlm_dir, *argv, "--out", tmp_path / "no")
        assert code == 2 and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "no").exists()


def test_tune_transcoders_from_a_shell(capsys, tmp_path, tiny_mlm_dir, monkeypatch):
    """A trained set tuned end to end into another folder: its figures before and after, and the set it started
    from left as it was."""
    trained, tuned = tmp_path / "tcs", tmp_path / "tuned"
    code, stdout, err = run_cli(capsys, "train-transcoders", tiny_mlm_dir, "--skip", "--tokens", 600, "--held-out", 6,
                                "--expansion", 2, "--k", 4, "--epochs", 1, "--batch-tokens", 64, "--seed", 3, "--out",
                                trained, "--json")
    assert code == 0, err
    trained_report = json.loads(stdout)
    first = (trained / "layer_0.safetensors").read_bytes()
    code, stdout, err = run_cli(capsys, "score-transcoders", tiny_mlm_dir, "--transcoders", trained, "--held-out", 6,
                                "--json")
    assert code == 0, err
    scored = json.loads(stdout)  # the same held-out side (the set's seed, 3) and masked positions as the training
    assert scored["replacement"] == pytest.approx(trained_report["replacement"])  # run's own figures
    assert [q["fve"] for q in scored["layers"]] == pytest.approx([q["fve"] for q in trained_report["layers"]])
    assert (scored["held_out_seed"], scored["seed"]) == (3, 3)
    code, stdout, err = run_cli(capsys, "score-transcoders", tiny_mlm_dir, "--transcoders", trained, "--held-out", 6,
                                "--seed", 0, "--json")
    assert code == 0, err
    other = json.loads(stdout)  # another seed masks other positions of the same held-out texts
    assert (other["held_out_seed"], other["seed"]) == (3, 0)
    assert other["replacement"] != scored["replacement"]  # the held-out side's other masked positions
    assert [q["fve"] for q in other["layers"]] == pytest.approx([q["fve"] for q in scored["layers"]])
    code, stdout, _ = run_cli(capsys, "score-transcoders", tiny_mlm_dir, "--transcoders", trained, "--held-out", 6,
                              "--each-layer")
    assert code == 0 and "top-1 agreement" in stdout and "  squad" in stdout
    assert "layer 0 alone replaced" in stdout and "layer 1 alone replaced" in stdout
    code, _, err = run_cli(capsys, "score-transcoders", tiny_mlm_dir, "--held-out", 6)
    assert code == 2 and "No transcoders are shipped" in err and err.count("\n") == 1
    code, stdout, err = run_cli(capsys, "tune-transcoders", tiny_mlm_dir, "--transcoders", trained, "--steps", 20,
                                "--batch-size", 4, "--lr", 1e-3, "--tokens", 600, "--held-out", 6, "--seed", 5,
                                "--out", tuned, "--json")
    assert code == 0, err
    report = json.loads(stdout)  # seed 5 masks the training text; the held-out side stays the set's
    assert (report["held_out_seed"], report["end_to_end"]["seed"]) == (3, 5)
    assert report["replacement_before"] == pytest.approx(trained_report["replacement"])
    assert [q["layer"] for q in report["layers"]] == [0, 1] and report["end_to_end"]["steps"] == 20
    assert [q["fve"] for q in report["layers_before"]] == pytest.approx([q["fve"] for q in scored["layers"]])
    assert list(report["layers"][0]["domains"]) == ["brown", "ewt", "tweets", "bbc", "squad"]
    assert report["history"][-1]["step"] == 20
    assert report["replacement"]["kl"] < report["replacement_before"]["kl"]
    assert report["replacement"]["positions"] == report["replacement_before"]["positions"] > 0
    assert (trained / "layer_0.safetensors").read_bytes() == first  # the set it started from is kept
    assert json.loads((tuned / "quality.json").read_text())["replacement"] == report["replacement"]
    code, stdout, err = run_cli(capsys, "tune-transcoders", tiny_mlm_dir, "--transcoders", trained, "--steps", 1,
                                "--tokens", 600, "--held-out", 6, "--out", tuned)
    assert code == 0 and "top-1 agreement" in stdout, err
    code, _, err = run_cli(capsys, "tune-transcoders", tiny_mlm_dir, "--transcoders", tuned, "--steps", 2,
                           "--tokens", 600, "--held-out", 6, "--parts", "skip", "--out", tmp_path / "tuned-again")
    assert code == 0, err
    from bertscope.features.transcoder import load_transcoder

    runs = load_transcoder(tmp_path / "tuned-again", 1).info.extra["end_to_end_runs"]  # a tuned set tuned again
    assert [r["steps"] for r in runs] == [1, 2] and all(r["history"] for r in runs)
    assert [r["parts"] for r in runs] == ["all", "skip"]
    from bertscope.core.models import load_model
    from bertscope.features.shipped import SHIPPED_TRANSCODERS

    monkeypatch.setitem(SHIPPED_TRANSCODERS, load_model(str(tiny_mlm_dir)).name, trained)  # as if shipped
    code, _, err = run_cli(capsys, "tune-transcoders", tiny_mlm_dir, "--out", trained)
    assert code == 2 and "the folder the transcoders are read from" in err, err
    for bad, message in ((("--out", trained), "the folder the transcoders are read from"),
                         (("--steps", 0, "--out", tuned), "at least 1"),
                         (("--parts", "decoders", "--out", tuned), "--parts is one of all, writes, skip"),
                         (("--out", trained / "layer_0.safetensors"), "is a file")):
        code, _, err = run_cli(capsys, "tune-transcoders", tiny_mlm_dir, "--transcoders", trained, *bad)
        assert code == 2 and message in err and err.count("\n") == 1, err


def test_refit_transcoders_from_a_shell(capsys, tmp_path, tiny_mlm_dir):
    """A trained set's writes refitted into another folder: every encoder as trained, the figures before and after,
    the set it started from left as it was; bad input one line."""
    import torch

    from bertscope.features.transcoder import load_transcoder

    trained, refit = tmp_path / "tcs", tmp_path / "refit"
    code, stdout, err = run_cli(capsys, "train-transcoders", tiny_mlm_dir, "--skip", "--masked", "--tokens", 600,
                                "--held-out", 6, "--expansion", 2, "--k", 4, "--epochs", 1, "--batch-tokens", 64,
                                "--seed", 2, "--out", trained, "--json")
    assert code == 0, err
    trained_report = json.loads(stdout)
    first = (trained / "layer_0.safetensors").read_bytes()
    code, stdout, err = run_cli(capsys, "refit-transcoders", tiny_mlm_dir, "--transcoders", trained, "--tokens", 600,
                                "--held-out", 6, "--seed", 7, "--out", refit, "--json")
    assert code == 0, err
    report = json.loads(stdout)  # seed 7 masks the training text; the held-out side and its positions the set's
    assert (report["held_out_seed"], report["seed"]) == (2, 7)
    assert report["replacement_before"] == pytest.approx(trained_report["replacement"])
    assert report["masked"] is True and [q["layer"] for q in report["layers"]] == [0, 1]
    assert report["replacement"]["positions"] == report["replacement_before"]["positions"] > 0
    assert (trained / "layer_0.safetensors").read_bytes() == first
    for layer in (0, 1):
        before, after = load_transcoder(trained, layer), load_transcoder(refit, layer)
        assert torch.equal(before.W_enc, after.W_enc) and torch.equal(before.b_enc, after.b_enc)
        assert not torch.equal(before.W_dec, after.W_dec)
        assert after.info.extra["refit"]["rows"] > 0
    assert json.loads((refit / "quality.json").read_text())["replacement"] == report["replacement"]
    unweighted = load_transcoder(refit, 1).W_dec.clone()
    code, stdout, err = run_cli(capsys, "refit-transcoders", tiny_mlm_dir, "--transcoders", trained, "--tokens", 600,
                                "--held-out", 6, "--out", refit, "--chosen-weight", 4)
    assert code == 0 and "refitted by least squares" in stdout and "top-1 agreement" in stdout, err
    assert "chosen for prediction weighing 4" in stdout
    weighed = load_transcoder(refit, 1)
    assert weighed.info.extra["refit"]["chosen_weight"] == 4 and not torch.equal(weighed.W_dec, unweighted)
    for bad, message in ((("--out", trained), "the folder the transcoders are read from"),
                         (("--chosen-weight", 0.5, "--out", refit), "between 1 and 1,000"),
                         (("--tokens", 0, "--out", refit), "at least 1"),
                         (("--out", trained / "layer_0.safetensors"), "is a file")):
        code, _, err = run_cli(capsys, "refit-transcoders", tiny_mlm_dir, "--transcoders", trained, *bad)
        assert code == 2 and message in err and err.count("\n") == 1, err
    code, _, err = run_cli(capsys, "refit-transcoders", tiny_mlm_dir, "--transcoders", tmp_path / "none", "--out",
                           refit)
    assert code == 2 and "is not a folder" in err and err.count("\n") == 1, err
