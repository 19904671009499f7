"""Each layer read as the output, from a shell: ``tuned-lens`` (one text read at every hidden state by the tuned
lens beside the logit lens) and ``train-tuned-lens`` (the translators, trained on the corpus mixture)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command, load, positive_int, seed_int


def cmd_tuned_lens(args: argparse.Namespace) -> Any:
    from bertscope.lenses.readings import lens_readings
    from bertscope.lenses.shipped import find_lens

    lm = load(args)
    lens = find_lens(lm, args.lens)
    result = lens_readings(lm, lens, args.text, args.mask - 1, args.top_k)
    if args.json:
        return result.to_json()
    where = f" at position {result.position}" if result.position is not None else ""
    lines = [f"{lm.name}{where}: each hidden state read by the tuned lens (trained {lens.meta.steps} steps on "
             f"{lens.meta.trained_on or 'its texts'}) and by the logit lens; KL to the final layer in nats",
             f"  {'layer':>10}  {'KL tuned':>8}  {'KL logit':>8}  tuned lens top / logit lens top"]
    for r in result.layers:
        show = ", ".join(f"{t.strip()} {p:.2f}" for t, p in r.tuned[:3])
        other = ", ".join(f"{t.strip()} {p:.2f}" for t, p in r.logit[:3])
        lines.append(f"  {r.layer!s:>10}  {r.kl_tuned:8.3f}  {r.kl_logit:8.3f}  {show}  /  {other}")
    return "\n".join(lines)


def _tuned_lens_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", help="a masked LM: a text with [MASK]; a classifier: the text it decides on")
    p.add_argument("--mask", type=positive_int, default=1, help="which [MASK] to read, from 1 (default 1)")
    p.add_argument("--top-k", type=positive_int, default=5, help="tokens shown per layer (default 5)")
    p.add_argument("--lens", help="a folder train-tuned-lens wrote (default: the shipped lens, else the one trained "
                                  "into the user cache)")


def cmd_train_tuned_lens(args: argparse.Namespace) -> Any:
    from bertscope.corpora.mixture import mixed_texts
    from bertscope.errors import BertScopeError
    from bertscope.lenses.shipped import trained_folder
    from bertscope.lenses.tuned import lens_quality, train_tuned_lens

    if args.out is not None and not args.out.strip():
        raise BertScopeError("--out is empty: give a folder, or leave it out for the user cache.")
    if not 1 <= args.sentences <= 100_000 or not 1 <= args.held_out <= 20_000:
        raise BertScopeError("Give 1 to 100,000 training texts a corpus (--sentences) and 1 to 20,000 held out.")
    lm = load(args)
    mixture = mixed_texts(args.sentences)
    lens = train_tuned_lens(lm, list(mixture.texts), args.steps, args.batch, args.seed,
                            trained_on=f"the corpus mixture ({', '.join(mixture.counts())}; {len(mixture.texts):,} "
                                       "texts)")
    out = lens.save(args.out or trained_folder(lm.name), half=args.half)
    held = mixed_texts(max(20, args.held_out // max(1, len(mixture.counts()))), held_out=True)
    quality = lens_quality(lm, lens, list(held.texts)[: args.held_out])
    report = {"out": str(out), "steps": lens.meta.steps, "sentences": lens.meta.sentences,
              "first_loss": lens.meta.losses[0], "last_loss": lens.meta.losses[-1], **quality.to_json()}
    if args.json:
        return report
    lines = [f"Translators for {lm.name} written to {out}: {lens.meta.steps} steps, {lens.meta.sentences:,} sentences, "
             f"loss {lens.meta.losses[0]:.3f} -> {lens.meta.losses[-1]:.3f}",
             f"Held out ({quality.positions:,} reads, calibrated against {quality.against}):",
             f"  {'layer':>10}  {'KL tuned':>8}  {'KL logit':>8}  {'bias tuned':>10}  {'bias logit':>10}"]
    for i, s in enumerate(quality.states):
        lines.append(f"  {s!s:>10}  {quality.kl['tuned'][i]:8.3f}  {quality.kl['logit'][i]:8.3f}  "
                     f"{quality.bias['tuned'][i]:10.3f}  {quality.bias['logit'][i]:10.3f}")
    return "\n".join(lines)


def _train_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.lenses.tuned import DEFAULT_BATCH, DEFAULT_STEPS

    p.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS, help=f"optimizer steps (default {DEFAULT_STEPS})")
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, help=f"sentences a step (default {DEFAULT_BATCH})")
    p.add_argument("--sentences", type=positive_int, default=2000, help="training texts from each installed corpus of the "
                                                               "mixture (default 2000)")
    p.add_argument("--held-out", type=positive_int, default=500, help="held-out texts the lens is scored on (default 500)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--half", action="store_true", help="float16 weights (half the size on disk)")
    p.add_argument("--out", help="where to write it (default: the user cache, where tuned-lens finds it)")


COMMANDS = [
    Command("tuned-lens", "one text read at every hidden state by the tuned lens (Belrose et al. 2023) beside the "
            "logit lens: a masked LM's tokens at [MASK], a classifier's classes, each with its KL to the final layer",
            cmd_tuned_lens, _tuned_lens_arguments),
    Command("train-tuned-lens", "train a model's tuned lens (an affine translator a hidden state) on the corpus "
            "mixture, and score it against the logit lens on held-out text", cmd_train_tuned_lens, _train_arguments),
]
