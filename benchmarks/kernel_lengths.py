"""Where the fast attention kernel pays: hidden-state passes, SDPA against eager, by length.

    python benchmarks/kernel_lengths.py --model random:bert-base-uncased --device cuda --dtype float16

Texts of exactly ``--lengths`` tokens (a long text cut there), ``--rows`` of each. Two paths that
return no attention weights, each with the model's fast kernel and forced eager:
- ``inspect_batch(..., with_attentions=False)``: every hidden state of every layer copied to the
  host as float32 (what a caller who wants the raw vectors gets);
- ``pooled_hidden_states``: one vector per sentence per layer pooled on the device (what probes,
  shift, alignment and corpus search run), only [sentence, layer + 1, dim] crosses to the host.
Prints figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, describe, forced_kernel, interleaved, load  # noqa: E402

LONG = ("The bank of the river was muddy after the storm, and the boats stayed in the harbour while the "
        "keepers of the lock argued about the water. ") * 60


def main() -> None:
    from bertscope import inspect_batch
    from bertscope.core.pooling import PoolingPlan, pooled_hidden_states

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, model="random:bert-base-uncased")
    parser.add_argument("--lengths", default="32,128,256,512")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lm = load(args, heads="none")
    print(describe(lm))
    ids = lm.tokenizer(LONG, add_special_tokens=False, verbose=False)["input_ids"]
    for length in (int(n) for n in args.lengths.split(",")):
        text = lm.tokenizer.decode(ids[:length - 2])
        texts = [text] * args.rows

        def raw() -> None:
            for _ in inspect_batch(lm, texts, batch_size=args.batch_size, with_attentions=False):
                pass

        def pooled() -> None:
            def plan_of(batch):
                return PoolingPlan.from_groups([(b, np.flatnonzero(~batch.special_mask[b]).tolist(), "mean")
                                                for b in range(len(batch))])
            for _ in pooled_hidden_states(lm, texts, plan_of, batch_size=args.batch_size):
                pass

        times = {}
        for kernel in (lm.fast_attention, "eager"):
            with forced_kernel(lm, kernel):
                found = interleaved({"raw": raw, "pooled": pooled}, args.repeats, lm.device)
            times[kernel] = {k: statistics.median(v) for k, v in found.items()}
        fast, eager = times[lm.fast_attention], times["eager"]
        print(f"{length:>4} tokens, {args.rows} rows: all hidden states to the host {args.rows / fast['raw']:8.1f} vs "
              f"{args.rows / eager['raw']:8.1f} sentences/s ({eager['raw'] / fast['raw']:.2f}x); pooled on the device "
              f"{args.rows / fast['pooled']:8.1f} vs {args.rows / eager['pooled']:8.1f} "
              f"({eager['pooled'] / fast['pooled']:.2f}x) [{lm.fast_attention} vs eager]")


if __name__ == "__main__":
    main()
