"""Head statistics throughput against a bare batched forward, and peak memory.

    python benchmarks/head_stats.py [--model bundled|random:bert-base-uncased] [--device cuda] [--dtype float16]
                                    [--sentences 1000] [--batch-size 32]

Both sides run the same length-sorted batches of the shipped corpus (cycled to --sentences)
with ``output_attentions`` on the model's device; ours also computes every statistic there
(torch, layer by layer) and copies only the [layer, head] sums. Goal:
ours / bare >= 0.8 sentences per second. Memory: the peak of numpy buffers (tracemalloc) and
of RSS while the statistics stream, against one batch's attentions and the whole corpus's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, bare_forward, describe, interleaved, load  # noqa: E402


class PeakRSS:
    """Samples this process's resident memory every 5 ms in a thread."""

    def __enter__(self):
        self.process = psutil.Process()
        self.base = self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.base) / 2**20


def main() -> None:
    from bertscope.analysis.attention_stats import head_stats
    from bertscope.corpora.sentences import shipped_corpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    lm = load(args)
    corpus = shipped_corpus()
    sentences = [corpus[i % len(corpus)] for i in range(args.sentences)]
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    batches = [[sentences[i] for i in order[s:s + args.batch_size]]
               for s in range(0, len(order), args.batch_size)]

    def bare() -> None:
        for batch in batches:
            bare_forward(lm, batch, output_attentions=True)

    def ours() -> None:
        head_stats(lm, sentences, batch_size=args.batch_size)

    times = interleaved({"bare": bare, "ours": ours}, args.repeats, lm.device)
    t_bare, t_ours = times["bare"], times["ours"]
    rate_bare = args.sentences / statistics.median(t_bare)
    rate_ours = args.sentences / statistics.median(t_ours)
    print(f"{describe(lm)}; {args.sentences} sentences, batches of {args.batch_size}")
    print(f"bare HF forward with attentions: {rate_bare:8.1f} sentences/s")
    print(f"head statistics (ours):          {rate_ours:8.1f} sentences/s   "
          f"ratio {rate_ours / rate_bare:.3f} (goal >= 0.8)")

    import tracemalloc

    with PeakRSS() as mem:
        tracemalloc.start()  # numpy reports its buffers to tracemalloc; torch's tensors do not
        ours()
        traced_peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    longest = max(len(lm.tokenizer(s)["input_ids"]) for s in sentences)
    one_batch = args.batch_size * lm.num_layers * lm.num_heads * longest**2 * 4 / 2**20
    lengths = [len(lm.tokenizer(s)["input_ids"]) for s in sentences]
    whole = sum(lm.num_layers * lm.num_heads * n * n * 4 for n in lengths) / 2**20
    print(f"peak numpy memory while streaming (tracemalloc) {traced_peak:.1f} MiB; peak RSS growth "
          f"after warm-up {mem.growth_mib:.1f} MiB; one padded batch of attentions (fp32) "
          f"{one_batch:.1f} MiB; the whole corpus's attentions {whole:.1f} MiB")


if __name__ == "__main__":
    main()
