"""Probe every layer of a model on one task, headless.

    python -m probes.layerwise --model bert-base-uncased --task pos --out results/
    python -m probes.layerwise --model bundled --data my_tags.conllu --out results/mine

Extracts the task's hidden states (or reuses the on-disk cache), trains a probe and its control
task at every layer, and writes into ``--out``: ``results.json`` (also printed with --json),
``results.csv``, ``layers.png`` and ``layers.html``, and the probes' weights
(``weights/layer_XX.npz`` + ``.json``, no pickle). Errors: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Sequence

from bertscope.errors import BertScopeError

EXIT_BAD_INPUT = 2


def add_arguments(p: argparse.ArgumentParser, several: bool = False) -> None:
    if several:
        p.add_argument("--models", required=True, help="comma-separated presets, hub ids or folders")
        p.add_argument("--tasks", default="pos", help="comma-separated shipped tasks")
    else:
        p.add_argument("--model", required=True, help="preset, hub id, local folder, or 'bundled'")
        p.add_argument("--task", default="pos", help="shipped task: pos, sense, tense, subject_number, "
                                                     "negation, question, bigram_shift, brown-pos, brown-tags, "
                                                     "brown-genre")
        p.add_argument("--data", help="your own task: .conllu, .csv or .jsonl (overrides --task)")
    p.add_argument("--size", type=int, help="Brown tasks: sentences in the sample (default 2000; 0 = all)")
    p.add_argument("--out", default="results", help="output folder")
    p.add_argument("--pooling", default="mean", help="token tasks: mean|first; sentence tasks: mean|cls")
    p.add_argument("--probe", default="logreg", choices=["logreg", "mlp"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", help="hidden-state cache folder (default: ~/.cache/bertscope/hidden)")
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--engine", default="local",
                   help="local (this process), ray (a Ray cluster on this machine) or ray:ADDRESS (a running one)")


def load_task(task: str, data: str | None, size: int | None = None):
    from bertscope.corpora.probe_tasks import read_task
    from bertscope.corpora.suites import shipped_task

    if data:
        path = Path(data)
        if not path.is_file():
            raise BertScopeError(f"No data file at {data}.")
        try:
            return read_task(path.read_text(encoding="utf-8"), path.name)
        except UnicodeDecodeError as err:
            raise BertScopeError(f"{data} is not UTF-8 text.") from err
    return shipped_task(task, size)


def run_one(model: str, task, args, weights_dir: Path | None = None, quiet: bool = False):
    """Extract (or reuse) and probe; returns the ProbeResult and whether the cache was hit."""
    from tqdm import tqdm

    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
    from bertscope.analysis.probing import probe_layers
    from bertscope.core.models import load_model

    from bertscope.engines.ray_engine import rows_for

    rows = rows_for(args.engine)  # None: this process
    lm = load_model(model, device=args.device)
    with tqdm(total=len(task.words), desc=f"{model}: hidden states", unit="sentence", disable=quiet,
              file=sys.stderr) as bar:
        states = hidden_states(lm, task, args.pooling, HiddenStateCache(args.cache), args.batch_size,
                               progress=lambda d, t: bar.update(d - bar.n), rows=rows)
    with tqdm(total=len(states.layers), desc=f"{model}: probes", unit="layer", disable=quiet, file=sys.stderr) as bar:
        result = probe_layers(states, task.name, args.pooling, args.probe, args.seed,
                              weights_dir=weights_dir,
                              progress=lambda d, t: bar.update(d - bar.n))
    return result, states.hit


def write_results(result, out: Path) -> dict:
    from bertscope.figures.probe import layer_figure, save_png

    out.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    (out / "results.json").write_text(json.dumps(data, indent=1))
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "accuracy", "control_accuracy", "selectivity", "ci_low", "ci_high",
                         "majority_baseline"])
        for r in result.layers:
            writer.writerow([r.name, r.accuracy, r.control_accuracy, r.selectivity, *r.ci, result.majority_baseline])
    layer_figure([result]).write_html(out / "layers.html", include_plotlyjs=True)
    save_png([result], out / "layers.png")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m probes.layerwise", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print results.json on stdout")
    args = parser.parse_args(argv)
    try:
        task = load_task(args.task, args.data, args.size)
        result, hit = run_one(args.model, task, args, weights_dir=Path(args.out) / "weights", quiet=args.json)
        data = write_results(result, Path(args.out))
    except BertScopeError as err:
        print(f"probes.layerwise: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(data))
    else:
        best = result.best
        print(f"{args.model} on {task.name}: cache {'hit' if hit else 'built'}; "
              f"majority {result.majority_baseline:.3f}; "
              f"best layer {best.name}: accuracy {best.accuracy:.3f} (control {best.control_accuracy:.3f}); "
              f"wrote {args.out}/results.json, results.csv, layers.png, layers.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
