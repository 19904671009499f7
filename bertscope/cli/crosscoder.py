"""What fine-tuning added, latent by latent.

- ``train-crosscoder BASE FINETUNED``: a BatchTopK crosscoder over a base model and a fine-tuned model's outputs
  at one layer, on the same mixed text through both (``corpora.mixture``), then each latent's decoder norms, its
  class (shared, base-only, fine-tuned-only) and Latent Scaling on held-out text.
- ``diff-features BASE FINETUNED``: a trained crosscoder (``--crosscoder``, or the one shipped for the pair) read
  on held-out text: every latent's norms and class, and the causal check (``features.diff_causal``): the
  fine-tuned-only latents switched off inside the fine-tuned model against as many controls, its classifier's or
  tagger's held-out accuracy before and after."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.cli.common import Command, finite_float, load, progress_bar, seed_int, staged_bars
from bertscope.errors import BertScopeError


def cmd_crosscoder(args: argparse.Namespace) -> Any:
    from bertscope.core.models import load_model
    from bertscope.corpora.mixture import mixed_texts
    from bertscope.features.activations import layer_activations, resid_post
    from bertscope.features.crosscoder import CrosscoderInfo
    from bertscope.features.crosscoder_trainer import CrosscoderTrainConfig, train_crosscoder
    from bertscope.features.diff_reading import check_pair, finite_or_none
    from bertscope.features.model_diff import CLASSES, diff_models

    if args.tokens < args.batch_tokens or args.per_source < 1 or args.held_out < 1:
        raise BertScopeError("--tokens must hold one batch, and --per-source and --held-out be at least 1.")
    if args.top < 0:
        raise BertScopeError("--top takes a number from 0.")
    if args.lr <= 0:
        raise BertScopeError("--lr must be above 0.")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise BertScopeError(f"--out {args.out} is a file: give a folder for the crosscoder.")
    base = load(args)
    tuned = load_model(args.tuned, device=args.device, dtype=args.dtype)
    layer = base.num_layers - 1 if args.layer is None else args.layer
    if not 0 <= layer < min(base.num_layers, tuned.num_layers):
        raise BertScopeError(f"Layer {layer} does not exist in both: they have layers 0 to "
                             f"{min(base.num_layers, tuned.num_layers) - 1}.")
    check_pair(base, tuned)
    cfg = CrosscoderTrainConfig(expansion=args.expansion, k=args.k, epochs=args.epochs, batch_tokens=args.batch_tokens,
                                lr=args.lr, seed=args.seed)
    cfg.check(base.hidden_size, cfg.batch_tokens)
    train = mixed_texts(args.per_source, held_out=False, seed=args.seed)
    held = mixed_texts(args.held_out, held_out=True, seed=args.seed)
    caches = {}
    for name, lm in (("base", base), ("tuned", tuned)):
        with progress_bar(f"{lm.name} layer {layer}: activations", "sentence") as progress:
            caches[name] = (layer_activations(lm, train.texts, layer, args.tokens, progress=progress,
                                              positions=args.positions),
                            layer_activations(lm, held.texts, layer, max_tokens=10**9, progress=progress,
                                              positions=args.positions))
    extra = {"corpus": f"mixture of {', '.join(train.counts())}", "per_source": args.per_source, "seed": args.seed}
    info = CrosscoderInfo((base.name, tuned.name), resid_post(layer),
                          extra if args.positions == "pieces" else {**extra, "positions": args.positions})
    with progress_bar(f"crosscoder layer {layer}", "step") as progress:
        cc, state = train_crosscoder(caches["base"][0], caches["tuned"][0], cfg, Path(args.out), info,
                                     device=str(base.device), progress=lambda done, total, _: progress(done, total))
    diff = diff_models(cc, caches["base"][1], caches["tuned"][1])
    real = np.nonzero(diff.real_fine_tuned_only)[0]
    order = real[np.argsort(-diff.fires[real])][:args.top]
    report = {
        "base": base.name, "tuned": tuned.name, "layer": layer, "hook_name": resid_post(layer),
        "positions": args.positions, "out": args.out,
        "d_sae": cc.d_sae, "k": cc.k, "trained_tokens": caches["base"][0].tokens, "asked_tokens": args.tokens,
        "corpus_too_small": caches["base"][0].tokens < args.tokens, "held_out_tokens": diff.tokens,
        "fve": {"base": finite_or_none(diff.fve[0]), "tuned": finite_or_none(diff.fve[1])}, "l0": diff.l0, "counts": diff.counts(),
        "sources": train.counts(), "missing_sources": list(train.missing),
        "seconds": sum(h["seconds"] for h in state.history),
        "real_fine_tuned_only": [{"latent": int(j), "fires": int(diff.fires[j]), "delta_norm": float(diff.delta[j]),
                                  "nu_error": float(diff.nu_error[j]), "nu_reconstruction": float(diff.nu_reconstruction[j])}
                                 for j in order],
        "classes": list(CLASSES)}
    return report if args.json else table(report)


def table(r: dict) -> str:
    c = r["counts"]
    lines = [f"BatchTopK crosscoder, {r['base']} (base) and {r['tuned']} (fine-tuned), {r['hook_name']}: "
             f"{r['d_sae']:,} latents, k={r['k']}, {r['trained_tokens']:,} "
             f"{'texts ([CLS] alone)' if r['positions'] == 'cls' else 'tokens'}, saved in {r['out']}",
             f"text: {', '.join(r['sources'])}" + (f" (not installed: {', '.join(r['missing_sources'])})"
                                                   if r["missing_sources"] else ""),
             *([f"the text gave {r['trained_tokens']:,} of the {r['asked_tokens']:,} "
                f"{'texts' if r['positions'] == 'cls' else 'tokens'} asked for (raise --per-source)"]
               if r["corpus_too_small"] else []),
             f"held-out ({r['held_out_tokens']:,} {'texts' if r['positions'] == 'cls' else 'tokens'}): variance "
             f"explained {_fmt(r['fve']['base'])} (base), {_fmt(r['fve']['tuned'])} (fine-tuned); {r['l0']:.1f} "
             f"latents a {'text' if r['positions'] == 'cls' else 'token'}",
             "latents by relative decoder norm (0 base-only .. 1 fine-tuned-only):",
             *[f"  {name:<18}{c[name]:>7,}" for name in r["classes"]],
             f"  fine-tuned-only that Latent Scaling keeps (|ν^ε| < 0.2, |ν^r| < 0.5): {c['fine-tuned-only, real']:,}"]
    for latent in r["real_fine_tuned_only"]:
        lines.append(f"    latent {latent['latent']:>6}: fires on {latent['fires']:,} held-out tokens, Δnorm "
                     f"{latent['delta_norm']:.2f}, ν^ε {latent['nu_error']:.2f}, ν^r {latent['nu_reconstruction']:.2f}")
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def cmd_diff_features(args: argparse.Namespace) -> Any:
    from bertscope.core.models import load_model
    from bertscope.features.diff_causal import MAX_EXAMPLES, MAX_LATENTS
    from bertscope.features.diff_reading import crosscoder_for, read_diff

    if args.held_out < 1 or args.seed < 0:
        raise BertScopeError("--held-out must be at least 1, --seed at least 0.")
    if not 1 <= args.examples <= MAX_EXAMPLES:
        raise BertScopeError(f"--examples takes 1 to {MAX_EXAMPLES:,}.")
    if not 1 <= args.max_latents <= MAX_LATENTS:
        raise BertScopeError(f"--max-latents takes 1 to {MAX_LATENTS}.")
    wanted = _latent_list(args.latents) if args.latents else None
    base = load(args)
    tuned = load_model(args.tuned, device=args.device, dtype=args.dtype)
    cc, path, layer = crosscoder_for(base, tuned, args.crosscoder, args.layer)
    with staged_bars() as progress:
        reading = read_diff(base, tuned, cc, path, layer, args.held_out, args.examples, wanted, args.max_latents,
                            args.seed, progress, args.data)
    report = reading.to_json(args.all_latents)
    return report if args.json else diff_table(report)


def _latent_list(spec: str) -> list[int]:
    from bertscope.features.diff_causal import MAX_LATENTS

    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or not all(p.isascii() and p.isdecimal() for p in parts):
        raise BertScopeError(f"--latents {spec!r}: give latent numbers from 0, separated by commas (12,345).")
    chosen = list(dict.fromkeys(int(p) for p in parts))
    if len(chosen) > MAX_LATENTS:
        raise BertScopeError(f"--latents names {len(chosen)}; at most {MAX_LATENTS} are switched off together.")
    return chosen


def diff_table(r: dict) -> str:
    cc, held, c = r["crosscoder"], r["held_out"], r["counts"]
    lines = [f"crosscoder {cc['path']}: layer {cc['layer']}, {cc['d_sae']:,} latents, k={cc['k']}, "
             f"{cc['models'][0]} (base) and {cc['models'][1]} (fine-tuned)",
             f"held-out mixture ({held['tokens']:,} tokens): variance explained {_fmt(held['fve']['base'])} (base), "
             f"{_fmt(held['fve']['finetuned'])} (fine-tuned), {held['l0']:.1f} latents a token",
             "latents: " + ", ".join(f"{name} {c[name]:,}" for name in ("shared", "base", "finetuned", "other", "silent")
                                      if name in c) + f"; fine-tuned-only kept by Latent Scaling {c.get('finetuned_real', 0):,}"]
    k = r["causal"]
    if k is None:
        lines.append(f"causal check: not run ({r.get('causal_note', '')})")
        return "\n".join(lines)
    a, agree = k["accuracy"], k["agreement_with_base"]
    what = "words" if k["task"] == "tag" else "texts"
    lines += [f"causal check on {k['data']} ({k['examples']:,} examples, {k.get(what, 0):,} {what} scored), layer "
              f"{k['layer']}:",
              f"  accuracy intact {a['intact']:.3f}; crosscoder spliced in {a['spliced']:.3f}; the base's layer read "
              f"{a['base read']:.3f}",
              f"  {len(k['finetuned_only']['latents'])} fine-tuned-only latents off: {a['removed']:.3f} "
              f"(agreement with the base read {agree['intact']:.3f} -> {agree['removed']:.3f})",
              f"  as many controls off (matched removal): {a['control']:.3f} (agreement {agree['control']:.3f})"]
    shown = [row for row in r["latents"] if row.get("top_contexts")]
    if len(shown) > 10:
        lines.append(f"  the {len(shown)} latents' strongest contexts (the first 10 here; --json: all, 5 each):")
    for row in shown[:10]:
        for ctx in row["top_contexts"][:1]:
            lines.append(f"  latent {row['latent']}: peaks on {ctx['token']!r} ({ctx['gold']}) in {ctx['text'][:70]!r}")
    return "\n".join(lines)


def _diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tuned", metavar="FINETUNED", help="the fine-tuned model (fine-tuned from MODEL, the base)")
    p.add_argument("--crosscoder", help="a train-crosscoder --out folder (default: the one shipped for the pair)")
    p.add_argument("--layer", type=int, help="the crosscoder's layer (default: the folder's last)")
    p.add_argument("--latents", help="latents to switch off, e.g. 12,345 (default: the fine-tuned-only ones that "
                   "Latent Scaling keeps, else every fine-tuned-only one)")
    p.add_argument("--max-latents", type=int, default=32, help="at most this many switched off, the most frequent "
                   "(without --latents; 1 to 64)")
    p.add_argument("--held-out", type=int, default=200, help="held-out texts from each corpus for the norms' figures")
    p.add_argument("--examples", type=int, default=500, help="held-out task examples the causal check scores "
                   "(1 to 2,000)")
    p.add_argument("--data", help="the task data the causal check scores: a shipped corpus (sentiment, topics, ewt-upos, brown-pos) "
                   "or a file as finetune reads it; its held-out side (10%%, seed 0, as finetune splits it). Default: "
                   "the tweets for a classifier, EWT for a tagger (what the shipped task models were trained on)")
    p.add_argument("--all-latents", action="store_true", help="list shared and silent latents too")
    p.add_argument("--seed", type=seed_int, default=0)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tuned", metavar="FINETUNED", help="the fine-tuned model (fine-tuned from MODEL, the base)")
    p.add_argument("--layer", type=int, help="the layer whose output both are read at (default the last)")
    p.add_argument("--expansion", type=int, default=8, help="latents = expansion x the models' width")
    p.add_argument("--k", type=int, default=32, help="active latents a token (on average over a batch)")
    p.add_argument("--tokens", type=int, default=200_000, help="training word pieces (the mixture's training side; "
                   "with --positions cls, texts)")
    p.add_argument("--positions", choices=("pieces", "cls"), default="pieces", help="read every word piece, or each "
                   "text's [CLS] alone (what a classifier's head reads at the last layer)")
    p.add_argument("--per-source", type=int, default=2000, help="training texts from each installed corpus")
    p.add_argument("--held-out", type=int, default=200, help="held-out texts from each corpus for the figures")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=finite_float, default=2e-3, help="Adam's rate (the reference's 2e-4/sqrt(d_sae/2^14) is for "
                   "~100k steps; a few hundred steps here need more)")
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--top", type=int, default=10, help="fine-tuned-only latents to list")
    p.add_argument("--out", required=True, help="a folder for the crosscoder (cfg.json, crosscoder.safetensors) and its checkpoint after every "
                   "epoch: a run stopped or killed mid-way, started again with the same settings, goes on from it")


COMMANDS = [
    Command("train-crosscoder", "what fine-tuning added, latent by latent: a BatchTopK crosscoder over a base and a "
            "fine-tuned model at one layer, shared / base-only / fine-tuned-only latents, Latent Scaling",
            cmd_crosscoder, _arguments),
    Command("diff-features", "a crosscoder read on held-out text: each latent's norms and class, and whether the "
            "fine-tuned model uses its fine-tuned-only latents (its task accuracy with them off, against controls)",
            cmd_diff_features, _diff_arguments),
]
