"""Concept erasure's figures (issue 53).

    python benchmarks/erasure.py --fit [--model bundled-mlm] [--layer 3]
    python benchmarks/erasure.py --table --model bundled-mlm --concept ewt-upos [--size 600 --test-size 300]

``--fit``: LEACE (``concept-erasure``'s ``LeaceFitter``) over the states of every EWT train word at one
layer, against reading those states from the hidden-state cache: seconds of each, the peak RSS
the fit adds, and the eraser's rank; INLP on the same states for contrast.

``--table``: the amnesic table (``interventions.amnesic``) at every layer, printed as Markdown
(the probe, the masked LM, UUAS and the task model before / after / after the random control),
with the run's seconds; ``--out`` keeps the JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fit(args) -> None:
    from bertscope import load_model
    from bertscope.analysis.erasure import fit_inlp, fit_leace
    from bertscope.analysis.hidden_cache import hidden_states
    from bertscope.core.layers import hidden_index
    from bertscope.corpora.ewt import ewt_task

    lm = load_model(args.model)
    states = hidden_states(lm, ewt_task("train"), "mean")  # built once, then a cache hit
    state = hidden_index(args.layer, lm.num_layers)
    before = rss_mib()  # the fit first: its peak is measured before anything else reads the layer
    start = time.perf_counter()
    eraser = fit_leace(states.layer(state), states.labels)  # streamed from the memory map
    leace = time.perf_counter() - start
    grown = rss_mib() - before
    start = time.perf_counter()
    x = np.array(states.layer(state))  # the cache's read: memory-mapped file -> memory
    read = time.perf_counter() - start
    del x
    start = time.perf_counter()
    inlp = fit_inlp(states.layer(state), states.labels) if not args.no_inlp else None
    inlp_s = time.perf_counter() - start
    rows, dim = states.layer(state).shape
    print("(run it twice: the first run extracts EWT train's states into the cache, which sets the peak)")
    print(f"{lm.name}, EWT train at layer {args.layer}: {rows:,} words x {dim} dims "
          f"({rows * dim * 4 / 2**20:.0f} MiB float32)")
    print(f"  cache read            {read:6.2f} s")
    print(f"  LEACE fit             {leace:6.2f} s  ({leace / read:.1f}x the read), rank {eraser.rank}, "
          f"peak RSS +{grown:.0f} MiB")
    if inlp is not None:
        print(f"  INLP fit              {inlp_s:6.2f} s  rank {inlp.rank}")


def _cell(arms: dict | None) -> str:
    if not arms or arms.get("before") is None:
        return "–"
    return f"{arms['before']:.3f} → {arms['after']:.3f} ({arms['random_after']:.3f})"


def table(args) -> None:
    from bertscope import load_model
    from bertscope.core.layers import hidden_labels
    from bertscope.interventions.amnesic import amnesic_probe
    from bertscope.interventions.concepts import load_concept

    lm = load_model(args.model)
    concept = load_concept(args.concept, args.size, args.test_size)
    start = time.perf_counter()
    result = amnesic_probe(lm, concept, hidden_labels(lm.num_layers), args.method)
    seconds = time.perf_counter() - start
    data = result.to_json()
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1))
    print(f"{data['concept']} erased by {data['method']} in {data['model']}: {data['train_sentences']} training / "
          f"{data['test_sentences']} test sentences, {len(data['classes'])} labels, {seconds:.0f} s")
    print("before → after erasing (after a random erasure of the same rank)\n")
    print("| layer | rank | majority | probe at the layer | probe at the last layer | masked LM top-1 | "
          "UUAS at the last layer | task accuracy |")
    print("|---|---|---|---|---|---|---|---|")
    for row in data["layers"]:
        probe = {"before": row["probe_before"], "after": row["probe_after"], "random_after": row["probe_random_after"]}
        last = row["later_layers"][-1]["probe"] if row["later_layers"] else None
        print(f"| {row['layer']} | {row['rank']} | {row['majority']:.3f} | {_cell(probe)} | {_cell(last)} | "
              f"{_cell(row['mlm_top1'])} | {_cell(row['uuas'])} | {_cell(row['task_accuracy'])} |")
    for note in data["notes"]:
        print(f"\nnot measured: {note}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", action="store_true")
    p.add_argument("--table", action="store_true")
    p.add_argument("--model", default="bundled-mlm")
    p.add_argument("--layer", default="3")
    p.add_argument("--concept", default="ewt-upos")
    p.add_argument("--method", default="leace")
    p.add_argument("--size", type=int, default=600)
    p.add_argument("--test-size", type=int, default=300)
    p.add_argument("--out", default=None)
    p.add_argument("--no-inlp", action="store_true", help="--fit: LEACE alone")
    args = p.parse_args()
    if args.fit:
        fit(args)
    if args.table:
        table(args)
    if not (args.fit or args.table):
        p.error("choose --fit and/or --table")


if __name__ == "__main__":
    main()
