"""Probe every layer of a model on one task, headless.

    python -m probes.layerwise --model bert-base-uncased --task pos --out results/
    python -m probes.layerwise --model bundled --data my_tags.conllu --out results/mine

The same as ``python -m bertscope probe MODEL … --out DIR`` (this script calls that command):
extracts the task's hidden states (or reuses the on-disk cache), trains a probe and its control
task at every layer, and writes into ``--out`` (default ``results``): ``results.json`` (also
printed with --json), ``results.csv``, ``layers.png`` and ``layers.html``, and the probes' weights
(``weights/layer_XX.npz`` + ``.json``, no pickle). Errors: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bertscope.cli import main as cli_main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m probes.layerwise", description=__doc__.splitlines()[0],
                                     epilog="Every other option is `python -m bertscope probe`'s (see its --help): "
                                            "--task, --data, --test-data, --size, --pooling, --probe, --seed, "
                                            "--cache, --batch-size, --engine, --device, --json.")
    parser.add_argument("--model", required=True, help="preset, hub id, local folder, or 'bundled'")
    parser.add_argument("--out", default="results", help="output folder (default: results)")
    args, rest = parser.parse_known_args(argv)
    return cli_main(["probe", args.model, "--out", args.out, *rest])


if __name__ == "__main__":
    sys.exit(main())
