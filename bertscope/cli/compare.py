"""Two models side by side: ``compare MODEL_A MODEL_B``. Hidden states are numbered as in
``inspect``: "embeddings", then block l's output."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, engine_argument, engine_of, load, positive_int, progress_bar, read_text
from bertscope.errors import BertScopeError

DEFAULT_SENTENCES = 500


def compare_task(corpus: str | None, data: str | None):
    """(the words to compare on, where they came from) for ``--corpus brown:N`` or ``--data FILE``."""
    from bertscope.analysis.compare import text_task
    from bertscope.corpora.brown_tasks import brown_task

    if corpus is not None and data is not None:
        raise BertScopeError("Give --corpus or --data, not both.")
    if data is not None:
        return text_task(read_text(data, "data").splitlines()), data
    spec = corpus or f"brown:{DEFAULT_SENTENCES}"
    name, _, size = spec.partition(":")
    if name != "brown" or not (size or "1").isdigit() or int(size or DEFAULT_SENTENCES) < 1:
        raise BertScopeError(f"{spec!r}: use --corpus brown:N (N Brown sentences, at least 1) or --data FILE.")
    n = int(size or DEFAULT_SENTENCES)
    return brown_task("brown-pos", n), f"brown:{n}"


def cmd_compare(args: argparse.Namespace) -> Any:
    import numpy as np

    from bertscope.analysis.compare import compare_layers
    from bertscope.core.layers import hidden_name
    from bertscope.core.models import load_model

    engine = engine_of(args)
    task, source = compare_task(args.corpus, args.data)
    lm_a = load(args)
    lm_b = load_model(args.model_b, device=args.device, dtype=args.dtype)
    with progress_bar("sentences", "sentence") as progress:
        result = compare_layers(lm_a, lm_b, task, args.pool, source=source, progress=progress, engine=engine)
    heads, skipped = None, None
    texts = task.texts[: args.head_sentences]
    if args.head_sentences > 0:
        from bertscope.analysis.compare import compare_heads, same_tokenizer

        if same_tokenizer(lm_a, lm_b, texts):
            with progress_bar("heads", "sentence") as progress:
                heads = compare_heads(lm_a, lm_b, texts, progress=progress)
        else:
            skipped = "the models do not share a tokenizer"
    if args.json:
        out = result.to_json()
        if heads is not None:
            out["heads"] = heads.to_json()
        elif skipped:
            out["heads_skipped"] = skipped
        return out
    rows, columns = result.cka.shape
    lines = [f"linear CKA (unbiased, {result.minibatches} minibatches of {result.minibatch} words; {result.n_words:,} "
             f"words of {result.n_sentences:,} sentences from {source}, pieces pooled by {result.pool}): rows "
             f"{lm_a.name}, columns {lm_b.name}",
             " " * 11 + "".join(f"{hidden_name(j)[:6]:>7}" for j in range(columns))]
    for i in range(rows):
        lines.append(f"{hidden_name(i):>10} " + "".join(f"{v:>7.3f}" for v in result.cka[i]))
    if heads is not None and heads.same_head is not None:
        moved = np.argsort(-heads.same_head.ravel())[:5]
        lines.append(f"heads that moved most (Jensen-Shannon divergence of their attention rows from the same head of "
                     f"B, over {heads.n_sentences} sentences): " + ", ".join(
                         f"{i // heads.shape_a[1]}:{i % heads.shape_a[1]} {heads.same_head.ravel()[i]:.3f}" for i in moved))
    elif skipped:
        lines.append(f"heads not compared: {skipped}")
    return "\n".join(lines)


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.analysis.compare import POOLS

    p.add_argument("model_b", metavar="MODEL_B", help="the second model: a preset, hub id or folder")
    p.add_argument("--corpus", help=f"brown:N: N Brown sentences over every genre (default brown:{DEFAULT_SENTENCES})")
    p.add_argument("--data", help="a UTF-8 file, one sentence a line (words: runs of non-space characters)")
    p.add_argument("--pool", choices=POOLS, default="mean", help="a word's vector: the mean of its pieces, or its "
                                                                 "first piece")
    p.add_argument("--head-sentences", type=int, default=100, help="when both models share a tokenizer: compare "
                                                                   "every head of A with every head of B on this many "
                                                                   "of the sentences (0: skip)")
    engine_argument(p)  # the CKA passes; the head comparison stays in this process


def cmd_query_key(args: argparse.Namespace) -> Any:
    from bertscope.analysis.query_key import query_key

    lm = load(args)
    qk = query_key(lm, args.text, args.layer, args.head, args.query, args.pair)
    if args.json:
        return qk.to_json()
    order = qk.weights.argsort()[::-1][: args.top]
    lines = [f"layer {qk.layer}, head {qk.head}, query token {qk.query_position} ({qk.tokens[qk.query_position]}): "
             f"score = q·k / {qk.scale:.2f}, weight = softmax (the head's attention row); the top {len(order)} keys:"]
    lines += [f"  {j:>4} {qk.tokens[j]:<14} q·k/√d {qk.scores[j]:+8.3f}   weight {qk.weights[j]:.4f}" for j in order]
    return "\n".join(lines)


def _query_key_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--layer", type=int, required=True, help="the layer, from 0 as in `attention`")
    p.add_argument("--head", type=int, required=True, help="the head, from 0")
    p.add_argument("--query", type=int, required=True, help="the query token's position (0 = [CLS])")
    p.add_argument("--top", type=positive_int, default=10, help="text output: how many keys to list")


COMMANDS = [
    Command("compare", "how similar two models are, layer by layer: linear CKA over the words of a corpus",
            cmd_compare, _compare_arguments),
    Command("query-key", "the query and key vectors behind one attention row: q, each k, q ⊙ k, the scores and "
            "their softmax (bertviz's neuron view)", cmd_query_key, _query_key_arguments),
]
