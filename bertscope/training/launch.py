"""``pretrain --processes N``: the same command started as N data-parallel processes by
Accelerate's launcher (``accelerate launch --multi_gpu --num_processes N -m bertscope pretrain …``;
torchrun underneath: gloo between CPU processes, NCCL between GPUs, one GPU a process).

What the user sees is what one process shows: the main process's progress bar on stderr and its
JSON summary on stdout. Everything the processes and the launcher print goes whole into the
run folder's ``launch.log``; when a process fails, the launcher stops the others and the
command ends with one line (the first ``bertscope: error:`` a process printed, or which process
died and how) pointing at that log.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bertscope.errors import BertScopeError

PROGRESS = re.compile(r"\d+%\|")  # a tqdm bar: the main process's progress, shown as it comes
OUR_ERROR = "bertscope: error: "
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")  # torchrun's mark on a process's lines


def check_processes(processes: int, device: str) -> None:
    """N is at least 1 and the machine has N GPUs (GPU runs) or N CPU cores (CPU runs)."""
    import torch

    if processes < 1:
        raise BertScopeError("--processes must be at least 1.")
    on_gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if on_gpu and torch.cuda.device_count() < processes:
        raise BertScopeError(f"--processes {processes} needs {processes} GPUs; this machine has "
                             f"{torch.cuda.device_count()} (or choose --device cpu).")
    if not on_gpu and processes > (os.cpu_count() or 1):
        raise BertScopeError(f"--processes {processes} on the CPU needs as many cores; this machine has "
                             f"{os.cpu_count()}.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(processes: int, arguments: Sequence[str], port: int) -> list[str]:
    """The launcher's command line for ``python -m bertscope <arguments>`` on N processes."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), "-m", "bertscope", *arguments]


def failure_line(log: str, processes: int) -> str:
    """One line for a failed launch: a process's own error, else the launcher's root cause (the
    first process to fail: its rank, how it ended, the exception it raised if it raised one)."""
    for line in log.splitlines():
        line = RANK_PREFIX.sub("", line)
        if line.startswith(OUR_ERROR):
            return line.removeprefix(OUR_ERROR)
    cause = log[log.find("Root Cause"):] if "Root Cause" in log else log
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", cause, re.M)
    exitcode = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", cause, re.M)
    why = ""
    if exitcode:
        code = int(exitcode.group(1))
        why = f" (killed by signal {-code})" if code < 0 else f" (exit status {code})"
    own = rf"^\[rank{rank.group(1)}\]:\s?" if rank else r"^"
    raised = re.search(own + r"([A-Za-z_.]*(?:Error|Exception)\b: .+)$", log, re.M)
    who = f"process {rank.group(1)} of {processes}" if rank else f"one of the {processes} processes"
    return f"{who} failed{why}" + (f": {raised.group(1)}" if raised else "")


def launch(processes: int, arguments: Sequence[str], out: Path) -> int:
    """Run ``python -m bertscope <arguments>`` as ``processes`` processes; returns the exit status
    (2 when a process refused its input, 1 when one failed otherwise)."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "launch.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(launch_command(processes, arguments, free_port()), stderr=subprocess.PIPE,
                                   env=env)
        pending = b""
        while chunk := os.read(process.stderr.fileno(), 65536):
            pending += chunk
            *lines, pending = re.split(rb"(?<=[\r\n])", pending)
            for raw in lines:
                text = raw.decode("utf-8", "replace")
                log.write(text)
                if PROGRESS.search(text):
                    sys.stderr.write(text)
                    sys.stderr.flush()
        log.write(pending.decode("utf-8", "replace"))
        status = process.wait()
    if status == 0:
        return 0
    text = log_path.read_text(encoding="utf-8")
    sys.stderr.write("\n")
    raise LaunchFailed(f"{failure_line(text, processes)}; the run keeps its last finished epoch, and "
                       f"{log_path} holds what every process printed.", 2 if re.search(r"^(\[rank\d+\]:\s?)?" + OUR_ERROR, text, re.M) else 1)


class LaunchFailed(BertScopeError):
    """A data-parallel run that ended in failure; ``status`` is the command's exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
