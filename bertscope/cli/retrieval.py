"""Embedding models from a shell: ``similarity`` (why two texts are as similar as the model says, token pair by token
pair: integrated Jacobians) and ``embed`` (the model's own sentence embedding, as sentence-transformers computes
it)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load


def cmd_similarity(args: argparse.Namespace) -> Any:
    from bertscope.core.layers import hidden_index
    from bertscope.retrieval.similarity import explain_pair

    lm = load(args)
    at = hidden_index(args.at, lm.num_layers)
    x = explain_pair(lm, args.a, args.b, args.method, args.steps, at, (args.a_kind, args.b_kind))
    if args.json:
        return x.to_json(words=args.words)
    lines = [f"{x.similarity} similarity {x.score:.4f}; the references account for {x.baseline_score:.4f}, the "
             f"{'word' if args.words else 'token'} pairs for {x.score - x.baseline_score:.4f} (error {x.error:.2e}, "
             f"{x.method}, {x.steps} step{'s' if x.steps != 1 else ''})"]
    if x.pairs is not None:
        lines.append("strongest pairs:")
        lines += [f"  {a:>15} ~ {b:<15} {v:+.4f}" for a, b, v in x.strongest(10, words=args.words)]
    a_names, b_names, _, a_scores, b_scores = x.by_words() if args.words else (x.a.tokens, x.b.tokens, None,
                                                                              x.a_scores, x.b_scores)
    for name, names, values in (("a", a_names, a_scores), ("b", b_names, b_scores)):
        lines.append(f"{name}: " + " ".join(f"{t}({v:+.3f})" for t, v in zip(names, values)))
    return "\n".join([*lines, *x.notes])


def _similarity_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.retrieval.similarity import DEFAULT_STEPS, METHODS

    p.add_argument("--a", required=True, help="the first text (a query, say)")
    p.add_argument("--b", required=True, help="the second text (a passage, say)")
    p.add_argument("--method", choices=list(METHODS), default="ij",
                   help="ij: integrated Jacobians (every token pair; the pairs sum to the score less the references' "
                        "share); first-order: one step at the input (cheaper, its error said); ig: each text's "
                        "integrated gradients with the other held fixed (default ij)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"integration steps (default {DEFAULT_STEPS})")
    p.add_argument("--at", default="embeddings", help="the hidden state to integrate from: embeddings (the tokens "
                                                      "themselves, default) or a layer number (its output)")
    p.add_argument("--words", action="store_true", help="words instead of word pieces (each the sum of its pieces)")
    p.add_argument("--a-kind", help="the prompt before a, as the model declares them (query, passage; E5 models)")
    p.add_argument("--b-kind", help="the prompt before b")


def cmd_embed(args: argparse.Namespace) -> Any:
    from bertscope.retrieval.embedding import embed

    lm = load(args)
    out = embed(lm, args.texts, args.kind)
    if args.json:
        return out.to_json()
    lines = [out.settings.note]
    lines += [f"{t[:60]!r}: {out.vectors.shape[1]} dims, {n} tokens{' (cut)' if c else ''}, "
              f"[{', '.join(f'{v:.4f}' for v in vec[:4])}, …]"
              for t, vec, n, c in zip(out.texts, out.vectors, out.tokens, out.truncated)]
    return "\n".join(lines)


def _embed_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("texts", nargs="+", help="the texts to embed")
    p.add_argument("--kind", help="the prompt before each text, as the model declares them (query, passage)")


COMMANDS = [
    Command("similarity", "why two texts are as similar as an embedding model says: every token pair's share of the "
            "score (integrated Jacobians, Moeller et al. 2023), each text's tokens' totals", cmd_similarity,
            _similarity_arguments),
    Command("embed", "the model's own sentence embedding (its sentence-transformers settings: pooling, dense layers, "
            "normalisation, prompts), as SentenceTransformer.encode computes it", cmd_embed, _embed_arguments),
]
