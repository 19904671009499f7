"""Which attribution to trust: the scoreboard on Brown, and what the deletion test and Value Zeroing
cost beside the passes they cannot avoid.

    python benchmarks/faithfulness.py [--model bundled-mlm|bundled-sentiment|random:bert-base-uncased] [--items 200]
                                      [--methods attention,rollout,…] [--removal attention|mask]
                                      [--steps 50] [--cost] [--vz-tokens 128] [--vz-long 512]

- The scoreboard (``attribution.faithfulness``) on ``--items`` Brown sentences (a masked LM: a
  content word-piece masked; a classifier: the class it predicts): the table the CLI prints, each
  method's seconds an explanation, and the wall time.
- ``--cost``: the erasure of one item (every removal variant as rows of batches bounded by bytes,
  p(y) read at the mask) against the plain encoder passes of the same rows (the same inputs and
  attention masks, no head, no bookkeeping); medians over ten items.
- ``--vz-tokens``: Value Zeroing at that many tokens against the batched layer passes it needs
  (each layer module on T copies of its input, no hook, no distance); ``--vz-long``: one layer
  at that length, and the peak memory Value Zeroing adds (the RSS high-water mark).

Medians of interleaved runs; figures only, nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, describe, interleaved, load  # noqa: E402


def scoreboard(lm, items, methods, removal: str, steps: int, seed: int, out: str | None) -> None:
    from bertscope.attribution.faithfulness import faithfulness
    from bertscope.cli.attribution import board_table

    start = time.perf_counter()
    board = faithfulness(lm, items, methods, removal, steps, seed, f"brown:{len(items)}",
                         progress=lambda d, t: print(f"\r  {d}/{t} items", end="", file=sys.stderr, flush=True))
    print(file=sys.stderr)
    seconds = time.perf_counter() - start
    print(board_table(board))
    print(f"{len(items)} items in {seconds:.0f} s ({seconds / len(items):.2f} s an item), IG at {steps} steps")
    if out:
        Path(out).write_text(json.dumps(board.to_json(with_items=False), indent=1))
        print(f"summary written to {out}")


def erasure_cost(lm, items, repeats: int) -> None:
    from bertscope.attribution.deletion import removal_feed
    from bertscope.attribution.faithfulness import deletion_test, method_scores, plan_removals
    from bertscope.core.passes import rows_within_budget

    ratios, rows = [], []
    for item in items[:10]:
        scores = {m: method_scores(lm, item, m) for m in ("attention", "rollout", "grad", "random")}
        plan = plan_removals(item, scores)
        per_batch = rows_within_budget(lm, item.inspection.n_tokens)

        def plain():
            for start in range(0, len(plan.keeps), per_batch):
                feed = removal_feed(lm, item.input_ids, item.inspection.token_type_ids,
                                    plan.keeps[start:start + per_batch], "attention")
                with lm.attention_kernel(False), torch.inference_mode():
                    lm.model.base_model(**feed, return_dict=True)

        times = interleaved({"plain": plain, "ours": lambda: deletion_test(lm, item, scores)}, repeats, lm.device)
        ratios.append(statistics.median(times["ours"]) / statistics.median(times["plain"]))
        rows.append(len(plan.keeps))
    print(f"erasure of one item ({int(np.median(rows))} distinct removal rows, median; 4 methods x 5 fractions x 2 "
          f"+ leave-one-out + intact): ours / plain passes of the same rows = {statistics.median(ratios):.2f}x median, "
          f"{max(ratios):.2f}x worst of {len(ratios)} items (goal <= 1.3x)")


def brown_text_of(lm, tokens: int) -> str:
    from bertscope.corpora.brown_tasks import brown_split_texts

    ids = lm.tokenizer(" ".join(brown_split_texts(64, held_out=True)), add_special_tokens=False,
                       verbose=False)["input_ids"][: tokens - 2]
    return lm.tokenizer.decode(ids)


def value_zeroing_cost(lm, tokens: int, repeats: int) -> None:
    from bertscope.attribution.value_zeroing import layer_inputs, value_zeroing
    from bertscope.core.forward import inspect
    from bertscope.core.hooked_pass import run_block
    from bertscope.core.passes import rows_within_budget

    ins = inspect(lm, brown_text_of(lm, tokens), with_attentions=False, with_hidden_states=False, with_logits=False)
    n = ins.n_tokens
    states = layer_inputs(lm, ins)
    per_batch = rows_within_budget(lm, n)

    def plain():
        for layer in range(lm.num_layers):
            for start in range(0, n, per_batch):
                rows = min(per_batch, n - start)
                run_block(lm, layer, states[layer].expand(rows, -1, -1).contiguous())

    times = interleaved({"plain": plain, "ours": lambda: value_zeroing(lm, ins)}, repeats, lm.device)
    p, o = statistics.median(times["plain"]), statistics.median(times["ours"])
    print(f"Value Zeroing at {n} tokens: {lm.num_layers} layers x {n} variants, {per_batch} rows a batch: batched layer "
          f"passes {p:.2f} s, ours {o:.2f} s ({o / p:.2f}x; goal <= 1.3x)")


def value_zeroing_long(lm, tokens: int) -> None:
    from bertscope.attribution.value_zeroing import value_zeroing
    from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
    from bertscope.core.forward import inspect
    from bertscope.core.passes import rows_within_budget

    ins = inspect(lm, brown_text_of(lm, tokens), with_attentions=False, with_hidden_states=False, with_logits=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # MiB (Linux reports KiB)
    if lm.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(lm.device)
    start = time.perf_counter()
    value_zeroing(lm, ins, up_to=0)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    gpu = (f", GPU peak {torch.cuda.max_memory_allocated(lm.device) / 2**20:,.0f} MiB" if lm.device.type == "cuda"
           else "")
    print(f"Value Zeroing at {ins.n_tokens} tokens: one layer in {seconds:.1f} s ({ins.n_tokens} variants, "
          f"{rows_within_budget(lm, ins.n_tokens)} rows a batch within the {DEFAULT_BATCH_BYTES / 2**20:.0f} MiB batch "
          f"budget), so all {lm.num_layers} layers about {seconds * lm.num_layers:.0f} s; RSS high-water mark "
          f"{before:,.0f} -> {after:,.0f} MiB{gpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(parser, "bundled-mlm")
    parser.add_argument("--items", type=int, default=200, help="Brown sentences for the scoreboard (0: none)")
    parser.add_argument("--methods", default=None, help="comma-separated (default: every default method)")
    parser.add_argument("--removal", default="attention")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the scoreboard's summary JSON here")
    parser.add_argument("--cost", action="store_true", help="the erasure's cost against plain passes")
    parser.add_argument("--vz-tokens", type=int, default=0, help="Value Zeroing's cost at this many tokens")
    parser.add_argument("--vz-long", type=int, default=0, help="one layer of Value Zeroing at this many tokens")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from bertscope.attribution.faithfulness import check_methods
    from bertscope.attribution.items import brown_items
    from bertscope.attribution.registry import faithfulness_defaults

    lm = load(args)
    print(describe(lm))
    methods = check_methods(args.methods.split(",")) if args.methods else faithfulness_defaults()
    n = max(args.items, 10 if args.cost else 0)
    if not (args.items or args.cost):
        items = []
    elif "mlm" in lm.outputs:  # a masked LM: a content word-piece masked, its top-1 explained
        items = brown_items(lm, n, args.seed)
    else:  # a classifier (bundled-sentiment): the class it predicts for each sentence
        from bertscope.attribution.class_items import brown_class_items

        items = brown_class_items(lm, n, args.seed)
    if args.items:
        scoreboard(lm, items[: args.items], methods, args.removal, args.steps, args.seed, args.out)
    if args.cost:
        erasure_cost(lm, items, args.repeats)
    if args.vz_tokens:
        value_zeroing_cost(lm, args.vz_tokens, args.repeats)
    if args.vz_long:
        value_zeroing_long(lm, args.vz_long)


if __name__ == "__main__":
    main()
