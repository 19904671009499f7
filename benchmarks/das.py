"""Distributed alignment search measured on the shipped models, and its training beside pyvene's.

    python benchmarks/das.py [--dim 1] [--epochs 4] [--seed 0]            # the figures (the app's environment)
    .venv-pyvene/bin/python benchmarks/das.py --pyvene [--rounds 3]         # training time against pyvene 0.1.8

The figures: for each shipped causal model on its network (agreement on bundled-mlm at the subject,
negation on bundled-sentiment at "very"/"not", tagging on bundled-upos at the opening word) the IIA of a
``--dim``-wide subspace at every hidden state on held-out pairs, then at the best state the controls: a
random rotation of the same width (frozen), the same training on neurons, the whole state swapped, and no
intervention.

``--pyvene``: the same interchange intervention training (the agreement pairs, block 1's output at the subject,
a 1-dimensional rotation, Adam, the same batches in the same order, the same loss) through BertScope's
interchange (``causal.das.train``) and through pyvene's ``IntervenableModel`` with its
``LowRankRotatedSpaceIntervention`` (``peers.references``), interleaved, ``--rounds`` times; the ratio is
BertScope's seconds over pyvene's (as ``docs/peers.md`` states every ratio: below 1 is faster). BertScope runs each source once and reuses its states across epochs (the
model is frozen, so they do not change); pyvene runs the source pass on every step. Figures only.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def figures(args: argparse.Namespace) -> None:
    from bertscope import load_model
    from bertscope.causal.alignment import align
    from bertscope.causal.das import TrainSettings
    from bertscope.causal.variables import MODELS

    for model in MODELS.values():
        lm = load_model(model.model)
        start = time.perf_counter()
        r = align(lm, task=model.name, layer="all", dim=args.dim,
                  settings=TrainSettings(epochs=args.epochs, seed=args.seed)).to_json()
        seconds = time.perf_counter() - start
        print(f"\n{lm.name}, {model.name} ({model.title}): {r['pairs_train']} training pairs, {r['pairs_held_out']} "
              f"held out, dim {r['dim']}, every state in {seconds:.0f} s")
        print("  " + "  ".join(f"{row['layer']!s}: {row['iia']:.3f}" for row in r["by_layer"]))
        print(f"  best {r['layer']}: IIA {r['iia']:.3f} | random rotation {r['iia_random_rotation']:.3f} | neurons "
              f"{r['iia_neurons']:.3f} | whole state {r['iia_full_vector']:.3f} | no intervention {r['iia_base']:.3f}")


def against_pyvene(args: argparse.Namespace) -> None:
    import pyvene as pv
    import torch

    from bertscope import load_model
    from bertscope.causal.alignment import pairs_for
    from bertscope.causal.das import TrainSettings, split, train
    from bertscope.causal.subspaces import Rotation
    from peers.references import pyvene_batch_margins, pyvene_model

    lm = load_model("bundled-mlm", device="cpu")
    _, prepared = pairs_for(lm, "agreement", seed=args.seed)
    rows, _ = split(len(prepared.rows), args.seed)
    settings = TrainSettings(epochs=args.epochs, seed=args.seed)
    layer = 1

    def ours() -> float:
        start = time.perf_counter()
        train(lm, prepared, layer + 1, rows, Rotation(lm.hidden_size, 1, args.seed), settings)
        return time.perf_counter() - start

    def theirs() -> float:
        start = time.perf_counter()
        iv = pv.LowRankRotatedSpaceIntervention(embed_dim=lm.hidden_size, low_rank_dimension=1)
        iv.rotate_layer.weight = Rotation(lm.hidden_size, 1, args.seed).weight.detach().clone()
        model = pyvene_model(pv, lm, layer, iv)
        optimizer = torch.optim.Adam(iv.parameters(), lr=settings.lr)
        batches = prepared.batches(rows, settings.batch)
        order = list(range(len(batches)))
        rng = random.Random(settings.seed)
        for _ in range(settings.epochs):
            rng.shuffle(order)
            for b in order:
                loss = torch.nn.functional.softplus(-pyvene_batch_margins(model, prepared, batches[b])).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        return time.perf_counter() - start

    ours(), theirs()  # warm both
    mine, peer = [], []
    for _ in range(args.rounds):
        mine.append(ours())
        peer.append(theirs())
    m, p = statistics.median(mine), statistics.median(peer)
    print(f"DAS training, bundled-mlm, agreement at block {layer}'s output, {len(rows)} pairs x {args.epochs} epochs, "
          f"torch {torch.__version__}, pyvene {pv.__version__ if hasattr(pv, '__version__') else '0.1.8'}")
    print(f"  BertScope {m:.2f} s   pyvene {p:.2f} s   BertScope's time over pyvene's {m / p:.2f}x "
          f"({p / m:.2f}x pyvene's speed; medians of {args.rounds})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pyvene", action="store_true", help="time the training against pyvene's (its environment)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    against_pyvene(args) if args.pyvene else figures(args)


if __name__ == "__main__":
    main()
