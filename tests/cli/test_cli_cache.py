"""``bertscope cache``: the user cache's bytes kind by kind, and ``clear`` removing only what is named, only what is
old enough, never a write under way nor the installation's models and corpora."""

from __future__ import annotations

import json
import os
import time

import pytest

from bertscope.cli import main


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))
    activations = tmp_path / "features" / "activations"
    old, new, writing = activations / "old", activations / "new", activations / ".new.tmp-123-abc"
    for folder, size in ((old, 300_000), (new, 100_000), (writing, 50_000)):
        folder.mkdir(parents=True)
        (folder / "rows.npy").write_bytes(b"x" * size)
    ten_days = time.time() - 10 * 86_400
    os.utime(old, (ten_days, ten_days))
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "states.npy").write_bytes(b"y" * 20_000)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "weights").write_bytes(b"z" * 70_000)
    return tmp_path


def _run(capsys, *argv):
    code = main(["cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_listing_counts_each_kinds_bytes_and_names_the_installation_apart(cache, capsys):
    code, out, err = _run(capsys, "--json")
    assert code == 0 and err == ""
    found = json.loads(out)
    kinds = {k["kind"]: k for k in found["kinds"]}
    assert kinds["activations"]["entries"] == 3 and kinds["activations"]["bytes"] >= 450_000
    assert kinds["hidden"]["entries"] == 1 and kinds["training"]["entries"] == 0
    assert [i["folder"] for i in found["installed"]] == ["models"]
    assert found["bytes"] == sum(k["bytes"] for k in found["kinds"]) + found["installed"][0]["bytes"]
    code, out, _ = _run(capsys)
    assert code == 0 and "activations" in out and "installed (not cleared here)" in out


def test_clear_removes_only_the_kinds_named_and_only_what_is_old_enough(cache, capsys):
    activations = cache / "features" / "activations"
    code, out, _ = _run(capsys, "clear", "activations", "--older-than", "5", "--dry-run")
    assert code == 0 and out.startswith("would remove 1 entries")
    assert (activations / "old").is_dir()  # a dry run removes nothing
    code, out, _ = _run(capsys, "clear", "activations", "--older-than", "5", "--json")
    assert code == 0 and json.loads(out)["removed"] == [str(activations / "old")]
    assert sorted(p.name for p in activations.iterdir()) == [".new.tmp-123-abc", "new"]
    code, out, _ = _run(capsys, "clear", "all")
    assert code == 0 and out.startswith("removed 2 entries")  # new and hidden's file
    assert [p.name for p in activations.iterdir()] == [".new.tmp-123-abc"]  # a write under way stays
    assert (cache / "models" / "weights").is_file()


@pytest.mark.parametrize("argv, message", [
    (["clear"], "Name what to remove: hidden, align"),
    (["clear", "models"], "are the installation's, not a cache"),
    (["clear", "activatoins"], "No cached kind 'activatoins'"),
    (["clear", "hidden", "--older-than", "-1"], "give days, 0 or more"),
    (["list", "nothing"], "No cached kind 'nothing'"),
])
def test_a_bad_request_is_one_line_and_status_2_and_removes_nothing(cache, capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
    assert (cache / "features" / "activations" / "old").is_dir() and (cache / "hidden" / "states.npy").is_file()
