"""Two models side by side: ``compare MODEL_A MODEL_B``. Hidden states are numbered as in
``inspect``: "embeddings", then block l's output."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load, progress_bar, read_text
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
    from bertscope.analysis.compare import compare_layers
    from bertscope.core.layers import hidden_name
    from bertscope.core.models import load_model

    task, source = compare_task(args.corpus, args.data)
    lm_a = load(args)
    lm_b = load_model(args.model_b, device=args.device, dtype=args.dtype)
    with progress_bar("sentences", "sentence") as progress:
        result = compare_layers(lm_a, lm_b, task, args.pool, source=source, progress=progress)
    if args.json:
        return result.to_json()
    rows, columns = result.cka.shape
    lines = [f"linear CKA (unbiased, {result.minibatches} minibatches of {result.minibatch} words; {result.n_words:,} "
             f"words of {result.n_sentences:,} sentences from {source}, pieces pooled by {result.pool}): rows "
             f"{lm_a.name}, columns {lm_b.name}",
             " " * 11 + "".join(f"{hidden_name(j)[:6]:>7}" for j in range(columns))]
    for i in range(rows):
        lines.append(f"{hidden_name(i):>10} " + "".join(f"{v:>7.3f}" for v in result.cka[i]))
    return "\n".join(lines)


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.analysis.compare import POOLS

    p.add_argument("model_b", metavar="MODEL_B", help="the second model: a preset, hub id or folder")
    p.add_argument("--corpus", help=f"brown:N: N Brown sentences over every genre (default brown:{DEFAULT_SENTENCES})")
    p.add_argument("--data", help="a UTF-8 file, one sentence a line (words: runs of non-space characters)")
    p.add_argument("--pool", choices=POOLS, default="mean", help="a word's vector: the mean of its pieces, or its "
                                                                 "first piece")


COMMANDS = [
    Command("compare", "how similar two models are, layer by layer: linear CKA over the words of a corpus",
            cmd_compare, _compare_arguments),
]
