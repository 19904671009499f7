"""The attribution command: every method of the registry, from the command line."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load
from bertscope.core.layers import parse_blocks
from bertscope.errors import BertScopeError


def cmd_attribute(args: argparse.Namespace) -> Any:
    import numpy as np

    from bertscope.attribution.gradients import parse_target
    from bertscope.attribution.methods import attribute
    from bertscope.attribution.registry import SCORE_METHODS

    target = parse_target(args.target, args.probe, args.probe_layer, args.label, args.position)
    if args.method not in SCORE_METHODS and target is not None:
        raise BertScopeError(f"{args.method} is a token-to-token method: --target/--probe belong to grad and ig.")
    lm = load(args)
    layers = parse_blocks(args.layers, lm.num_layers)
    result = attribute(lm, args.text, args.pair, args.method, target, layers, args.steps)
    if args.json:
        return result.to_json()
    if args.method in SCORE_METHODS:
        a = result.attribution
        lines = [f"{args.method} for {a.target.describe()}: f = log p = {a.f_input:.4f}"]
        if a.completeness_error is not None:
            lines.append(f"  f(baseline) {a.f_baseline:.4f}; completeness error {a.completeness_error:.2%} "
                         f"over {a.steps} steps")
        lines += [f"  {i:>3} {tok:<14} {score:+.4f}" for i, (tok, score) in enumerate(zip(result.tokens, a.scores))]
        return "\n".join(lines)
    last, m = result.layers[-1], result.matrices[-1]
    lines = [f"{args.method}, {len(result.tokens)} tokens; after layer {last}, the top contributors of each token "
             "(add --json for every layer):"]
    for i, tok in enumerate(result.tokens):
        top = np.argsort(-m[i])[:3]
        lines.append(f"  {i:>3} {tok:<14} " + ", ".join(f"{result.tokens[j]} {m[i, j]:.3f}" for j in top))
    return "\n".join(lines)


def _attribute_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.attribution.registry import METHODS

    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--method", choices=METHODS, default="rollout")
    p.add_argument("--target", help="grad/ig: POSITION:TOKEN (a masked-token prediction; POSITION alone = the "
                                    "model's top prediction there), nsp, or sop (ALBERT)")
    p.add_argument("--probe", help="grad/ig: a probe run's output folder (probes.layerwise --out)")
    p.add_argument("--layer", dest="probe_layer", help="with --probe: the layer the probe reads, 0 to L-1 (an encoder "
                                                        "block, as in `attention`) or 'embeddings'")
    p.add_argument("--class", dest="label", help="with --probe: the class to explain")
    p.add_argument("--position", type=int, help="with a word-level probe: a token position of the word")
    p.add_argument("--steps", type=int, default=50, help="ig: integration steps (Gauss-Legendre)")
    p.add_argument("--layers", help="matrix methods: comma-separated layers to keep, numbered from 0 like every "
                                    "layer in BertScope (until 2026-11 this flag counted from 1: --layers 6 then "
                                    "is --layers 5 now); default all")


COMMANDS = [
    Command("attribute", "rollout, flow, norm-based attention, ALTI, gradient x input, integrated gradients",
            cmd_attribute, _attribute_arguments),
]
