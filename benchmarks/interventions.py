"""What interventions cost beside the passes they cannot avoid, and the pruning curve.

    python benchmarks/interventions.py [--model bundled-mlm|random:bert-base-uncased] [--device cuda]
                                       [--tokens 128] [--states all] [--sentences 256] [--prune]

- Patching: the hidden-state grid ((L + 1) x T cells) and the head grid (L x H cells) through
  ``interventions.patching.patched_metrics``, against the same number of plain encoder passes of
  the corrupted input run in the same batches (no hooks, no metric): the patching overhead.
  ``--states N`` times the first N hidden states only (a CPU keeps BERT-base's 13 x 128 cells
  for a long while); the ratio is per cell either way.
- Head importance over ``--sentences`` Brown sentences (training documents) against a plain
  forward + backward (parameter gradients) of the same masked batches.
- ``--prune``: the pruning curve on held-out Brown documents, importance order beside three
  random orders.

Medians of interleaved runs; figures only, nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, describe, interleaved, load  # noqa: E402


def pair_of(lm, tokens: int) -> tuple[str, str, tuple[str, str]]:
    """A clean and a corrupted text of exactly ``tokens`` tokens from Brown: a mask in the middle,
    and one word swapped near the start ("the" -> "a"): the metric is logit(the) - logit(a)."""
    from bertscope.corpora.brown_tasks import brown_split_texts

    ids = lm.tokenizer(" ".join(brown_split_texts(64, held_out=True)), add_special_tokens=False, verbose=False)["input_ids"]
    ids = ids[: tokens - 2]
    the, a = lm.tokenizer.convert_tokens_to_ids(["the", "a"])
    first = ids.index(the) if the in ids else 1
    ids[len(ids) // 2] = lm.tokenizer.mask_token_id
    clean = lm.tokenizer.decode(ids)
    ids[first] = a
    return clean, lm.tokenizer.decode(ids), ("the", "a")


def patching(lm, tokens: int, states: int | None, repeats: int) -> None:
    from bertscope.core.passes import repeat_feed, rows_within_budget
    from bertscope.interventions.patching import capture, patched_metrics, prepare

    clean, corrupt, candidates = pair_of(lm, tokens)
    setup = prepare(lm, clean, corrupt, candidates)
    n = len(setup.tokens)
    per_batch = rows_within_budget(lm, n)
    for what, rows, columns in (("hidden", min(states or lm.num_layers + 1, lm.num_layers + 1), n),
                                ("heads", lm.num_layers, lm.num_heads)):
        pieces, m_clean, m_corrupt = capture(lm, setup, what)
        cells = [(r, (c,)) for r in range(rows) for c in range(columns)]

        def plain():
            for start in range(0, len(cells), per_batch):
                feed = repeat_feed(setup.corrupt_feed, min(per_batch, len(cells) - start))
                with lm.attention_kernel(False), torch.inference_mode():
                    lm.model.base_model(**feed, return_dict=True)

        times = interleaved({"plain": plain,
                             "ours": lambda: patched_metrics(lm, setup, what, cells, pieces)}, repeats, lm.device)
        p, o = statistics.median(times["plain"]), statistics.median(times["ours"])
        print(f"patching {what}: {rows} x {columns} = {len(cells):,} cells at {n} tokens, {per_batch} rows a pass: "
              f"plain passes {p:.2f} s, ours {o:.2f} s, overhead {o / p:.2f}x (goal <= 1.3x); "
              f"m_clean {m_clean:+.3f}, m_corrupt {m_corrupt:+.3f}")


def importance(lm, sentences: int, repeats: int) -> object:
    from bertscope.core.passes import mlm_logits
    from bertscope.corpora.brown_tasks import brown_split_texts
    from bertscope.interventions.importance import head_importance, masked_batches

    texts = brown_split_texts(sentences, held_out=False)
    batches = list(masked_batches(lm, texts, 16, seed=0))
    result = {}

    def plain():
        lm.model.zero_grad(set_to_none=True)
        with torch.enable_grad(), lm.attention_kernel(False):
            for _, feed, chosen, gold in batches:
                logits = mlm_logits(lm.model(**feed, return_dict=True))[chosen]
                F.cross_entropy(logits.float(), gold).backward()
        lm.model.zero_grad(set_to_none=True)

    def ours():
        result["importance"] = head_importance(lm, texts, batch_size=16, seed=0)

    for p in lm.model.parameters():
        p.requires_grad_(True)
    times = interleaved({"plain": plain, "ours": ours}, repeats, lm.device)
    p, o = statistics.median(times["plain"]), statistics.median(times["ours"])
    tokens = sum(int(f["attention_mask"].sum()) for _, f, _, _ in batches)
    print(f"head importance: {sentences} Brown sentences, {tokens:,} tokens, {len(batches)} batches: plain forward + "
          f"backward {p:.2f} s, ours {o:.2f} s, ratio {o / p:.2f}x (goal <= 2.5x)")
    return result["importance"]


def pruning(lm, imp, held: int) -> None:
    import time

    from bertscope.corpora.brown_tasks import brown_split_texts
    from bertscope.interventions.importance import pruning_curve

    texts = brown_split_texts(held, held_out=True)
    start = time.perf_counter()
    curve = pruning_curve(lm, imp, texts)
    low, high = curve.random_spread
    print(f"pruning curve ({time.perf_counter() - start:.1f} s): held-out masked-LM top-1 on {held} Brown sentences "
          f"(held-out documents), {curve.positions:,} positions")
    print("| heads removed | least important first | random orders: mean | min | max |")
    print("|---:|---:|---:|---:|---:|")
    for f, a, m, lo, hi in zip(curve.fractions, curve.importance_order, curve.random_mean, low, high):
        print(f"| {f:.0%} | {a:.3f} | {m:.3f} | {lo:.3f} | {hi:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, model="bundled-mlm")
    parser.add_argument("--tokens", type=int, default=128, help="patching input length, special tokens included")
    parser.add_argument("--states", type=int, help="time the first N hidden states of the grid (default all)")
    parser.add_argument("--sentences", type=int, default=256, help="head importance sample (0: skip)")
    parser.add_argument("--prune", action="store_true", help="also the pruning curve on 200 held-out sentences")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    lm = load(args)
    print(describe(lm))
    patching(lm, args.tokens, args.states, args.repeats)
    if args.sentences:
        imp = importance(lm, args.sentences, args.repeats)
        if args.prune:
            pruning(lm, imp, 200)


if __name__ == "__main__":
    main()
