"""Fill-mask latency against transformers' fill-mask pipeline on the same model and inputs.

    python benchmarks/fill_mask.py [--model DIR_OR_ID] [--repeats 10]

With no --model, a BERT-base-sized masked LM is built from bert-base-uncased's shipped config
with random weights (offline machines have no checkpoint with an MLM head; the cost of a
forward pass depends on the shapes, not on the values). Both sides use the same loaded model
object. Ours also returns attentions and hidden states of the pass. Goal: ratio <= 1.2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, describe, interleaved, load  # noqa: E402

TEXTS = [
    "The capital of France is [MASK].",
    "She deposited the money in the [MASK] on Friday.",
    "The [MASK] barked at the postman all morning.",
    "He plays the [MASK] in a jazz band.",
    "The river [MASK] its banks after the storm.",
    "Paris is the [MASK] of France, and Rome is the capital of [MASK].",
    "Water boils at one hundred degrees [MASK].",
    "The children built a [MASK] on the beach.",
    "I would like a cup of [MASK], please.",
    "The [MASK] rose over the mountains at dawn.",
    "Attention heads in the middle layers often track [MASK] relations.",
    "The museum opens at nine, but the guided [MASK] start at ten.",
]


def main() -> None:
    from transformers import pipeline

    from bertscope.mlm.fill_mask import fill_mask

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, model="random:bert-base-uncased")  # needs an MLM head
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()

    lm = load(args, heads="mlm")
    texts = [t.replace("[MASK]", lm.tokenizer.mask_token) for t in TEXTS]
    pipe = pipeline("fill-mask", model=lm.model, tokenizer=lm.tokenizer, top_k=args.top_k,
                    device=lm.device)

    def ours() -> None:
        for text in texts:
            fill_mask(lm, text, args.top_k)

    def theirs() -> None:
        for text in texts:
            pipe(text)

    times = interleaved({"pipeline": theirs, "ours": ours}, args.repeats, lm.device)
    t_ours, t_theirs = times["ours"], times["pipeline"]
    per = lambda ts: statistics.median(ts) / len(texts) * 1000  # noqa: E731
    print(f"{describe(lm)} ({lm.architecture}); {len(texts)} texts, top-{args.top_k}")
    print(f"pipeline: {per(t_theirs):7.1f} ms/text   ours: {per(t_ours):7.1f} ms/text   "
          f"ratio {statistics.median(t_ours) / statistics.median(t_theirs):.3f} (goal <= 1.2)")


if __name__ == "__main__":
    main()
