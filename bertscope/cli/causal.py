"""Whether a concept is used, from a shell: ``tcav`` (concept activation vectors per layer, the share of
inputs whose decision rises along them, and the t-test against random CAVs)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load


def cmd_tcav(args: argparse.Namespace) -> Any:
    from bertscope.causal.cavs import read_examples, tcav

    concept = read_examples(args.concept)
    inputs = read_examples(args.inputs, "inputs file", least=1) if args.inputs else None
    layers = [x.strip() for x in args.layers.split(",") if x.strip()] if args.layers else None
    lm = load(args)
    from pathlib import Path

    result = tcav(lm, concept, args.target, name=Path(args.concept).stem, random_from=args.random_from,
                  runs=args.runs, inputs=inputs, n_inputs=args.n, layers=layers, alpha=args.alpha, seed=args.seed)
    if args.json:
        return result.to_json()
    out = result.to_json()
    lines = [f"TCAV of {out['concept']!r} for {out['target']} on {out['model']}: {out['inputs']} inputs, "
             f"{out['runs']} random sets; significant at p < {out['corrected_alpha']:.4f} "
             f"(alpha {out['alpha']} over {len(out['layers'])} layers, Bonferroni)",
             f"  {'layer':>10}  {'TCAV':>5}  {'random':>6}  {'CAV acc':>7}  {'p':>9}  {'p (CAV)':>9}  verdict"]
    for v in out["layers"]:
        lines.append(f"  {v['layer']!s:>10}  {v['tcav']:5.2f}  {v['random_tcav']:6.2f}  {v['cav_accuracy']:7.2f}  "
                     f"{v['p_value']:9.2e}  {v['cav_p_value']:9.2e}  "
                     f"{'significant' if v['significant'] else 'not significant'}")
    return "\n".join(lines)


def _tcav_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.causal.cavs import ALPHA, MIN_CONCEPT, MIN_RUNS, RANDOM_SOURCES

    p.add_argument("--concept", required=True, help=f"a text file, one example of the concept a line (at least "
                                                    f"{MIN_CONCEPT})")
    p.add_argument("--target", required=True, help="the decision: a class of a sequence classifier (POSITIVE), or a "
                                                    "word a masked LM predicts at [MASK] (river)")
    p.add_argument("--random-from", default="brown", help=f"where the random sets come from: "
                                                          f"{', '.join(RANDOM_SOURCES)} or a text file (default brown)")
    p.add_argument("--runs", type=int, default=MIN_RUNS, help=f"random sets, one CAV each (default and least "
                                                              f"{MIN_RUNS})")
    p.add_argument("--inputs", help="a text file of the inputs whose decision is tested, one a line (a masked LM: "
                                    "each with one [MASK]); by default Brown sentences (with the word, masked)")
    p.add_argument("--n", type=int, default=50, help="inputs (default 50)")
    p.add_argument("--layers", help="comma-separated layers (from 0, or embeddings); default every one")
    p.add_argument("--alpha", type=float, default=ALPHA, help=f"the test's level before Bonferroni (default {ALPHA})")
    p.add_argument("--seed", type=int, default=0)


COMMANDS = [
    Command("tcav", "whether a concept is used for a decision: concept activation vectors per layer, the share of "
            "inputs whose decision rises along them, and the t-test against random CAVs (Kim et al. 2018)",
            cmd_tcav, _tcav_arguments),
]
