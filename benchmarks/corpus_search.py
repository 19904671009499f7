"""Corpus search over a Brown sample: indexing throughput and query latency.

    python benchmarks/corpus_search.py [--model bundled|random:bert-base-uncased] [--device cuda]
                                       [--sentences 2000] [--queries 20]

Indexing = extracting every word's vector at every layer of the sample (the probes' hidden-state
cache of brown-pos), first into an empty cache, then read back from disk. A query = embedding
the sentence, then the cosine against every word of the sample at one layer (float16 rows) and
the top 20. The first query at a layer also builds that layer's unit rows. Figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, describe, load, synchronize  # noqa: E402

QUERIES = ["The bank of the river was muddy.", "She will run the company next year.",
           "He saw the light in the window.", "They left the old house at dawn."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()

    from bertscope.analysis.corpus_search import build_index, search
    from bertscope.analysis.hidden_cache import HiddenStateCache

    lm = load(args)
    print(describe(lm))
    with tempfile.TemporaryDirectory() as tmp:
        cache = HiddenStateCache(tmp)
        synchronize(lm.device)
        start = time.perf_counter()
        index = build_index(lm, args.sentences, cache)
        synchronize(lm.device)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        again = build_index(lm, args.sentences, cache)
        warm = time.perf_counter() - start
        print(f"index of {len(index.texts):,} sentences, {index.n_words:,} words x {lm.num_layers + 1} layers: "
              f"built in {cold:.1f} s ({index.n_words / cold:,.0f} words/s, {len(index.texts) / cold:,.0f} "
              f"sentences/s); read back from disk in {warm:.2f} s; {again.states.size_bytes / 2**20:,.0f} MiB on disk")
        layer = lm.num_layers // 2
        start = time.perf_counter()
        search(lm, index, QUERIES[0], 1, layer)
        first = time.perf_counter() - start
        times = []
        for n in range(args.queries):
            start = time.perf_counter()
            search(lm, index, QUERIES[n % len(QUERIES)], 1, layer)
            times.append(time.perf_counter() - start)
        print(f"query at layer {layer}: first {first * 1000:.0f} ms (builds the layer's float16 rows, "
              f"{index.n_words * lm.hidden_size * 2 / 2**20:.0f} MiB), then median {statistics.median(times) * 1000:.1f} ms "
              f"over {args.queries} queries (embedding the sentence + cosine against {index.n_words:,} words + top 20)")


if __name__ == "__main__":
    main()
