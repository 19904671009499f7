"""The tuned lens measured: the shipped translators (or ones trained now) against the logit lens on held-out text
of the corpus mixture, and what training costs.

    python benchmarks/tuned_lens.py [--models bundled-mlm,bundled-sentiment] [--held-out 1000] [--train STEPS]

For each model, per hidden state: the mean KL(p_final ‖ p_lens) in nats (the paper's figure of merit), the bias
(KL from the final layer's mean distribution to the lens's), the expected calibration error of the lens's top-1
(a masked LM: against the masked tokens; a classifier: against the final decision) and the share of reads whose
top-1 is the final one — the tuned lens beside the logit lens. ``--train STEPS`` trains translators now (the
package's recipe, ``lenses.tuned``) and reports seconds a step and the process's peak RSS; without it the shipped
lens is read. Figures only.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bundled-mlm,bundled-sentiment")
    parser.add_argument("--held-out", type=int, default=1000)
    parser.add_argument("--train", type=int, default=0, help="train this many steps now instead of reading the shipped")
    parser.add_argument("--sentences", type=int, default=2000)
    args = parser.parse_args()
    from bertscope import load_model
    from bertscope.corpora.mixture import mixed_texts
    from bertscope.lenses.shipped import find_lens
    from bertscope.lenses.tuned import lens_quality, train_tuned_lens

    held = mixed_texts(args.held_out // 5 + 1, held_out=True)
    texts = list(held.texts)[: args.held_out]
    for name in args.models.split(","):
        lm = load_model(name)
        if args.train:
            mixture = mixed_texts(args.sentences)
            start = time.perf_counter()
            lens = train_tuned_lens(lm, list(mixture.texts), args.train, trained_on="the corpus mixture")
            seconds = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"\n{name}: trained {args.train} steps in {seconds:.0f} s ({seconds / args.train:.2f} s a step), "
                  f"loss {lens.meta.losses[0]:.3f} -> {lens.meta.losses[-1]:.3f}, peak RSS {peak:,.0f} MiB")
        else:
            lens = find_lens(lm)
            print(f"\n{name}: the shipped lens ({lens.meta.steps} steps, {lens.meta.sentences:,} sentences)")
        start = time.perf_counter()
        q = lens_quality(lm, lens, texts)
        print(f"held out: {len(texts)} texts ({q.positions:,} reads, calibrated against {q.against}), "
              f"{time.perf_counter() - start:.0f} s")
        print(f"  {'layer':>10}  {'KL tuned':>8}  {'KL logit':>8}  {'bias t':>7}  {'bias l':>7}  {'ECE t':>6}  "
              f"{'ECE l':>6}  {'agree t':>7}  {'agree l':>7}")
        for i, s in enumerate(q.states):
            print(f"  {s!s:>10}  {q.kl['tuned'][i]:8.3f}  {q.kl['logit'][i]:8.3f}  {q.bias['tuned'][i]:7.3f}  "
                  f"{q.bias['logit'][i]:7.3f}  {q.ece['tuned'][i]:6.3f}  {q.ece['logit'][i]:6.3f}  "
                  f"{q.agreement['tuned'][i]:7.2f}  {q.agreement['logit'][i]:7.2f}")


if __name__ == "__main__":
    main()
