"""Whether a concept or a variable is used, from a shell: ``tcav`` (concept activation vectors per layer, the
share of inputs whose decision rises along them, and the t-test against random CAVs) and ``das``
(distributed alignment search: the subspace whose interchange does what the causal model says, its IIA
beside a random rotation's and the neurons')."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load, positive_int, probability, seed_int, whole_number
from bertscope.errors import BertScopeError


def cmd_tcav(args: argparse.Namespace) -> Any:
    from bertscope.causal.cavs import read_examples, tcav

    concept = read_examples(args.concept)
    inputs = read_examples(args.inputs, "inputs file", least=1) if args.inputs else None
    layers = [x.strip() for x in args.layers.split(",") if x.strip()] if args.layers is not None else None
    if layers == []:
        raise BertScopeError(f"--layers {args.layers!r} names no layer: give points such as 4,8 (or leave it out).")
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
    p.add_argument("--target", required=True, help="the decision: a class of a sequence classifier (POSITIVE), a "
                                                    "tagger's tag at the first word of each input tagged so (VERB), or a "
                                                    "word a masked LM predicts at [MASK] (river)")
    p.add_argument("--random-from", default="brown", help=f"where the random sets come from: "
                                                          f"{', '.join(RANDOM_SOURCES)} or a text file (default brown)")
    p.add_argument("--runs", type=whole_number(MIN_RUNS, f"the test takes at least {MIN_RUNS} random sets"), default=MIN_RUNS, help=f"random sets, one CAV each (default and least "
                                                              f"{MIN_RUNS})")
    p.add_argument("--inputs", help="a text file of the inputs whose decision is tested, one a line (a masked LM: "
                                    "each with one [MASK]); by default Brown sentences (with the word, masked)")
    p.add_argument("--n", type=positive_int, default=50, help="inputs (default 50)")
    p.add_argument("--layers", help="comma-separated layers (from 0, or embeddings); default every one")
    p.add_argument("--alpha", type=probability, default=ALPHA, help=f"the test's level before Bonferroni (default {ALPHA})")
    p.add_argument("--seed", type=seed_int, default=0)


def _positions(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BertScopeError(f"--positions takes token indices from 0 ([CLS] is 0), comma-separated: {text!r}.") \
            from None


def cmd_das(args: argparse.Namespace) -> Any:
    from bertscope.causal.alignment import align, check_run
    from bertscope.causal.das import TrainSettings, check_dim
    from bertscope.causal.variables import model_for, read_counterfactuals

    if args.task:
        model_for(args.task)  # an unknown task in one line before the model loads
    data = read_counterfactuals(args.data) if args.data else None
    positions = _positions(args.positions)
    settings = TrainSettings(epochs=args.epochs, seed=args.seed)
    check_run(args.pairs, settings)  # before the model loads, for the map as for one layer
    if args.map and args.dim == 0:
        raise BertScopeError("--map trains a subspace of one width at every cell: give --dim 1 or more (0, a width "
                             "learned, is for one layer).")
    lm = load(args)
    dim = None if args.dim == 0 else args.dim
    check_dim(lm, dim)
    if args.map:
        return _map(lm, args, data, positions, dim or 1, settings)
    result = align(lm, task=args.task, data=data, layer=args.layer, positions=positions, dim=dim, pairs=args.pairs,
                   settings=settings)
    out = result.to_json()
    if args.json:
        return out
    where = "each pair's variable word" if not out["positions"] else f"position {', '.join(map(str, out['positions']))}"
    lines = [f"DAS on {out['model']}, {out['task']}: layer {out['layer']}, {where}, a {out['dim']}-dimensional subspace "
             f"({out['pairs_train']} training pairs, {out['pairs_held_out']} held out, {out['seconds']:.1f} s)",
             f"  IIA {out['iia']:.3f}   random rotation {out['iia_random_rotation']:.3f}   "
             f"neurons {out['iia_neurons']:.3f}   whole state {out['iia_full_vector']:.3f}   "
             f"no intervention {out['iia_base']:.3f}"]
    for row in out.get("by_layer", []):
        lines.append(f"  layer {row['layer']!s:>10}  IIA {row['iia']:.3f}")
    return "\n".join(lines)


def _map(lm: Any, args: argparse.Namespace, data: Any, positions: list[int] | None, dim: int, settings: Any) -> Any:
    from bertscope.causal.alignment import iia_map, pairs_for

    name, prepared = pairs_for(lm, args.task, data, positions or [0], args.pairs, args.seed)
    found = iia_map(lm, prepared, task=name, dim=dim, settings=settings)
    out = found.to_json()
    if args.json:
        return out
    width = max(len(t) for t in out["tokens"]) + 1
    lines = [f"IIA of a {dim}-dimensional subspace at each layer and position, {out['task']} on {out['model']}",
             " " * 12 + "".join(f"{t:>{width}}" for t in out["tokens"])]
    for layer, row in zip(out["layers"], out["iia"]):
        lines.append(f"{layer!s:>12}" + "".join(f"{x:>{width}.2f}" for x in row))
    return "\n".join(lines)


def _das_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.causal.das import DEFAULT_PAIRS
    from bertscope.causal.variables import MODELS

    p.add_argument("--task", help=f"a shipped causal model: {', '.join(f'{m.name} ({m.model})' for m in MODELS.values())}")
    p.add_argument("--data", help="a CSV of counterfactual pairs: base, source, answer (what the interchange should "
                                  "give), foil (what it should not), and word for a tagger")
    p.add_argument("--layer", default="0", help="the hidden state: a layer from 0, embeddings, or all (every state, "
                                                "then the best with its controls)")
    p.add_argument("--positions", help="token positions aligned, comma-separated from 0 ([CLS] is 0); a task's "
                                       "default is its variable's word")
    p.add_argument("--dim", type=whole_number(0, "0 learns the width (boundless DAS); 1 and up fix it"), default=1, help="the subspace's width (default 1; 0 learns it: boundless DAS)")
    p.add_argument("--pairs", type=positive_int, default=DEFAULT_PAIRS, help=f"a task's pairs drawn before those the model "
                                                                    f"gets wrong are dropped (default {DEFAULT_PAIRS})")
    p.add_argument("--epochs", type=positive_int, default=4)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--map", action="store_true", help="the layer × position map instead: a subspace trained at every "
                                                       "state and token position (pairs of one token count); --json: "
                                                       '{"tokens", "layers", "iia": [[state][position]]}')


COMMANDS = [
    Command("tcav", "whether a concept is used for a decision: concept activation vectors per layer, the share of "
            "inputs whose decision rises along them, and the t-test against random CAVs (Kim et al. 2018)",
            cmd_tcav, _tcav_arguments),
    Command("das", "distributed alignment search: the subspace of a layer whose interchange between two inputs "
            "does what swapping a causal variable does; its interchange intervention accuracy beside a random "
            "rotation's and the neurons' (Geiger et al. 2024)", cmd_das, _das_arguments),
]
