"""Embedding models explained, measured: the model's own embedding beside sentence-transformers', pair attribution
beside integrated gradients, search latency, and retrieval quality on SQuAD dev.

    python benchmarks/retrieval.py [--model bundled] [--device cpu] [--quality] [--full-size]
    python benchmarks/retrieval.py --only --pairs [--rounds 3] [--steps 50]     # the pair attribution alone

- embedding: ``retrieval.embed`` against ``SentenceTransformer.encode`` on the same 2,067 SQuAD passages (or
  Brown sentences when SQuAD is missing), the same batch size, interleaved rounds: texts/s of each, their ratio,
  and the largest difference between the two embeddings;
- pairs: integrated Jacobians of a (query, passage) pair with the default steps against integrated gradients with
  the same steps through the encoder (single-sided: one text's gradient of the score), and the completeness error;
- search: a query over SQuAD dev's passages, index built once (median of 50 queries);
- ``--quality``: MRR@10 and recall@1/10 on SQuAD dev's 10,570 questions for the model, bundled-multilingual (with
  its query/passage prefixes) and BM25, in one table;
- ``--faithfulness N``: the deletion test on N held-out pairs (SQuAD dev questions beside their own passage's first
  sentence: pairs the model should find similar, none seen in training): each method's mean fall of the score as
  b's top tokens go, beside a random order, and its seconds per explanation;
- ``--index N [--index-sets shaped,iid]``: N random vectors through FAISS's HNSW graph: Gaussian with the mean and
  covariance of the model's own embeddings of SQuAD's passages (shaped), and iid Gaussian (no neighbourhoods for
  any index to follow: the worst case); build time, a query's time and recall@10 against exact search on 1,000
  queries at three efSearch settings, beside exact search's time (``retrieval.vector_index``);
- ``--rerank MODEL [--questions N]``: the model's top 20 reordered by the reranker on SQuAD dev's first N questions
  (default 2,000), MRR@10 and recall@1/10 beside the model alone on the same questions;
- ``--only --cost``: what an explanation costs, in word pieces passed through the model (``similarity.pair_cost``,
  the unit of a hosted demo's ``Limits.explanation_pieces``) and seconds, for a query against SQuAD dev passages of
  100 and 256 tokens, first-order and integrated Jacobians at 20 steps; and the passages' lengths as the model reads
  them (the share a cap would refuse);
- ``--full-size [--steps N]``: a BERT-base-sized random model from ``bertscope/configs/`` at 512 tokens: the pair
  attribution's time with ``--steps`` (default 50: hours on a CPU; 1: the first-order estimate, a pass a token; the
  memory is the same for any number) and peak memory (bounded by ``similarity.ROW_BYTES``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import synchronize  # noqa: E402

QUERY = "Which NFL team represented the AFC at Super Bowl 50?"


def passages(limit: int) -> list[str]:
    from bertscope.errors import BertScopeError
    from bertscope.retrieval.search import documents

    try:
        return list(documents("squad").texts[:limit])
    except BertScopeError:
        return list(documents("brown").texts[:limit])


def embedding(lm, texts: list[str], batch: int, rounds: int) -> None:
    from sentence_transformers import SentenceTransformer

    from bertscope.retrieval.embedding import embed

    reference = SentenceTransformer(lm.source, device=str(lm.device), local_files_only=True)
    ours_t, theirs_t = [], []
    for _ in range(rounds):
        synchronize(lm.device)
        t = time.perf_counter()
        ours = embed(lm, texts, batch_size=batch).vectors
        synchronize(lm.device)
        ours_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs = reference.encode(texts, batch_size=batch, convert_to_numpy=True)
        synchronize(lm.device)
        theirs_t.append(time.perf_counter() - t)
    a, b = statistics.median(ours_t), statistics.median(theirs_t)
    print(f"embedding {len(texts):,} texts, batch {batch}: BertScope {len(texts) / a:.1f} texts/s, "
          f"SentenceTransformer.encode {len(texts) / b:.1f} texts/s, ratio {b / a:.3f}; largest difference "
          f"{np.abs(ours - theirs).max():.2e}")


def pairs(lm, steps: int, rounds: int) -> None:
    from bertscope.retrieval.similarity import explain_pair

    passage = passages(1)[0][:400]
    ij_t, ig_t = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        x = explain_pair(lm, QUERY, passage, "ij", steps)
        ij_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        explain_pair(lm, QUERY, passage, "ig", steps)
        ig_t.append(time.perf_counter() - t)
    a, b = statistics.median(ij_t), statistics.median(ig_t)
    print(f"pair attribution, {len(x.a.tokens)} x {len(x.b.tokens)} tokens, {steps} steps: integrated Jacobians "
          f"{a:.2f} s, integrated gradients of both texts {b:.2f} s, ratio {a / b:.2f}; completeness error "
          f"{x.error:.2e} (score {x.score:.4f}, references' share {x.baseline_score:.4f})")


def search_latency(lm) -> None:
    from bertscope.retrieval.search import build_index, documents, search, squad_retrieval

    corpus = documents("squad")
    t = time.perf_counter()
    index = build_index(lm, corpus, cache=False)
    built = time.perf_counter() - t
    _, questions, _ = squad_retrieval()
    times = []
    for q in questions[:50]:
        t = time.perf_counter()
        search(lm, index, q, 10)
        times.append(time.perf_counter() - t)
    print(f"search over {len(corpus.texts):,} passages: index built in {built:.1f} s, a query "
          f"{statistics.median(times) * 1000:.1f} ms (median of 50, the query's embedding included)")


def quality(lm) -> None:
    from bertscope.core.models import load_model
    from bertscope.retrieval.search import bm25_squad, evaluate_squad

    rows = [evaluate_squad(lm), evaluate_squad(load_model("bundled-multilingual", device=str(lm.device))),
            bm25_squad()]
    print(f"SQuAD v1.1 dev, {rows[0].questions:,} questions against {rows[0].passages:,} passages")
    print(f"  {'system':<24}{'MRR@10':>8}{'R@1':>8}{'R@10':>8}")
    for r in rows:
        print(f"  {r.system:<24}{r.mrr_at_10:8.4f}{r.recall_at_1:8.4f}{r.recall_at_10:8.4f}")


def faithfulness(lm, pairs_n: int, steps: int) -> None:
    import re

    from bertscope.retrieval.faithful import METHODS, deletion_curves
    from bertscope.retrieval.search import passage_kind, query_kind, squad_retrieval

    corpus, questions, gold = squad_retrieval()
    rng = np.random.default_rng(0)
    picked = rng.choice(len(questions), pairs_n, replace=False)
    areas: dict[str, list[float]] = {m: [] for m in METHODS}
    seconds: dict[str, list[float]] = {m: [] for m in METHODS}
    for i in picked:
        passage = re.split(r"(?<=[.!?])\s", corpus.texts[gold[i]])[0]  # its first sentence
        for curve in deletion_curves(lm, questions[i], passage, METHODS, 0.5, steps, (query_kind(lm), passage_kind(lm))):
            areas[curve.method].append(curve.area)
            seconds[curve.method].append(curve.seconds)
    print(f"deletion test on {pairs_n} SQuAD (question, first sentence of its passage) pairs, half of b's tokens at "
          f"most, {steps} steps: mean fall of the score (higher: more faithful)")
    for m in METHODS:
        print(f"  {m:<12} {np.mean(areas[m]):.4f} ± {np.std(areas[m]) / np.sqrt(len(areas[m])):.4f}   "
              f"{np.mean(seconds[m]):.2f} s per explanation")


def shaped_like_embeddings(lm, rng: np.random.Generator):
    """A sampler of Gaussian vectors with the mean and covariance of the model's own embeddings of SQuAD dev's
    passages (their spectrum: ~86 effective dimensions of bundled's 384, where iid Gaussian vectors use all)."""
    from bertscope.retrieval.embedding import embed

    real = embed(lm, passages(2067)).vectors.astype(np.float64)  # [passage, dim]
    mean, cov = real.mean(0), np.cov(real.T)
    values, vectors = np.linalg.eigh(cov)
    scale = vectors * np.sqrt(np.clip(values, 0, None))  # [dim, dim]: x = mean + scale @ z
    ratio = values.sum() ** 2 / (values ** 2).sum()
    print(f"{lm.name}'s embeddings of {len(real):,} SQuAD passages: participation ratio {ratio:.1f} of {len(mean)} "
          "dimensions")
    return lambda m: (mean + rng.normal(size=(m, len(mean))) @ scale.T).astype(np.float32)


def index(lm, n: int, sets: list[str], queries: int = 1000) -> None:
    from bertscope.retrieval.vector_index import CALIBRATION_QUERIES, HNSW_SEARCH_EF, Hnsw, exact, recall_at_k

    rng = np.random.default_rng(0)
    makers = {"iid Gaussian": lambda m: rng.normal(size=(m, lm.hidden_size)).astype(np.float32)}
    if "shaped" in sets:
        makers[f"shaped as {lm.name}'s embeddings"] = shaped_like_embeddings(lm, rng)
    for name, make in makers.items():
        if name == "iid Gaussian" and "iid" not in sets:
            continue
        docs, q = make(n), make(queries)
        t = time.perf_counter()
        truth, _ = exact(docs, "cosine").search(q, 10)
        exact_s = (time.perf_counter() - t) / queries
        t = time.perf_counter()
        built = Hnsw(docs, "cosine")
        build_s = time.perf_counter() - t
        chosen = built.search_ef
        print(f"{n:,} vectors x {docs.shape[1]} ({name}): HNSW built in {build_s:.0f} s "
              f"({built.size_bytes / 2**20:.0f} MiB), its search breadth calibrated to efSearch {chosen} (recall@10 "
              f"{built.recall:.4f} on {CALIBRATION_QUERIES} of its documents); exact search {exact_s * 1000:.1f} ms "
              "a query")
        for ef in sorted({128, HNSW_SEARCH_EF, 512, chosen}):
            built.index.hnsw.efSearch = ef
            t = time.perf_counter()
            found, _ = built.search(q, 10)
            query_s = (time.perf_counter() - t) / queries
            print(f"  efSearch {ef}{' (calibrated)' if ef == chosen else ''}: a query {query_s * 1000:.2f} ms, "
                  f"recall@10 {recall_at_k(found, truth):.4f} over {queries:,} new queries", flush=True)
        del built, docs


def rerank_quality(lm, reranker_name: str, questions: int) -> None:
    from bertscope.core.models import load_model
    from bertscope.retrieval.rerank import evaluate_rerank
    from bertscope.retrieval.search import evaluate_squad

    reranker = load_model(reranker_name, device=str(lm.device))
    t = time.perf_counter()
    reranked = evaluate_rerank(lm, reranker, questions, 20)
    seconds = time.perf_counter() - t
    alone = evaluate_squad(lm, questions)
    print(f"SQuAD v1.1 dev, the first {questions:,} questions against {alone.passages:,} passages; the reranker "
          f"reorders the top 20 ({seconds / questions * 1000:.0f} ms a question)")
    print(f"  {'system':<36}{'MRR@10':>8}{'R@1':>8}{'R@10':>8}")
    for r in (alone, reranked):
        print(f"  {r.system:<36}{r.mrr_at_10:8.4f}{r.recall_at_1:8.4f}{r.recall_at_10:8.4f}")


def full_size(device: str, steps: int) -> None:
    import resource
    import tempfile

    import psutil

    from bertscope.core.models import load_model
    from bertscope.core.random_models import save_random_model
    from bertscope.retrieval.similarity import ROW_BYTES, explain_pair

    with tempfile.TemporaryDirectory() as folder:
        save_random_model("bert-base-uncased", folder)
        lm = load_model(folder, device=device)
        long = " ".join(["the bank of the river was muddy after the storm ."] * 60)
        before = psutil.Process().memory_info().rss
        t = time.perf_counter()
        x = explain_pair(lm, QUERY, long, "ij", steps)
        seconds = time.perf_counter() - t
        after = psutil.Process().memory_info().rss
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        passes = (len(x.a.tokens) + len(x.b.tokens)) * steps  # one forward-mode pass a token and step
        print(f"BERT-base size, {len(x.a.tokens)} x {len(x.b.tokens)} tokens, {steps} steps: {seconds:.1f} s, "
              f"{passes:,} passes ({seconds / passes:.2f} s a pass); resident memory {before / 2**20:.0f} -> "
              f"{after / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB (a batch of passes holds at most "
              f"{ROW_BYTES / 2**20:.0f} MiB of activations, whatever the steps); completeness error {x.error:.2e}")


def explanation_cost(lm, query: str = "Who won Super Bowl 50?") -> None:
    """Seconds and word pieces of explanations the demo's cap weighs (see the module's docstring)."""
    from bertscope.app.kit.limits import DEMO_EXPLANATION_PIECES as cap
    from bertscope.app.kit.limits import DEMO_JOB_PIECES as general
    from bertscope.retrieval.similarity import explain_pair, pair_cost, text_tokens

    texts = passages(2067)
    lengths = np.array([text_tokens(lm, p) for p in texts])
    query_tokens = text_tokens(lm, query)
    print(f"{len(texts):,} passages, tokens as {lm.name} reads them: median {int(np.median(lengths))}, 90th "
          f"percentile {int(np.percentile(lengths, 90))}, cut at the model's length {np.mean(lengths == lengths.max()):.1%}")
    first_order = lengths ** 2 + query_tokens ** 2
    print(f"first-order explanations over the demo's job cap ({general:,}): {np.mean(first_order > general):.0%}; "
          f"over its explanation cap ({cap:,}): {np.mean(first_order > cap):.0%}")
    near = {n: texts[int(np.argmin(np.abs(lengths - n)))] for n in (100, int(lengths.max()))}
    for n, method, steps in ((100, "first-order", 1), (int(lengths.max()), "first-order", 1), (100, "ij", 20)):
        cost = pair_cost(lm, query, near[n], method, steps)
        started = time.perf_counter()
        x = explain_pair(lm, query, near[n], method, steps)
        print(f"{n}-token passage, {method}, {steps} step(s): {cost:,} word pieces, "
              f"{time.perf_counter() - started:.1f} s, identity error {x.error:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--texts", type=int, default=2067)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--faithfulness", type=int, default=0, help="pairs for the deletion test (0: none)")
    parser.add_argument("--full-size", action="store_true")
    parser.add_argument("--index", type=int, default=0, help="random vectors through the HNSW index (0: none)")
    parser.add_argument("--index-sets", default="shaped", help="which random vectors: shaped (as the model's "
                                                                "embeddings), iid, or shaped,iid")
    parser.add_argument("--rerank", help="a reranker reordering the model's top 20 on SQuAD dev")
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--pairs", action="store_true", help="with --only: the pair attribution's time")
    parser.add_argument("--cost", action="store_true", help="with --only: what an explanation costs (the demo's cap)")
    parser.add_argument("--only", action="store_true", help="only the parts asked for (--index, --rerank, --pairs, "
                                                            "--full-size)")
    args = parser.parse_args()
    from bertscope.core.models import load_model

    lm = load_model(args.model, device=args.device)
    if args.index:
        index(lm, args.index, args.index_sets.split(","))
    if args.rerank:
        rerank_quality(lm, args.rerank, args.questions)
    if args.only:
        if args.pairs:
            pairs(lm, args.steps, args.rounds)
        if args.cost:
            explanation_cost(lm)
        if args.full_size:
            full_size(args.device, args.steps)
        return
    embedding(lm, passages(args.texts), args.batch, args.rounds)
    pairs(lm, args.steps, args.rounds)
    search_latency(lm)
    if args.quality:
        quality(lm)
    if args.faithfulness:
        faithfulness(lm, args.faithfulness, args.steps)
    if args.full_size:
        full_size(args.device, args.steps)


if __name__ == "__main__":
    main()
