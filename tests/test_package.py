"""The front door: BertScope as a package. Its pins are requirements*.txt's; ``bertscope`` with no command,
an unknown one, a busy port or a missing extra gets one line (exit 2); ``--help`` imports nothing heavy;
and the wheel installs into a fresh virtual environment outside the checkout, where the console script,
a notebook's first cell and ``bertscope app`` work."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from bertscope.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s#;]+)", line)
        if m:
            found[m.group(1).lower()] = m.group(3)
    return found


def test_the_package_pins_what_the_requirements_files_pin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _pins(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared.update(_pins(extra))
    files = {}
    for name in ("requirements.txt", "requirements-test.txt", "requirements-cluster.txt", "requirements-peers.txt",
                 "requirements-saelens.txt", "requirements-pyvene.txt", "requirements-tunedlens.txt"):
        files.update(_pins((ROOT / name).read_text().splitlines()))
    assert declared == {k: v for k, v in files.items() if k in declared}  # the same version wherever both pin it
    assert set(_pins(project["dependencies"])) | set(_pins(project["optional-dependencies"]["app"])) | \
        set(_pins(project["optional-dependencies"]["train"])) == set(_pins((ROOT / "requirements.txt").read_text()
                                                                          .splitlines()))
    assert "streamlit" not in _pins(project["dependencies"])  # a notebook user needs no web server


def test_the_apps_settings_are_the_checkouts():
    """``bertscope app`` writes the packaged settings where Streamlit reads them; ``streamlit run app.py``
    reads .streamlit/config.toml: the same file."""
    assert (ROOT / "bertscope/app/streamlit.toml").read_text() == (ROOT / ".streamlit/config.toml").read_text()


def _lines(capsys) -> tuple[str, str]:
    out = capsys.readouterr()
    return out.out, out.err


def test_no_command_prints_the_help_and_exits_2(capsys):
    assert main([]) == 2
    _, err = _lines(capsys)
    assert err.startswith("usage: bertscope") and "app" in err and "attention" in err


def test_an_unknown_command_names_the_nearest(capsys):
    assert main(["atention", "bundled"]) == 2
    _, err = _lines(capsys)
    assert err == "bertscope: error: no command 'atention': did you mean 'attention'?\n"
    assert main(["zzzz"]) == 2 and "bertscope --help" in _lines(capsys)[1]


def test_app_on_a_busy_port_names_a_free_one(capsys):
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["app", "--port", str(port)]) == 2
    _, err = _lines(capsys)
    assert err.count("\n") == 1 and f"Port {port} is in use: try --port " in err


def test_app_without_its_extra_names_the_install(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a))
    assert main(["app"]) == 2
    assert "pip install 'bertscope[app]'" in _lines(capsys)[1]


def test_help_is_fast_and_imports_nothing_heavy():
    code = ("import sys, time; t = time.perf_counter(); from bertscope.cli import build_parser; "
            "build_parser(None).format_help(); "
            "print(time.perf_counter() - t, [m for m in ('torch', 'transformers', 'streamlit') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    seconds, heavy = out.split(" ", 1)
    assert heavy.strip() == "[]" and float(seconds) < 1.0


NOTEBOOK = '''
import bertscope, sys
from bertscope import attribute, load_model
from bertscope.attribution import Target
assert "site-packages" in bertscope.__file__, bertscope.__file__  # the installed copy, not the checkout
lm = load_model("bundled-mlm", device="cpu")
out, cache = lm.run_with_cache("The bank of the [MASK] was muddy.", names=["blocks.2.hook_resid_post"])
print(tuple(cache["blocks.2.hook_resid_post"].shape))
ig = attribute(lm, "The bank of the [MASK] was muddy.", method="ig", target=Target("token", 5), steps=8)
print(len(ig.scores), bertscope.__version__)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_wheel_installs_outside_the_checkout_and_runs(tmp_path):
    """``python -m build`` makes a wheel and an sdist; the wheel goes into a new virtual environment in a
    temporary folder (its dependencies are this environment's: a .pth names its site-packages, so nothing is
    downloaded), and there, from that folder: ``bertscope --help``, a notebook's first cell, ``bertscope app``."""
    import site

    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], check=True, capture_output=True)
    wheel = next(dist.glob("bertscope-*.whl"))
    assert next(dist.glob("bertscope-*.tar.gz"))
    import zipfile

    from bertscope.features.shipped import SHIPPED_CROSSCODERS

    packed = set(zipfile.ZipFile(wheel).namelist())
    for folder in SHIPPED_CROSSCODERS.values():  # the shipped dictionaries travel in the wheel
        for layer in folder.glob("layer_[0-9][0-9]"):
            for name in ("cfg.json", "crosscoder.safetensors"):
                assert (layer / name).relative_to(ROOT).as_posix() in packed, layer / name
    env_dir = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    inner = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                           capture_output=True, text=True).stdout.strip()
    (Path(inner) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")  # the dependencies, not bertscope
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    work = tmp_path / "elsewhere"
    work.mkdir()
    helped = subprocess.run([str(env_dir / "bin" / "bertscope"), "--help"], cwd=work, env=env, capture_output=True,
                            text=True)
    assert helped.returncode == 0 and "bertscope app" in helped.stdout
    ran = subprocess.run([str(python), "-c", NOTEBOOK], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split("\n")[:2] == ["(1, 10, 384)", "10 0.1.0"]
    port = _free_port()
    server = subprocess.Popen([str(env_dir / "bin" / "bertscope"), "app", "--port", str(port)], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError(server.stdout.read().decode()[-3000:] if server.poll() is not None else
                                         "the app did not answer in 120 s") from None
                time.sleep(1)
        with urllib.request.urlopen(f"http://localhost:{port}/", timeout=10) as r:
            assert r.status == 200
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://localhost:{port}/", wait_until="domcontentloaded")
            page.get_by_text("Look inside BERT-family encoders").first.wait_for(timeout=120_000)
            page.get_by_text("Models you can use right now").first.wait_for(timeout=60_000)
            browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
