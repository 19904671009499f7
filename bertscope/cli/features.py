"""``features``: the SAE features that fire on each word piece of a text, one feature (its logit
weights, nearest features and, over a tagged corpus, its firing, labels and top contexts), features by
tag or by the word they promote; ``feature-stats``: the corpus pass behind them; ``feature-effect``:
the causal check of a tag label. The SAEs are the model's shipped ones unless ``--sae`` names others."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, load, progress_bar, seed_int
from bertscope.cli.sae import parse_layers
from bertscope.errors import BertScopeError


def sae_source(args: argparse.Namespace, lm) -> Path:
    """``--sae``, or the model's shipped SAEs; one line when there is neither."""
    from bertscope.features.shipped import shipped_saes

    if args.sae:
        return Path(args.sae)
    shipped = shipped_saes(lm.name)
    if shipped is None:
        raise BertScopeError(f"{lm.name} ships no SAEs: give --sae (a train-sae --out folder, or one SAE in "
                             "SAELens's format); bundled-mlm ships one for each layer.")
    return shipped


def load_layer_sae(args: argparse.Namespace, lm, layer: int):
    from bertscope.features.sae import load_sae
    from bertscope.features.shipped import sae_folder

    folder = sae_folder(sae_source(args, lm), layer)
    sae = load_sae(folder, lm.device)
    sae.check_for(lm, f"blocks.{layer}.hook_resid_post")
    return sae, folder


def sae_json(sae, folder: Path, layer: int) -> dict:
    return {"path": str(folder.resolve()), "hook": sae.info.hook_name or f"blocks.{layer}.hook_resid_post",
            "d_in": sae.d_in, "d_sae": sae.d_sae, "k": sae.k if sae.architecture == "topk" else None}


def tagged_sample(args: argparse.Namespace):
    from bertscope.corpora.tagged import tagged_corpus

    if args.sentences < 0:
        raise BertScopeError("--sentences must be 0 (the whole corpus) or more.")
    return tagged_corpus(args.corpus, args.sentences, args.seed)

def cmd_features(args: argparse.Namespace) -> Any:
    from bertscope.features.active import active_features

    modes = [m for m in ("text", "feature", "tag", "token") if getattr(args, m) is not None]
    if len(modes) != 1:
        raise BertScopeError("Give one of --text (the features on each word piece), --feature N (one feature), "
                             "--tag TAG (the features that go with a gold tag) or --token WORD (the features that "
                             "promote a word).")
    if not 1 <= args.top <= 1000:
        raise BertScopeError("--top must be between 1 and 1000.")
    lm = load(args)
    sae, folder = load_layer_sae(args, lm, args.layer)
    if args.feature is not None:
        return one_feature(lm, sae, args, folder)
    if args.tag is not None:
        return tag_search(lm, sae, args, folder)
    if args.token is not None:
        return token_search(lm, sae, args, folder)
    result = active_features(lm, sae, args.text, args.layer, folder.resolve())
    if args.json:
        return result
    lines = [f"{result['sae']['hook']} of {lm.name}: {result['sae']['d_sae']:,} features, k={result['sae']['k']} "
             f"({result['sae']['path']})"]
    for t in result["tokens"]:
        top = ", ".join(f"{f['feature']} ({f['activation']:.2f})" for f in t["features"][:args.top])
        lines.append(f"{t['token']:>14}  {top or '-'}")
    return "\n".join(lines)


def corpus_statistics(lm, sae, args: argparse.Namespace, corpus=None):
    from bertscope.features.statistics import feature_statistics

    corpus = corpus if corpus is not None else tagged_sample(args)
    with progress_bar(f"{lm.name} layer {args.layer}: {corpus.name}", "sentence") as progress:
        return feature_statistics(lm, {args.layer: sae}, corpus, progress=progress)[args.layer], corpus


def one_feature(lm, sae, args: argparse.Namespace, folder: Path) -> Any:
    """One feature: from the weights, the tokens it promotes and suppresses and its nearest features;
    with --corpus, its firing rate, histogram, gold-tag labels and top contexts."""
    from bertscope.corpora.tagged import describe_tag
    from bertscope.features.contexts import feature_contexts
    from bertscope.features.directions import logit_weights, nearest_features
    from bertscope.features.statistics import bin_edges

    sae.check_feature(args.feature)
    if not 1 <= args.contexts <= 20:
        raise BertScopeError("--contexts must be between 1 and 20 (the statistics keep 20 a feature).")
    near = nearest_features(sae, args.feature, args.top)
    weights = logit_weights(lm, sae, args.feature, top=args.top) if "mlm" in lm.outputs else None
    result = {"sae": sae_json(sae, folder, args.layer), "feature": args.feature,
              "nearest": [{"feature": f, "cosine": c} for f, c in near],
              "logit_weights": weights.to_json() if weights is not None else None}
    stats = contexts = None
    if args.corpus:
        stats, corpus = corpus_statistics(lm, sae, args)
        contexts = feature_contexts(lm, sae, stats, corpus, args.feature, args.layer, args.contexts)
        result["corpus"] = {"name": corpus.name, "sentences": stats.sentences, "word_pieces": stats.pieces}
        result.update(stats.summary(args.feature))
        result["labels"] = {ts: [lab.to_json() for lab in stats.labels(args.feature, ts)] for ts in stats.tags}
        result["histogram"] = {"edges": [round(float(e), 6) for e in bin_edges()],
                               "counts": stats.histogram[args.feature].tolist()}
        result["contexts"] = [c.to_json() for c in contexts]
    if args.json:
        return result
    lines = [f"feature {args.feature} of {result['sae']['hook']} ({lm.name})",
             "nearest by decoder cosine: " + ", ".join(f"{f} ({c:.2f})" for f, c in near)]
    if weights is not None:
        lines.append("promotes: " + ", ".join(t for t, _ in weights.promoted))
        lines.append("suppresses: " + ", ".join(t for t, _ in weights.suppressed))
    else:
        lines.append(f"{lm.name} has no masked-LM head: no logit weights")
    if stats is not None:
        lines.append(f"over {result['corpus']['name']} ({stats.pieces:,} word pieces): fires on "
                     f"{result['firing_rate']:.2%} of them, mean activation {result['mean_activation']:.2f}")
        for ts, labs in result["labels"].items():
            lines.append(f"  {ts}: " + ("; ".join(f"{describe_tag(ts, lab['tag'])}: precision {lab['precision']:.2f}, "
                                                  f"recall {lab['recall']:.2f}" for lab in labs) or "-"))
        for c in contexts:
            marked = " ".join(f"[{p['token']}]" if p["activation"] > 0 else p["token"] for p in c.pieces)
            lines.append(f"  {c.peak:6.2f}  {c.source}: {marked}")
    return "\n".join(lines)


def tag_search(lm, sae, args: argparse.Namespace, folder: Path) -> Any:
    args.corpus = args.corpus or "brown"
    corpus = tagged_sample(args)  # the tag is checked before the pass
    tagset = args.tagset or corpus.tagsets[0]
    if tagset not in corpus.tags:
        raise BertScopeError(f"--tagset {tagset}: {corpus.name} has {', '.join(corpus.tagsets)}.")
    known = sorted({t for s in corpus.tags[tagset] for t in s})
    if args.tag not in known:
        raise BertScopeError(f"No tag {args.tag!r} in {tagset}: the tags are {', '.join(known)}.")
    stats, corpus = corpus_statistics(lm, sae, args, corpus)
    found = stats.features_for_tag(tagset, args.tag, args.top)
    result = {"sae": sae_json(sae, folder, args.layer), "corpus": corpus.name, "tagset": tagset, "tag": args.tag,
              "features": [{"feature": f} | lab.to_json() | {"firing_rate": round(stats.firing_rate(f), 6)}
                           for f, lab in found]}
    if args.json:
        return result
    lines = [f"features of {result['sae']['hook']} ({lm.name}) that go with {tagset} {args.tag} over {corpus.name}",
             f"{'feature':>8}{'precision':>11}{'recall':>8}{'F1':>7}{'fires':>9}"]
    lines += [f"{f['feature']:>8}{f['precision']:>11.3f}{f['recall']:>8.3f}{f['f1']:>7.3f}{f['firing_rate']:>9.2%}"
              for f in result["features"]]
    return "\n".join(lines)


def token_search(lm, sae, args: argparse.Namespace, folder: Path) -> Any:
    from bertscope.features.directions import features_promoting

    found = features_promoting(lm, sae, args.token, args.top)
    result = {"sae": sae_json(sae, folder, args.layer), "token": args.token.strip(),
              "features": [{"feature": f, "logit_change": v} for f, v in found]}
    if args.json:
        return result
    return "\n".join([f"features of {result['sae']['hook']} ({lm.name}) that promote {args.token.strip()!r}"] +
                     [f"{f:>8}  {v:+.3f}" for f, v in found])

def cmd_feature_stats(args: argparse.Namespace) -> Any:
    """One pass over the corpus for every layer's SAE: what the feature pages read."""
    import time

    from bertscope.features.sae import load_sae
    from bertscope.features.shipped import sae_folder, sae_layers
    from bertscope.features.statistics import feature_statistics

    lm = load(args)
    source = sae_source(args, lm)
    layers = parse_layers(args.layers, lm.num_layers) if args.layers else sae_layers(source)
    saes = {layer: load_sae(sae_folder(source, layer), lm.device) for layer in layers}
    corpus = tagged_sample(args)
    started = time.perf_counter()
    with progress_bar(f"{lm.name}: {corpus.name}", "sentence") as progress:
        stats = feature_statistics(lm, saes, corpus, progress=progress)
    seconds = time.perf_counter() - started
    report = {"model": lm.name, "sae": str(source.resolve()), "corpus": corpus.name, "seconds": round(seconds, 2),
              "layers": []}
    for layer in layers:
        s = stats[layer]
        labels = [s.label(f) for f in range(s.d_sae)]
        strong = [lab for lab in labels if lab is not None and lab.precision >= 0.8 and lab.recall >= 0.1]
        report["layers"].append({"layer": layer, "word_pieces": s.pieces, "words": s.words,
                                 "silent": int((s.fires == 0).sum()), "d_sae": s.d_sae,
                                 "labelled_precision_0.8": len(strong)})
    if args.json:
        return report
    lines = [f"{corpus.name} through the SAEs of {lm.name} ({report['sae']}) in {seconds:.1f} s",
             f"{'layer':<7}{'pieces':>10}{'silent':>8}{'labelled (precision >= 0.8, recall >= 0.1)':>45}"]
    lines += [f"{r['layer']:<7}{r['word_pieces']:>10,}{r['silent']:>8}{r['labelled_precision_0.8']:>45}"
              for r in report["layers"]]
    return "\n".join(lines)

def cmd_feature_effect(args: argparse.Namespace) -> Any:
    """The causal check of a tag label: features switched off against as many controls."""
    from bertscope.features.causal import tag_effect

    try:
        features = [int(f) for f in args.features.split(",") if f.strip()]
    except ValueError:
        raise BertScopeError(f"--features {args.features!r}: give feature numbers, e.g. 78,2176.") from None
    lm = load(args)
    sae, folder = load_layer_sae(args, lm, args.layer)
    with progress_bar(f"{lm.name} layer {args.layer}: {args.tag}", "step") as progress:
        effect = tag_effect(lm, sae, args.layer, features, args.tag, args.tagset, args.train_sentences,
                            args.held_out_sentences, args.seed, progress)
    result = {"sae": sae_json(sae, folder, args.layer)} | effect.to_json()
    if args.json:
        return result
    return "\n".join([
        f"features {', '.join(map(str, effect.features))} of {result['sae']['hook']} ({lm.name}) switched off; "
        f"controls {', '.join(map(str, effect.controls))}; tag {effect.tag} ({effect.tagset})",
        f"{'':<44}{'intact':>9}{'off':>9}{'controls':>10}",
        f"{f'probe for {effect.tag} (balanced accuracy)':<44}{effect.probe_intact:>9.3f}{effect.probe_removed:>9.3f}"
        f"{effect.probe_control:>10.3f}",
        f"{f'masked-LM top-1, {effect.masked_words} {effect.tag} words':<44}{effect.mlm_intact:>9.3f}"
        f"{effect.mlm_removed:>9.3f}{effect.mlm_control:>10.3f}",
        f"{f'masked-LM top-1, {effect.other_words} other words':<44}{effect.other_intact:>9.3f}"
        f"{effect.other_removed:>9.3f}",
        f"the features fire on {effect.fires_on_tag:.0%} of the {effect.tag_words} held-out {effect.tag} words"])


def _effect_arguments(p: argparse.ArgumentParser) -> None:
    _sae_argument(p)
    p.add_argument("--layer", type=int, required=True, help="the layer whose output the SAE reads (from 0)")
    p.add_argument("--features", required=True, help="the features to switch off together, e.g. 78,2176")
    p.add_argument("--tag", required=True, help="the gold tag they are said to carry (e.g. DET)")
    p.add_argument("--tagset", choices=("universal", "brown"), default="universal")
    p.add_argument("--train-sentences", type=int, default=1000, help="Brown training sentences for the probe")
    p.add_argument("--held-out-sentences", type=int, default=300, help="held-out Brown sentences scored")
    p.add_argument("--seed", type=seed_int, default=0)

def _corpus_arguments(p: argparse.ArgumentParser, default: str | None) -> None:
    p.add_argument("--corpus", choices=("brown", "ewt"), default=default,
                   help="the tagged corpus the statistics run over (ewt: `corpus install ewt` first)")
    p.add_argument("--sentences", type=int, default=5000, help="sentences of it, spread over Brown's documents "
                   "(0: all, 57,340 sentences); the statistics are kept on disk")
    p.add_argument("--seed", type=seed_int, default=0)


def _sae_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sae", help="an SAE folder (SAELens's format) or a train-sae --out folder (default: the "
                   "model's shipped SAEs)")

def _feature_arguments(p: argparse.ArgumentParser) -> None:
    _sae_argument(p)
    p.add_argument("--layer", type=int, required=True, help="the layer whose output the SAE reads (from 0)")
    p.add_argument("--text", help="the features that fire on each word piece of this text")
    p.add_argument("--feature", type=int, help="or one feature: the tokens it promotes and suppresses through the "
                   "masked-LM head, its nearest features by decoder cosine; with --corpus, its firing rate, "
                   "histogram, gold-tag labels and top contexts")
    p.add_argument("--tag", help="or the features whose firing goes with this gold tag (e.g. VERB, vbd), best F1 first")
    p.add_argument("--tagset", help="with --tag: universal or brown (Brown), upos or deprel (EWT)")
    p.add_argument("--token", help="or the features whose direction promotes this word through the masked-LM head")
    p.add_argument("--top", type=int, default=5, help="features shown a token; tokens and neighbours shown a feature")
    p.add_argument("--contexts", type=int, default=5, help="top contexts shown a feature (at most 20)")
    _corpus_arguments(p, None)

def _stats_arguments(p: argparse.ArgumentParser) -> None:
    _sae_argument(p)
    p.add_argument("--layers", help="layers from 0 (default: every layer with an SAE)")
    _corpus_arguments(p, "brown")

COMMANDS = [
    Command("features", "the SAE features that fire on each word piece of a text; one feature's logit weights, "
            "nearest features, gold-tag labels and top contexts; features by tag or by the word they promote",
            cmd_features, _feature_arguments),
    Command("feature-stats", "one pass over a tagged corpus (Brown, EWT) for every layer's SAE: top contexts, "
            "histograms, gold-tag labels, kept on disk for the feature pages", cmd_feature_stats, _stats_arguments),
    Command("feature-effect", "the causal check of a feature's tag label: switch features off and watch a probe for "
            "the tag and masked-token accuracy on its words, beside control features", cmd_feature_effect,
            _effect_arguments),
]
