"""Commands that change the model and watch the output: ablate, head-importance, patch.
Layers and heads are numbered from 0 as in ``attention``; hidden states as in ``inspect``
("embeddings", then layer l's output)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bertscope.cli.common import (
    Command,
    engine_argument,
    engine_of,
    finite_float,
    load,
    positive_int,
    progress_bar,
    read_text,
    seed_int,
)
from bertscope.core.layers import hidden_name
from bertscope.errors import BertScopeError


def brown_sentences(spec: str, default: int, held_out: bool) -> list[str]:
    """``brown`` or ``brown:N``: N sentences from the training (or held-out) documents of Brown."""
    from bertscope.corpora.brown_tasks import brown_split_texts

    size = spec.partition(":")[2] or str(default)
    if not size.isdigit() or int(size) < 1:
        raise BertScopeError(f"{spec!r}: use brown or brown:N (N sentences, at least 1), or a text file.")
    return brown_split_texts(int(size), held_out=held_out)


def sentences_from(spec: str, default: int, held_out: bool) -> list[str]:
    from bertscope.corpora.sentences import read_corpus

    if spec.startswith("brown"):
        return brown_sentences(spec, default, held_out)
    return read_corpus(read_text(spec, "corpus"))


def cmd_ablate(args: argparse.Namespace) -> Any:
    from bertscope.attribution.gradients import parse_target
    from bertscope.interventions.ablation import ablate_heads, parse_heads

    if (args.heads is None) == (args.features is None):
        raise BertScopeError("Give --heads LAYER:HEAD,… (attention heads to remove) or --features LAYER:FEATURE,… "
                             "(SAE features to switch off, or to steer with --steer).")
    target = parse_target(args.target, args.probe, args.probe_layer, args.label, args.position)
    if args.features is not None:
        return ablate_features(args, target)
    heads = parse_heads(args.heads)
    reference = sentences_from(args.reference, 200, False) if args.reference else None
    lm = load(args)
    with progress_bar("mean contexts", "sentence") as progress:
        result = ablate_heads(lm, args.text, heads, args.mode, args.pair, target, args.top_k, reference=reference,
                              progress=progress)
    if args.json:
        return result.to_json()
    named = ", ".join(f"{layer}:{head}" for layer, head in result.heads)
    lines = [f"{args.mode} ablation of heads {named} (layer:head, from 0)"
             + (f"; means over {result.reference}" if result.reference else "")]
    return "\n".join(lines + change_lines(result))


def change_lines(result) -> list[str]:
    """The decision's probability, or each mask's top-k, before and after an edit, as text lines."""
    lines = []
    if result.decision is not None:
        d = result.decision
        lines.append(f"  p = {d['before']:.4f} before, {d['after']:.4f} after")
    for m in result.masks:
        lines.append(f"  mask at {m.position}:")
        for b, a in zip(m.before, m.after):
            lines.append(f"    {b.token.strip():<14} {b.score:.4f}    {a.token.strip():<14} {a.score:.4f}")
        if m.token is not None:
            lines.append(f"    p({m.token}) {m.token_before:.4f} -> {m.token_after:.4f}")
    return lines


def ablate_features(args: argparse.Namespace, target) -> Any:
    """``ablate --features``: SAE features switched off (or steered) at their layers' outputs."""
    from bertscope.cli.features import load_layer_sae
    from bertscope.features.edits import edit_features, parse_feature_edits

    if args.steer is None and args.steer_at != "masks":
        raise BertScopeError("--steer-at goes with --steer.")
    if args.mode != "zero" or args.reference:
        raise BertScopeError("--mode and --reference are for heads: a feature is switched off by taking out its "
                             "own contribution.")
    edits = parse_feature_edits(args.features, args.steer, args.steer_at)
    lm = load(args)
    saes = {}
    for e in edits:
        if e.layer not in saes:
            if not 0 <= e.layer < lm.num_layers:
                raise BertScopeError(f"Layer {e.layer} does not exist: {lm.name} has layers 0 to {lm.num_layers - 1}.")
            saes[e.layer] = load_layer_sae(args, lm, e.layer)[0]
    result = edit_features(lm, args.text, saes, edits, args.pair, target, args.top_k)
    if args.json:
        return result.to_json()
    what = f"steered by {args.steer:g}" if args.steer is not None else "switched off"
    lines = [f"SAE features {', '.join(f'{e.layer}:{e.feature}' for e in edits)} (layer:feature, from 0) {what}"]
    return "\n".join(lines + change_lines(result))


def _ablate_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.interventions.ablation import MODES

    p.add_argument("text", help="the input, with [MASK] where the prediction to test is (or a pair with --pair)")
    p.add_argument("--heads", help="heads to remove, LAYER:HEAD[,LAYER:HEAD…], both from 0 (3:7,5:2)")
    p.add_argument("--features", help="or SAE features to switch off, LAYER:FEATURE[,…], both from 0 (2:342); "
                                      "their contribution leaves the layer's output")
    p.add_argument("--steer", type=finite_float, help="with --features: steer instead, adding this multiple of each "
                                               "feature's unit direction")
    p.add_argument("--steer-at", choices=("masks", "all"), default="masks",
                   help="with --steer: at the [MASK] tokens (default) or at every token")
    p.add_argument("--sae", help="with --features: an SAE folder (default: the model's shipped SAEs)")
    p.add_argument("--mode", choices=MODES, default="zero", help="zero the heads' contexts, or replace each by its "
                                                                 "mean over --reference")
    p.add_argument("--reference", help="mean mode: a UTF-8 file (one sentence a line) or brown:N (default: 200 "
                                       "Brown sentences from the training documents)")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--pair", help="segment B text (for nsp/sop)")
    p.add_argument("--target", help="POSITION:TOKEN (that token's probability at a mask as well), nsp, or sop; a "
                                    "fine-tuned model's class[:LABEL], tag:POSITION[:LABEL], start, end or span")
    p.add_argument("--probe", help="a probe run's output folder (bertscope probe --out)")
    p.add_argument("--layer", dest="probe_layer", help="with --probe: the layer the probe reads, 0 to L-1 or "
                                                        "'embeddings'")
    p.add_argument("--class", dest="label", help="with --probe: the class whose probability to watch")
    p.add_argument("--position", type=int, help="with a word-level probe: a token position of the word")


def labelled(path: str):
    """A labelled file's records (text[,pair],label), for a classifier's own task loss."""
    from bertscope.tasks.predict import read_records

    records = read_records(read_text(path, "labelled"), Path(path).name)
    if records.gold is None:
        raise BertScopeError(f"{path} has no label column: the task loss needs gold labels.")
    return records


def cmd_head_importance(args: argparse.Namespace) -> Any:
    from bertscope.interventions.importance import head_importance, pruning_curve
    from bertscope.interventions.task_importance import task_head_importance, task_pruning_curve

    engine = engine_of(args)  # None: this process; a bad spec is refused before the model loads
    if args.data is not None:  # a fine-tuned classifier's own loss (Michel et al.'s MNLI setting)
        if engine is not None:
            raise BertScopeError("The task loss runs in this process: leave out --engine with --data.")
        if args.prune and args.held_out_data is None:
            raise BertScopeError("--prune with --data needs --held-out-data (labelled records to score accuracy on).")
        fit = labelled(args.data)
        held_records = labelled(args.held_out_data) if args.prune else None
        lm = load(args)
        with progress_bar("gate gradients", "record") as progress:
            imp = task_head_importance(lm, fit.texts, fit.gold, fit.pairs, args.batch_size, progress=progress)
        curve = None
        if args.prune:
            with progress_bar("pruning", "step") as progress:
                curve = task_pruning_curve(lm, imp, held_records.texts, held_records.gold, held_records.pairs,
                                           seed=args.seed, progress=progress)
        what, scored = (f"{imp.sentences} labelled records, loss {imp.loss:.3f} (cross-entropy of the task head)",
                        "held-out accuracy over {} records")
    else:
        texts = sentences_from(args.corpus, 256, False)
        held = sentences_from(args.held_out, 200, True) if args.prune else None
        lm = load(args)
        with progress_bar("gate gradients", "sentence") as progress:
            imp = head_importance(lm, texts, batch_size=args.batch_size, seed=args.seed, progress=progress,
                                  engine=engine)
        curve = None
        if args.prune:
            with progress_bar("pruning", "step") as progress:
                curve = pruning_curve(lm, imp, held, seed=args.seed, progress=progress)
        what, scored = (f"{imp.sentences} sentences, {imp.positions} masked positions, loss {imp.loss:.3f}",
                        "held-out masked-LM top-1 over {} positions")
    if args.json:
        out = imp.to_json()
        if curve is not None:
            out["pruning"] = curve.to_json()
        return out
    lines = [f"head importance (Michel et al. 2019) over {what}; each layer's row has unit ℓ2 norm", "layer  " +
             " ".join(f"{h:>5}" for h in range(lm.num_heads))]
    for layer, row in enumerate(imp.importance):
        lines.append(f"{layer:>5}  " + " ".join(f"{v:5.2f}" for v in row))
    if curve is not None:
        mean = curve.random_mean
        lines.append("pruning: " + scored.format(curve.positions))
        lines.append("removed  importance order  random (mean of " + str(len(curve.random_orders)) + ")")
        for f, a, r in zip(curve.fractions, curve.importance_order, mean):
            lines.append(f"  {f:>5.0%}  {a:16.3f}  {r:.3f}")
    return "\n".join(lines)


def _head_importance_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="brown:256", help="brown:N (N sentences of Brown's training documents, "
                                                         "default 256) or a UTF-8 file, one sentence a line")
    p.add_argument("--prune", action="store_true", help="also the pruning curve (10%% of the heads at a time)")
    p.add_argument("--held-out", default="brown:200", help="--prune: brown:N (Brown's held-out documents, default "
                                                           "200 sentences) or a UTF-8 file")
    p.add_argument("--data", help="a fine-tuned classifier's own task: a labelled .csv or .jsonl "
                                  "(text[,pair],label); importance on its cross-entropy, as Michel et al. on MNLI")
    p.add_argument("--held-out-data", help="--data --prune: labelled records to score the accuracy on")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--seed", type=seed_int, default=0, help="the masking's seed (BERT's 15%% positions)")
    engine_argument(p)


def cmd_patch(args: argparse.Namespace) -> Any:
    from bertscope.interventions.patching import patch

    candidates = [c for c in args.target.split(",")] if args.target else []
    if args.target is not None and len(candidates) != 2:
        raise BertScopeError("--target takes two tokens (or a classifier's two labels, or two spans of --context), "
                             "A,B: the metric is their logit difference.")
    positions = None
    if args.positions:
        try:
            positions = [int(p) for p in args.positions.split(",") if p.strip()]
        except ValueError:
            raise BertScopeError("--positions takes token positions, e.g. 2,6.") from None
    lm = load(args)
    if args.features is not None:
        return patch_features_text(args, lm, candidates, positions)
    with progress_bar("patching", "cell") as progress:
        result = patch(lm, args.clean, args.corrupt, candidates, args.what, positions, progress=progress,
                       context=args.context)
    if args.json:
        return result.to_json()
    s = result.setup
    metric = {"mask": f"logit({s.candidates[0]}) - logit({s.candidates[1]}) at position {s.position}",
              "class": f"the classifier's logit({s.candidates[0]}) - logit({s.candidates[1]})",
              "value": "the regression head's value",
              "span": f"score({s.candidates[0]}) - score({s.candidates[1]}), a span's score its start + end logits"}[s.reads]
    lines = [f"{metric}: clean {result.m_clean:.3f}, "
             f"corrupted {result.m_corrupt:.3f}; recovered fraction per "
             + ("hidden state (rows) and position (columns)" if args.what == "hidden" else "layer (rows) and head")]
    columns = s.tokens if args.what == "hidden" else [str(h) for h in range(lm.num_heads)]
    width = max(6, *(len(c) for c in columns)) + 1
    lines.append(" " * 11 + "".join(f"{c[:width - 1]:>{width}}" for c in columns))
    for index, row in enumerate(result.recovered):
        name = hidden_name(index) if args.what == "hidden" else str(index)
        lines.append(f"{name:>10} " + "".join(f"{v:>{width}.2f}" if v == v else " " * (width - 1) + "-" for v in row))
    if result.caveat:
        lines.append(f"note: {result.caveat}")
    return "\n".join(lines)


def patch_features_text(args: argparse.Namespace, lm, candidates, positions) -> Any:
    """``patch --features L``: each SAE feature of layer L patched alone at the positions."""
    from bertscope.cli.features import load_layer_sae
    from bertscope.features.activations import resid_post
    from bertscope.features.patching import patch_features

    if args.what != "hidden":
        raise BertScopeError("--features patches SAE features of a layer's output; leave out --what.")
    sae, folder = load_layer_sae(args, lm, args.features)
    with progress_bar("patching features", "cell") as progress:
        result = patch_features(lm, sae, args.features, args.clean, args.corrupt, candidates, positions,
                                progress=progress)
    if args.json:
        return {"sae": str(folder.resolve())} | result.to_json(args.top)
    s = result.setup
    lines = [f"logit({s.candidates[0]}) - logit({s.candidates[1]}) at position {s.position}: clean {result.m_clean:.3f}, "
             f"corrupted {result.m_corrupt:.3f}; {len(result.cells)} features of {resid_post(args.features)} "
             "patched one at a time",
             "the whole hidden state patched: " + ", ".join(f"{p} {s.tokens[p]} {v:.2f}"
                                                           for p, v in sorted(result.whole.items())),
             f"{'position':>9} {'token':<12}{'feature':>8}{'clean':>8}{'corrupt':>9}{'recovered':>11}"]
    lines += [f"{c.position:>9} {c.token[:11]:<12}{c.feature:>8}{c.clean:>8.2f}{c.corrupt:>9.2f}{c.recovered:>11.3f}"
              for c in result.top(args.top)]
    return "\n".join(lines)


def _patch_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.interventions.patching import WHATS

    p.add_argument("--clean", required=True, help="the clean text")
    p.add_argument("--corrupt", required=True, help="the corrupted text: as many tokens as the clean one, with a [MASK] "
                                                    "(a fine-tuned classifier needs none)")
    p.add_argument("--target", help="TOKEN_A,TOKEN_B: the metric is logit(A) - logit(B) at the corrupted text's first "
                                    "mask; on a fine-tuned classifier LABEL_A,LABEL_B, two of its labels (a "
                                    "regression head: leave out, its value is the metric; a question-answering "
                                    "model: SPAN_A,SPAN_B, two spans of --context)")
    p.add_argument("--context", default="", help="a question-answering model's passage: --clean and --corrupt are two "
                                                 "questions of it, the metric the first span's score (start + end "
                                                 "logits) less the second's")
    p.add_argument("--what", choices=WHATS, default="hidden", help="hidden: every (hidden state, position); heads: "
                                                                    "every (layer, head)")
    p.add_argument("--positions", help="hidden: only these token positions, e.g. 2,6 (a long input's grid costs "
                                       "one pass a cell); default all (with --features: where the texts differ, "
                                       "and the mask)")
    p.add_argument("--features", type=int, metavar="LAYER", help="patch the SAE features of this layer's output one at "
                   "a time instead, at the positions (--sae, default the model's shipped SAEs)")
    p.add_argument("--sae", help="with --features: an SAE folder")
    p.add_argument("--top", type=positive_int, default=20, help="with --features: the features listed, largest effect first")


COMMANDS = [
    Command("ablate", "remove attention heads (zero or mean) and compare predictions before and after",
            cmd_ablate, _ablate_arguments),
    Command("head-importance", "head importance from gate gradients (Michel et al. 2019), with --prune the "
            "pruning curve", cmd_head_importance, _head_importance_arguments),
    Command("patch", "activation patching: clean states put into a corrupted run, the recovered fraction per "
            "(hidden state, position) or (layer, head)", cmd_patch, _patch_arguments),
]
