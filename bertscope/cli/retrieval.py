"""Embedding models from a shell: ``similarity`` (why two texts are as similar as the model says, token pair by token
pair: integrated Jacobians), ``embed`` (the model's own sentence embedding, as sentence-transformers computes
it), ``search`` and ``retrieval-eval`` (a corpus searched, SQuAD dev scored, a reranker beside), ``rerank`` (a
cross-encoder's order, explained), ``sparse`` (a SPLADE score split over shared vocabulary terms) and ``maxsim``
(ColBERT's late interaction as a match map)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, engine_argument, engine_of, load, positive_int


def cmd_similarity(args: argparse.Namespace) -> Any:
    from bertscope.cli.common import staged_bars
    from bertscope.core.layers import hidden_index
    from bertscope.retrieval.similarity import explain_pair

    lm = load(args)
    at = hidden_index(args.at, lm.num_layers)
    with staged_bars() as progress:
        x = explain_pair(lm, args.a, args.b, args.method, args.steps, at, (args.a_kind, args.b_kind),
                         progress=progress)
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
    p.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS, help=f"integration steps (default {DEFAULT_STEPS})")
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


def cmd_search(args: argparse.Namespace) -> Any:
    from bertscope.cli.common import progress_bar
    from bertscope.retrieval.search import build_index, documents, search

    if not args.query.strip():
        from bertscope.errors import BertScopeError

        raise BertScopeError("--query is empty: type what to search for.")
    engine = engine_of(args)  # a bad --engine refused before anything loads
    corpus = documents(args.corpus if args.data is None else args.data, args.limit)
    lm = load(args)
    with progress_bar(f"{lm.name}: embedding {corpus.name}", "document") as progress:
        index = build_index(lm, corpus, progress, index=args.index, engine=engine)
    hits = search(lm, index, args.query, args.top_k)
    out = {"model": lm.name, "corpus": corpus.name, "documents": len(corpus.texts), "truncated": index.truncated,
           "index": index.searcher.kind, "results": [h.to_json() for h in hits]}
    if args.rerank:
        from bertscope.core.models import load_model
        from bertscope.retrieval.rerank import rerank

        reranker = load_model(args.rerank, args.device)
        order = rerank(reranker, args.query, [h.text for h in hits], [h.id for h in hits])
        out["reranker"] = reranker.name
        out["results"] = [h.to_json() for h in order]
        hits = order
    if args.explain:
        from bertscope.retrieval.search import passage_kind, query_kind
        from bertscope.retrieval.similarity import explain_pair, token_contributions

        steps = 1 if args.explain_method == "first-order" else args.steps
        query = token_contributions(lm, args.query, query_kind(lm), steps)
        for hit, row in zip(hits, out["results"]):
            why = explain_pair(lm, args.query, hit.text, args.explain_method, steps, 0,
                               (query_kind(lm), passage_kind(lm)), (query, None))
            row["why"] = {"method": why.method, "pairs": why.strongest(5, words=True), "error": why.error}
    if args.json:
        return out
    lines = [f"{len(corpus.texts):,} documents of {corpus.name}" + (f" ({index.truncated:,} cut at the model's "
                                                                   "length)" if index.truncated else "")]
    for row in out["results"]:
        lines.append(f"{row['rank']:>3}. {row['score']:.4f}  {row['text'][:100]}")
        if "why" in row:
            lines.append("       " + ", ".join(f"{a} ~ {b} {v:+.3f}" for a, b, v in row["why"]["pairs"]))
    return "\n".join(lines)


def _search_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.retrieval.search import CORPORA
    from bertscope.retrieval.vector_index import KINDS

    p.add_argument("--corpus", default="squad", help=f"what to search: {', '.join(CORPORA)} (default squad)")
    p.add_argument("--data", help="or a text file of your own, one document a line")
    p.add_argument("--query", required=True, help="what to search for")
    p.add_argument("--top-k", type=positive_int, default=10)
    p.add_argument("--limit", type=positive_int, help="search only the first N documents")
    p.add_argument("--explain", action="store_true", help="each hit's strongest word pairs with the query "
                                                          "(integrated Jacobians)")
    p.add_argument("--explain-method", choices=["first-order", "ij"], default="first-order",
                   help="first-order (one step: a passage of 256 tokens in seconds; its error said) or ij (integrated "
                        "Jacobians over --steps: exact to the error, a token and step a pass: minutes a long passage "
                        "on a CPU)")
    p.add_argument("--steps", type=positive_int, default=20, help="ij's integration steps (default 20)")
    p.add_argument("--index", choices=list(KINDS), default="auto",
                   help="; ".join(f"{k}: {v}" for k, v in KINDS.items()) + " (default auto)")
    p.add_argument("--rerank", metavar="MODEL", help="reorder the top hits with a reranker (a cross-encoder: "
                                                     "bundled-reranker)")
    engine_argument(p)


def cmd_retrieval_eval(args: argparse.Namespace) -> Any:
    from bertscope.cli.common import progress_bar
    from bertscope.retrieval.search import bm25_squad, dense_squad

    if args.corpus != "squad":
        from bertscope.errors import BertScopeError

        raise BertScopeError(f"--corpus {args.corpus}: the retrieval evaluation reads SQuAD (questions and their "
                             "passages).")
    if args.rerank:
        from bertscope.retrieval.rerank import check_depth

        check_depth(args.depth)  # before any pass
    engine = engine_of(args)
    _sparse_here(args.sparse, engine)  # before the model loads, when asked for
    lm = load(args)
    sparse = args.sparse or _is_splade(lm)
    _sparse_here(sparse, engine)
    depth = max(10, args.depth) if args.rerank else 10
    with progress_bar(f"{lm.name}: embedding SQuAD dev's passages", "passage") as progress:
        if sparse:  # the ranked lists kept for the reranker: the passages and questions read once
            from bertscope.retrieval.sparse import sparse_squad

            scores, top = sparse_squad(lm, args.limit, depth, progress)
        else:
            scores, top = dense_squad(lm, args.limit, depth, progress, engine)
    out = scores.to_json()
    if args.rerank:
        from bertscope.core.models import load_model
        from bertscope.retrieval.rerank import evaluate_rerank

        reranker = load_model(args.rerank, args.device)
        with progress_bar(f"{reranker.name}: reranking the top {args.depth}", "question") as progress:
            out["reranked"] = evaluate_rerank(lm, reranker, args.limit, args.depth, progress, sparse,
                                             top).to_json()
    if args.bm25:
        out["bm25"] = bm25_squad(args.limit).to_json()
    if args.json:
        return out
    rows = [scores.to_json(), *([out["reranked"]] if args.rerank else []), *([out["bm25"]] if args.bm25 else [])]
    lines = [f"SQuAD v1.1 dev: {scores.questions:,} questions against {scores.passages:,} passages",
             f"{'system':<24}{'MRR@10':>8}{'R@1':>8}{'R@10':>8}"]
    lines += [f"{r['system']:<24}{r['mrr@10']:8.4f}{r['recall@1']:8.4f}{r['recall@10']:8.4f}" for r in rows]
    return "\n".join(lines)


def _is_splade(lm) -> bool:
    from bertscope.retrieval.embedding import model_folder
    from bertscope.retrieval.sparse import read_splade

    return read_splade(model_folder(lm)) is not None


def _sparse_here(sparse: bool, engine) -> None:
    if sparse and engine is not None:
        from bertscope.errors import BertScopeError

        raise BertScopeError("--engine runs the dense embedding; the sparse reading runs in this process: leave "
                             "--engine out.")


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="squad", help="squad: SQuAD v1.1 dev's questions against its passages")
    p.add_argument("--limit", type=positive_int, help="the first N questions only")
    p.add_argument("--bm25", action="store_true", help="BM25 (bm25s) on the same questions and passages beside it")
    p.add_argument("--rerank", metavar="MODEL", help="a reranker (cross-encoder: bundled-reranker) reordering the "
                                                     "model's top --depth passages (dense, or with --sparse the "
                                                     "sparse reading's), scored beside it")
    p.add_argument("--depth", type=int, default=20, help="passages a question the reranker reorders (default 20)")
    p.add_argument("--sparse", action="store_true", help="score with the sparse view (SPLADE: term weights through "
                                                         "the masked-LM head; a SPLADE checkpoint is read so "
                                                         "without it)")
    engine_argument(p)


def cmd_rerank(args: argparse.Namespace) -> Any:
    from bertscope.retrieval.rerank import explain_relevance, interactions, rerank

    lm = load(args)
    hits = rerank(lm, args.query, args.passages)
    out: dict[str, Any] = {"model": lm.name, "query": args.query, "results": [h.to_json() for h in hits]}
    if args.explain:
        best = hits[0].text
        ig = explain_relevance(lm, args.query, best, args.steps)
        pairs = interactions(lm, args.query, best)
        out["why"] = {"passage": best, "ig": {"tokens": list(ig.tokens), "scores": ig.scores.round(6).tolist(),
                                              "completeness_error": ig.completeness_error},
                      "interactions": pairs.to_json()}
    if args.json:
        return out
    lines = [f"{h.rank:>3}. {h.score:+.4f}  {h.text[:100]}" for h in hits]
    if args.explain:
        lines.append(f"why the first (integrated gradients, {args.steps} steps; completeness error "
                     f"{ig.completeness_error:.2e}):")
        lines.append("  " + " ".join(f"{t}({v:+.3f})" for t, v in zip(ig.tokens, ig.scores)))
        lines.append("strongest query-passage word interactions (ArchDetect):")
        lines += [f"  {a:>15} ~ {b:<15} {v:+.4f}" for a, b, v in pairs.strongest(10)]
    return "\n".join(lines)


def _rerank_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--query", required=True, help="the query")
    p.add_argument("--passages", nargs="+", required=True, help="the passages to order (two or more, say)")
    p.add_argument("--explain", action="store_true", help="why the first passage ranks first: integrated gradients "
                                                          "and the query-passage word interactions")
    p.add_argument("--steps", type=positive_int, default=50, help="integrated gradients' steps (default 50)")


def cmd_sparse(args: argparse.Namespace) -> Any:
    from bertscope.retrieval.sparse import explain_sparse

    _check_top(args.top)
    x = explain_sparse(load(args), args.a, args.b, top=args.top)
    if args.json:
        return x.to_json()
    lines = [x.settings.note, f"score {x.score:.4f} over {len(x.terms):,} shared terms (a: {x.a_active:,} active "
                              f"terms, b: {x.b_active:,}); the shares sum to it (error {x.error:.1e})",
             "strongest shared terms (* a term the text does not contain: the head's expansion):"]
    lines += [f"  {t.term:<16}{t.share:9.4f} = {t.a_weight:.3f}{'*' if not t.in_a else ' '} x "
              f"{t.b_weight:.3f}{'*' if not t.in_b else ' '}  ({x.a_tokens[t.a_token]} ~ {x.b_tokens[t.b_token]})"
              for t in x.terms[:args.top]]
    for name, top in (("a", x.a_top), ("b", x.b_top)):
        lines.append(f"{name}'s terms: " + " ".join(f"{t}{'*' if not held else ''}({w:.2f})" for t, w, held in top))
    lines += [f"text {name} was cut at the model's length: the reading covers its start only."
              for name, cut in zip("ab", x.truncated) if cut]
    return "\n".join(lines)


def _check_top(top: int) -> None:
    if top < 1:
        from bertscope.errors import BertScopeError

        raise BertScopeError(f"--top {top}: give how many to list (1 or more).")


def _sparse_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", required=True, help="the first text (a query, say)")
    p.add_argument("--b", required=True, help="the second text (a passage, say)")
    p.add_argument("--top", type=int, default=15, help="terms listed (default 15)")


def cmd_maxsim(args: argparse.Namespace) -> Any:
    from bertscope.retrieval.late_interaction import explain_maxsim

    _check_top(args.top)
    m = explain_maxsim(load(args), args.query, args.passage)
    if args.json:
        return m.to_json()
    lines = [m.note, f"MaxSim {m.score:.4f}: each query token's best match, summed"]
    lines += [f"  {q:>15} -> {d:<15} {v:.4f}" for q, d, v in m.matches(args.top)]
    lines += [f"the {name} was cut at the model's length: the map covers its start only."
              for name, cut in zip(("query", "passage"), m.truncated) if cut]
    return "\n".join(lines)


def _maxsim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--query", required=True, help="the query")
    p.add_argument("--passage", required=True, help="the passage")
    p.add_argument("--top", type=int, default=15, help="matches listed (default 15)")


COMMANDS = [
    Command("search", "search a corpus with an embedding model (its own embedding, exact search), each hit "
            "explained against the query with --explain", cmd_search, _search_arguments),
    Command("retrieval-eval", "an embedding model's MRR@10 and recall@1/10 on SQuAD dev's questions against its "
            "passages (with --bm25, BM25 beside it)", cmd_retrieval_eval, _eval_arguments),
    Command("rerank", "order passages by a reranker's relevance to a query (a cross-encoder: bundled-reranker), "
            "the first explained with --explain", cmd_rerank, _rerank_arguments),
    Command("similarity", "why two texts are as similar as an embedding model says: every token pair's share of the "
            "score (integrated Jacobians, Moeller et al. 2023), each text's tokens' totals", cmd_similarity,
            _similarity_arguments),
    Command("sparse", "a sparse encoder's score (SPLADE: vocabulary terms through the masked-LM head) split exactly "
            "over the two texts' shared terms, and each text's expansion terms", cmd_sparse, _sparse_arguments),
    Command("maxsim", "ColBERT's late interaction (a PyLate checkpoint; any other encoder: its token vectors) as a "
            "match map: each query token's best passage token and its share of the score", cmd_maxsim,
            _maxsim_arguments),
    Command("embed", "the model's own sentence embedding (its sentence-transformers settings: pooling, dense layers, "
            "normalisation, prompts), as SentenceTransformer.encode computes it", cmd_embed, _embed_arguments),
]
