"""``structural-probe``: Hewitt & Manning's distance and depth probes at every layer, on UD English-EWT."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load, progress_bar
from bertscope.errors import BertScopeError


def parse_states(text: str | None, n_layers: int) -> list[int] | None:
    """``embeddings,0,3`` -> hidden-state indices (0 = the embeddings, then block l is l + 1)."""
    from bertscope.core.layers import hidden_index

    if not text:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        value = part if part == "embeddings" else int(part) if part.lstrip("-").isdigit() else None
        if value is None:
            raise BertScopeError(f"--layers {text!r}: give 'embeddings' or layer numbers from 0, e.g. embeddings,0,3.")
        out.append(hidden_index(value, n_layers))
    return out


def cmd_structural_probe(args: argparse.Namespace) -> Any:
    from bertscope.analysis.structural_runs import random_twin, structural_probes

    if args.corpus != "ewt":
        raise BertScopeError(f"--corpus {args.corpus!r}: the structural probe reads ewt (UD English-EWT).")
    for flag in ("max_train", "max_test", "rank"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise BertScopeError(f"--{flag.replace('_', '-')} must be at least 1.")
    lm = load(args)
    states = parse_states(args.layers, lm.num_layers)
    twin = random_twin(lm, args.seed) if args.random_baseline else None
    with progress_bar(f"{lm.name}: structural probes", "layer") as progress:
        result = structural_probes(lm, states, args.rank, args.what, args.max_train, args.max_test, args.seed, twin,
                                   progress=lambda done, total, what: progress(done, total))
    if args.json:
        return result.to_json()
    return table(result)


def table(result) -> str:
    def cell(value) -> str:
        return f"{value:>9.3f}" if isinstance(value, float) else f"{'-':>9}"

    c = result.counts
    lines = [f"structural probes on UD English-EWT ({result.model}; {c['train_sentences']:,} train / "
             f"{c['dev_sentences']:,} dev / {c['test_sentences']:,} test sentences; {c['pooling']}; rank "
             f"{c['rank']}); test figures",
             f"{'layer':<16}{'UUAS':>9}{'DSpr.':>9}{'root %':>9}{'NSpr.':>9}"]
    for row in result.layers:
        lines.append(f"{str(row['layer']):<16}{cell(row.get('uuas'))}{cell(row.get('dspr'))}"
                     f"{cell(row.get('root_accuracy'))}{cell(row.get('nspr'))}")
    for name, row in result.baselines.items():
        title = "chain" if name == "chain" else f"random model ({row['layer']})"
        lines.append(f"{title:<16}{cell(row.get('uuas'))}{cell(row.get('dspr'))}{cell(row.get('root_accuracy'))}"
                     f"{cell(row.get('nspr'))}")
    lines.append(f"best layer: {result.best_layer} (add --json for every test sentence's predicted tree)")
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="ewt", help="ewt: UD English-EWT (after `corpus install ewt`)")
    p.add_argument("--layers", help="hidden states to probe: 'embeddings' and layer numbers from 0 (default all)")
    p.add_argument("--rank", type=int, help="the probe's rank (default the model's width, as Hewitt & Manning)")
    p.add_argument("--what", choices=["distance", "depth", "both"], default="both")
    p.add_argument("--max-train", type=int, help="train on at most this many EWT training sentences (seeded)")
    p.add_argument("--max-test", type=int, help="score at most this many test sentences (seeded)")
    p.add_argument("--random-baseline", action="store_true",
                   help="also a random-weight model of the same config at the best layer")
    p.add_argument("--seed", type=int, default=0)


COMMANDS = [
    Command("structural-probe", "Hewitt & Manning's structural probes (tree distance, depth) per layer on UD "
            "English-EWT: UUAS, DSpr., root accuracy, NSpr., with the chain baseline", cmd_structural_probe,
            _arguments),
]
