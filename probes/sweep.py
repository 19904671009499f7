"""Probe several models and/or tasks into one comparison, headless.

    python -m probes.sweep --models bundled,bundled-multilingual --tasks pos,bigram_shift --out results/sweep

Each (model, task) pair runs as ``python -m bertscope probe`` does (cache reused), written to
``--out/<model>__<task>/``; the comparison goes to ``--out/comparison.png``, ``.html`` and
``summary.csv`` (best layer, its accuracy, control, selectivity per pair). Errors: one line, exit
status 2.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from bertscope.cli.common import EXIT_BAD_INPUT
from bertscope.cli.probe import load_task, probe_arguments, run_probe, write_probe_results
from bertscope.errors import BertScopeError


def folder_name(model: str, task: str) -> str:
    return re.sub(r"[^\w.-]+", "_", f"{model}__{task}").strip("_")


def main(argv: Sequence[str] | None = None) -> int:
    from bertscope.cli.common import engine_of
    from bertscope.core.models import load_model
    from bertscope.figures.probe import layer_figure, save_png

    parser = argparse.ArgumentParser(prog="python -m probes.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="comma-separated presets, hub ids or folders")
    parser.add_argument("--device", default="auto")
    probe_arguments(parser, several=True)
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    out = Path(args.out or "results")
    try:
        engine = engine_of(args)
        if not models or not tasks:
            raise BertScopeError("Give at least one model (--models) and one task (--tasks).")
        loaded = {name: load_task(name, None, args.size) for name in tasks}
        results = []
        for model in models:
            lm = load_model(model, device=args.device)
            for name, task in loaded.items():
                result, _ = run_probe(lm, task, args, engine, weights_dir=out / folder_name(model, name) / "weights")
                write_probe_results(result, out / folder_name(model, name))
                results.append(result)
        out.mkdir(parents=True, exist_ok=True)
        layer_figure(results).write_html(out / "comparison.html", include_plotlyjs=True)
        save_png(results, out / "comparison.png")
        with open(out / "summary.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["model", "task", "majority_baseline", "best_layer", "accuracy", "control_accuracy",
                             "selectivity"])
            for r in results:
                writer.writerow([r.model, r.task, r.majority_baseline, r.best.layer, r.best.accuracy,
                                 r.best.control_accuracy, r.best.selectivity])
    except BertScopeError as err:
        print(f"probes.sweep: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{len(results)} runs; wrote {out}/comparison.png, comparison.html, summary.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
