"""``erase``: does the model use what the probe finds? LEACE (or INLP) at each chosen layer, and every
behaviour against a random erasure of the same rank (``interventions.amnesic``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, load, positive_int, progress_bar, seed_int
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_text

CONCEPT_HELP = ("ewt-upos, ewt-deprel (after `corpus install ewt`), brown-pos (after `make brown`), sentiment "
                "(after `corpus install sentiment`), or a .conllu, .csv or .jsonl file of your own")


def parse_layers(text: str, n_layers: int) -> list:
    """``"embeddings,0,3"`` -> the layers, checked ("embeddings" or block numbers); "all": every one."""
    from bertscope.core.layers import hidden_labels, parse_layer

    if text.strip().lower() == "all":
        return hidden_labels(n_layers)
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise BertScopeError("--layers names no layer: give block numbers from 0, 'embeddings', or 'all'.")
    return [parse_layer(p, n_layers) for p in parts]


def cmd_erase(args: argparse.Namespace) -> Any:
    from bertscope.analysis.erasure import METHODS
    from bertscope.analysis.hidden_cache import HiddenStateCache
    from bertscope.interventions.amnesic import amnesic_probe
    from bertscope.interventions.concepts import load_concept

    if args.method not in METHODS:
        raise BertScopeError(f"No erasure method {args.method!r}: choose {' or '.join(METHODS)}.")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise BertScopeError(f"--out {args.out}: its folder does not exist.")
    concept = load_concept(args.concept, args.size, args.test_size, args.seed)  # bad data: refused before loading
    lm = load(args)
    layers = parse_layers(args.layers, lm.num_layers)
    with progress_bar(f"{lm.name}: erasing {concept.name}", "step") as bar:
        result = amnesic_probe(lm, concept, layers, args.method, args.seed, args.batch_size,
                               HiddenStateCache(args.cache),
                               progress=None if args.json else (lambda done, total, _: bar(done, total)))
    data = result.to_json()
    if args.out:
        write_text(Path(args.out), json.dumps(data, indent=1))
    if args.json:
        return data
    return describe(data) + (f"\nwrote {args.out}" if args.out else "")


def _fmt(value: float | None) -> str:
    return "    –" if value is None else f"{value:5.3f}"


def describe(data: dict) -> str:
    """The table a person reads: each behaviour before, after, and after the random control."""
    lines = [f"{data['concept']} erased by {data['method']} in {data['model']}: {data['train_sentences']:,} training "
             f"and {data['test_sentences']:,} test sentences, {len(data['classes'])} labels; control: "
             f"{data['control']}",
             "layer        rank  majority  probe: before  after  random   mlm top-1: before  after  random   "
             "last-layer probe: after  random"]
    for row in data["layers"]:
        mlm = row["mlm_top1"] or {}
        last = row["later_layers"][-1]["probe"] if row["later_layers"] else {}
        lines.append(f"{str(row['layer']):<12} {row['rank']:4d}  {row['majority']:8.3f}         "
                     f"{_fmt(row['probe_before'])}  {_fmt(row['probe_after'])}  {_fmt(row['probe_random_after'])}"
                     f"              {_fmt(mlm.get('before'))}  {_fmt(mlm.get('after'))}  {_fmt(mlm.get('random_after'))}"
                     f"                    {_fmt(last.get('after'))}  {_fmt(last.get('random_after'))}")
        for what, key in (("task accuracy", "task_accuracy"), ("UUAS at the last layer", "uuas")):
            if row[key]:
                arms = row[key]
                lines.append(f"{'':12} {what}: {_fmt(arms['before'])} -> {_fmt(arms['after'])} "
                             f"(random: {_fmt(arms['random_after'])})")
    lines += [f"not measured: {note}" for note in data["notes"]]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.interventions.concepts import DEFAULT_SIZE, DEFAULT_TEST

    p.add_argument("--concept", required=True, help=CONCEPT_HELP)
    p.add_argument("--layers", default="all",
                   help="where to erase: block numbers from 0 and/or 'embeddings', comma-separated, or 'all' (default)")
    p.add_argument("--method", default="leace", help="leace (default) or inlp")
    p.add_argument("--size", type=int, default=DEFAULT_SIZE, help=f"training sentences sampled (default {DEFAULT_SIZE})")
    p.add_argument("--test-size", type=int, default=DEFAULT_TEST, help=f"test sentences sampled (default {DEFAULT_TEST})")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--cache", default=None, help="the hidden-state cache folder (default: the user cache)")
    p.add_argument("--out", default=None, help="also write the JSON to this file")


COMMANDS = [
    Command("erase", "does the model use what a probe finds? LEACE or INLP at each layer (amnesic probing), every "
            "behaviour against a random erasure of the same rank", cmd_erase, _arguments),
]
