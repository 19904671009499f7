"""Commands about a model itself: its card, one pass's shapes, attention weights, parameter counts."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bertscope.cli.common import Command, load
from bertscope.core.layers import hidden_labels
from bertscope.errors import BertScopeError


def cmd_info(args: argparse.Namespace) -> Any:
    from bertscope.core.card import model_card, outputs_text

    card = model_card(load(args))
    if args.json:
        return card
    lines = [
        f"{card['model']} ({card['architecture']}, {card['model_type']})",
        f"  layers {card['layers']}, heads {card['heads']}, hidden {card['hidden_size']}, "
        f"vocab {card['vocab_size']:,}, max tokens {card['max_length']}",
        f"  parameters {card['parameters']:,} (encoder {card['encoder_parameters']:,})",
        f"  pretraining outputs: {outputs_text(card['outputs_present'])}",
        f"  task head: {card['task']['description'] if card['task'] else 'none'}",
        f"  device {card['device']}, dtype {card['dtype']}",
        *(f"  note: {note}" for note in card["notes"]),
    ]
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> Any:
    from bertscope.core.forward import inspect

    r = inspect(load(args), args.text, args.pair)
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
        # the names of the hidden states' first axis, and of the attentions' (core.layers)
        "hidden_state_layers": hidden_labels(r.n_layers),
        "attention_layers": list(range(r.n_layers)),
        "truncated": r.truncated,
        "warnings": list(r.warnings),
    }
    if args.json:
        return result
    lines = [f"{len(r.tokens)} tokens: {' '.join(r.tokens)}"]
    lines += [f"  {name} {shape}" for name, shape in shapes.items() if shape is not None]
    lines.append(f"  hidden states: the embeddings, then layers 0-{r.n_layers - 1}; attentions: layers 0-{r.n_layers - 1}")
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines)


def cmd_attention(args: argparse.Namespace) -> Any:
    from bertscope.core.forward import inspect

    r = inspect(load(args), args.text, args.pair, with_logits=False)
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
    # float32 widened before rounding: 0.000424, not 0.0004239999980200082
    result = {"tokens": r.tokens, "layers": list(range(r.n_layers)) if args.layer is None else [args.layer],
              "attentions": np.round(attentions.astype(np.float64), 6).tolist()}
    if r.warnings:
        result["warnings"] = list(r.warnings)
    if args.json:
        return result
    if args.layer is None:
        return f"{len(r.tokens)} tokens; attention {list(r.attentions.shape)}; add --json for values"
    rows = [f"{'':>12} " + " ".join(f"{t[:6]:>6}" for t in r.tokens)]
    rows += [f"{t[:12]:>12} " + " ".join(f"{v:6.3f}" for v in row) for t, row in zip(r.tokens, attentions)]
    return "\n".join(rows)


def _attention_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--layer", type=int, help="one layer (with --head)")
    p.add_argument("--head", type=int, help="one head (with --layer)")


def cmd_params(args: argparse.ArgumentParser) -> Any:
    from bertscope.analysis.params import count_parameters

    b = count_parameters(args.model, args.head)
    if args.json:
        return b.to_json()
    lines = [f"{b.model} ({b.architecture}): {b.total:,} parameters"]
    lines += [f"  {group:<11} {total:>14,}" for group, total in b.group_totals().items()]
    lines += [f"  note: {n}" for n in b.notes]
    return "\n".join(lines)


COMMANDS = [
    Command("info", "config summary, the output layers it carries (pretraining, a task), parameter total", cmd_info),
    Command("inspect", "tokens and tensor shapes of one forward pass", cmd_inspect,
            lambda p: (p.add_argument("text"), p.add_argument("--pair", help="segment B text"))),
    Command("attention", "attention weights of one input, all heads or one", cmd_attention, _attention_arguments),
    Command("params", "exact parameter counts by component, from the config alone (no weights)", cmd_params,
            lambda p: p.add_argument("--head", default="none", choices=["none", "mlm", "pretraining"],
                                     help="none: the bare encoder with its pooler (default)")),
]
