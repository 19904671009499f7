"""``probe``: linear probes per layer with a control task (Hewitt & Liang 2019) — the one probe command
line; ``probe-sweep`` runs it over several models and tasks into one comparison (the checkout's
``python -m probes.layerwise`` and ``probes.sweep`` call these commands)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, engine_argument, engine_of, load, progress_bar, read_text, seed_int
from bertscope.corpora.suites import BROWN_TASKS, SHIPPED, TREEBANK_TASKS
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_text

TASKS_HELP = (f"shipped: {', '.join(SHIPPED)}; {', '.join(BROWN_TASKS)} (after `bertscope corpus install brown`); "
              f"{', '.join(TREEBANK_TASKS)} (UD English-EWT's own train/test split, after `bertscope corpus install ewt`)")


def load_task(task: str, data: str | None, size: int | None = None):
    """Your file (``--data``: .conllu, .csv or .jsonl) or a shipped task."""
    from bertscope.corpora.probe_tasks import read_task
    from bertscope.corpora.suites import shipped_task

    if data:
        return read_task(read_text(data, "data"), data)
    return shipped_task(task, size)


def run_probe(lm, task, args: argparse.Namespace, engine=None, external_task=None, weights_dir: Path | None = None,
              quiet: bool = False):
    """(ProbeResult, whether the hidden-state cache was hit): states extracted (or read) with a bar,
    then a probe and its control at every layer with a bar of layers."""
    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
    from bertscope.analysis.probing import probe_layers

    cache = HiddenStateCache(args.cache)
    with progress_bar(f"{lm.name}: hidden states", "word piece") as progress:
        states = hidden_states(lm, task, args.pooling, cache, args.batch_size, progress=None if quiet else progress,
                               engine=engine)
        external = None if external_task is None else hidden_states(lm, external_task, args.pooling, cache,
                                                                    args.batch_size, engine=engine)
    with progress_bar(f"{lm.name}: probes (task, then control, per layer)", "fit") as progress:
        result = probe_layers(states, task.name, args.pooling, args.probe, args.seed, external=external,
                              weights_dir=weights_dir, progress=None if quiet else progress)
    return result, states.hit


def write_probe_results(result, out: Path) -> dict:
    """``results.json``, ``results.csv``, ``layers.html`` and ``layers.png`` into ``out``."""
    from bertscope.figures.probe import layer_figure, save_png

    out.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    write_text(out / "results.json", json.dumps(data, indent=1))
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "accuracy", "control_accuracy", "selectivity", "ci_low", "ci_high",
                         "majority_baseline"])
        for r in result.layers:
            writer.writerow([r.name, r.accuracy, r.control_accuracy, r.selectivity, *r.ci, result.majority_baseline])
    layer_figure([result]).write_html(out / "layers.html", include_plotlyjs=True)
    save_png([result], out / "layers.png")
    return data


def cmd_probe(args: argparse.Namespace) -> Any:
    from bertscope.analysis.probing import check_external_labels
    from bertscope.corpora.probe_tasks import read_task

    engine = engine_of(args)  # a bad --engine is refused before anything loads
    if args.task in TREEBANK_TASKS and not args.data:
        return treebank_command(args, engine)
    task = load_task(args.task, args.data, args.size)
    external_task = None
    if args.test_data:
        external_task = read_task(read_text(args.test_data, "test data"), args.test_data)
        if external_task.level != task.level:
            raise BertScopeError(f"{args.test_data} is a {external_task.level}-level task; {task.name} is "
                                 f"{task.level}-level: give a file of the same kind.")
        check_external_labels(task.classes, external_task.classes)
    lm = load(args)
    out = Path(args.out) if args.out else None
    result, hit = run_probe(lm, task, args, engine, external_task, None if out is None else out / "weights",
                            quiet=args.json)
    data = write_probe_results(result, out) if out is not None else result.to_json()
    if args.json:
        return data
    lines = [f"{task.name} ({task.level}, {task.n_examples:,} examples, {len(task.classes)} labels) on {lm.name}; "
             f"cache {'hit' if hit else 'built'}; majority baseline {result.majority_baseline:.3f}",
             "     layer  accuracy  control  selectivity  95% interval"]
    lines += [f"{r.name:>10}  {r.accuracy:8.3f}  {r.control_accuracy:7.3f}  {r.selectivity:11.3f}  "
              f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]"
              + (f"  test file {r.external_accuracy:.3f}" if r.external_accuracy is not None else "")
              for r in result.layers]
    if out is not None:
        lines.append(f"wrote {out}/results.json, results.csv, layers.png, layers.html and weights/")
    return "\n".join(lines)


def treebank_command(args: argparse.Namespace, engine) -> Any:
    """``probe --task ewt-upos|ewt-deprel``: trained on EWT train (``--size`` sentences), scored on EWT test."""
    from bertscope.analysis.hidden_cache import HiddenStateCache
    from bertscope.analysis.treebank_probes import treebank_probe
    from bertscope.corpora.ewt import read_ewt

    if args.test_data:
        raise BertScopeError(f"--task {args.task} is scored on EWT's own test split: leave out --test-data.")
    if args.pooling != "mean":
        raise BertScopeError(f"--task {args.task} pools a word's pieces by their mean (as the structural probe).")
    if args.size is not None and args.size < 0:
        raise BertScopeError("--size must be 0 (every training sentence) or more.")
    read_ewt("test")  # not installed: the install command in one line, before the model loads
    lm = load(args)
    out = Path(args.out) if args.out else None
    with progress_bar(f"{lm.name}: hidden states of EWT", "word piece") as states_bar, \
            progress_bar(f"{lm.name}: probes (task, then control, per layer)", "fit") as fits_bar:
        result, hit = treebank_probe(lm, args.task, size=args.size, kind=args.probe, seed=args.seed,
                                     cache=HiddenStateCache(args.cache), batch_size=args.batch_size,
                                     weights_dir=None if out is None else out / "weights", engine=engine,
                                     states_progress=None if args.json else states_bar,
                                     progress=None if args.json else fits_bar)
    data = write_probe_results(result, out) if out is not None else result.to_json()
    if args.json:
        return data
    what = "arcs" if result.level == "arc" else "words"
    lines = [f"{result.task} on {lm.name}: {result.n_train:,} train / {result.n_test:,} test {what} (EWT's split), "
             f"{len(result.classes)} labels; cache {'hit' if hit else 'built'}; majority baseline "
             f"{result.majority_baseline:.3f}" + (f"; {result.left_out_sentences:,} sentences the model cannot "
                                                  "read whole left out" if result.left_out_sentences else ""),
             "     layer  accuracy  control  selectivity  95% interval"]
    lines += [f"{r.name:>10}  {r.accuracy:8.3f}  {r.control_accuracy:7.3f}  {r.selectivity:11.3f}  "
              f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]" for r in result.layers]
    if out is not None:
        lines.append(f"wrote {out}/results.json, results.csv, layers.png, layers.html and weights/")
    return "\n".join(lines)


def probe_arguments(p: argparse.ArgumentParser, several: bool = False) -> None:
    """The probe's options; ``several``: the sweep's --tasks in place of --task/--data/--test-data."""
    if several:
        p.add_argument("--tasks", default="pos", help="comma-separated shipped tasks")
    else:
        p.add_argument("--task", default="pos", help=TASKS_HELP)
        p.add_argument("--data", help="your own task: .conllu, .csv or .jsonl (overrides --task)")
        p.add_argument("--test-data", help="train here, test there: also score the probe on this file "
                                           "(.conllu, .csv or .jsonl with the task's labels)")
    p.add_argument("--size", type=int, help="Brown tasks: sentences in the sample; ewt tasks: training sentences "
                                           "(default 2000; 0 = all)")
    p.add_argument("--out", help="a folder for results.json, results.csv, layers.png, layers.html and the probes' "
                                 "weights (weights/layer_XX.npz + .json, no pickle)")
    p.add_argument("--pooling", default="mean", help="token tasks: mean|first; sentence tasks: mean|cls")
    p.add_argument("--probe", choices=["logreg", "mlp"], default="logreg")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--cache", help="hidden-state cache folder (default: ~/.cache/bertscope/hidden)")
    p.add_argument("--batch-size", type=int, default=64)
    engine_argument(p)


def sweep_folder(model: str, task: str) -> str:
    return re.sub(r"[^\w.-]+", "_", f"{model}__{task}").strip("_")


def cmd_probe_sweep(args: argparse.Namespace) -> Any:
    """Each (model, task) pair probed as ``probe`` does (the cache reused), written to ``--out/<model>__<task>/``;
    the comparison to ``--out/comparison.png``, ``.html`` and ``summary.csv``."""
    from bertscope.core.models import load_model
    from bertscope.figures.probe import layer_figure, save_png

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    out = Path(args.out or "results")
    engine = engine_of(args)
    if not models or not tasks:
        raise BertScopeError("Give at least one model (--models) and one task (--tasks).")
    loaded = {name: load_task(name, None, args.size) for name in tasks}
    results = []
    for model in models:
        lm = load_model(model, device=args.device)
        for name, task in loaded.items():
            result, _ = run_probe(lm, task, args, engine, weights_dir=out / sweep_folder(model, name) / "weights")
            write_probe_results(result, out / sweep_folder(model, name))
            results.append(result)
    out.mkdir(parents=True, exist_ok=True)
    layer_figure(results).write_html(out / "comparison.html", include_plotlyjs=True)
    save_png(results, out / "comparison.png")
    rows = [["model", "task", "majority_baseline", "best_layer", "accuracy", "control_accuracy", "selectivity"]]
    rows += [[r.model, r.task, r.majority_baseline, r.best.layer, r.best.accuracy, r.best.control_accuracy,
              r.best.selectivity] for r in results]
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    write_text(out / "summary.csv", text.getvalue())
    summary = [dict(zip(rows[0], row)) for row in rows[1:]]
    return summary if args.json else f"{len(results)} runs; wrote {out}/comparison.png, comparison.html, summary.csv"


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", required=True, help="comma-separated presets, hub ids or folders")
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    probe_arguments(p, several=True)


COMMANDS = [
    Command("probe", "linear probes per layer with a control task (Hewitt & Liang 2019)", cmd_probe, probe_arguments),
    Command("probe-sweep", "probes over several models and tasks into one comparison (a folder per pair, "
            "comparison.png / .html, summary.csv)", cmd_probe_sweep, _sweep_arguments, takes_model=False),
]
