"""The writes refitted on the replacement model's own inputs, one layer after another (a lever measured, not
shipped).

    python benchmarks/chained_refit.py [--device auto] [--transcoders FOLDER] [--target plain|corrected] [--tokens 400000]
                                       [--held-out 300] [--out FOLDER] [--json]

``refit-transcoders`` solves each layer's writes on the real model's feed-forward inputs. In the replacement model
layer m reads what the earlier transcoders left, so this script solves layer m (m = 0, 1, …) on the features its
encoder picks from *that* input, every earlier layer already replaced by its newly solved transcoder, every
encoder held:

- ``plain``: the target is the real feed-forward's output at the same token (the real run's, same text, same
  corruption);
- ``corrected``: the target is what brings the block's output LayerNorm's input back to the real run's:
  resid_mid_real + mlp_out_real − resid_mid_replaced (the earlier layers' drift written off as well).

Both over the training mixture read as the set was trained (BERT's seeded corruption when it was), scored as the
replacement model on the held-out side that ``score-transcoders`` reads; ``--out`` keeps the solved set.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGETS = ("plain", "corrected")


def feeds(lm, texts, seed: int | None):
    """The training text's batches, through BERT's seeded corruption (``seed``) or as written (None)."""
    from bertscope.core.passes import batches
    from bertscope.interventions.importance import masked_batches

    if seed is None:
        return (feed for _, _, feed in batches(lm, texts, 32))
    return (feed for _, feed, _, _ in masked_batches(lm, texts, 32, seed))


def layer_equations(lm, transcoders: dict, layer: int, texts, tokens: int, target: str, seed: int | None):
    """Layer ``layer``'s normal equations over ``tokens`` word pieces of ``texts`` (read through BERT's corruption
    with ``seed``; None: as written), its input read in the model with every earlier layer replaced by
    ``transcoders``; (equations, rows)."""
    from bertscope.core.hook_points import UNEMBED_IN
    from bertscope.features.transcoder_refit import add_rows, empty_equations
    from bertscope.features.transcoder_training import replaced_positions, replacement_hooks

    tc = transcoders[layer]
    equations, rows = empty_equations(tc), 0
    no_head = {UNEMBED_IN: lambda x, hook: x[:0]}  # the vocabulary is not read
    for feed in feeds(lm, texts, seed):
        keep, seen = replaced_positions(lm, feed), {}  # keep: [batch, token]

        def read(name, chained=None):
            def hook(x, _):  # [batch, token, d_model]
                if chained is not None:
                    chained(x, _)
                seen[name] = x[keep].float()  # [rows, d_model]
            return hook

        lm.run(feed, hooks={**no_head, tc.info.input_hook: read("x_real"), tc.info.output_hook: read("y_real")})
        hooks = {**replacement_hooks(lm, {i: transcoders[i] for i in range(layer)}, keep), **no_head}
        hooks[tc.info.input_hook] = read("x", hooks.get(tc.info.input_hook))
        lm.run(feed, hooks=hooks)
        y = seen["y_real"] + (seen["x_real"] - seen["x"] if target == "corrected" else 0)
        add_rows(equations, tc, seen["x"], y)
        rows += len(y)
        if rows >= tokens:
            break
    return equations, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="bundled-mlm")
    p.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (default)")
    p.add_argument("--transcoders", help="a transcoder set's folder (default: the shipped set)")
    p.add_argument("--target", choices=TARGETS, default="plain")
    p.add_argument("--tokens", type=int, default=400_000, help="training word pieces a layer (default 400,000)")
    p.add_argument("--held-out", type=int, default=300, help="held-out texts from each source (default 300)")
    p.add_argument("--seed", type=int, default=None, help="the training text's masking (default: the set's own seed; "
                   "the held-out side is always the set's)")
    p.add_argument("--out", help="a folder for the solved set (float16, as shipped)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.tokens < 1 or args.held_out < 1:
        p.error("--tokens and --held-out must be at least 1")

    import torch

    from bertscope.cli.sae import texts_for
    from bertscope.cli.transcoders import set_seeds
    from bertscope.core.models import load_model
    from bertscope.features.shipped import transcoder_set
    from bertscope.features.transcoder import save_transcoder
    from bertscope.features.transcoder_refit import check_refittable, solved
    from bertscope.features.transcoder_training import replacement_quality

    lm = load_model(args.model, device=args.device)
    transcoders = {layer: tc.float() for layer, tc in transcoder_set(lm, args.transcoders).items()}
    for tc in transcoders.values():
        check_refittable(tc)
    split, masking = set_seeds(args, transcoders)
    train, held = texts_for("mixture", args.tokens, args.held_out, split)
    seed = masking if transcoders[0].info.extra.get("masked") else None
    report = {"from": args.transcoders or "the shipped set", "target": args.target, "tokens": args.tokens,
              "before": replacement_quality(lm, transcoders, held.texts, seed=split), "layers": []}
    with torch.no_grad():
        for layer in sorted(transcoders):
            started = time.perf_counter()
            equations, rows = layer_equations(lm, transcoders, layer, train.texts, args.tokens, args.target, seed)
            transcoders[layer] = solved(transcoders[layer], equations, rows).to(lm.device)  # solved on the CPU
            report["layers"].append({"layer": layer, "rows": rows, "seconds": round(time.perf_counter() - started),
                                     "kept_as_trained": transcoders[layer].info.extra["refit"]["kept_as_trained"]})
            print(f"layer {layer}: {rows:,} rows solved in {report['layers'][-1]['seconds']} s", file=sys.stderr)
    report["after"] = replacement_quality(lm, transcoders, held.texts, seed=split)
    if args.out:
        for tc in transcoders.values():
            save_transcoder(tc, args.out, torch.float16)
    before, after = report["before"], report["after"]
    print(json.dumps(report, indent=1) if args.json else
          f"{args.target}: top-1 agreement {before['top1_agreement']:.3f} -> {after['top1_agreement']:.3f}, KL "
          f"{before['kl']:.3f} -> {after['kl']:.3f} on {after['positions']:,} held-out masked positions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
