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


def _read_text(path: str, what: str) -> str:
    """A UTF-8 text file's contents, or one clear error."""
    from pathlib import Path

    file = Path(path)
    if not file.is_file():
        raise BertScopeError(f"No {what} file at {path}.")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise BertScopeError(f"{path} is not UTF-8 text.") from err


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
    from .attention_stats import head_stats, read_corpus, shipped_corpus

    if args.corpus and args.corpus.startswith("brown"):
        from .brown_probes import brown_texts

        size = args.corpus.partition(":")[2] or "500"
        if not size.isdigit():
            raise BertScopeError(f"--corpus {args.corpus}: use brown or brown:N (N sentences, 0 = all).")
        sentences = brown_texts(int(size))
    elif args.corpus:
        sentences = read_corpus(_read_text(args.corpus, "corpus"))
    else:
        sentences = shipped_corpus()
    stats = head_stats(_load(args), sentences, batch_size=args.batch_size)
    if args.json:
        return stats.to_json()
    lines = [f"{stats.sentences} sentences, {stats.tokens} tokens; top heads per statistic:"]
    for name in stats.stats:
        top = ", ".join(f"L{layer}H{h} {v:.3f}" for layer, h, v in stats.ranking(name)[:3])
        lines.append(f"  {name:<9} {top}")
    return "\n".join(lines)


def cmd_fill_mask(args: argparse.Namespace) -> Any:
    from .fill_mask import fill_mask

    r = fill_mask(_load(args), args.text, args.top_k)
    if args.json:
        return r.to_json()
    lines = [f"mask {n + 1}: " + ", ".join(f"{p.token.strip()} {p.score:.3f}" for p in preds)
             for n, preds in enumerate(r.predictions)]
    return "\n".join([*lines, *(f"warning: {w}" for w in r.warnings)])


def cmd_mlm_recipe(args: argparse.Namespace) -> Any:
    from .mlm_recipe import mlm_recipe

    r = mlm_recipe(_load(args), args.text, seed=args.seed, select_rate=args.select_rate,
                   mask_rate=args.mask_rate, random_rate=args.random_rate)
    if args.json:
        return r.to_json()
    lines = [f"corrupted: {' '.join(r.corrupted.tokens)}"]
    lines += [f"  {p.position:>3} {p.original:>12} -> {p.shown:<12} ({p.action}); top {p.top[0].token.strip()}, "
              f"loss {p.loss:.3f}" for p in r.positions]
    lines.append(f"mean MLM loss {r.mean_loss:.4f} over {len(r.positions)} positions; "
                 f"recovered {r.accuracy:.0%}")
    return "\n".join(lines)


def cmd_nsp(args: argparse.Namespace) -> Any:
    from .nsp import next_sentence

    r = next_sentence(_load(args), args.text_a, args.text_b)
    return r.to_json() if args.json else f"IsNext {r.is_next:.4f}  NotNext {r.not_next:.4f}"


def cmd_corpus_search(args: argparse.Namespace) -> Any:
    from .corpus_search import build_index, search
    from .hidden_cache import HiddenStateCache

    lm = _load(args)
    layer = lm.num_layers if args.layer is None else args.layer
    index = build_index(lm, args.size, HiddenStateCache(args.cache))
    found = search(lm, index, args.text, args.word, layer, args.k)
    out = {"query_word": found.query_word, "layer": found.layer, "index_words": index.n_words,
           "matches": [m.__dict__ for m in found.matches], "tags": dict(found.tag_counts.most_common())}
    if args.json:
        return out
    lines = [f"“{found.query_word}” at layer {layer}: the {len(found.matches)} nearest of {index.n_words:,} Brown "
             f"words; tags {', '.join(f'{t} {n}' for t, n in found.tag_counts.most_common())}"]
    lines += [f"  {m.similarity:.3f}  {m.word:<14} {m.tag:<6} {m.genre:<16} {m.sentence[:70]}" for m in found.matches]
    return "\n".join(lines)


def _corpus_search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="a sentence containing the word to search for")
    p.add_argument("--word", type=int, required=True, help="the word's index in the text (0 = first word)")
    p.add_argument("--layer", type=int, help="0 = embeddings (default: the last layer)")
    p.add_argument("--k", type=int, default=20, help="matches to return (1-200)")
    p.add_argument("--size", type=int, default=2000, help="Brown sentences in the index (0 = all 57,340)")
    p.add_argument("--cache", help="hidden-state cache folder (default: ~/.cache/bertscope/hidden)")


def cmd_sop(args: argparse.Namespace) -> Any:
    from .nsp import sentence_order

    r = sentence_order(_load(args), args.text_a, args.text_b)
    return r.to_json() if args.json else f"in order {r.in_order:.4f}  swapped {r.swapped:.4f}"


def cmd_shift(args: argparse.Namespace) -> Any:
    from .shift import anisotropy_baseline, collect, layer_metrics, read_labelled_csv, sense_presets

    if args.data:
        rows = read_labelled_csv(_read_text(args.data, "data"))
    else:
        presets = sense_presets()
        if args.word not in presets:
            raise BertScopeError(f"No shipped sentences for {args.word!r}: pass --data FILE "
                                 f"(presets: {', '.join(presets)}).")
        rows = presets[args.word]
    lm = _load(args)
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
             "layer  within  across    gap  centroid  self-sim  anisotropy"]
    lines += [f"{m.layer:>5}  {m.within:6.3f}  {m.across:6.3f}  {m.gap:6.3f}  {m.centroid_accuracy:8.3f}  "
              f"{m.self_similarity:8.3f}  {m.anisotropy:10.3f}" for m in metrics]
    return "\n".join(lines)


def cmd_align(args: argparse.Namespace) -> Any:
    from .align import embed_parallel, read_parallel_tsv, retrieval, shipped_parallel

    if args.data:
        data = read_parallel_tsv(_read_text(args.data, "data"), args.kind)
    else:
        data = shipped_parallel(args.kind)
    if args.languages:
        data = data.select([g.strip() for g in args.languages.split(",") if g.strip()])
    vectors = embed_parallel(_load(args), data, pooling=args.pooling, context=args.context)
    scores = retrieval(vectors)
    out = {"model": args.model, "kind": data.kind, "pooling": args.pooling, "context": args.context,
           **scores.to_json(),
           "left_out": [{"line": line, "missing": missing} for line, missing in data.incomplete]}
    if args.json:
        return out
    raw, centred = scores.mean(), scores.mean(True)
    lines = [f"{data.n_items} items x {len(data.languages)} languages ({', '.join(data.languages)}); "
             f"chance {scores.chance:.3f}; rows left out: {len(data.incomplete)}",
             "layer  mean P@1  centred"]
    lines += [f"{layer:>5}  {raw[layer]:8.3f}  {centred[layer]:7.3f}" for layer in range(len(raw))]
    return "\n".join(lines)


def cmd_attribute(args: argparse.Namespace) -> Any:
    import numpy as np

    from .attribution import SCORE_METHODS, attribute, parse_target

    target = parse_target(args.target, args.probe, args.probe_layer, args.label, args.position)
    if args.method not in SCORE_METHODS and target is not None:
        raise BertScopeError(f"{args.method} is a token-to-token method: --target/--probe belong to grad and ig.")
    layers = None
    if args.layers:
        try:
            layers = [int(x) for x in args.layers.split(",") if x.strip()]
        except ValueError:
            layers = []
        if not layers:
            raise BertScopeError("--layers: give layer numbers counted from 1, e.g. 6 or 1,6.")
    result = attribute(_load(args), args.text, args.pair, args.method, target, layers, args.steps)
    if args.json:
        return result.to_json()
    if args.method in SCORE_METHODS:
        a = result.attribution
        lines = [f"{args.method} for {a.target.to_json()}: f = {a.f_input:.4f}"]
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
    from .attribution import METHODS

    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--method", choices=METHODS, default="rollout")
    p.add_argument("--target", help="grad/ig: POSITION:TOKEN (a masked-token prediction; POSITION alone = the "
                                    "model's top prediction there), nsp, or sop (ALBERT)")
    p.add_argument("--probe", help="grad/ig: a probe run's output folder (probes.layerwise --out)")
    p.add_argument("--layer", dest="probe_layer", type=int, help="with --probe: the probe's layer (0 = embeddings)")
    p.add_argument("--class", dest="label", help="with --probe: the class to explain")
    p.add_argument("--position", type=int, help="with a word-level probe: a token position of the word")
    p.add_argument("--steps", type=int, default=50, help="ig: integration steps (Gauss-Legendre)")
    p.add_argument("--layers", help="flow: comma-separated layers to compute, counted from 1 (default all)")


def _align_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="TSV, one column per language code (default: the shipped file)")
    p.add_argument("--kind", choices=["sentences", "words"], default="sentences")
    p.add_argument("--languages", help="comma-separated subset, e.g. en,de,zh")
    p.add_argument("--pooling", choices=["mean", "cls"], default="mean", help="sentence vector")
    p.add_argument("--context", choices=["alone", "carrier"], default="alone",
                   help="words: alone or inside a per-language carrier sentence")


def cmd_probe(args: argparse.Namespace) -> Any:
    from .hidden_cache import HiddenStateCache, hidden_states
    from .probe_data import read_task, shipped_task
    from .probing import check_external_labels, probe_layers

    if args.data:
        task = read_task(_read_text(args.data, "data"), args.data)
    else:
        task = shipped_task(args.task, args.size)
    external_task = None
    if args.test_data:
        external_task = read_task(_read_text(args.test_data, "test data"), args.test_data)
        if external_task.level != task.level:
            raise BertScopeError(f"{args.test_data} is a {external_task.level}-level task; {task.name} is "
                                 f"{task.level}-level: give a file of the same kind.")
        check_external_labels(task.classes, external_task.classes)
    lm = _load(args)
    cache = HiddenStateCache(args.cache)
    states = hidden_states(lm, task, args.pooling, cache)
    external = hidden_states(lm, external_task, args.pooling, cache) if external_task is not None else None
    result = probe_layers(states, task.name, args.pooling, args.probe, args.seed, external=external)
    if args.json:
        return result.to_json()
    lines = [f"{task.name} ({task.level}, {task.n_examples:,} examples, {len(task.classes)} labels) on {lm.name}; "
             f"cache {'hit' if states.hit else 'built'}; majority baseline {result.majority_baseline:.3f}",
             "layer  accuracy  control  selectivity  95% interval"]
    lines += [f"{r.layer:>5}  {r.accuracy:8.3f}  {r.control_accuracy:7.3f}  {r.selectivity:11.3f}  "
              f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]"
              + (f"  test file {r.external_accuracy:.3f}" if r.external_accuracy is not None else "")
              for r in result.layers]
    return "\n".join(lines)


def _probe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="pos", help="shipped: pos, sense, tense, subject_number, negation, "
                                                 "question, bigram_shift; brown-pos, brown-tags, brown-genre "
                                                 "(after `make brown`)")
    p.add_argument("--size", type=int, help="Brown tasks: sentences in the sample (default 2000; 0 = all)")
    p.add_argument("--data", help="your own task: .conllu, .csv or .jsonl")
    p.add_argument("--test-data", help="train here, test there: also score the probe on this file "
                                       "(.conllu, .csv or .jsonl with the task's labels)")
    p.add_argument("--pooling", default="mean", help="token tasks: mean|first; sentence tasks: mean|cls")
    p.add_argument("--probe", choices=["logreg", "mlp"], default="logreg")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", help="hidden-state cache folder (default: ~/.cache/bertscope/hidden)")


def _shift_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--word", required=True, help="the target word")
    p.add_argument("--data", help="CSV with columns sentence,label (default: the shipped preset)")
    p.add_argument("--pooling", choices=["mean", "first"], default="mean", help="over the word's pieces")
    p.add_argument("--occurrences", choices=["all", "first"], default="all", help="per sentence")


def _fill_mask_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="text with [MASK] or <mask> where words should be predicted")
    p.add_argument("--top-k", type=int, default=5)


def _recipe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--select-rate", type=float, default=0.15, help="share of tokens in the loss")
    p.add_argument("--mask-rate", type=float, default=0.8, help="of those, share replaced by [MASK]")
    p.add_argument("--random-rate", type=float, default=0.1, help="share replaced by a random token")


def _nsp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text_a")
    p.add_argument("text_b")


def _attention_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text")
    p.add_argument("--pair", help="segment B text")
    p.add_argument("--layer", type=int, help="one layer (with --head)")
    p.add_argument("--head", type=int, help="one head (with --layer)")


def _head_stats_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", help="a UTF-8 text file, one sentence per line; or brown[:N], N Brown corpus "
                                    "sentences over all 15 genres (default N 500); default: the shipped sample")
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
    "fill-mask": ("top-k predictions at every [MASK]", cmd_fill_mask, _fill_mask_arguments),
    "mlm-recipe": ("BERT's 15% / 80-10-10 masking on one text, with the MLM loss", cmd_mlm_recipe,
                   _recipe_arguments),
    "nsp": ("next-sentence prediction for a pair", cmd_nsp, _nsp_arguments),
    "sop": ("ALBERT's sentence-order prediction for a pair (A then B: in order or swapped)", cmd_sop,
            _nsp_arguments),
    "shift": ("the same word in different contexts, layer by layer", cmd_shift, _shift_arguments),
    "corpus-search": ("the Brown corpus words nearest to a word of a sentence at a layer, with their tags",
                      cmd_corpus_search, _corpus_search_arguments),
    "attribute": ("rollout, flow, norm-based attention, ALTI, gradient x input, integrated gradients",
                  cmd_attribute, _attribute_arguments),
    "align": ("cross-lingual retrieval P@1 per layer, raw and mean-centred", cmd_align, _align_arguments),
    "probe": ("linear probes per layer with a control task (Hewitt & Liang 2019)", cmd_probe, _probe_arguments),
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
    try:
        print(json.dumps(result, ensure_ascii=False) if args.json else result)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader left, which is not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
