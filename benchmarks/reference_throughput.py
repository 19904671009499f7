"""The physical reference: sequences per second of the bare model with the ids already on the device.

    python benchmarks/reference_throughput.py --model random:bert-base-uncased --device cuda --dtype float16

No tokenising, no copies to the host, nothing of BertScope on the timed path: the encoder alone
(``base_model``) on random ids of exactly ``--lengths`` tokens, batches of ``--batch`` rows,
once with the fastest kernel (SDPA) returning nothing but the last hidden state, once eager with
every attention map returned (what an attention view needs). These are the ceilings the
library's own figures are measured against. Prints figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, describe, interleaved, load  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, model="random:bert-base-uncased")
    parser.add_argument("--lengths", default="128,512", help="comma-separated sequence lengths")
    parser.add_argument("--rows", type=int, default=2048, help="sequences timed per length")
    parser.add_argument("--batch", type=int, default=128, help="rows per forward pass")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lm = load(args, heads="none")
    print(describe(lm))
    encoder = lm.model.base_model
    for length in (int(n) for n in args.lengths.split(",")):
        batch = max(1, min(args.batch, args.rows))
        ids = torch.randint(1000, lm.vocab_size, (batch, length), device=lm.device)  # [batch, token]
        mask = torch.ones_like(ids)  # [batch, token]
        steps = max(1, args.rows // batch)

        def run(kernel: str, attentions: bool):
            def go() -> None:
                with lm.attention_kernel(kernel == "eager"), torch.inference_mode():
                    for _ in range(steps):
                        encoder(input_ids=ids, attention_mask=mask, output_attentions=attentions)
            return go

        cases = {"fast": run(lm.fast_attention, False), "eager+attentions": run("eager", True)}
        times = interleaved(cases, args.repeats, lm.device)
        rates = {k: steps * batch / statistics.median(v) for k, v in times.items()}
        print(f"{length:>4} tokens, batches of {batch}: {lm.fast_attention} {rates['fast']:9,.0f} sequences/s   "
              f"eager with attentions returned {rates['eager+attentions']:9,.0f} sequences/s   "
              f"ratio {rates['fast'] / rates['eager+attentions']:.2f}x")


if __name__ == "__main__":
    main()
