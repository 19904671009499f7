"""Time to train the probes (task + control) for every layer of a 20k-token task.

    python benchmarks/probe.py [--tokens 20000] [--dim 384] [--layers 13]

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


def main() -> None:
    from bertscope.analysis.hidden_cache import CacheKey, HiddenStateCache
    from bertscope.analysis.probing import probe_layers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--layers", type=int, default=13)
    parser.add_argument("--mlp-layers", type=int, default=2, help="layers timed with the MLP probe")
    args = parser.parse_args()
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
