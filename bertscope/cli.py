"""``python -m bertscope``: the library from a shell, one error style for every subcommand.

    python -m bertscope info bundled --json
    python -m bertscope inspect bundled "The bank of the river." --json

Bad input prints one line, ``bertscope: error: <what to do>``, on stderr and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from .errors import BertScopeError

EXIT_BAD_INPUT = 2


def _load(args: argparse.Namespace):
    from .models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def cmd_info(args: argparse.Namespace) -> Any:
    from .card import heads_text, model_card

    card = model_card(_load(args))
    if args.json:
        return card
    lines = [
        f"{card['model']} ({card['architecture']}, {card['model_type']})",
        f"  layers {card['layers']}, heads {card['heads']}, hidden {card['hidden_size']}, "
        f"vocab {card['vocab_size']:,}, max tokens {card['max_length']}",
        f"  parameters {card['parameters']:,} (encoder {card['encoder_parameters']:,})",
        f"  heads present: {heads_text(card['heads_present'])}",
        f"  device {card['device']}, dtype {card['dtype']}",
    ]
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> Any:
    from .inspect import inspect

    r = inspect(_load(args), args.text, args.pair)
    shapes = {
        "attentions": list(r.attentions.shape),
        "hidden_states": list(r.hidden_states.shape),
        "mlm_logits": None if r.mlm_logits is None else list(r.mlm_logits.shape),
    }
    result = {
        "tokens": r.tokens,
        "raw_tokens": r.raw_tokens,
        "input_ids": r.input_ids.tolist(),
        "token_type_ids": r.token_type_ids.tolist(),
        "word_ids": r.word_ids,
        "shapes": shapes,
        "truncated": r.truncated,
        "warnings": list(r.warnings),
    }
    if args.json:
        return result
    lines = [f"{len(r.tokens)} tokens: {' '.join(r.tokens)}"]
    lines += [f"  {name} {shape}" for name, shape in shapes.items() if shape is not None]
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines)


def cmd_params(args: argparse.ArgumentParser) -> Any:
    from .params import count_parameters

    b = count_parameters(args.model, args.head)
    if args.json:
        return b.to_json()
    lines = [f"{b.model} ({b.architecture}): {b.total:,} parameters"]
    lines += [f"  {group:<11} {total:>14,}" for group, total in b.group_totals().items()]
    lines += [f"  note: {n}" for n in b.notes]
    return "\n".join(lines)


def cmd_attention(args: argparse.Namespace) -> Any:
    from .inspect import inspect

    r = inspect(_load(args), args.text, args.pair, with_logits=False)
    if (args.layer is None) != (args.head is None):
        raise BertScopeError("Give both --layer and --head, or neither (for all of them).")
    attentions = r.attentions  # [layer, head, query, key]
    if args.layer is not None:
        if not (0 <= args.layer < r.n_layers and 0 <= args.head < r.n_heads):
            raise BertScopeError(
                f"Layer {args.layer}, head {args.head} does not exist: layers 0-{r.n_layers - 1}, "
                f"heads 0-{r.n_heads - 1}."
            )
        attentions = attentions[args.layer, args.head]  # [query, key]
    result = {"tokens": r.tokens, "attentions": attentions.round(6).tolist()}
    if r.warnings:
        result["warnings"] = list(r.warnings)
    if args.json:
        return result
    if args.layer is None:
        return f"{len(r.tokens)} tokens; attention {list(r.attentions.shape)}; add --json for values"
    rows = [f"{'':>12} " + " ".join(f"{t[:6]:>6}" for t in r.tokens)]
    rows += [f"{t[:12]:>12} " + " ".join(f"{v:6.3f}" for v in row) for t, row in zip(r.tokens, attentions)]
    return "\n".join(rows)


def cmd_head_stats(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from .attention_stats import head_stats, read_corpus, shipped_corpus

    if args.corpus:
        path = Path(args.corpus)
        if not path.is_file():
            raise BertScopeError(f"No corpus file at {args.corpus}.")
        try:
            sentences = read_corpus(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise BertScopeError(f"{args.corpus} is not UTF-8 text.") from err
    else:
        sentences = shipped_corpus()
    stats = head_stats(_load(args), sentences, batch_size=args.batch_size)
    if args.json:
        return stats.to_json()
    lines = [f"{stats.sentences} sentences, {stats.tokens} tokens; top heads per statistic:"]
    for name in stats.stats:
        top = ", ".join(f"L{l}H{h} {v:.3f}" for l, h, v in stats.ranking(name)[:3])
        lines.append(f"  {name:<9} {top}")
    return "\n".join(lines)


def _attention_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--layer", type=int, help="one layer (with --head)")
    p.add_argument("--head", type=int, help="one head (with --layer)")


def _head_stats_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", help="a UTF-8 text file, one sentence per line (default: shipped sample)")
    p.add_argument("--batch-size", type=int, default=32)


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="preset name, hub id, local folder, or 'bundled'")
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    p.add_argument("--dtype", default="auto", help="auto (float32), float16 or bfloat16 on a GPU")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], Any], Callable | None]] = {
    "info": ("config summary, heads present, parameter total", cmd_info, None),
    "inspect": (
        "tokens and tensor shapes of one forward pass",
        cmd_inspect,
        lambda p: (p.add_argument("text"), p.add_argument("--pair", help="segment B text")),
    ),
    "attention": ("attention weights of one input, all heads or one", cmd_attention, _attention_arguments),
    "head-stats": (
        "head statistics over a corpus (Clark et al. 2019)", cmd_head_stats, _head_stats_arguments,
    ),
    "params": (
        "exact parameter counts by component, from the config alone (no weights)",
        cmd_params,
        lambda p: p.add_argument(
            "--head", default="none", choices=["none", "mlm", "pretraining"],
            help="none: the bare encoder with its pooler (default)",
        ),
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertscope", description="Look inside BERT-family encoders.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, _, extra) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _model_arguments(p)
        if extra:
            extra(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = COMMANDS[args.command][1](args)
    except BertScopeError as err:
        print(f"bertscope: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(result, ensure_ascii=False) if args.json else result)
    return 0
