"""Masked-LM training speed, full fine-tuning against LoRA, and held-out accuracy per epoch.

    python benchmarks/pretrain.py [--model bundled] [--device cuda] [--chunks 256] [--runs runs/a,runs/b]

Each variant trains one epoch of the recipe (``bertscope.training``: Brown corpus, 128-token
chunks, dynamic 80/10/10 masking, batches of 64) on ``--chunks`` training chunks, on the same
device, and reports training tokens per second (padding included) measured over the epoch's
steps alone. "head everywhere" is the previous path, kept here as the baseline: the masked-LM
head's vocabulary projection at every position, the loss then taken at the chosen 15%; the
recipe now projects only the chosen positions. The NSP row adds BERT's sentence pairs. ``--runs`` prints held-out top-1/top-5 per epoch from finished runs' metrics.json
(e.g. those of ``python -m bertscope pretrain``). Figures only; nothing passes or fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@contextmanager
def _head_everywhere(on: bool):
    """The previous path: the vocabulary projection at every position (the hook switched off)."""
    from bertscope.training import steps  # the forward that runs the head looks the hook up there

    if not on:
        yield
        return

    @contextmanager
    def nothing(model, chosen):
        yield False

    kept = steps.logits_only_at
    steps.logits_only_at = nothing
    try:
        yield
    finally:
        steps.logits_only_at = kept


def main() -> None:
    from bertscope.corpora.documents import brown_documents
    from bertscope.errors import BertScopeError
    from bertscope.training.config import RecipeConfig
    from bertscope.training.recipe import train

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
    speeds = {}
    for label, rank, lr, pair, everywhere in (
            ("full, head everywhere", 0, 1e-4, "none", True), ("full fine-tuning", 0, 1e-4, "none", False),
            ("LoRA, head everywhere", 16, 1e-3, "none", True), ("LoRA r=16 + head, LayerNorms", 16, 1e-3, "none", False),
            ("LoRA r=16 + NSP pairs", 16, 1e-3, "nsp", False)):
        with tempfile.TemporaryDirectory() as tmp, _head_everywhere(everywhere):
            cfg = RecipeConfig(epochs=1, lora_rank=rank, lr=lr, batch_size=args.batch_size, max_chunks=args.chunks,
                               pair_task=pair)
            try:
                state = train(args.model, train_docs, held_docs, tmp, cfg, device)
            except BertScopeError as err:
                print(f"{label:<30} skipped: {err}")
                continue
            metrics = json.loads((Path(tmp) / "metrics.json").read_text())
        epoch = state.history[0]
        speeds[label] = epoch["tokens_per_s"]
        print(f"{label:<30} {epoch['tokens_per_s']:>10,.0f} tokens/s  ({metrics['trainable_parameters']:,} "
              f"trainable parameters; one epoch {epoch['seconds']:.1f} s)")
    for new, old in (("full fine-tuning", "full, head everywhere"), ("LoRA r=16 + head, LayerNorms",
                                                                     "LoRA, head everywhere")):
        if new in speeds and old in speeds:
            print(f"{new}: head at the chosen positions only is {speeds[new] / speeds[old]:.2f}x the speed of "
                  "the head everywhere")
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
