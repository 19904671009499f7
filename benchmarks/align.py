"""Cross-lingual alignment costs: UMAP cold and warm, and retrieval for every pair and layer.

    python benchmarks/align.py [--points 2000] [--items 200] [--model bundled]

1. UMAP on 2,000 points x 384 dims: cold = a fresh Python process's first call (numba
   compiles its kernels), warm = the next call in the same process on other data. Both are
   measured in a child process so "cold" really is cold.
2. Retrieval P@1 for 8 languages x 13 layers (every ordered pair, raw and mean-centred):
   ours (one matrix product per layer and source) against a plain per-item loop, on random
   768-dim vectors of the size of mBERT's hidden states.
3. The shipped sentences (105 x 9 languages) end to end on a real model: embedding and
   retrieval.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, interleaved, load  # noqa: E402

CHILD = """
import json, sys, time
import numpy as np
start = time.perf_counter()
from bertscope.analysis.projection import umap_2d
imported = time.perf_counter() - start
rng = np.random.default_rng(0)
n = int(sys.argv[1])
a = rng.normal(size=(n, 384)).astype(np.float32)
b = rng.normal(size=(n, 384)).astype(np.float32)
t = time.perf_counter(); umap_2d(a, seed=0); cold = time.perf_counter() - t
t = time.perf_counter(); umap_2d(b, seed=0); warm = time.perf_counter() - t
print(json.dumps({"import": imported, "cold": cold, "warm": warm}))
"""


def naive_retrieval(vectors: np.ndarray) -> np.ndarray:
    """The loop a first version would write: for each query, cosine against every candidate."""
    n_lang, n_items, n_layers, _ = vectors.shape
    out = np.full((n_layers, n_lang, n_lang), np.nan)
    for layer in range(n_layers):
        for s in range(n_lang):
            for t in range(n_lang):
                if s == t:
                    continue
                candidates = vectors[t, :, layer]
                norms = np.linalg.norm(candidates, axis=1)
                hits = 0
                for i in range(n_items):
                    q = vectors[s, i, layer]
                    cos = candidates @ q / (norms * np.linalg.norm(q))
                    hits += int(np.argmax(cos) == i)
                out[layer, s, t] = hits / n_items
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--items", type=int, default=200)
    add_model_args(parser)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from bertscope.analysis.align import centre, embed_parallel, retrieval, retrieval_accuracy
    from bertscope.corpora.parallel import shipped_parallel

    child = subprocess.run([sys.executable, "-c", CHILD, str(args.points)], cwd=ROOT, check=True,
                           capture_output=True, text=True)
    umap = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"UMAP, {args.points} points x 384 dims, fresh process: import {umap['import']:.1f} s, "
          f"cold (numba compile + fit) {umap['cold']:.1f} s, warm {umap['warm']:.1f} s, "
          f"ratio cold/warm {umap['cold'] / umap['warm']:.1f}")

    rng = np.random.default_rng(0)
    vectors = (rng.normal(size=(1, args.items, 13, 768)) +
               rng.normal(size=(8, args.items, 13, 768))).astype(np.float32)  # [language, item, layer, dim]
    assert np.allclose(retrieval_accuracy(vectors), naive_retrieval(vectors), equal_nan=True)
    times = interleaved({
        "ours": lambda: (retrieval_accuracy(vectors), retrieval_accuracy(centre(vectors))),
        "naive": lambda: (naive_retrieval(vectors), naive_retrieval(centre(vectors))),
    }, repeats=args.repeats)
    ours, naive = statistics.median(times["ours"]), statistics.median(times["naive"])
    print(f"retrieval P@1, 8 languages x 13 layers x {args.items} items x 768 dims, raw + centred: "
          f"ours {ours:.2f} s, per-item loop {naive:.2f} s, speed-up {naive / ours:.1f}x")

    lm = load(args)
    data = shipped_parallel("sentences")
    start = time.perf_counter()
    av = embed_parallel(lm, data)
    embedded = time.perf_counter() - start
    start = time.perf_counter()
    scores = retrieval(av)
    scored = time.perf_counter() - start
    texts = data.n_items * len(data.languages)
    print(f"shipped sentences on {args.model}: {texts} texts embedded in {embedded:.1f} s "
          f"({texts / embedded:.0f} texts/s), retrieval for {len(data.languages)} languages x "
          f"{av.n_layers} layers in {scored:.3f} s; best mean P@1 raw {scores.mean().max():.3f}, "
          f"centred {scores.mean(True).max():.3f} (chance {scores.chance:.3f})")


if __name__ == "__main__":
    main()
