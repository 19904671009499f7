"""Commands over many sentences: head statistics, one word across contexts, corpus search,
cross-lingual retrieval (probes: ``cli.probe``)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, engine_argument, engine_of, load, progress_bar, read_text
from bertscope.core.layers import hidden_index, hidden_label, hidden_name, layer_title
from bertscope.corpora.brown import tag_name
from bertscope.errors import BertScopeError
from bertscope.figures.text import in_context


def cmd_head_stats(args: argparse.Namespace) -> Any:
    from bertscope.analysis.attention_stats import head_stats
    from bertscope.corpora.sentences import read_corpus, shipped_corpus

    if args.corpus and args.corpus.startswith("brown"):
        from bertscope.corpora.brown_tasks import brown_texts

        size = args.corpus.partition(":")[2] or "500"
        if not size.isdigit():
            raise BertScopeError(f"--corpus {args.corpus}: use brown or brown:N (N sentences, 0 = all).")
        sentences = brown_texts(int(size))
    elif args.corpus:
        sentences = read_corpus(read_text(args.corpus, "corpus"))
    else:
        sentences = shipped_corpus()
    engine = engine_of(args)  # a bad spec is refused before the model loads
    stats = head_stats(load(args), sentences, batch_size=args.batch_size, engine=engine)
    if args.json:
        return stats.to_json()
    lines = [f"{stats.sentences} sentences, {stats.tokens} tokens; top heads per statistic:"]
    for name in stats.stats:
        top = ", ".join(f"L{layer}H{h} {v:.3f}" for layer, h, v in stats.ranking(name)[:3])
        lines.append(f"  {name:<9} {top}")
    return "\n".join(lines)


def _head_stats_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", help="a UTF-8 text file, one sentence per line; or brown[:N], N Brown corpus "
                                    "sentences over all 15 genres (default N 500); default: the shipped sample")
    p.add_argument("--batch-size", type=int, default=32)
    engine_argument(p)


def cmd_shift(args: argparse.Namespace) -> Any:
    from bertscope.analysis.shift import anisotropy_baseline, collect, layer_metrics
    from bertscope.corpora.senses import read_labelled_csv, sense_presets

    if args.data:
        rows = read_labelled_csv(read_text(args.data, "data"))
    else:
        presets = sense_presets()
        if args.word not in presets:
            raise BertScopeError(f"No shipped sentences for {args.word!r}: pass --data FILE "
                                 f"(presets: {', '.join(presets)}).")
        rows = presets[args.word]
    lm = load(args)
    result = collect(lm, args.word, rows, pooling=args.pooling, occurrences=args.occurrences)
    metrics = layer_metrics(result, anisotropy_baseline(lm, args.pooling))
    out = {
        "word": result.word,
        "occurrences": len(result.occurrences),
        "layers": [m.to_json() for m in metrics],
        "skipped": result.skipped,
    }
    if args.json:
        return out
    lines = [f"{result.word}: {len(result.occurrences)} occurrences; skipped rows {result.skipped or 'none'}",
             "     layer  within  across    gap  centroid  self-sim  anisotropy"]
    lines += [f"{hidden_name(m.layer):>10}  {m.within:6.3f}  {m.across:6.3f}  {m.gap:6.3f}  {m.centroid_accuracy:8.3f}  "
              f"{m.self_similarity:8.3f}  {m.anisotropy:10.3f}" for m in metrics]
    return "\n".join(lines)


def _shift_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--word", required=True, help="the target word")
    p.add_argument("--data", help="CSV with columns sentence,label (default: the shipped preset)")
    p.add_argument("--pooling", choices=["mean", "first"], default="mean", help="over the word's pieces")
    p.add_argument("--occurrences", choices=["all", "first"], default="all", help="per sentence")


def cmd_corpus_search(args: argparse.Namespace) -> Any:
    from bertscope.analysis.corpus_search import build_index, search
    from bertscope.analysis.hidden_cache import HiddenStateCache

    engine = engine_of(args)
    lm = load(args)
    layer = hidden_index(lm.num_layers - 1 if args.layer is None else args.layer, lm.num_layers)
    index = build_index(lm, args.size, HiddenStateCache(args.cache), engine=engine)
    found = search(lm, index, args.text, args.word, layer, args.k)
    out = {"query_word": found.query_word, "layer": hidden_label(found.layer), "index_words": index.n_words,
           "matches": [m.__dict__ for m in found.matches], "tags": dict(found.tag_counts.most_common())}
    if args.json:
        return out
    lines = [f"“{found.query_word}” at {layer_title(layer)}: the {len(found.matches)} nearest of {index.n_words:,} Brown "
             f"words; tags {', '.join(f'{t} {n}' for t, n in found.tag_counts.most_common())}"]
    for m in found.matches:  # each sentence centred on its word, the word between ▸ ◂
        before, word, after = in_context(m.sentence, m.start, m.end, width=34)
        lines.append(f"  {m.similarity:.3f}  {tag_name(m.tag):<6} {m.genre:<16} {before:>36} ▸{word}◂ {after}")
    return "\n".join(lines)


def _corpus_search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="a sentence containing the word to search for")
    p.add_argument("--word", type=int, required=True, help="the word's index in the text (0 = first word)")
    p.add_argument("--layer", help="0 to L-1 (an encoder block's output, as `attention` numbers layers) or "
                                   "'embeddings' (default: the last layer)")
    p.add_argument("--k", type=int, default=20, help="matches to return (1-200)")
    p.add_argument("--size", type=int, default=2000, help="Brown sentences in the index (0 = all 57,340)")
    p.add_argument("--cache", help="hidden-state cache folder (default: ~/.cache/bertscope/hidden)")
    engine_argument(p)


def cmd_align(args: argparse.Namespace) -> Any:
    from bertscope.analysis.align import embed_parallel, retrieval
    from bertscope.corpora.parallel import read_parallel_tsv, shipped_parallel

    if args.data == "udhr":
        return align_udhr(args)
    if args.data:
        data = read_parallel_tsv(read_text(args.data, "data"), args.kind)
    else:
        data = shipped_parallel(args.kind)
    if args.languages:
        data = data.select([g.strip() for g in args.languages.split(",") if g.strip()])
    vectors = embed_parallel(load(args), data, pooling=args.pooling, context=args.context)
    scores = retrieval(vectors)
    out = {"model": args.model, "kind": data.kind, "pooling": args.pooling, "context": args.context,
           **scores.to_json(),
           "left_out": [{"line": line, "missing": missing} for line, missing in data.incomplete]}
    if args.json:
        return out
    raw, centred = scores.mean(), scores.mean(True)
    lines = [f"{data.n_items} items x {len(data.languages)} languages ({', '.join(data.languages)}); "
             f"chance {scores.chance:.3f}; rows left out: {len(data.incomplete)}",
             "     layer  mean P@1  centred"]
    lines += [f"{hidden_name(layer):>10}  {raw[layer]:8.3f}  {centred[layer]:7.3f}" for layer in range(len(raw))]
    return "\n".join(lines)


def per_word(coverage) -> str:
    """Pieces per word, or per character (c) for a script written without spaces."""
    value = coverage.pieces_per_word
    return f"{coverage.pieces_per_char:.1f}c" if value != value else f"{value:.1f}"


def align_udhr(args: argparse.Namespace) -> Any:
    """``align --data udhr``: every complete UDHR version against English, article by article."""
    import time

    from bertscope.analysis.align import embed_parallel
    from bertscope.analysis.align_pivot import pivot_retrieval
    from bertscope.corpora.udhr import declarations_by_code, udhr_parallel

    versions = declarations_by_code()
    if args.list:
        rows = sorted((v for v in versions.values() if len(v.articles) == 30), key=lambda v: v.code)
        return ({"versions": [{"code": v.code, "name": v.name, "bcp47": v.bcp47, "script": v.script} for v in rows]}
                if args.json else "\n".join(f"{v.code:<14}{v.script:<12}{v.name}" for v in rows))
    if args.kind != "sentences" or args.context != "alone":
        raise BertScopeError("The UDHR's items are articles: leave out --kind and --context.")
    wanted = [g.strip() for g in args.languages.split(",") if g.strip()] if args.languages else None
    data = udhr_parallel(wanted)
    if args.max_languages is not None:
        if args.max_languages < 1:
            raise BertScopeError("--max-languages must be at least 1.")
        data = data.select(list(data.languages[:args.max_languages + 1]))
    lm = load(args)
    started = time.perf_counter()
    with progress_bar(f"{lm.name}: {len(data.languages)} UDHR versions x {data.n_items} articles", "word piece") as progress:
        vectors = embed_parallel(lm, data, pooling=args.pooling, progress=progress, cache=True)
    result = pivot_retrieval(lm, vectors, {c: v.name for c, v in versions.items()},
                             {c: v.script for c, v in versions.items() if c in data.languages})
    seconds = time.perf_counter() - started
    out = {"model": args.model, "data": "udhr", "kind": "sentences", "pooling": args.pooling, "context": "alone",
           "seconds": round(seconds, 2), "truncated": vectors.truncated, **result.to_json()}
    if args.json:
        return out
    best = result.best_layer
    covered = [i for i, c in enumerate(result.coverage) if i > 0 and c.covered]
    order = sorted(covered, key=lambda i: -result.centred[best, i])
    line = lambda i: (f"  {result.languages[i]:<12}{result.scripts.get(result.languages[i], ''):<11}"  # noqa: E731
                      f"{result.centred[best, i]:6.2f} {result.raw[best, i]:6.2f}  "
                      f"{result.coverage[i].unknown_share:6.1%} {per_word(result.coverage[i]):>5}  "
                      f"{result.names.get(result.languages[i], '')}")
    lines = [f"{len(data.languages) - 1} UDHR versions against English, {data.n_items} articles each (chance "
             f"{result.chance:.3f}), {seconds:.0f} s; {len(covered)} covered by the tokenizer (at most a fifth of "
             "their pieces unknown)",
             "     layer  mean P@1  centred   (covered languages)"]
    raw, centred = result.mean(), result.mean(True)
    lines += [f"{hidden_name(layer):>10}  {raw[layer]:8.3f}  {centred[layer]:7.3f}" for layer in range(len(raw))]
    header = "  code        script     centred  raw  unknown pieces/word  name"
    lines += [f"best aligned at {hidden_name(best)}:", header] + [line(i) for i in order[:10]]
    if len(order) > 10:
        lines += ["worst aligned:", header] + [line(i) for i in order[max(10, len(order) - 10):]]
    uncovered = [result.languages[i] for i, c in enumerate(result.coverage) if i > 0 and not c.covered]
    if uncovered:
        lines.append(f"not covered (more than a fifth unknown pieces): {', '.join(uncovered[:40])}"
                     + (f" and {len(uncovered) - 40} more" if len(uncovered) > 40 else ""))
    return "\n".join(lines)



def _align_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="TSV, one column per language code (default: the shipped file), or udhr: the "
                                  "UDHR's 30 articles in every complete version, against English "
                                  "(`corpus install udhr` first)")
    p.add_argument("--max-languages", type=int, help="udhr: the first N versions by code (a quick run)")
    p.add_argument("--list", action="store_true", help="udhr: list the versions' codes, scripts and names")
    p.add_argument("--kind", choices=["sentences", "words"], default="sentences")
    p.add_argument("--languages", help="comma-separated subset, e.g. en,de,zh (udhr: version codes, e.g. deu_1996)")
    p.add_argument("--pooling", choices=["mean", "cls"], default="mean", help="sentence vector")
    p.add_argument("--context", choices=["alone", "carrier"], default="alone",
                   help="words: alone or inside a per-language carrier sentence")


COMMANDS = [
    Command("head-stats", "head statistics over a corpus (Clark et al. 2019)", cmd_head_stats, _head_stats_arguments),
    Command("shift", "the same word in different contexts, layer by layer", cmd_shift, _shift_arguments),
    Command("corpus-search", "the Brown corpus words nearest to a word of a sentence at a layer, with their tags",
            cmd_corpus_search, _corpus_search_arguments),
    Command("align", "cross-lingual retrieval P@1 per layer, raw and mean-centred", cmd_align, _align_arguments),
]
