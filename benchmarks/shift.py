"""Embedding-shift extraction against a bare batched forward on the same sentences.

    python benchmarks/shift.py [--model bundled] [--sentences 200]

Ours: locate the word in every sentence and keep its vector at every layer (plus every word's
vector for intra-sentence similarity). Bare: the same length-sorted batches through the model
with ``output_hidden_states``. Goal: ours / bare >= 0.8 in sentences per second. The one-off
anisotropy baseline (per model and process) is timed separately.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, bare_forward, describe, interleaved, load  # noqa: E402


def main() -> None:
    from bertscope.analysis.shift import anisotropy_baseline, clear_baselines, collect
    from bertscope.corpora.senses import sense_presets

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="then torch.profiler's busiest host operations "
                                                                "of one pass of each")
    args = parser.parse_args()

    lm = load(args)
    rows = [row for word_rows in sense_presets().values() for row in word_rows]
    rows = [rows[i % len(rows)] for i in range(args.sentences)]
    words = {s: w for w, word_rows in sense_presets().items() for s, _ in word_rows}
    by_word: dict[str, list] = {}
    for sentence, label in rows:
        by_word.setdefault(words[sentence], []).append((sentence, label))
    texts = sorted((s for s, _ in rows), key=len)

    def bare() -> None:
        for start in range(0, len(texts), 32):
            bare_forward(lm, texts[start:start + 32], output_hidden_states=True)

    def ours() -> None:
        for word, word_rows in by_word.items():
            collect(lm, word, word_rows)

    arms = {"bare": bare, "ours": ours}
    times = interleaved(arms, args.repeats, lm.device)
    t_bare, t_ours = times["bare"], times["ours"]
    rate = lambda ts: args.sentences / statistics.median(ts)  # noqa: E731
    print(f"{describe(lm)}; {args.sentences} sentences ({len(by_word)} words)")
    print(f"bare forward with hidden states: {rate(t_bare):8.1f} sentences/s")
    print(f"shift extraction (ours):         {rate(t_ours):8.1f} sentences/s   "
          f"ratio {rate(t_ours) / rate(t_bare):.3f} (goal >= 0.8)")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if lm.device.type == "cuda" else [])
        for name in ("bare", "ours"):
            with profile(activities=activities) as prof:
                arms[name]()
            print(f"--- {name}: busiest host operations")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))
    clear_baselines()
    start = time.perf_counter()
    anisotropy_baseline(lm)
    print(f"anisotropy baseline (218 shipped sentences, once per model): {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
