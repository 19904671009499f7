"""``train-sae``: TopK sparse autoencoders on layers' outputs over a stated mixture of every installed corpus
(``corpora.mixture``; or Brown alone), scored on each source's held-out text the way SAEBench reports them, saved
in SAELens's format."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, finite_float, load, progress_bar, seed_int
from bertscope.errors import BertScopeError
from bertscope.features.shipped import layer_folder
from bertscope.runtime.atomic import write_text

PIECES_PER_TEXT = 12  # Brown sentences average ~24 word pieces, the other sources' texts more: twice what's needed


def parse_layers(text: str | None, n_layers: int) -> list[int]:
    if not text:
        return list(range(n_layers))
    try:
        layers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BertScopeError(f"--layers {text!r}: give layer numbers from 0, e.g. 0,2,5.") from None
    if not layers:
        raise BertScopeError(f"--layers {text!r} names no layer: give layer numbers from 0, e.g. 0,2,5.")
    for layer in layers:
        if not 0 <= layer < n_layers:
            raise BertScopeError(f"Layer {layer} does not exist: the model has layers 0 to {n_layers - 1}.")
    return list(dict.fromkeys(layers))  # each layer once

def texts_for(corpus: str, tokens: int, held_out: int, seed: int):
    """(training side, held-out side) as mixtures: every installed source (its texts interleaved), or Brown alone."""
    from bertscope.corpora.mixture import Mixture, installed_sources, mixed_texts

    if corpus == "brown":
        from bertscope.corpora.brown_tasks import brown_split_texts

        train = brown_split_texts(max(1, tokens // PIECES_PER_TEXT), held_out=False, seed=seed)
        held = brown_split_texts(held_out, held_out=True, seed=seed)
        return (Mixture(tuple(train), ("brown",) * len(train), ()), Mixture(tuple(held), ("brown",) * len(held), ()))
    per_source = max(1, -(-tokens // (PIECES_PER_TEXT * max(1, len(installed_sources())))))  # of those installed
    return mixed_texts(per_source, held_out=False, seed=seed), mixed_texts(held_out, held_out=True, seed=seed)


def dictionary_run(args: argparse.Namespace, what: str):
    """What ``train-sae`` and ``train-transcoders`` share before any pass: the arguments checked, the model, its
    layers, the trainer's settings, the folder, the mixture's two sides and its name."""
    from bertscope.features.trainer import SaeTrainConfig

    if args.tokens < 1 or args.held_out < 1:
        raise BertScopeError("--tokens and --held-out must be at least 1.")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise BertScopeError(f"--out {args.out} is a file: give a folder for the {what}.")
    lm = load(args)
    layers = parse_layers(args.layers, lm.num_layers)
    cfg = SaeTrainConfig(expansion=args.expansion, k=args.k, epochs=args.epochs, batch_tokens=args.batch_tokens,
                         lr=args.lr, seed=args.seed, chosen_weight=getattr(args, "chosen_weight", 1.0),
                         lr_decay=args.lr_decay, resample_every=args.resample_every,
                         standardise=getattr(args, "standardise", False))
    if cfg.chosen_weight != 1 and not getattr(args, "masked", False):
        raise BertScopeError("--chosen-weight weighs the positions BERT's corruption chose: it needs --masked.")
    cfg.check(lm.hidden_size, cfg.batch_tokens)  # the settings alone, before any pass
    train, held = texts_for(args.corpus, args.tokens, args.held_out, args.seed)
    corpus = "brown (training documents)" if args.corpus == "brown" else f"mixture of {', '.join(train.counts())}"
    return lm, layers, cfg, Path(args.out), train, held, corpus


def cmd_train_sae(args: argparse.Namespace) -> Any:
    import numpy as np
    import torch

    from bertscope.features.activations import layers_activations, resid_post, row_mean
    from bertscope.features.quality import domain_qualities, sae_quality
    from bertscope.features.sae import SaeInfo, load_sae, save_sae
    from bertscope.features.trainer import train_sae

    lm, layers, cfg, out, train, held, corpus = dictionary_run(args, "SAEs")
    report = {"model": lm.name, "out": str(out), "corpus": corpus, "missing_sources": list(train.missing),
              "config": vars(cfg) | {"lr": cfg.rate(cfg.expansion * lm.hidden_size)}, "layers": []}
    with progress_bar(f"{lm.name}: activations of layers {', '.join(map(str, layers))}", "sentence") as progress:
        every = layers_activations(lm, train.texts, layers, args.tokens, progress=progress)  # one pass, on disk
        every_held = layers_activations(lm, held.texts, layers, max_tokens=10**9, progress=progress)
    for layer in layers:
        acts, whole = every.pop(layer), every_held.pop(layer)  # unmapped once done: memory holds one layer's
        short = acts.tokens < args.tokens
        shares = np.bincount(acts.where[:, 0], minlength=len(train.texts))  # word pieces per text
        by_source = {s: int(shares[[i for i, t in enumerate(train.sources) if t == s]].sum()) for s in train.counts()}
        info = SaeInfo(lm.name, resid_post(layer), {"corpus": corpus, "tokens_by_source": by_source,
                                                    "seed": args.seed, "batch_tokens": cfg.batch_tokens})
        with progress_bar(f"{lm.name} layer {layer}: SAE", "step") as progress:
            sae, state = train_sae(acts, cfg, layer_folder(out, layer), info, device=str(lm.device),
                                   progress=lambda done, total, _: progress(done, total))
        if args.weights == "float16":  # half the bytes; the figures below are of the weights as saved
            save_sae(sae, layer_folder(out, layer), torch.float16)
            sae = load_sae(layer_folder(out, layer), lm.device)
        sae = sae.to(lm.device)
        mean = row_mean(acts.rows)  # the training tokens' mean: the mean-ablation reference
        with progress_bar(f"{lm.name} layer {layer}: scoring", "sentence") as progress:
            quality = sae_quality(lm, sae, whole, held.texts, mean, seed=args.seed).to_json()
            domains = domain_qualities(lm, sae, whole, held, mean, seed=args.seed, progress=progress)
        quality.update({"held_out": f"{len(held.texts):,} held-out texts of the {corpus}",
                        "domains": {s: q.to_json() for s, q in domains.items()}, "tokens_by_source": by_source,
                        "trained_tokens": acts.tokens, "asked_tokens": args.tokens, "corpus_too_small": short,
                        "train_seconds": sum(h["seconds"] for h in state.history)})
        write_text(layer_folder(out, layer) / "quality.json", json.dumps(quality, indent=1))
        report["layers"].append(quality)
    write_text(out / "quality.json", json.dumps(report, indent=1))
    return report if args.json else table(report)


def _row(name: str, q: dict) -> str:
    return (f"{name:<9}{q['tokens']:>9,}{q['fve']:>8.3f}{q['l0']:>7.1f}{q['dead_share']:>7.1%}{q['dense_share']:>7.1%}"
            f"{q['loss_intact']:>8.3f}{q['loss_sae']:>8.3f}{q['loss_mean']:>8.3f}{q['recovered']:>11.3f}"
            f"{q['recovered_context']:>11.3f}")


def table(report: dict) -> str:
    lines = [f"TopK SAEs on {report['model']} ({report['config']['expansion']}x, k={report['config']['k']}), "
             f"in {report['out']}; trained on the {report['corpus']}, scored on its held-out side and each source's",
             f"{'layer':<9}{'held-out':>9}{'FVE':>8}{'L0':>7}{'dead':>7}{'dense':>7}{'loss':>8}{'SAE':>8}{'mean':>8}"
             f"{'recovered':>11}{'(context)':>11}"]
    if report["missing_sources"]:
        lines.append(f"not installed, left out: {', '.join(report['missing_sources'])}")
    for q in report["layers"]:
        lines.append(_row(str(q["layer"]), q))
        lines.extend(_row(f"  {source}", d) for source, d in q["domains"].items())
        trained = ", ".join(f"{s} {n:,}" for s, n in q["tokens_by_source"].items())
        lines.append(f"  trained on {q['trained_tokens']:,} word pieces ({trained}) in {q['train_seconds']:.0f} s")
        if q["corpus_too_small"]:
            lines.append(f"  the corpus gave {q['trained_tokens']:,} of the {q['asked_tokens']:,} tokens asked for")
    lines.append("FVE and dead/dense latents on the held-out word pieces (each source against its own variance); loss: "
                 "the masked-LM loss at BERT's 15% positions: intact, with the layer's output replaced by the SAE's "
                 "reconstruction, by the training tokens' mean; recovered = (mean - SAE) / (mean - intact); "
                 "(context): the chosen positions kept intact")
    return "\n".join(lines)


def schedule_arguments(p: argparse.ArgumentParser) -> None:
    """The trainer's rate, its decay and dead-latent restarts, shared by ``train-sae`` and ``train-transcoders``."""
    p.add_argument("--lr", type=finite_float, metavar="RATE",
                   help="Adam's rate (default 2e-4 / sqrt(latents / 2^14), Gao et al. 2024's for their batches)")
    p.add_argument("--lr-decay", type=finite_float, default=0.0, metavar="SHARE",
                   help="the share of the last steps over which the rate falls linearly to 0 (default 0: constant)")
    p.add_argument("--resample-every", type=int, default=0, metavar="STEPS",
                   help="restart the dead latents every STEPS steps in the first half of the run, each at a "
                        "badly rebuilt row of the batch (Bricken et al. 2023; default 0: AuxK alone)")


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", help="layers from 0 (default every layer)")
    p.add_argument("--expansion", type=int, default=8, help="latents = expansion x the model's width (default 8)")
    p.add_argument("--k", type=int, default=32, help="active latents a token (default 32)")
    p.add_argument("--corpus", choices=("mixture", "brown"), default="mixture",
                   help="mixture: every installed corpus (Brown, EWT, tweets, BBC, SQuAD paragraphs), their texts "
                        "interleaved one from each in turn (a source that runs out leaves the others to go on); "
                        "brown: Brown's training documents alone")
    p.add_argument("--tokens", type=int, default=200_000, help="training word pieces a layer (default 200,000)")
    p.add_argument("--held-out", type=int, default=300,
                   help="held-out texts from each source (sentences for Brown) for the figures (default 300)")
    p.add_argument("--epochs", type=int, default=4, help="passes over the training word pieces (default 4)")
    p.add_argument("--batch-tokens", type=int, default=2048, help="word pieces a training step (default 2,048)")
    schedule_arguments(p)
    p.add_argument("--seed", type=seed_int, default=0, help="the texts drawn, the SAE's start, its shuffle and the scoring's masks (default 0)")
    p.add_argument("--weights", choices=("float32", "float16"), default="float32",
                   help="the saved SAE's dtype (float16: half the bytes, as the shipped SAEs)")
    p.add_argument("--out", required=True, help="a folder: layer_LL/ in SAELens's format (cfg.json, "
                   "sae_weights.safetensors) with its quality.json; a run stopped mid-way resumes from its checkpoint")

COMMANDS = [
    Command("train-sae", "TopK sparse autoencoders (Gao et al. 2024) on layers' outputs over a mixture of every "
            "installed corpus; FVE, L0, dead and dense latents, the spliced-in masked-LM loss on each source's "
            "held-out text", cmd_train_sae, _train_arguments),
]
