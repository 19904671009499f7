"""The attribution command: every method of the registry, from the command line."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.attribution.registry import METHODS, attribution_methods, matrix_methods, score_methods
from bertscope.cli.common import Command, engine_argument, engine_of, load, progress_bar, read_text, seed_int
from bertscope.core.layers import parse_blocks
from bertscope.errors import BertScopeError


def cmd_attribute(args: argparse.Namespace) -> Any:
    import numpy as np

    from bertscope.attribution.gradients import parse_target
    from bertscope.attribution.methods import attribute

    target = parse_target(args.target, args.probe, args.probe_layer, args.label, args.position)
    if args.method not in score_methods() and target is not None:
        raise BertScopeError(f"{args.method} is a token-to-token method: --target/--probe belong to the methods "
                             f"that explain one decision ({', '.join(score_methods())}).")
    lm = load(args)
    layers = parse_blocks(args.layers, lm.num_layers)
    result = attribute(lm, args.text, args.pair, args.method, target, layers, args.steps)
    if args.json:
        return result.to_json()
    if args.method in score_methods():
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

    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--method", choices=attribution_methods(), default="rollout")
    p.add_argument("--target", help="a method that explains one decision (grad, ig, occlusion, lime, …): POSITION:TOKEN (a masked-token prediction; POSITION alone = the "
                                    "model's top prediction there), nsp, or sop (ALBERT); a fine-tuned model's "
                                    "class[:LABEL], tag:POSITION[:LABEL], start[:POSITION], end[:POSITION] or span "
                                    "(question answering: the question is TEXT, the context --pair)")
    p.add_argument("--probe", help="a method that explains one decision: a probe run's output folder (bertscope probe --out)")
    p.add_argument("--layer", dest="probe_layer", help="with --probe: the layer the probe reads, 0 to L-1 (an encoder "
                                                        "block, as in `attention`) or 'embeddings'")
    p.add_argument("--class", dest="label", help="with --probe: the class to explain")
    p.add_argument("--position", type=int, help="with a word-level probe: a token position of the word")
    p.add_argument("--steps", type=int, default=50, help="ig: integration steps (Gauss-Legendre)")
    p.add_argument("--layers", help="matrix methods: comma-separated layers to keep, numbered from 0 like every "
                                    "layer in BertScope (until 2026-11 this flag counted from 1: --layers 6 then "
                                    "is --layers 5 now); default all")


def faithfulness_items(lm, corpus: str | None, data: str | None, seed: int):
    """(items, lines skipped, where they came from) for ``--corpus brown:N`` or ``--data FILE``: a
    fine-tuned classifier's predicted classes, else masked-token predictions."""
    from bertscope.attribution.class_items import brown_class_items, class_items
    from bertscope.attribution.items import brown_items, text_items
    from bertscope.core.task_head import SEQUENCE

    classifier = lm.task is not None and lm.task.kind == SEQUENCE
    if data is not None:
        content = read_text(data, "data")
        if not classifier:
            items, skipped = text_items(lm, content.splitlines(), seed)
            return items, skipped, data
        texts, pairs = class_texts(content, data)
        items, skipped = class_items(lm, texts, pairs)
        return items, skipped, data
    spec = corpus or "brown:200"
    name, _, size = spec.partition(":")
    if name != "brown" or not (size or "200").isdigit():
        raise BertScopeError(f"{spec!r}: use --corpus brown:N (N Brown sentences) or --data FILE.")
    n = int(size or 200)
    if classifier:
        return brown_class_items(lm, n, seed), 0, f"brown:{n}"
    return brown_items(lm, n, seed), 0, f"brown:{n}"


def class_texts(content: str, name: str) -> tuple[list[str], list[str | None] | None]:
    """A classifier's texts (and pairs) from a CSV/JSONL file of records, or one text a line."""
    from bertscope.tasks.predict import read_records

    if name.lower().endswith((".csv", ".jsonl", ".json")):
        records = read_records(content, name)
        return records.texts, records.pairs
    return [line for line in content.splitlines() if line.strip()], None


def cmd_faithfulness(args: argparse.Namespace) -> Any:
    from bertscope.attribution.deletion import REMOVALS
    from bertscope.attribution.faithfulness import check_methods, faithfulness

    if args.corpus is not None and args.data is not None:
        raise BertScopeError("Give --corpus or --data, not both.")
    methods = check_methods(args.methods.split(","))
    if args.removal not in REMOVALS:  # argparse checks too; the library says the same
        raise BertScopeError(f"Unknown removal {args.removal!r}.")
    if args.steps < 1:
        raise BertScopeError("--steps must be at least 1.")
    engine = engine_of(args)
    lm = load(args)
    items, skipped, source = faithfulness_items(lm, args.corpus, args.data, args.seed)
    with progress_bar("items", "item") as progress:
        board = faithfulness(lm, items, methods, args.removal, args.steps, args.seed, source, skipped, progress, engine)
    if args.json:
        return board.to_json()
    return board_table(board)


def board_table(board) -> str:
    """The scoreboard as text: one row per method, means with 95% intervals."""
    summary = board.summary()
    removal = "excluded as keys (attention mask)" if board.removal == "attention" else "replaced by [MASK]"
    own = "predicted classes" if board.decision == "class" else "masked-token predictions"
    lines = [f"faithfulness of each method on {board.model}'s own {own}: {len(board.results)} items "
             f"({board.source}{f', lines skipped: {board.skipped}' if board.skipped else ''}); removed tokens "
             f"{removal}; AOPC over k = " + ", ".join(f"{f:.0%}" for f in board.fractions) + " of the candidates",
             f"{'method':<14}{'comprehensiveness ↑':>26}{'sufficiency ↓':>26}{'ρ with leave-one-out ↑':>26}"
             f"{'s/item':>9}"]

    def cell(stat: dict) -> str:
        if stat["mean"] is None:
            return f"{'-':>26}"
        return f"{stat['mean']:>+10.3f} [{stat['low']:+.3f}, {stat['high']:+.3f}]"

    for name, entry in summary.items():
        lines.append(f"{name:<14}{cell(entry['comprehensiveness'])}{cell(entry['sufficiency'])}"
                     f"{cell(entry['loo_spearman'])}{entry['seconds_per_item']:>9.2f}")
    return "\n".join(lines)


def _faithfulness_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.attribution.deletion import REMOVALS
    from bertscope.attribution.faithfulness import RANDOM
    from bertscope.attribution.registry import faithfulness_defaults

    p.add_argument("--corpus", help="brown:N: N Brown sentences over every genre, each with one content word-piece "
                                    "masked (default brown:200)")
    p.add_argument("--data", help="a UTF-8 file, one sentence a line: a line's [MASK] is used, else a content word "
                                  "(Brown's tags) is masked; for a fine-tuned classifier, its texts (a .csv/.jsonl "
                                  "of text[,pair][,label] records, or one text a line) and y = the predicted class")
    p.add_argument("--methods", default=",".join(faithfulness_defaults()), help="comma-separated methods of `attribute`, "
                                                                        f"and {RANDOM} (the floor)")
    p.add_argument("--removal", choices=REMOVALS, default="attention", help="attention: a removed token is no "
                                                                            "query's key in any layer, positions kept "
                                                                            "(default); mask: it becomes [MASK]")
    p.add_argument("--seed", type=seed_int, default=0, help="which sentences and pieces, and the random ranking")
    p.add_argument("--steps", type=int, default=50, help="integrated gradients' steps")
    engine_argument(p)


COMMANDS = [
    Command("faithfulness", "which attribution to trust: comprehensiveness, sufficiency and agreement with "
            "leave-one-out of every method on the model's own masked-token predictions (or a classifier's predicted "
            "classes)", cmd_faithfulness,
            _faithfulness_arguments),
    Command("attribute", "what each token owes to the others (" + ", ".join(
        METHODS[m].title for m in matrix_methods() if m != "attention") + ") or to one decision (" + ", ".join(
        METHODS[m].title for m in score_methods()) + ")", cmd_attribute, _attribute_arguments),
]
