"""How far a transcoder set is from the replacement model's bar, and which layers stand in the way.

    python benchmarks/replacement_headroom.py [--model bundled-mlm] [--device auto] [--transcoders FOLDER] [--held-out 100]
                                              [--scales 1,0.8,0.7,0.6,0.5,0.3] [--groups 0123,45]
                                              [--group-scales 0123:0.7,0123:0.5,45:0.5] [--json]

Two measurements on the mixture's held-out side (the texts ``score-transcoders`` reads, BERT's seeded masked
positions):

- **every error shrunk**: each transcoder writes y + s (ŷ - y) instead of ŷ, y being the real feed-forward on the
  pass's own input (``replacement_quality(error_scale=s)``): the agreement the set would reach were every error s
  times as large. s = 1 is the replacement model; the s where the bar is crossed says how much better every
  transcoder must be (its unexplained variance times s²).
- **groups replaced alone**: only a group's layers replaced, the others real (``replacement_quality(layers=)``):
  a group whose errors cost most is where training time goes first.
- **a group's errors shrunk**: every layer replaced, one group's errors times s and the rest as they are
  (``replacement_quality(error_scale={layer: s})``): how much better that group alone would have to be.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parsed(p: argparse.ArgumentParser, args) -> tuple[list[float], list[list[int]], list[tuple[list[int], float]]]:
    """(--scales, --groups, --group-scales) read before the model loads; a malformed one ends in one line (exit 2)."""
    def scale(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 <= value <= 1:
            p.error(f"a scale is a number from 0 to 1; got {text!r}")
        return value

    def group(text: str) -> list[int]:
        if not text.isdigit():
            p.error(f"a group is its layers' digits, as 0123; got {text!r}")
        return [int(c) for c in text]

    pairs = [pair.split(":") for pair in filter(None, args.group_scales.split(","))]
    if any(len(pair) != 2 for pair in pairs):
        p.error(f"--group-scales takes GROUP:SCALE pairs, as 0123:0.7; got {args.group_scales!r}")
    return ([scale(s) for s in args.scales.split(",")], [group(g) for g in args.groups.split(",")],
            [(group(g), scale(s)) for g, s in pairs])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="bundled-mlm")
    p.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (default)")
    p.add_argument("--transcoders", help="a train-transcoders --out folder (default: the shipped set)")
    p.add_argument("--held-out", type=int, default=100, help="held-out texts from each source (default 100)")
    p.add_argument("--scales", default="1,0.8,0.7,0.6,0.5,0.3", help="each error's scale, 0 to 1")
    p.add_argument("--groups", default="0123,45", help="groups of layers replaced alone, as digits, comma-separated")
    p.add_argument("--group-scales", default="0123:0.7,0123:0.5,45:0.5",
                   help="GROUP:SCALE pairs, comma-separated: that group's errors shrunk, every other layer's as it is")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    scales, groups, group_scales = parsed(p, args)

    from bertscope.cli.sae import texts_for
    from bertscope.core.models import load_model
    from bertscope.features.shipped import transcoder_set
    from bertscope.features.transcoder_training import replacement_quality

    lm = load_model(args.model, device=args.device)
    transcoders = transcoder_set(lm, args.transcoders)
    _, held = texts_for("mixture", 1, args.held_out, 0)
    rows = []
    out = sys.stderr if args.json else sys.stdout  # the table; --json prints the rows alone on stdout

    def measure(label: str, **kwargs) -> None:
        started = time.perf_counter()
        q = replacement_quality(lm, transcoders, held.texts, **kwargs)
        rows.append({"replaced": label, **kwargs, **q, "seconds": time.perf_counter() - started})
        print(f"{label:<34}{q['top1_agreement']:>10.3f}{q['kl']:>9.3f}   ({time.perf_counter() - started:.0f} s)",
              file=out, flush=True)

    unit = "masked positions" if "mlm" in lm.outputs else "texts"
    print(f"{lm.name}, transcoders from {args.transcoders or 'the shipped set'}: {len(held.texts):,} held-out texts "
          f"of the mixture ({unit})", file=out)
    print(f"{'replaced':<34}{'top-1 agr.':>10}{'KL':>9}", file=out)
    for scale in scales:
        measure(f"every layer, each error x {scale:g}", error_scale=scale)
    for layers in groups:
        measure(f"layers {', '.join(map(str, layers))} alone (others real)", layers=layers)
    for layers, scale in group_scales:
        measure(f"layers {', '.join(map(str, layers))}'s errors x {scale:g}",
                error_scale=dict.fromkeys(layers, scale))
    if args.json:
        print(json.dumps({"model": lm.name, "transcoders": args.transcoders or "shipped", "texts": len(held.texts),
                          "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
