"""``train-transcoders``: a TopK transcoder (or skip transcoder) for each layer's feed-forward, trained on its input →
output over the corpus mixture (the SAE trainer's loop), scored per layer and per source on held-out text, and the
replacement model (every feed-forward replaced at once) against the real one; saved as a circuit-tracer transcoder
set (``features.transcoder``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bertscope.cli.common import Command, finite_float, load, progress_bar, seed_int
from bertscope.cli.sae import dictionary_run, schedule_arguments
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_text


def cmd_train_transcoders(args: argparse.Namespace) -> Any:
    import torch

    from bertscope.features.activations import points_activations
    from bertscope.features.transcoder import (
        INPUT_POINT,
        OUTPUT_POINT,
        TranscoderInfo,
        load_transcoder,
        save_transcoder,
    )
    from bertscope.features.transcoder_training import check_replaceable, replacement_quality, train_transcoder

    lm, layers, cfg, out, train, held, corpus = dictionary_run(args, "transcoders")
    points = (INPUT_POINT, OUTPUT_POINT)
    masking = args.seed if args.masked else None
    report: dict[str, Any] = {"model": lm.name, "out": str(out), "corpus": corpus, "skip": args.skip,
                              "masked": args.masked,
                              "missing_sources": list(train.missing), "layers": [],
                              "config": vars(cfg) | {"lr": cfg.rate(cfg.expansion * lm.hidden_size)}}
    with progress_bar(f"{lm.name}: feed-forward inputs and outputs of layers {', '.join(map(str, layers))}",
                      "sentence") as progress:
        every = points_activations(lm, train.texts, layers, points, args.tokens, progress=progress, masking=masking)
        every_held = points_activations(lm, held.texts, layers, points, max_tokens=10**9, progress=progress)
    transcoders = {}
    for layer in layers:
        x, y = every.pop((layer, INPUT_POINT)), every.pop((layer, OUTPUT_POINT))
        hx, hy = every_held.pop((layer, INPUT_POINT)), every_held.pop((layer, OUTPUT_POINT))
        info = TranscoderInfo(lm.name, layer, {"corpus": corpus, "seed": args.seed, "batch_tokens": cfg.batch_tokens,
                                               "masked": args.masked})
        with progress_bar(f"{lm.name} layer {layer}: {'skip ' if args.skip else ''}transcoder", "step") as progress:
            tc, state = train_transcoder(x, y, cfg, out, info, args.skip, str(lm.device),
                                         progress=lambda done, total, _: progress(done, total))
        if args.weights == "float16":  # half the bytes; the figures below are of the weights as saved
            save_transcoder(tc, out, torch.float16)
            tc = load_transcoder(out, layer, lm.device)
        transcoders[layer] = tc.to(lm.device).eval()
        quality = layer_figures(transcoders[layer], hx, hy, held)
        quality.update({"trained_tokens": x.tokens, "train_seconds": sum(h["seconds"] for h in state.history),
                        "held_out": f"{len(held.texts):,} held-out texts of the {corpus}"})
        report["layers"].append(quality)
    if sorted(transcoders) == list(range(lm.num_layers)):
        try:
            check_replaceable(lm, transcoders)
        except BertScopeError as why:  # a multi-label classifier, a model with neither head: the layers stand
            report["replacement_not_scored"] = str(why)
        else:
            with progress_bar(f"{lm.name}: the replacement model", "sentence") as progress:
                report["replacement"] = replacement_quality(lm, transcoders, held.texts, seed=args.seed,
                                                            progress=progress)
    write_text(out / "quality.json", json.dumps(report, indent=1))
    return report if args.json else table(report)


def layer_figures(tc, inputs, outputs, held) -> dict:
    """A transcoder's held-out figures (``transcoder_figures``), overall and for each source of ``held``."""
    from bertscope.features.transcoder_training import transcoder_figures

    quality = transcoder_figures(tc, inputs, outputs).to_json()
    quality["domains"] = {}
    for source in held.counts():
        chosen = [i for i, s in enumerate(held.sources) if s == source]
        quality["domains"][source] = transcoder_figures(tc, inputs.of_sentences(chosen),
                                                        outputs.of_sentences(chosen)).to_json()
    return quality


def cmd_tune_transcoders(args: argparse.Namespace) -> Any:
    import dataclasses

    import torch

    from bertscope.cli.sae import texts_for
    from bertscope.features.shipped import SHIPPED_TRANSCODERS, transcoder_set
    from bertscope.features.transcoder import load_transcoder, save_transcoder
    from bertscope.features.transcoder_training import replacement_quality
    from bertscope.features.transcoder_tuning import TuneConfig, check_tunable, tune_end_to_end

    cfg = TuneConfig(args.steps, args.batch_size, args.lr, args.local, args.pieces, args.seed or 0, args.parts)
    cfg.check()
    tuned_folder(args, args.transcoders)
    lm = load(args)
    out = tuned_folder(args, args.transcoders or SHIPPED_TRANSCODERS.get(lm.name))
    transcoders = transcoder_set(lm, args.transcoders)
    check_tunable(lm, transcoders, cfg.parts)  # before any pass
    split, seed = set_seeds(args, transcoders)
    cfg = dataclasses.replace(cfg, seed=seed)
    train, held = texts_for("mixture", args.tokens, args.held_out, split)
    layers_before = held_out_figures(lm, transcoders, held)
    with progress_bar(f"{lm.name}: the replacement model before", "sentence") as progress:
        before = replacement_quality(lm, transcoders, held.texts, seed=split, progress=progress)
    with progress_bar(f"{lm.name}: every transcoder tuned end to end", "step") as progress:
        history = tune_end_to_end(lm, transcoders, train.texts, cfg, progress=progress)
    dtype = torch.float16 if args.weights == "float16" else torch.float32
    for layer, tc in transcoders.items():
        earlier = tc.info.extra.pop("end_to_end_runs", None) or (  # a tuned set tuned again keeps its earlier runs
            [tc.info.extra.pop("end_to_end")] if "end_to_end" in tc.info.extra else [])  # (one run, as first written)
        tc.info.extra["end_to_end_runs"] = [*earlier, vars(cfg) | {"texts": len(train.texts), "history": history}]
        save_transcoder(tc, out, dtype)
        transcoders[layer] = load_transcoder(out, layer, lm.device).eval()  # the figures are of the weights saved
    report: dict[str, Any] = {"model": lm.name, "from": str(args.transcoders or "the shipped set"), "out": str(out),
                              "corpus": f"mixture of {', '.join(train.counts())}", "held_out_seed": split,
                              "end_to_end": vars(cfg), "history": history, "layers_before": layers_before,
                              "replacement_before": before, "layers": held_out_figures(lm, transcoders, held)}
    with progress_bar(f"{lm.name}: the replacement model after", "sentence") as progress:
        report["replacement"] = replacement_quality(lm, transcoders, held.texts, seed=split, progress=progress)
    write_text(out / "quality.json", json.dumps(report, indent=1))
    return report if args.json else tuned_table(report)


def cmd_score_transcoders(args: argparse.Namespace) -> Any:
    from bertscope.cli.sae import texts_for
    from bertscope.features.shipped import transcoder_set
    from bertscope.features.transcoder_training import check_replaceable, replacement_quality

    if args.held_out < 1:
        raise BertScopeError("--held-out must be at least 1.")
    lm = load(args)
    transcoders = transcoder_set(lm, args.transcoders)
    check_replaceable(lm, transcoders)
    split, seed = set_seeds(args, transcoders)
    _, held = texts_for("mixture", 1, args.held_out, split)
    report: dict[str, Any] = {"model": lm.name, "transcoders": str(args.transcoders or "the shipped set"),
                              "held_out_seed": split, "seed": seed,
                              "held_out": f"{len(held.texts):,} held-out texts of the mixture of "
                                          f"{', '.join(held.counts())}",
                              "layers": held_out_figures(lm, transcoders, held)}
    with progress_bar(f"{lm.name}: the replacement model", "sentence") as progress:
        report["replacement"] = replacement_quality(lm, transcoders, held.texts, seed=seed, progress=progress)
    if args.each_layer:
        report["each_layer"] = []
        for layer in sorted(transcoders):
            with progress_bar(f"{lm.name}: layer {layer} alone replaced", "sentence") as progress:
                alone = replacement_quality(lm, transcoders, held.texts, seed=seed, progress=progress,
                                            layers=[layer])
            report["each_layer"].append({"layer": layer, **alone})
    if args.json:
        return report
    lines = [f"{lm.name}: transcoders from {report['transcoders']}, on {report['held_out']}", *layer_lines(report)]
    r = report["replacement"]
    unit = (f"{r.get('positions', r.get('examples', 0)):,} held-out "
            f"{'masked positions' if 'positions' in r else 'texts'}")
    lines.append(f"replacement model, {unit}: top-1 agreement {r['top1_agreement']:.3f}, KL {r['kl']:.3f} nats")
    for alone in report.get("each_layer", []):
        lines.append(f"  layer {alone['layer']} alone replaced: top-1 agreement {alone['top1_agreement']:.3f}, "
                     f"KL {alone['kl']:.3f} nats")
    return "\n".join(lines)


def held_out_figures(lm, transcoders, held) -> list[dict]:
    """Every layer's held-out figures (``layer_figures``), the feed-forwards' inputs and outputs read in one pass."""
    from bertscope.features.activations import points_activations
    from bertscope.features.transcoder import INPUT_POINT, OUTPUT_POINT

    layers = sorted(transcoders)
    with progress_bar(f"{lm.name}: held-out feed-forward inputs and outputs", "sentence") as progress:
        every = points_activations(lm, held.texts, layers, (INPUT_POINT, OUTPUT_POINT), max_tokens=10**9,
                                   progress=progress)
    return [layer_figures(transcoders[layer], every.pop((layer, INPUT_POINT)), every.pop((layer, OUTPUT_POINT)), held)
            for layer in layers]


def layer_lines(report: dict) -> list[str]:
    lines = [f"{'layer':<10}{'held-out':>9}{'FVE':>8}{'L0':>7}{'dead':>7}"]
    for q in report["layers"]:
        for name, row in [(str(q["layer"]), q), *((f"  {s}", d) for s, d in q["domains"].items())]:
            lines.append(f"{name:<10}{row['tokens']:>9,}{row['fve']:>8.3f}{row['l0']:>7.1f}{row['dead_share']:>7.1%}")
    return lines


def _score_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transcoders", help="a train-transcoders or tune-transcoders --out folder (default: the set "
                                         "shipped for the model)")
    p.add_argument("--each-layer", action="store_true", help="also each layer's transcoder alone in the real model "
                                                             "(the others real): what each one costs the agreement")
    set_seed_arguments(p)


def tuned_folder(args: argparse.Namespace, read_from):
    """The folder the tuned set goes to: a folder, and never ``read_from``, the one the set is read from (given, or
    the shipped set's)."""
    from pathlib import Path

    if args.tokens < 1 or args.held_out < 1:
        raise BertScopeError("--tokens and --held-out must be at least 1.")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BertScopeError(f"--out {args.out} is a file: give a folder for the new set.")
    if read_from is not None and out.exists() and out.resolve() == Path(read_from).resolve():
        raise BertScopeError("--out is the folder the transcoders are read from: give another one (the set it "
                             "started from is kept).")
    return out


def tuned_table(report: dict) -> str:
    before, after = report["replacement_before"], report["replacement"]
    lines = [f"{report['model']}: transcoders from {report['from']} tuned end to end "
             f"({report['end_to_end']['steps']:,} steps, local weight {report['end_to_end']['local']}), in "
             f"{report['out']}",
             *layer_lines(report)]
    if report.get("layers_before"):
        lines.append("FVE before tuning: " + " / ".join(f"{q['fve']:.3f}" for q in report["layers_before"]))
    lines.append(f"replacement model, {after['positions']:,} held-out masked positions: top-1 agreement "
                 f"{before['top1_agreement']:.3f} -> {after['top1_agreement']:.3f}, KL {before['kl']:.3f} -> "
                 f"{after['kl']:.3f} nats, masked-LM loss {after['loss_real']:.3f} (real) "
                 f"{before['loss_replacement']:.3f} -> {after['loss_replacement']:.3f}")
    return "\n".join(lines)


def _tune_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transcoders", help="a train-transcoders --out folder (default: the set shipped for the model)")
    p.add_argument("--steps", type=int, default=600, help="optimiser steps (default 600)")
    p.add_argument("--batch-size", type=int, default=8, help="texts a step (default 8)")
    p.add_argument("--lr", type=float, default=2e-5, help="Adam's rate (default 2e-5; 1e-4 and more made the "
                                                        "shipped set worse, BENCHMARKS.md)")
    p.add_argument("--local", type=float, default=1.0, help="the weight of each layer's own reconstruction beside the "
                                                            "KL (default 1)")
    p.add_argument("--pieces", type=int, default=128, help="each training text cut to its first word pieces "
                                                           "(default 128)")
    p.add_argument("--tokens", type=int, default=400_000, help="training word pieces of the mixture (default 400,000)")
    p.add_argument("--parts", default="all", help="what moves: all (default); writes: the decoder rows (free of unit "
                                                  "norm), skip path and output bias, every encoder as trained (each "
                                                  "feature fires where it fired; a refitted set); or skip: the skip "
                                                  "path and the output bias alone (skip transcoders)")
    set_seed_arguments(p)
    weights_argument(p)
    p.add_argument("--out", required=True, help="a folder for the tuned set (layer_L.safetensors, config.yaml, "
                                                "quality.json)")


def table(report: dict) -> str:
    kind = "skip transcoders" if report["skip"] else "transcoders"
    masked = " with BERT's masking" if report.get("masked") else ""
    lines = [f"TopK {kind} on {report['model']} ({report['config']['expansion']}x, k={report['config']['k']}), in "
             f"{report['out']}; trained on the {report['corpus']}{masked}, scored on its held-out side and each "
             "source's (read as written)",
             f"{'layer':<10}{'held-out':>9}{'FVE':>8}{'L0':>7}{'dead':>7}{'dense':>7}{'ReLU cut':>10}"]
    for q in report["layers"]:
        for name, row in [(str(q["layer"]), q), *((f"  {s}", d) for s, d in q["domains"].items())]:
            lines.append(f"{name:<10}{row['tokens']:>9,}{row['fve']:>8.3f}{row['l0']:>7.1f}{row['dead_share']:>7.1%}"
                         f"{row['dense_share']:>7.1%}{row['negative_share']:>10.2%}")
        lines.append(f"  trained on {q['trained_tokens']:,} word pieces in {q['train_seconds']:.0f} s")
    r = report.get("replacement")
    if report.get("replacement_not_scored"):
        lines.append(f"replacement model not scored: {report['replacement_not_scored']}")
    if r and "examples" in r:
        lines.append(f"replacement model (every feed-forward replaced), {r['examples']:,} held-out texts: the same "
                     f"class {r['top1_agreement']:.3f} of the time, KL {r['kl']:.3f} nats")
    elif r:
        lines.append(f"replacement model (every feed-forward replaced), {r['positions']:,} held-out masked positions: "
                     f"top-1 agreement {r['top1_agreement']:.3f}, KL {r['kl']:.3f} nats, masked-LM loss "
                     f"{r['loss_real']:.3f} -> {r['loss_replacement']:.3f}")
    return "\n".join(lines)


def _held_out_texts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--held-out", type=int, default=300, help="held-out texts from each source (default 300)")


def held_out_arguments(p: argparse.ArgumentParser) -> None:
    _held_out_texts(p)
    p.add_argument("--seed", type=seed_int, default=0, help="the seed of the held-out side, of the masked positions and "
                                                       "of the training text (default 0)")


def set_seed_arguments(p: argparse.ArgumentParser) -> None:
    """``--held-out`` and ``--seed`` for a command that reads a trained set (score, refit, tune): the held-out side is
    the set's own, and the seed moves the masking alone."""
    _held_out_texts(p)
    p.add_argument("--seed", type=seed_int, default=None,
                   help="the seed of the masked positions (score: the held-out side's; refit, tune: the training "
                        "text's) and of the tuning text's order (default: the set's own train-transcoders --seed); "
                        "the held-out side is always the one the set was trained apart from")


def set_seeds(args: argparse.Namespace, transcoders) -> tuple[int, int]:
    """(the seed of the set's held-out side, the seed of the masking): the first as the set records it (``--seed``
    for a set that records none), the second ``--seed``, else the first."""
    from bertscope.features.shipped import held_out_seed

    recorded = held_out_seed(transcoders)
    split = recorded if recorded is not None else (args.seed or 0)
    return split, split if args.seed is None else args.seed


def weights_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", choices=("float32", "float16"), default="float32",
                   help="the saved weights' dtype (float16: half the bytes, as the shipped sets)")


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", help="layers from 0 (default every layer; the replacement model needs them all)")
    p.add_argument("--skip", action="store_true", help="skip transcoders: a linear path beside the sparse one "
                                                        "(Paulo et al. 2025)")
    p.add_argument("--masked", action="store_true", help="train on the texts as BERT's pretraining read them (the "
                                                          "seeded 80/10/10 corruption: 15 %% of the word pieces [MASK], "
                                                          "random or kept), where the replacement model is read")
    p.add_argument("--chosen-weight", type=finite_float, default=1.0, metavar="W",
                   help="with --masked: the positions chosen for prediction weigh W times the others in the error "
                        "(default 1), as the replacement model and the graphs are read there")
    p.add_argument("--expansion", type=int, default=8, help="features = expansion x the model's width (default 8)")
    p.add_argument("--k", type=int, default=32, help="active features a token (default 32)")
    p.add_argument("--corpus", choices=("mixture", "brown"), default="mixture",
                   help="mixture: every installed corpus, interleaved; brown: Brown's training documents alone")
    p.add_argument("--tokens", type=int, default=200_000, help="training word pieces a layer (default 200,000)")
    p.add_argument("--epochs", type=int, default=4, help="passes over the training word pieces (default 4)")
    p.add_argument("--batch-tokens", type=int, default=2048, help="word pieces a training step (default 2,048)")
    schedule_arguments(p)
    p.add_argument("--standardise", action="store_true",
                   help="train the encoder and skip path on each input dimension centred, at unit variance (folded "
                        "into the saved weights: the same map), where BERT's LayerNorm outputs carry a few large "
                        "dimensions")
    held_out_arguments(p)
    weights_argument(p)
    p.add_argument("--out", required=True, help="a folder: layer_L.safetensors per layer (circuit-tracer's format) "
                                                "and config.yaml, quality.json; a stopped run resumes from its "
                                                "checkpoints")


def cmd_attribution_graph(args: argparse.Namespace) -> Any:
    from bertscope.cli.common import progress_bar
    from bertscope.features.shipped import transcoder_set
    from bertscope.graphs.build import MAX_GRAPH_BYTES, attribution_graph
    from bertscope.graphs.frozen import check_head

    check_head(args.head)  # before the model loads
    if not 0 < args.keep <= 1:
        raise BertScopeError(f"--keep {args.keep}: give a share of the influence between 0 and 1 (0.8 keeps the nodes "
                             "that carry 80 %).")
    if args.max_mb is not None and args.max_mb < 1:
        raise BertScopeError(f"--max-mb {args.max_mb}: the adjacency's budget is at least 1 MiB (default 512).")
    lm = load(args)
    transcoders = transcoder_set(lm, args.transcoders)
    with progress_bar(f"{lm.name}: the attribution graph", "row") as progress:
        graph = attribution_graph(lm, args.text, transcoders, args.target, args.contrast,
                                  max_bytes=MAX_GRAPH_BYTES if args.max_mb is None else args.max_mb * 2**20, progress=progress,
                                  head=args.head)
    out = graph.to_json(args.keep)
    if args.json:
        return out
    target = out["target"]
    what = target.get("token") or target.get("label")
    lines = [f"{lm.name}: {what!r} at token {target['position']}"
             + (f" against {target['contrast']!r}" if target["contrast"] else " against the mean logit")
             + f", value {out['logit']:+.4f}; {out['unpruned']['features']:,} active features, "
               f"{out['unpruned']['nodes']:,} nodes in {out['seconds']:.1f} s",
             f"replacement score {out['replacement_score']:.3f}, completeness score {out['completeness_score']:.3f}; "
             f"kept {len(out['nodes']):,} nodes and {len(out['edges']):,} edges carrying {args.keep:.0%} of the "
             "influence", "strongest nodes (influence on the target):"]
    ranked = sorted((n for n in out["nodes"] if n["kind"] != "target"), key=lambda n: -n["influence"])[:15]
    for n in ranked:
        where = f"layer {n['layer']} " if n["layer"] is not None else ""
        token = graph.tokens[n["position"]] if n["position"] is not None else ""
        lines.append(f"  {n['id']:<14} {n['kind']:<9} {where}at {token!r:<12} influence {n['influence']:.4f}"
                     + (f", activation {n['activation']:.3f}" if n["kind"] == "feature" else ""))
    return "\n".join([*lines, *out["notes"]])


def _graph_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="the input: with [MASK] for a masked LM (the first explained), any text for a classifier")
    p.add_argument("--target", help="the token (masked LM) or class to explain (default the model's own choice)")
    p.add_argument("--contrast", help="a second token or class: explain logit[target] − logit[contrast] (default: "
                                      "against the mean logit)")
    p.add_argument("--keep", type=float, default=0.8, help="the share of the influence the pruned graph keeps "
                                                            "(default 0.8, circuit-tracer's node threshold)")
    p.add_argument("--transcoders", help="a train-transcoders --out folder (default: the set shipped for the model)")
    p.add_argument("--max-mb", type=int, help="the adjacency matrix's budget in MiB (default 512): past it the least "
                                              "influential features merge into their error nodes; the backward "
                                              "pass's working tensors are held to half of it")
    p.add_argument("--head", default="frozen",
                   help="how the graph reads the masked-LM head or classifier: frozen (default: its GELU and "
                        "LayerNorm scale held at the real run's, every sum exact; circuit-tracer's convention) or "
                        "linear (to first order at the real run, the scale's response in: edge sizes as the model's)")


COMMANDS = [
    Command("train-transcoders", "TopK transcoders (or --skip transcoders) replacing each layer's feed-forward, "
            "trained on the corpus mixture; FVE, L0, dead features per layer and source, and the replacement model's "
            "top-1 agreement and KL against the real one", cmd_train_transcoders, _arguments),
    Command("tune-transcoders", "a transcoder set tuned end to end: every feed-forward replaced at once, trained on "
            "the real model's masked-token predictions (KL) beside each layer's own reconstruction; FVE per layer and "
            "the replacement model before and after", cmd_tune_transcoders, _tune_arguments),
    Command("score-transcoders", "a transcoder set scored on held-out text: FVE, L0 and dead features per layer and "
            "source, and the replacement model against the real one", cmd_score_transcoders, _score_arguments),
    Command("attribution-graph", "the attribution graph of one decision (a token at [MASK], a class): transcoder "
            "features, error nodes and input embeddings, edges as direct effects in the frozen replacement pass, "
            "pruned by influence; replacement and completeness scores", cmd_attribution_graph, _graph_arguments),
]
