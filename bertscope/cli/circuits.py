"""``circuit``: which edges of the encoder carry a decision? EAP or EAP-IG scores every edge, and circuits
of every size are scored for faithfulness as MIB scores them, beside random circuits (``circuits``)."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, load, progress_bar, seed_int
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_text


def cmd_circuit(args: argparse.Namespace) -> Any:
    from bertscope.circuits.edges import check_method
    from bertscope.circuits.find import find_circuit
    from bertscope.circuits.pairs import read_pairs
    from bertscope.circuits.tasks import TASKS, task_pairs

    if (args.task is None) == (args.data is None):
        raise BertScopeError(f"Give --task ({', '.join(TASKS)}) or --data FILE (CSV or JSON Lines), one of them.")
    check_method(args.method, args.steps, args.ablation)
    if args.top_n is not None and args.top_n < 1:
        raise BertScopeError(f"--top-n {args.top_n}: a circuit has at least one edge.")
    if args.out and (not Path(args.out).resolve().parent.is_dir() or Path(args.out).is_dir()):
        raise BertScopeError(f"--out {args.out}: give a file in a folder that exists.")
    pairs = read_pairs(args.data) if args.data else None  # a bad file is refused before the model loads
    lm = load(args)
    if pairs is None:
        found = task_pairs(lm, args.task, args.size, args.seed)
        pairs = found.pairs
    phase: dict[str, Any] = {"what": None, "bar": None, "stack": contextlib.ExitStack()}

    def report(done: int, total: int, what: str) -> None:  # one bar per phase: recording, attribution, circuits
        if what != phase["what"]:
            phase["stack"].close()
            phase["what"], phase["bar"] = what, phase["stack"].enter_context(progress_bar(f"{lm.name}: {what}", "pass"))
        phase["bar"](done, total)

    try:
        result = find_circuit(lm, pairs, args.method, args.steps, args.top_n, args.ablation, seed=args.seed,
                              progress=None if args.json else report)
    finally:
        phase["stack"].close()
    data = result.to_json()
    if args.task:
        data["task"] = {"name": args.task, "kept": len(pairs), "tried": found.tried}
    if args.out:
        write_text(Path(args.out), json.dumps(data, indent=1))
    if args.json:
        return data
    return describe(data) + (f"\nwrote {args.out}" if args.out else "")


def describe(data: dict) -> str:
    """What a person reads: the metric's ends, the curve beside random circuits, the strongest edges."""
    from bertscope.circuits.find import split_said

    attributed, evaluated = data["attribution_pairs"], data["evaluation_pairs"]
    lines = [f"{data['method']} ({data['ablation']} ablation) on {data['model']}: "
             f"{split_said(len(attributed), len(evaluated), attributed == evaluated)}; "
             f"logit(answer) − logit(foil): clean {data['clean_metric']:+.3f}, corrupted {data['corrupted_metric']:+.3f}",
             f"CPR {data['cpr']:.3f} (random {data['random_cpr']:.3f}), CMD {data['cmd']:.3f} "
             f"(random {data['random_cmd']:.3f}); 80% faithful at "
             + (f"{data['share_reaching_80']:.1%} of the edges" if data["share_reaching_80"] else "no size swept"),
             "edges   share    kept  faithfulness  random"]
    for ours, rand in zip(data["faithfulness"], data["random_faithfulness"]):
        lines.append(f"{ours['edges']:6d}  {ours['share']:6.1%}  {ours['kept']:6d}  {ours['value']:12.3f}  "
                     f"{rand['value']:6.3f}")
    circuit = data["circuit"]
    lines.append(f"circuit: {len(circuit['edges'])} edges ({circuit['asked']} asked, the rest pruned), "
                 f"{len(circuit['nodes'])} nodes; strongest:")
    lines += [f"  {e['source']} -> {e['target']}  {e['score']:+.4f}" for e in circuit["edges"][:10]]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.circuits.edges import ABLATIONS, DEFAULT_STEPS, METHODS
    from bertscope.circuits.tasks import DEFAULT_SIZE, TASKS

    p.add_argument("--task", default=None, help=f"a built-in task: {', '.join(TASKS)}")
    p.add_argument("--data", default=None, help="your pairs: a CSV or JSON Lines file with clean, corrupted, answer, "
                   "foil (and word, for a tagger; context, for question answering)")
    p.add_argument("--method", default="eap", help=f"{', '.join(METHODS)} (default eap)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"integrated-gradient steps (default {DEFAULT_STEPS})")
    p.add_argument("--top-n", type=int, default=None,
                   help="edges in the circuit shown (default: the smallest swept size that is 80%% faithful)")
    p.add_argument("--ablation", default="patch", help=f"{' or '.join(ABLATIONS)}: what edges outside the circuit "
                   "carry (the corrupted run, or each node's mean output)")
    p.add_argument("--size", type=int, default=DEFAULT_SIZE, help=f"pairs of a task (default {DEFAULT_SIZE})")
    p.add_argument("--seed", type=seed_int, default=0, help="the task's pairs and the split into halves (default 0)")
    p.add_argument("--out", default=None, help="also write the JSON to this file")


COMMANDS = [
    Command("circuit", "which edges carry a decision? EAP or EAP-IG over the encoder's graph, circuits scored for "
            "faithfulness as MIB scores them (CPR, CMD) beside random circuits", cmd_circuit, _arguments),
]
