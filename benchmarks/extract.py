"""Hidden-state cache building: ours against a naive loop and against unsorted batches.

    python benchmarks/extract.py [--model bundled] [--copies 3]

Texts of realistic, varied length: the 218 sentences of the shipped attention corpus, alone
and joined in twos and fours (5 to ~100 words), ``--copies`` times in a seeded shuffle; every
word gets a tag (the figures do not depend on the tags). Three ways to get one vector per word (mean of its pieces) at
every layer:
- ours: ``hidden_states`` (length-sorted padded batches of 64, written to the disk cache);
- naive: one sentence at a time through the Hugging Face model, word ids from the tokenizer;
- unsorted: our extraction with the batches in input order (padding to each batch's longest);
- eager: ours with the attention kernel forced to eager (what the fast kernel alone buys);
- previous: the path before pooling moved to the device: eager passes through ``inspect_batch``
  with every hidden state copied to the CPU as float32, pieces pooled in numpy;
- raw: the physical reference, the encoder alone on the same length-sorted batches with the ids
  already on the device (no tokenising, nothing copied back), as tokens per second.
Figures: words per second (median of interleaved repeats, after one warm-up each), ratios
measured in this run, and tracemalloc's peak of Python-side allocations (numpy included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, describe, forced_kernel, interleaved, load  # noqa: E402


def peak_memory(fn) -> int:
    """tracemalloc's peak during one run (traced separately: tracing slows allocations)."""
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def naive(lm, task) -> list[np.ndarray]:
    out = []
    for words, tags in zip(task.words, task.labels):
        enc = lm.tokenizer(" ".join(words), return_tensors="pt", return_offsets_mapping=True)
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.inference_mode():
            states = lm.model.base_model(**{k: v.to(lm.device) for k, v in enc.items()},
                                         output_hidden_states=True).hidden_states
            hidden = torch.stack(states)[:, 0].float().cpu()  # [layer+1, token, dim]
        # word ids from the tokenizer: a piece belongs to the word whose characters it covers
        starts, at = [], 0
        for w in words:
            starts.append((at, at + len(w)))
            at += len(w) + 1
        for (s, e), _tag in zip(starts, tags):
            pieces = [i for i, (a, b) in enumerate(offsets) if a < e and b > s and b > a]
            out.append(hidden[:, pieces].mean(1).numpy())
    return out


def previous(lm, task) -> list[np.ndarray]:
    """The extraction before pooling moved to the device: eager passes, every hidden state to
    the CPU as float32 numpy, each word's pieces averaged there."""
    from bertscope import inspect_batch

    out = []
    with forced_kernel(lm, "eager"):
        texts = [" ".join(w) for w in task.words]
        for batch in inspect_batch(lm, texts, batch_size=64, with_attentions=False):
            for b in range(len(batch)):
                hidden = batch.hidden_states[b]  # [layer+1, token, dim]
                words: dict[int, list[int]] = {}
                for i, (w, seq) in enumerate(zip(batch.word_ids[b], batch.sequence_ids[b])):
                    if w is not None and seq == 0:
                        words.setdefault(w, []).append(i)
                out.append(np.stack([hidden[:, pos].mean(axis=1) for pos in words.values()], axis=1))
    return out


def main() -> None:
    from bertscope.analysis.hidden_cache import HiddenStateCache, extract, hidden_states
    from bertscope.corpora.probe_tasks import ProbeTask
    from bertscope.corpora.sentences import shipped_corpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lm = load(args, heads="none")
    corpus = shipped_corpus()
    texts = corpus + [" ".join(corpus[i:i + 2]) for i in range(0, len(corpus), 2)] + \
        [" ".join(corpus[i:i + 4]) for i in range(0, len(corpus), 4)]
    texts = [t for _ in range(args.copies) for t in texts]
    np.random.default_rng(0).shuffle(texts)
    words = tuple(tuple(t.split()) for t in texts)
    task = ProbeTask("corpus", "token", words, tuple(("X",) * len(w) for w in words))
    n_words = sum(len(w) for w in words)
    def ours() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            hidden_states(lm, task, "mean", HiddenStateCache(tmp))

    def unsorted() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            extract(lm, task, Path(tmp), "mean", sort_by_length=False)

    def eager() -> None:
        with forced_kernel(lm, "eager"):
            ours()

    from bertscope.core.batch_plan import output_bytes, pad, plan_batches, tokenize

    tokenized = tokenize(lm, [" ".join(w) for w in words], [None] * len(words))
    lengths = [len(e.ids) for e in tokenized.encodings]
    n_tokens = sum(lengths)
    row = lambda n: output_bytes(lm, n, False, True, False)  # noqa: E731  the batches ours runs
    feeds = [{k: v.to(lm.device) for k, v in pad(lm, tokenized, idx).feed.items()
              if k in lm.tokenizer.model_input_names} for idx in plan_batches(lengths, row, 64, 512 * 2**20)]

    def raw() -> None:
        with lm.attention_kernel(False), torch.inference_mode():
            for feed in feeds:
                lm.model.base_model(**feed)

    times = interleaved({"ours": ours, "naive": lambda: naive(lm, task), "unsorted": unsorted, "eager": eager,
                         "previous": lambda: previous(lm, task), "raw": raw},
                        repeats=args.repeats, device=lm.device)  # in turn, so drift of this shared machine hits all alike
    ours_s, naive_s, unsorted_s = (statistics.median(times[k]) for k in ("ours", "naive", "unsorted"))
    eager_s, previous_s = statistics.median(times["eager"]), statistics.median(times["previous"])
    ours_peak, naive_peak, unsorted_peak = (peak_memory(f) for f in (ours, lambda: naive(lm, task), unsorted))
    with tempfile.TemporaryDirectory() as tmp:
        hidden_states(lm, task, "mean", HiddenStateCache(tmp))
        start = time.perf_counter()
        hidden_states(lm, task, "mean", HiddenStateCache(tmp))
        hit_s = time.perf_counter() - start
    rate = lambda s: n_words / s  # noqa: E731
    print(f"{describe(lm)}; {len(words)} sentences, {n_words:,} words")
    for name, seconds, peak in (("ours (sorted batches + disk cache)", ours_s, ours_peak),
                                ("naive one sentence at a time", naive_s, naive_peak),
                                ("unsorted padded batches", unsorted_s, unsorted_peak)):
        print(f"{name + ':':<37}{rate(seconds):,.0f} words/s ({seconds:.1f} s), peak {peak / 2**20:.0f} MiB")
    print(f"ratios: ours / naive {naive_s / ours_s:.2f}x (goal >= 3), ours / unsorted {unsorted_s / ours_s:.2f}x "
          f"(goal >= 1.2); cache hit afterwards {hit_s:.2f} s")
    raw_s = statistics.median(times["raw"])
    print(f"tokens/s: ours {n_tokens / ours_s:,.0f}, the raw {lm.fast_attention} forward on the same batches with ids "
          f"already on the device {n_tokens / raw_s:,.0f}: ours {raw_s / ours_s:.2f}x of it (goal >= 0.5)")
    print(f"fast kernel: ours {rate(ours_s):,.0f} words/s, forced eager {rate(eager_s):,.0f} ({eager_s / ours_s:.2f}x); "
          f"previous eager path (all hidden states to the CPU, numpy pooling) {rate(previous_s):,.0f} words/s: "
          f"ours {previous_s / ours_s:.2f}x (goal on a GPU >= 1.5)")


if __name__ == "__main__":
    main()
