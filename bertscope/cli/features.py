"""``train-sae``: TopK sparse autoencoders on layers' outputs over Brown, scored on held-out documents;
``features``: the features that fire on each word piece of a text."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, load, progress_bar
from bertscope.errors import BertScopeError

SENTENCES_PER_TOKEN = 1 / 12  # Brown sentences average ~24 word pieces: twice what the tokens need


def parse_layers(text: str | None, n_layers: int) -> list[int]:
    if not text:
        return list(range(n_layers))
    try:
        layers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BertScopeError(f"--layers {text!r}: give layer numbers from 0, e.g. 0,2,5.") from None
    for layer in layers:
        if not 0 <= layer < n_layers:
            raise BertScopeError(f"Layer {layer} does not exist: the model has layers 0 to {n_layers - 1}.")
    return layers


def layer_folder(out: Path, layer: int) -> Path:
    return out / f"layer_{layer:02d}"


def cmd_train_sae(args: argparse.Namespace) -> Any:
    import numpy as np

    from bertscope.corpora.brown_tasks import brown_split_texts
    from bertscope.features.activations import layer_activations, resid_post
    from bertscope.features.quality import sae_quality
    from bertscope.features.sae import SaeInfo
    from bertscope.features.training import SaeTrainConfig, train_sae

    if args.tokens < 1 or args.held_out < 1:
        raise BertScopeError("--tokens and --held-out must be at least 1.")
    lm = load(args)
    layers = parse_layers(args.layers, lm.num_layers)
    cfg = SaeTrainConfig(expansion=args.expansion, k=args.k, epochs=args.epochs, batch_tokens=args.batch_tokens,
                         seed=args.seed)
    cfg.check(lm.hidden_size, cfg.batch_tokens)  # the settings alone, before any pass
    out = Path(args.out)
    train_texts = brown_split_texts(max(1, int(args.tokens * SENTENCES_PER_TOKEN)), held_out=False, seed=args.seed)
    held_texts = brown_split_texts(args.held_out, held_out=True, seed=args.seed)
    report = {"model": lm.name, "out": str(out), "config": vars(cfg) | {"lr": cfg.rate(cfg.expansion * lm.hidden_size)},
              "layers": []}
    for layer in layers:
        with progress_bar(f"{lm.name} layer {layer}: activations", "sentence") as progress:
            acts = layer_activations(lm, train_texts, layer, args.tokens, progress=progress)
            held = layer_activations(lm, held_texts, layer, max_tokens=10**9, progress=progress)
        short = acts.tokens < args.tokens
        info = SaeInfo(lm.name, resid_post(layer), {"corpus": "brown (training documents)", "seed": args.seed})
        with progress_bar(f"{lm.name} layer {layer}: SAE", "step") as progress:
            sae, state = train_sae(acts, cfg, layer_folder(out, layer), info, device=str(lm.device),
                                   progress=lambda done, total, _: progress(done, total))
        mean = np.asarray(acts.rows, np.float64).mean(0)
        quality = sae_quality(lm, sae.to(lm.device), held, held_texts, mean, seed=args.seed).to_json()
        quality.update({"trained_tokens": acts.tokens, "asked_tokens": args.tokens, "corpus_too_small": short,
                        "train_seconds": sum(h["seconds"] for h in state.history)})
        (layer_folder(out, layer) / "quality.json").write_text(json.dumps(quality, indent=1))
        report["layers"].append(quality)
    (out / "quality.json").write_text(json.dumps(report, indent=1))
    return report if args.json else table(report)


def table(report: dict) -> str:
    lines = [f"TopK SAEs on {report['model']} ({report['config']['expansion']}x, k={report['config']['k']}), "
             f"in {report['out']}; held-out Brown documents",
             f"{'layer':<7}{'tokens':>9}{'FVE':>8}{'L0':>7}{'dead':>7}{'dense':>7}{'loss':>8}{'SAE':>8}{'mean':>8}"
             f"{'recovered':>11}{'(context)':>11}"]
    for q in report["layers"]:
        lines.append(f"{q['layer']:<7}{q['trained_tokens']:>9,}{q['fve']:>8.3f}{q['l0']:>7.1f}{q['dead_share']:>7.1%}"
                     f"{q['dense_share']:>7.1%}{q['loss_intact']:>8.3f}{q['loss_sae']:>8.3f}{q['loss_mean']:>8.3f}"
                     f"{q['recovered']:>11.3f}{q['recovered_context']:>11.3f}")
        if q["corpus_too_small"]:
            lines.append(f"        the corpus gave {q['trained_tokens']:,} of the {q['asked_tokens']:,} tokens asked for")
    lines.append("loss: the masked-LM loss at BERT's 15% positions: intact, with the layer's output replaced by the "
                 "SAE's reconstruction, by its mean; recovered = (mean - SAE) / (mean - intact); (context): the "
                 "chosen positions kept intact")
    return "\n".join(lines)


def cmd_features(args: argparse.Namespace) -> Any:
    from bertscope.features.active import active_features
    from bertscope.features.sae import load_sae

    lm = load(args)
    folder = Path(args.sae)
    if (layer_folder(folder, args.layer) / "cfg.json").is_file():
        folder = layer_folder(folder, args.layer)
    sae = load_sae(folder, lm.device)
    if args.feature is not None:
        return one_feature(lm, sae, args, folder)
    if args.text is None:
        raise BertScopeError("Give --text (the features on each word piece) or --feature N (one feature's directions).")
    result = active_features(lm, sae, args.text, args.layer, folder.resolve())
    if args.json:
        return result
    lines = [f"{result['sae']['hook']} of {lm.name}: {result['sae']['d_sae']:,} features, k={result['sae']['k']} "
             f"({result['sae']['path']})"]
    for t in result["tokens"]:
        top = ", ".join(f"{f['feature']} ({f['activation']:.2f})" for f in t["features"][:args.top])
        lines.append(f"{t['token']:>14}  {top or '-'}")
    return "\n".join(lines)


def one_feature(lm, sae, args: argparse.Namespace, folder: Path) -> Any:
    """One feature from the weights alone: the tokens it promotes and suppresses, its nearest features."""
    from bertscope.features.directions import logit_weights, nearest_features

    sae.check_for(lm, f"blocks.{args.layer}.hook_resid_post")
    near = nearest_features(sae, args.feature, args.top)
    weights = logit_weights(lm, sae, args.feature, top=args.top) if "mlm" in lm.heads else None
    result = {"sae": {"path": str(folder.resolve()), "hook": sae.info.hook_name or f"blocks.{args.layer}.hook_resid_post",
                      "d_in": sae.d_in, "d_sae": sae.d_sae, "k": sae.k if sae.architecture == "topk" else None},
              "feature": args.feature, "nearest": [{"feature": f, "cosine": c} for f, c in near],
              "logit_weights": weights.to_json() if weights is not None else None}
    if args.json:
        return result
    lines = [f"feature {args.feature} of {result['sae']['hook']} ({lm.name})",
             "nearest by decoder cosine: " + ", ".join(f"{f} ({c:.2f})" for f, c in near)]
    if weights is not None:
        lines.append("promotes: " + ", ".join(t for t, _ in weights.promoted))
        lines.append("suppresses: " + ", ".join(t for t, _ in weights.suppressed))
    else:
        lines.append(f"{lm.name} has no masked-LM head: no logit weights")
    return "\n".join(lines)


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", help="layers from 0 (default every layer)")
    p.add_argument("--expansion", type=int, default=8, help="latents = expansion x the model's width")
    p.add_argument("--k", type=int, default=32, help="active latents a token")
    p.add_argument("--tokens", type=int, default=200_000, help="training word pieces a layer (Brown training side)")
    p.add_argument("--held-out", type=int, default=200, help="held-out Brown sentences for the figures")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="a folder: layer_LL/ in SAELens's format (cfg.json, "
                   "sae_weights.safetensors) with its quality.json; a run stopped mid-way resumes from its checkpoint")


def _feature_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sae", required=True, help="an SAE folder (SAELens's format) or a train-sae --out folder")
    p.add_argument("--layer", type=int, required=True, help="the layer whose output the SAE reads (from 0)")
    p.add_argument("--text", help="the features that fire on each word piece of this text")
    p.add_argument("--feature", type=int, help="or one feature: the tokens it promotes and suppresses through the "
                   "masked-LM head, its nearest features by decoder cosine")
    p.add_argument("--top", type=int, default=5, help="features shown a token; tokens and neighbours shown a feature")


COMMANDS = [
    Command("train-sae", "TopK sparse autoencoders (Gao et al. 2024) on layers' outputs over Brown; FVE, L0, dead "
            "and dense latents, the spliced-in masked-LM loss on held-out documents", cmd_train_sae, _train_arguments),
    Command("features", "the SAE features that fire on each word piece of a text, or one feature's logit weights "
            "and nearest features", cmd_features, _feature_arguments),
]
