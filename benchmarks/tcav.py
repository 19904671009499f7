"""TCAV measured on the shipped models: the example concepts on the decisions they are written for, a
random concept as the control (the test should reject it at every layer), and what a test costs.

    python benchmarks/tcav.py [--runs 20] [--inputs 50] [--seed 0]

- bundled-sentiment, the concept "praise" (``causal.cavs.EXAMPLES``) for its positive class, on held-out Brown
  sentences; the same with Brown sentences as the "concept" (the control);
- bundled-mlm, the concept "water" for the word "river" at [MASK], on Brown sentences where "river" stands
  (masked there); the control likewise.

Each line: the layer, the mean TCAV over the runs, the random CAVs' mean, the CAVs' held-out accuracy, p and the
verdict at α / layers; and the seconds the whole test took. Figures only, nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(lm, concept, name, target, args) -> None:
    from bertscope.causal.cavs import tcav

    start = time.perf_counter()
    result = tcav(lm, concept, target, name=name, runs=args.runs, n_inputs=args.inputs, seed=args.seed)
    seconds = time.perf_counter() - start
    out = result.to_json()
    print(f"\n{lm.name}: {name!r} for {out['target']}, {out['inputs']} inputs, {out['runs']} random sets, "
          f"p < {out['corrected_alpha']:.4f} ({seconds:.0f} s)")
    print(f"  {'layer':>10}  {'TCAV':>5}  {'random':>6}  {'CAV acc':>7}  {'p':>9}  {'p (CAV)':>9}  verdict")
    for v in out["layers"]:
        print(f"  {v['layer']!s:>10}  {v['tcav']:5.2f}  {v['random_tcav']:6.2f}  {v['cav_accuracy']:7.2f}  "
              f"{v['p_value']:9.2e}  {v['cav_p_value']:9.2e}  {'significant' if v['significant'] else '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--inputs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from bertscope import load_model
    from bertscope.causal.cavs import EXAMPLES
    from bertscope.corpora.brown_tasks import brown_split_texts

    control = brown_split_texts(15, held_out=False, seed=args.seed + 11)  # training side: never an input
    sentiment = load_model("bundled-sentiment")
    positive = next(label for label in sentiment.task.labels if label.lower().startswith("pos"))
    run(sentiment, list(EXAMPLES["praise"][1]), "praise", positive, args)
    run(sentiment, control, "random sentences (control)", positive, args)
    del sentiment
    mlm = load_model("bundled-mlm")
    run(mlm, list(EXAMPLES["water"][1]), "water", "river", args)
    run(mlm, control, "random sentences (control)", "river", args)


if __name__ == "__main__":
    main()
