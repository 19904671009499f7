"""Probe several models and/or tasks into one comparison, headless.

    python -m probes.sweep --models bundled,bundled-multilingual --tasks pos,bigram_shift --out results/sweep

The same as ``bertscope probe-sweep`` (this script calls that command; installed users run that): each (model,
task) pair runs as ``bertscope probe`` does (cache reused), written to ``--out/<model>__<task>/``; the comparison
goes to ``--out/comparison.png``, ``.html`` and ``summary.csv`` (best layer, its accuracy, control, selectivity
per pair). Errors: one line, exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bertscope.cli import main as cli_main


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(["probe-sweep", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
