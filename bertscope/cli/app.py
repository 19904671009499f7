"""``bertscope app``: the Streamlit app from the installed package, from any folder.

Streamlit reads its settings from ``.streamlit/config.toml`` in the folder it starts in and serves
``static/`` beside its main script, so the command keeps a launch folder in the user cache
(``~/.cache/bertscope/app``: the main script, the app's settings shipped in the package, bertviz's
scripts) and runs ``streamlit run`` there: on POSIX it becomes that server (``exec``), so a SIGTERM to the
PID it was started with (systemd, a process manager, ``kill``) stops the server and frees its port. Nothing here imports streamlit: a missing ``app`` extra
is one line naming the install to run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command
from bertscope.errors import BertScopeError

PACKAGE = Path(__file__).resolve().parents[1]  # bertscope/
MAIN = '''"""Written by `bertscope app`: the router that ships in the package."""

from bertscope.app.router import run

run()
'''
APP_EXTRA = ("streamlit", "plotly", "bertviz", "umap")  # what the pages import (the `app` extra)


def launch_folder() -> Path:
    """The folder ``bertscope app`` starts Streamlit in, made or refreshed: main script and settings."""
    from bertscope.runtime.atomic import write_bytes, write_text
    from bertscope.runtime.user_cache import user_cache_dir

    folder = user_cache_dir() / "app"
    main = folder / "app.py"
    if not main.is_file() or main.read_text() != MAIN:
        write_text(main, MAIN)
    settings, shipped = folder / ".streamlit" / "config.toml", (PACKAGE / "app" / "streamlit.toml").read_bytes()
    if not settings.is_file() or settings.read_bytes() != shipped:
        write_bytes(settings, shipped)
    return folder


def port_free(port: int, host: str = "") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_port(port: int) -> None:
    """One line naming the port in use and a free one."""
    if not 1 <= port <= 65535:
        raise BertScopeError(f"--port {port}: a port is a number from 1 to 65535.")
    if port_free(port):
        return
    free = next((p for p in range(port + 1, min(port + 200, 65536)) if port_free(p)), None)
    raise BertScopeError(f"Port {port} is in use" + (f": try --port {free}." if free else "."))


def check_extra() -> None:
    missing = [m for m in APP_EXTRA if importlib.util.find_spec(m) is None]
    if missing:
        raise BertScopeError(f"The app needs its extra ({', '.join(missing)} missing): "
                             "pip install 'bertscope[app]'.")


def cmd_app(args: argparse.Namespace) -> Any:
    check_extra()
    check_port(args.port)
    folder = launch_folder()
    env = dict(os.environ)
    if args.demo:
        env["BERTSCOPE_DEMO"] = "1"
    command = [sys.executable, "-m", "streamlit", "run", str(folder / "app.py"), "--server.port", str(args.port),
               "--server.address", args.address, "--browser.serverAddress", "localhost"]
    print(f"BertScope {'demo ' if args.demo else ''}at http://localhost:{args.port} (Ctrl+C stops it)", flush=True)
    if os.name == "posix":  # this process becomes the server: a supervisor's SIGTERM to its PID stops the server
        os.chdir(folder)
        os.execve(sys.executable, command, env)
    try:
        done = subprocess.run(command, cwd=folder, env=env)
    except KeyboardInterrupt:
        return None
    if done.returncode not in (0, -2, 130):  # Ctrl+C is not a failure
        raise BertScopeError(f"Streamlit stopped with status {done.returncode} (its lines above say why).")
    return None


def _app_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8501, help="the port to serve on (default 8501)")
    p.add_argument("--address", default="localhost",
                   help="the address to listen on (default localhost; 0.0.0.0 to serve other machines)")
    p.add_argument("--demo", action="store_true",
                   help="a hosted demo: allowlisted models, input caps, the cost budget (BERTSCOPE_DEMO=1)")


COMMANDS = [
    Command("app", "start the app in the browser (Streamlit, from the installed package; needs the app extra)",
            cmd_app, _app_arguments, takes_model=False),
]
