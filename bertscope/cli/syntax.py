"""``structural-probe``: Hewitt & Manning's distance and depth probes at every layer, on UD English-EWT."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load, progress_bar, seed_int
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
    from bertscope.analysis.structural_runs import TRAINING, random_twin, structural_probes
    from bertscope.analysis.typed_tree import typed_tree, typed_words
    from bertscope.core.layers import hidden_index

    if args.corpus != "ewt":
        raise BertScopeError(f"--corpus {args.corpus!r}: the structural probe reads ewt (UD English-EWT).")
    for flag in ("max_train", "max_test", "rank"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise BertScopeError(f"--{flag.replace('_', '-')} must be at least 1.")
    if args.sentence is not None:
        if args.what == "depth":
            raise BertScopeError("--sentence's tree comes from the distance probe: leave out --what depth.")
        typed_words(args.sentence)  # a sentence without a tree is refused before the training, not after
    if args.layer is not None and (not args.layer.strip() or "," in args.layer):
        raise BertScopeError(f"--layer {args.layer!r}: give one layer, 'embeddings' or a number from 0.")
    lm = load(args)
    states = parse_states(args.layers, lm.num_layers)
    tree_state = None if args.layer is None else hidden_index(args.layer.strip(), lm.num_layers)
    if tree_state is not None and states is not None and tree_state not in states:
        raise BertScopeError(f"--layer {args.layer} is not among --layers {args.layers}.")
    twin = random_twin(lm, args.seed) if args.random_baseline else None
    with progress_bar(f"{lm.name}: structural probes", "layer") as progress:
        result = structural_probes(lm, states, args.rank, args.what, args.max_train, args.max_test, args.seed, twin,
                                   progress=lambda done, total, what: progress(done, total) if what == TRAINING else None,
                                   tree_state=tree_state)  # the bar counts layers trained
    typed = None if args.sentence is None else typed_tree(lm, result.probe, result.tree_state, args.sentence)
    if args.json:
        return {**result.to_json(), **({"typed_tree": typed.to_json()} if typed is not None else {})}
    return table(result) + ("" if typed is None else "\n" + typed_lines(typed))


def typed_lines(tree) -> str:
    """The typed sentence's predicted tree as its edges, words numbered from 1."""
    words = " ".join(f"{i}:{w}" for i, w in enumerate(tree.words, start=1))
    edges = ", ".join(f"{tree.words[a - 1]}–{tree.words[b - 1]}" for a, b in tree.predicted_edges)
    lines = [f"your sentence at {tree.layer}: {words}", f"  predicted tree (punctuation left out): {edges}"]
    if tree.left_out:
        lines.append(f"  left out (no piece of the tokenizer): {', '.join(tree.left_out)}")
    return "\n".join(lines)


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
    lines.append(f"best layer: {result.best_layer} (add --json for every test sentence's predicted tree at "
                 f"{result.tree_layer})")
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
    p.add_argument("--layer", help="the layer whose test trees (and --sentence's tree) are given: 'embeddings' or "
                                   "a number from 0 (default the best)")
    p.add_argument("--sentence", help="also the tree the probe predicts for this sentence (no gold)")
    p.add_argument("--seed", type=seed_int, default=0)


COMMANDS = [
    Command("structural-probe", "Hewitt & Manning's structural probes (tree distance, depth) per layer on UD "
            "English-EWT: UUAS, DSpr., root accuracy, NSpr., with the chain baseline", cmd_structural_probe,
            _arguments),
]
