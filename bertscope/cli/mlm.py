"""Commands that read the pretraining heads: fill-mask, BERT's 80/10/10 recipe on one text, NSP, SOP."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, finite_float, load, seed_int


def cmd_fill_mask(args: argparse.Namespace) -> Any:
    from bertscope.mlm.fill_mask import fill_mask

    r = fill_mask(load(args), args.text, args.top_k)
    if args.json:
        return r.to_json()
    lines = [f"mask {n + 1}: " + ", ".join(f"{p.token.strip()} {p.score:.3f}" for p in preds)
             for n, preds in enumerate(r.predictions)]
    return "\n".join([*lines, *(f"warning: {w}" for w in r.warnings)])


def _fill_mask_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="text with [MASK] or <mask> where words should be predicted")
    p.add_argument("--top-k", type=int, default=5)


def cmd_mlm_recipe(args: argparse.Namespace) -> Any:
    from bertscope.mlm.recipe import mlm_recipe

    r = mlm_recipe(load(args), args.text, seed=args.seed, select_rate=args.select_rate,
                   mask_rate=args.mask_rate, random_rate=args.random_rate)
    if args.json:
        return r.to_json()
    lines = [f"corrupted: {' '.join(r.corrupted.tokens)}"]
    lines += [f"  {p.position:>3} {p.original:>12} -> {p.shown:<12} ({p.action}); top {p.top[0].token.strip()}, "
              f"loss {p.loss:.3f}" for p in r.positions]
    lines.append(f"mean MLM loss {r.mean_loss:.4f} over {len(r.positions)} positions; "
                 f"recovered {r.accuracy:.0%}")
    return "\n".join(lines)


def _recipe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--select-rate", type=finite_float, default=0.15, help="share of tokens in the loss")
    p.add_argument("--mask-rate", type=finite_float, default=0.8, help="of those, share replaced by [MASK]")
    p.add_argument("--random-rate", type=finite_float, default=0.1, help="share replaced by a random token")


def cmd_nsp(args: argparse.Namespace) -> Any:
    from bertscope.mlm.nsp import next_sentence

    r = next_sentence(load(args), args.text_a, args.text_b)
    return r.to_json() if args.json else f"IsNext {r.is_next:.4f}  NotNext {r.not_next:.4f}"


def cmd_sop(args: argparse.Namespace) -> Any:
    from bertscope.mlm.nsp import sentence_order

    r = sentence_order(load(args), args.text_a, args.text_b)
    return r.to_json() if args.json else f"in order {r.in_order:.4f}  swapped {r.swapped:.4f}"


def _nsp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text_a")
    p.add_argument("text_b")


COMMANDS = [
    Command("fill-mask", "top-k predictions at every [MASK]", cmd_fill_mask, _fill_mask_arguments),
    Command("mlm-recipe", "BERT's 15% / 80-10-10 masking on one text, with the MLM loss", cmd_mlm_recipe,
            _recipe_arguments),
    Command("nsp", "next-sentence prediction for a pair", cmd_nsp, _nsp_arguments),
    Command("sop", "ALBERT's sentence-order prediction for a pair (A then B: in order or swapped)", cmd_sop,
            _nsp_arguments),
]
