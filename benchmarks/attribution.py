"""Time per attribution method as a ratio to one forward pass, and IG's steps vs its
completeness error.

    python benchmarks/attribution.py [--model bundled-mlm|random:bert-base-uncased] [--device cuda]
                                     [--lengths 32,128] [--repeats 3]

For each input length (tokens, special tokens included, a [MASK] in the middle) every method
runs through ``bertscope.attribution.methods.attribute`` from text, as the CLI and pages call it; the
baseline is one bare Hugging Face forward of the same text with the model's heads (logits),
on the same device. Flow is timed for the last layer only (n² max-flow problems) and only
under its token cap. Medians of interleaved runs; figures only, nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, bare_forward, describe, interleaved, load  # noqa: E402

PARAGRAPH = (
    "The bank of the river was muddy after the storm, and the fishermen who came every morning walked "
    "along it slowly with their dogs. Nobody expected the committee to approve the proposal so quickly, "
    "least of all the chair, who had argued against it for months. In spring the cherry trees along the "
    "canal bloom for barely two weeks, and the whole town comes out to see them. "
)


def text_of(lm, tokens: int) -> str:
    """A text of exactly ``tokens`` tokens (special tokens included) with a mask in the middle."""
    ids = lm.tokenizer(PARAGRAPH * 20, add_special_tokens=False)["input_ids"][: tokens - 2]
    ids[len(ids) // 2] = lm.tokenizer.mask_token_id
    text = lm.tokenizer.decode(ids)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, model="bundled-mlm")
    parser.add_argument("--lengths", default="32,128")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", default="4,8,16,32,50,100", help="IG steps for the completeness table (on the first length; empty: no table)")
    args = parser.parse_args()

    from bertscope.attribution.gradients import Target
    from bertscope.attribution.methods import attribute
    from bertscope.attribution.rollout import MAX_FLOW_TOKENS
    from bertscope.core.forward import inspect

    lm = load(args)
    print(describe(lm))
    for length in [int(x) for x in args.lengths.split(",")]:
        text = text_of(lm, length)
        ins = inspect(lm, text, with_attentions=False, with_hidden_states=False, with_logits=False)
        position = list(ins.input_ids).index(lm.tokenizer.mask_token_id)
        target = Target("token", position)
        calls = {"forward (baseline)": lambda: bare_forward(lm, [text], heads=True)}
        for method in ("attention", "rollout", "norm", "alti"):
            calls[method] = lambda m=method: attribute(lm, text, method=m)
        if "mlm" in lm.outputs:
            calls["grad"] = lambda: attribute(lm, text, method="grad", target=target)
        times = interleaved(calls, args.repeats, lm.device)
        slow = {}
        if "mlm" in lm.outputs:
            slow["ig (50 steps)"] = lambda: attribute(lm, text, method="ig", target=target)
        if ins.n_tokens <= MAX_FLOW_TOKENS:
            slow[f"flow (layer {lm.num_layers} only)"] = lambda: attribute(lm, text, method="flow", layers=[lm.num_layers])
        times.update(interleaved(slow, 1, lm.device))
        base = statistics.median(times["forward (baseline)"])
        print(f"\n{ins.n_tokens} tokens (mask at {position}); forward {base * 1000:.1f} ms")
        print(f"{'method':<22} {'median ms':>10} {'x forward':>10}")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:<22} {median * 1000:>10.1f} {median / base:>10.1f}")
        if ins.n_tokens > MAX_FLOW_TOKENS:
            print(f"{'flow':<22} {'over the ' + str(MAX_FLOW_TOKENS) + '-token cap':>21}")
    if "mlm" in lm.outputs and args.steps.strip():
        length = int(args.lengths.split(",")[0])
        text = text_of(lm, length)
        ins = inspect(lm, text, with_attentions=False, with_hidden_states=False, with_logits=False)
        target = Target("token", list(ins.input_ids).index(lm.tokenizer.mask_token_id))
        print(f"\nIG on {ins.n_tokens} tokens: steps vs completeness error (|sum - (f(x) - f(x'))| / |f(x) - f(x')|)")
        for steps in [int(x) for x in args.steps.split(",")]:
            r = attribute(lm, text, method="ig", target=target, steps=steps)
            print(f"  {steps:>4} steps  {r.completeness_error:9.4%}")


if __name__ == "__main__":
    main()
