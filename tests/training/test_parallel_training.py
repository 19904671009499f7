"""BERT's recipe on N data-parallel processes through Accelerate (gloo between CPU processes):
the weights of one process, resuming on another number of processes, a failed process ending
the run with one line.

Each run here is the real command line, ``python -m bertscope pretrain … --processes 2``, which
starts ``accelerate launch`` (torchrun) on this machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertscope.cli import main
from tests.conftest import ROOT, bert_tokenizer, save_model, tiny_bert_config

pytestmark = pytest.mark.multiprocess  # starts training processes (gloo)

# 11 chunks in batches of 5: shares of 3 and 2 rows, and a last batch of one row, which leaves
# the second process nothing of it (it then takes part in the all-reduce with weight 0)
RUN = ["--seq-len", "16", "--batch-size", "5", "--max-chunks", "11", "--lora", "0", "--lr", "3e-3",
       "--device", "cpu"]
LAUNCH_LIMIT_S = 240


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny BERT without dropout (so that every process's forward is the same function) and a
    corpus of six documents."""
    from transformers import BertForMaskedLM

    folder = tmp_path_factory.mktemp("parallel")
    torch.manual_seed(5)
    model = BertForMaskedLM(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    save_model(model, bert_tokenizer(), folder / "model")
    lines = []
    for d in range(6):
        for i in range(12):
            lines.append("the man walked along the river bank with his dog ." if (i + d) % 2
                         else "she deposited the money in the bank and the cash .")
        lines.append("")
    (folder / "corpus.txt").write_text("\n".join(lines))
    return folder


def pretrain(setup: Path, out: Path, epochs: int, processes: int, env: dict | None = None,
             extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "bertscope", "pretrain", str(setup / "model"), "--corpus",
               str(setup / "corpus.txt"), "--out", str(out), "--epochs", str(epochs), *RUN,
               "--processes", str(processes), *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=LAUNCH_LIMIT_S,
                          env={**os.environ, **(env or {})})


def weights(run: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(run / "checkpoint" / "state.safetensors"))
    return {k: v for k, v in tensors.items() if k.startswith("param.")}


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def one_process(setup, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    done = pretrain(setup, out, epochs=2, processes=1)
    assert done.returncode == 0, done.stderr
    return out


def test_two_processes_end_with_the_weights_of_one(setup, one_process, tmp_path):
    out = tmp_path / "two"
    done = pretrain(setup, out, epochs=2, processes=2)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.strip().splitlines()) == 1  # one summary, from the main process
    summary = json.loads(done.stdout)
    assert summary["epochs"] == 2
    assert largest_difference(weights(out), weights(one_process)) < 1e-5
    start = {f"param.{k}": v for k, v in load_file(str(setup / "model" / "model.safetensors")).items()}
    moved = max(float((weights(out)[k] - start[k]).abs().max()) for k in weights(out) if k in start)
    assert moved > 1e-3  # it trained
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["memory"]["processes"] == 2
    # held-out scoring sharded over the two processes and gathered: the one process's figures
    alone = json.loads((one_process / "metrics.json").read_text())
    for key in ("loss", "top1", "top5", "positions"):
        assert metrics["after"]["held_out"][key] == pytest.approx(alone["after"]["held_out"][key], abs=1e-5)
    assert (out / "launch.log").stat().st_size > 0  # what every process printed, kept


def test_a_run_resumes_on_another_number_of_processes(setup, one_process, tmp_path):
    """Stopped after its first epoch on one process (as the app's Stop does), then resumed by the
    command on two: the weights of the uninterrupted run."""
    from bertscope.corpora.documents import file_documents
    from bertscope.training.config import RecipeConfig
    from bertscope.training.recipe import train

    out = tmp_path / "resumed"
    cfg = RecipeConfig(seq_len=16, batch_size=5, max_chunks=11, lora_rank=0, lr=3e-3, epochs=2)
    steps: list[int] = []
    train_docs, held_docs = file_documents(str(setup / "corpus.txt"), cfg.seed)
    state = train(str(setup / "model"), train_docs, held_docs, out, cfg, "cpu",
                  progress=lambda step, total, info: steps.append(step), stop=lambda: len(steps) == 3)
    assert state.epoch == 1
    second = pretrain(setup, out, epochs=2, processes=2)  # goes on from epoch 1 on two processes
    assert second.returncode == 0, second.stderr[-2000:]
    history = json.loads((out / "checkpoint" / "state.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    assert largest_difference(weights(out), weights(one_process)) < 1e-5


def _kill_rank_one_when_training(process: subprocess.Popen, out: Path, how: signal.Signals) -> None:
    import psutil

    deadline = time.monotonic() + LAUNCH_LIMIT_S
    while not (out / "checkpoint" / "state.json").is_file():  # an epoch finished: both are training
        assert process.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.2)
    ranks = [c for c in psutil.Process(process.pid).children(recursive=True) if c.environ().get("RANK") == "1"]
    assert len(ranks) == 1
    ranks[0].send_signal(how)


@pytest.mark.parametrize("how, timeout", [(signal.SIGKILL, "600"),
                                          pytest.param(signal.SIGSTOP, "5", marks=pytest.mark.extended)],
                         ids=["killed", "hung"])  # hung: 46 s of waiting for the all-reduce to give up
def test_a_failed_process_ends_the_run_with_one_line(setup, tmp_path, how, timeout):
    """Killed: the launcher stops the other at once. Hung (stopped): the other's all-reduce gives
    up after BERTSCOPE_DIST_TIMEOUT seconds, and the launcher then ends both."""
    out = tmp_path / "failing"
    command = [sys.executable, "-m", "bertscope", "pretrain", str(setup / "model"), "--corpus",
               str(setup / "corpus.txt"), "--out", str(out), "--epochs", "100000", *RUN, "--processes", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env={**os.environ, "BERTSCOPE_DIST_TIMEOUT": timeout})
    try:
        _kill_rank_one_when_training(process, out, how)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    assert stdout == ""
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("bertscope: error: process ")
    if how == signal.SIGKILL:
        assert "process 1 of 2 failed (killed by signal 9)" in last
    else:
        assert "process 0 of 2 failed" in last and "Timed out" in last
    assert str(out / "launch.log") in last
    assert json.loads((out / "checkpoint" / "state.json").read_text())["epoch"] >= 1  # its epochs are kept


def test_bad_input_inside_the_processes_is_one_line_with_exit_2(setup, tmp_path):
    done = pretrain(setup, tmp_path / "bad", epochs=1, processes=2, extra=("--seq-len", "400"))
    assert done.returncode == 2
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert lines == [lines[-1]] and lines[-1].startswith("bertscope: error: Chunks of 400 tokens are longer")


@pytest.mark.parametrize("processes, says", [("0", "--processes must be at least 1"),
                                             ("4096", "needs as many cores")])
def test_an_impossible_number_of_processes_is_refused_in_one_line(setup, tmp_path, capsys, processes, says):
    status = main(["pretrain", str(setup / "model"), "--corpus", str(setup / "corpus.txt"), "--out",
                   str(tmp_path / "x"), *RUN, "--processes", processes])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err


def test_fine_tuning_on_two_processes_ends_with_the_weights_of_one(setup, tmp_path):
    """The second stage runs the same loop: two processes split each batch's rows, the held-out
    confusion matrix is summed over them, and the weights are those of one process."""
    rows = [("the man walked along the river bank .", "river"), ("she deposited the money in the bank .", "money")]
    data = tmp_path / "records.csv"
    data.write_text("text,label\n" + "".join(f"{t} {'.' * (i % 3)},{label}\n" for i in range(14)
                                            for t, label in rows), encoding="utf-8")

    def finetune(out: Path, processes: int) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "bertscope", "finetune", str(setup / "model"), "--task", "classify",
                   "--data", str(data), "--out", str(out), "--epochs", "2", "--batch-size", "5", "--seq-len", "16",
                   "--full", "--lr", "3e-3", "--device", "cpu", "--processes", str(processes)]
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=LAUNCH_LIMIT_S)

    one, two = finetune(tmp_path / "one", 1), finetune(tmp_path / "two", 2)
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    assert len(two.stdout.strip().splitlines()) == 1 and json.loads(two.stdout)["epochs"] == 2
    assert largest_difference(weights(tmp_path / "two"), weights(tmp_path / "one")) < 1e-5
    a, b = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one", "two"))
    assert b["memory"]["processes"] == 2
    assert a["after"]["held_out"]["confusion"] == b["after"]["held_out"]["confusion"]
    assert a["after"]["held_out"]["loss"] == pytest.approx(b["after"]["held_out"]["loss"], abs=1e-5)
