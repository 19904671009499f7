"""``refit-transcoders``: a transcoder set's writes refitted by least squares on its own features
(``features.transcoder_refit``): each layer's decoder rows, skip path and output bias solved over the training
mixture read as the set was trained, every encoder as trained; FVE per layer and the replacement model before and
after."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bertscope.cli.common import Command, finite_float, load, progress_bar
from bertscope.cli.transcoders import (
    held_out_figures,
    layer_lines,
    set_seed_arguments,
    set_seeds,
    tuned_folder,
    weights_argument,
)
from bertscope.runtime.atomic import write_text


def cmd_refit_transcoders(args: argparse.Namespace) -> Any:
    import torch

    from bertscope.cli.sae import texts_for
    from bertscope.features.activations import points_activations
    from bertscope.features.shipped import SHIPPED_TRANSCODERS, transcoder_set
    from bertscope.features.transcoder import INPUT_POINT, OUTPUT_POINT, load_transcoder, save_transcoder
    from bertscope.features.transcoder_refit import check_chosen_weight, check_refittable, refit_writes
    from bertscope.features.transcoder_training import check_replaceable, replacement_quality

    tuned_folder(args, args.transcoders)
    lm = load(args)
    out = tuned_folder(args, args.transcoders or SHIPPED_TRANSCODERS.get(lm.name))
    transcoders = transcoder_set(lm, args.transcoders)
    for tc in transcoders.values():
        check_refittable(tc)  # before any pass
    check_replaceable(lm, transcoders)
    masked = bool(transcoders[0].info.extra.get("masked"))  # the text read as the set was trained on it
    check_chosen_weight(args.chosen_weight, masked)  # before any pass
    split, seed = set_seeds(args, transcoders)
    train, held = texts_for("mixture", args.tokens, args.held_out, split)
    layers = sorted(transcoders)
    report: dict[str, Any] = {"model": lm.name, "from": str(args.transcoders or "the shipped set"), "out": str(out),
                              "corpus": f"mixture of {', '.join(train.counts())}", "masked": masked,
                              "chosen_weight": args.chosen_weight, "held_out_seed": split, "seed": seed,
                              "layers_before": held_out_figures(lm, transcoders, held)}
    with progress_bar(f"{lm.name}: the replacement model before", "sentence") as progress:
        report["replacement_before"] = replacement_quality(lm, transcoders, held.texts, seed=split,
                                                           progress=progress)
    with progress_bar(f"{lm.name}: feed-forward inputs and outputs of the training text", "sentence") as progress:
        every = points_activations(lm, train.texts, layers, (INPUT_POINT, OUTPUT_POINT), args.tokens,
                                   progress=progress, masking=seed if masked else None)
    dtype = torch.float16 if args.weights == "float16" else torch.float32
    for layer in layers:
        with progress_bar(f"{lm.name} layer {layer}: the writes refitted", "row") as progress:
            tc = refit_writes(transcoders[layer], every.pop((layer, INPUT_POINT)), every.pop((layer, OUTPUT_POINT)),
                              progress=progress, chosen_weight=args.chosen_weight)  # no stop: a Transcoder
        save_transcoder(tc, out, dtype)
        transcoders[layer] = load_transcoder(out, layer, lm.device).eval()  # the figures are of the weights saved
    report["layers"] = held_out_figures(lm, transcoders, held)
    with progress_bar(f"{lm.name}: the replacement model after", "sentence") as progress:
        report["replacement"] = replacement_quality(lm, transcoders, held.texts, seed=split, progress=progress)
    write_text(out / "quality.json", json.dumps(report, indent=1))
    return report if args.json else refit_table(report)


def refit_table(report: dict) -> str:
    before, after = report["replacement_before"], report["replacement"]
    unit = "masked positions" if "positions" in after else "texts"
    lines = [f"{report['model']}: transcoders from {report['from']}, their writes refitted by least squares on the "
             f"{report['corpus']}{' as pretraining read it' if report['masked'] else ''}"
             + (f", the positions chosen for prediction weighing {report['chosen_weight']:g}"
                if report.get("chosen_weight", 1) != 1 else "") + f", in {report['out']}",
             *layer_lines(report),
             "FVE before: " + " / ".join(f"{q['fve']:.3f}" for q in report["layers_before"]),
             f"replacement model, {after.get('positions', after.get('examples', 0)):,} held-out {unit}: top-1 "
             f"agreement {before['top1_agreement']:.3f} -> {after['top1_agreement']:.3f}, KL {before['kl']:.3f} -> "
             f"{after['kl']:.3f} nats"]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transcoders", help="a train-transcoders or tune-transcoders --out folder (default: the set "
                                         "shipped for the model)")
    p.add_argument("--tokens", type=int, default=400_000, help="training word pieces of the mixture the writes are "
                                                               "solved on (default 400,000)")
    p.add_argument("--chosen-weight", type=finite_float, default=1.0, metavar="W",
                   help="the weight of the positions BERT's corruption chose for prediction in the squared error, "
                        "the others 1 (a set trained with --masked; default 1: every row alike)")
    set_seed_arguments(p)
    weights_argument(p)
    p.add_argument("--out", required=True, help="a folder for the refitted set (layer_L.safetensors, config.yaml, "
                                                "quality.json)")


COMMANDS = [
    Command("refit-transcoders", "a transcoder set's writes (decoder rows, skip path, output bias) refitted by least "
            "squares on its own features over the training mixture, every encoder as trained; FVE per layer and the "
            "replacement model before and after", cmd_refit_transcoders, _arguments),
]
