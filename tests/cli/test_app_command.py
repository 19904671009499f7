"""``bertscope app`` stops with its command: a supervisor (systemd, a process manager, ``kill``) sends SIGTERM to the
PID it started, and the server must go with it, its port freed. The command ran Streamlit as a child and forwarded
no signal, so the server lived on, reparented to PID 1, still serving (the hosted-demo audit's row)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from tests.conftest import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.skipif(os.name != "posix", reason="exec and SIGTERM are POSIX's")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_commands_pid_stops_the_server_and_frees_its_port(sig):
    port = _free_port()
    env = {**os.environ, "BERTSCOPE_MODEL": "bundled"}
    server = subprocess.Popen([sys.executable, "-m", "bertscope", "app", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not _answers(port):
            assert server.poll() is None, server.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the app did not answer in 90 s"
            time.sleep(0.5)
        serving = [c for c in psutil.Process(server.pid).children(recursive=True)]
        os.kill(server.pid, sig)  # the command's own PID, not its process group (a terminal's Ctrl+C)
        assert server.wait(timeout=30) is not None
        assert not [c for c in serving if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        with socket.socket() as s:  # the port is free again
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
        assert not _answers(port)
    finally:  # whatever is left of the group (an orphaned server, when the test fails) goes
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(timeout=30)
