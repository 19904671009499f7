"""Masked-LM training speed, full fine-tuning against LoRA, and held-out accuracy per epoch.

    python benchmarks/pretrain.py [--model bundled] [--device cuda] [--chunks 256] [--runs runs/a,runs/b]

Each variant trains one epoch of the recipe (``bertscope.pretraining``: Brown corpus, 128-token
chunks, dynamic 80/10/10 masking, batches of 64) on ``--chunks`` training chunks, on the same
device, and reports training tokens per second (padding included) measured over the epoch's
steps alone. ``--runs`` prints held-out top-1/top-5 per epoch from finished runs' metrics.json
(e.g. those of ``python -m bertscope.pretrain``). Figures only; nothing passes or fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from bertscope.pretrain import brown_documents
    from bertscope.pretraining import RecipeConfig, train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--chunks", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--runs", help="comma-separated run folders to summarise")
    args = parser.parse_args()

    train_docs, held_docs = brown_documents(None, 0)
    held_docs = held_docs[:5]  # evaluation is not what is timed here
    device = args.device
    name = torch.cuda.get_device_name() if torch.cuda.is_available() and device != "cpu" else "cpu"
    print(f"model {args.model}, device {name}, torch threads {torch.get_num_threads()}, "
          f"{args.chunks} chunks x 128 tokens, batches of {args.batch_size}")
    for label, rank, lr in (("full fine-tuning", 0, 1e-4), ("LoRA r=16 + head, LayerNorms", 16, 1e-3)):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = RecipeConfig(epochs=1, lora_rank=rank, lr=lr, batch_size=args.batch_size, max_chunks=args.chunks)
            state = train(args.model, train_docs, held_docs, tmp, cfg, device)
            metrics = json.loads((Path(tmp) / "metrics.json").read_text())
        epoch = state.history[0]
        print(f"{label:<30} {epoch['tokens_per_s']:>10,.0f} tokens/s  ({metrics['trainable_parameters']:,} "
              f"trainable parameters; one epoch {epoch['seconds']:.1f} s)")
    for run in (args.runs or "").split(","):
        if not run.strip():
            continue
        metrics = json.loads((Path(run.strip()) / "metrics.json").read_text())
        curve = ", ".join(f"{e['epoch']}: {e['held_out']['top1']:.3f}/{e['held_out']['top5']:.3f}"
                          for e in metrics["epochs"])
        print(f"{run}: {metrics['config']['lora_rank'] or 'full'} on {metrics['device']}, held-out top-1/top-5 "
              f"by epoch: {curve}")


if __name__ == "__main__":
    main()
