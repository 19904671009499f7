"""Every example notebook runs offline, as a user runs it (a new process, from the examples folder), in at
most two minutes here; each is a jupytext percent script that opens as a notebook with text and code."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("[0-9][0-9]_*.py"))


def test_there_are_nine_examples_and_each_is_a_notebook():
    import jupytext

    assert len(EXAMPLES) == 9
    for path in EXAMPLES:
        notebook = jupytext.read(path)
        kinds = [cell.cell_type for cell in notebook.cells]
        assert kinds[0] == "markdown" and kinds.count("code") >= 2, path.name
        assert not any(cell.get("outputs") for cell in notebook.cells)  # nothing stored: the run makes it


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_example_runs(path, tmp_path):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(path)], cwd=path.parent, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)})  # its runs: pytest's
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "an example prints what it found"
    print(f"{path.name}: {seconds:.0f} s")
