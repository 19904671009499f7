"""``train-sae``: TopK sparse autoencoders on layers' outputs over Brown, scored on held-out documents
the way SAEBench reports them, saved in SAELens's format."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, load, progress_bar
from bertscope.errors import BertScopeError
from bertscope.features.shipped import layer_folder

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

def cmd_train_sae(args: argparse.Namespace) -> Any:
    import numpy as np
    import torch

    from bertscope.corpora.brown_tasks import brown_split_texts
    from bertscope.features.activations import layer_activations, resid_post
    from bertscope.features.quality import sae_quality
    from bertscope.features.sae import SaeInfo, load_sae, save_sae
    from bertscope.features.trainer import SaeTrainConfig, train_sae

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
        info = SaeInfo(lm.name, resid_post(layer), {"corpus": "brown (training documents)", "seed": args.seed,
                                                    "batch_tokens": cfg.batch_tokens})
        with progress_bar(f"{lm.name} layer {layer}: SAE", "step") as progress:
            sae, state = train_sae(acts, cfg, layer_folder(out, layer), info, device=str(lm.device),
                                   progress=lambda done, total, _: progress(done, total))
        if args.weights == "float16":  # half the bytes; the figures below are of the weights as saved
            save_sae(sae, layer_folder(out, layer), torch.float16)
            sae = load_sae(layer_folder(out, layer), lm.device)
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

def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", help="layers from 0 (default every layer)")
    p.add_argument("--expansion", type=int, default=8, help="latents = expansion x the model's width")
    p.add_argument("--k", type=int, default=32, help="active latents a token")
    p.add_argument("--tokens", type=int, default=200_000, help="training word pieces a layer (Brown training side)")
    p.add_argument("--held-out", type=int, default=200, help="held-out Brown sentences for the figures")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", choices=("float32", "float16"), default="float32",
                   help="the saved SAE's dtype (float16: half the bytes, as the shipped SAEs)")
    p.add_argument("--out", required=True, help="a folder: layer_LL/ in SAELens's format (cfg.json, "
                   "sae_weights.safetensors) with its quality.json; a run stopped mid-way resumes from its checkpoint")

COMMANDS = [
    Command("train-sae", "TopK sparse autoencoders (Gao et al. 2024) on layers' outputs over Brown; FVE, L0, dead "
            "and dense latents, the spliced-in masked-LM loss on held-out documents", cmd_train_sae, _train_arguments),
]
