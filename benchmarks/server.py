"""Start ``streamlit run app.py`` on a free loopback port for a benchmark, and stop it after."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextlib.contextmanager
def running_app(env: dict | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Yields (url, server process) once the server answers its health check."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError("streamlit exited before answering") from None
                time.sleep(0.1)
        yield url, server
    finally:
        server.terminate()
        server.wait(timeout=30)
