"""Time to train the probes (task + control) for every layer of a 20k-token task.

    python benchmarks/probe.py [--tokens 20000] [--dim 384] [--layers 13]
    python benchmarks/probe.py --real brown-pos [--model bundled-mlm] [--size 2000] [--device cpu]

``--real``: the whole suite as the Probes page runs it (hidden states of a Brown sample into a fresh
cache, then every layer's probe and control), timed by phase; then the probes again with the
former budget of 100 L-BFGS steps on the same states, so the held-out accuracy and selectivity
of both budgets stand side by side (their time ratio in one run).

Synthetic states with the shape of a real run (20,000 tokens x 384 dims, 13 layers as in a
12-layer model, 17 tags drawn with a Zipf-like frequency, 2,000 word types, sentences of 10
tokens): the cost of ``probe_layers`` (logistic regression, scaled) does not depend on where
the vectors came from. Prints seconds per layer and in total, for the linear probe and the MLP.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def real_suite(args) -> None:
    from bertscope import load_model
    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
    from bertscope.analysis.probing import LOGREG_STEPS, probe_layers
    from bertscope.core.layers import hidden_label
    from bertscope.corpora.suites import shipped_task

    start = time.perf_counter()
    lm = load_model(args.model, device=args.device)
    task = shipped_task(args.real, size=args.size)
    loaded = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        states = hidden_states(lm, task, "mean", HiddenStateCache(tmp))
        extract = time.perf_counter() - start
        runs = {}
        for steps in (LOGREG_STEPS, 100):
            start = time.perf_counter()
            runs[steps] = (probe_layers(states, task.name, "mean", "logreg", steps=steps), time.perf_counter() - start)
    new, old = runs[LOGREG_STEPS], runs[100]
    print(f"{task.name} on {lm.name} ({lm.device}): {len(task.words):,} sentences, {new[0].n_train:,} train / "
          f"{new[0].n_test:,} test tokens")
    print(f"model and corpus {loaded:.1f} s, hidden states {extract:.1f} s, probes at {LOGREG_STEPS} steps "
          f"{new[1]:.1f} s: the suite in {loaded + extract + new[1]:.1f} s")
    print(f"probes at 100 steps {old[1]:.1f} s; {LOGREG_STEPS} steps take {new[1] / old[1]:.2f}x the time")
    print(f"{'layer':>10}  acc@{LOGREG_STEPS}  acc@100  ctl@{LOGREG_STEPS}  ctl@100  sel@{LOGREG_STEPS}  sel@100")
    for a, b in zip(new[0].layers, old[0].layers):
        print(f"{hidden_label(a.layer):>10}  {a.accuracy:6.4f}  {b.accuracy:7.4f}  {a.control_accuracy:6.4f}  "
              f"{b.control_accuracy:7.4f}  {a.selectivity:6.4f}  {b.selectivity:7.4f}")
    gap = max(max(abs(a.accuracy - b.accuracy), abs(a.selectivity - b.selectivity))
              for a, b in zip(new[0].layers, old[0].layers))
    print(f"largest gap in accuracy or selectivity between the budgets: {gap:.4f}")


def main() -> None:
    from bertscope.analysis.hidden_cache import CacheKey, HiddenStateCache
    from bertscope.analysis.probing import probe_layers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--layers", type=int, default=13)
    parser.add_argument("--mlp-layers", type=int, default=2, help="layers timed with the MLP probe")
    parser.add_argument("--real", help="a shipped suite (brown-pos, brown-tags, ...) on a real model instead")
    parser.add_argument("--model", default="bundled-mlm")
    parser.add_argument("--size", type=int, default=2000, help="--real Brown suites: sentences in the sample")
    parser.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda")
    args = parser.parse_args()
    if args.real:
        real_suite(args)
        return
    rng = np.random.default_rng(0)
    tags = [f"T{i}" for i in range(17)]
    p = 1 / np.arange(1, 18)
    types = rng.integers(0, 2000, size=args.tokens)
    tag_of_type = rng.choice(17, size=2000, p=p / p.sum())
    labels = [tags[tag_of_type[t]] for t in types]
    centres = rng.normal(size=(17, args.dim))
    with tempfile.TemporaryDirectory() as tmp:
        cache = HiddenStateCache(tmp)
        key = CacheKey("synthetic", "w", "t", "d", "token", "mean", tuple(range(args.layers)))

        def fill(folder):
            for layer in range(args.layers):
                signal = layer / args.layers
                x = signal * centres[tag_of_type[types]] + rng.normal(size=(args.tokens, args.dim))
                np.save(folder / f"layer_{layer:02d}.npy", x.astype(np.float32))
            return {"labels": labels, "groups": (np.arange(args.tokens) // 10).tolist(),
                    "types": [f"w{t}" for t in types]}

        states = cache.write(key, fill)
        start = time.perf_counter()
        result = probe_layers(states, "synthetic", "mean", "logreg")
        linear = time.perf_counter() - start
        start = time.perf_counter()
        probe_layers(states, "synthetic", "mean", "mlp", layers=list(range(args.mlp_layers)))
        mlp = time.perf_counter() - start
    print(f"{args.tokens:,} tokens x {args.dim} dims x {args.layers} layers, 17 tags, train {result.n_train:,} / "
          f"test {result.n_test:,}")
    print(f"logistic regression, task + control: {linear:.1f} s in all, {linear / args.layers:.2f} s per layer "
          f"(best accuracy {result.best.accuracy:.3f}, control {result.best.control_accuracy:.3f})")
    print(f"MLP (128 units), task + control: {mlp / args.mlp_layers:.2f} s per layer")


if __name__ == "__main__":
    main()
