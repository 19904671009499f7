"""A LoRA tagger's step with its frozen weights cast by autocast every pass against held in half
precision for the epoch (``training.frozen_weights``): the loss and gradients compared bit for bit,
then the time of a step each way. GPU only (on the CPU training runs in float32, without autocast).

    python benchmarks/frozen_weights.py [--model random:bert-base-uncased] [--rows 32] [--tokens 30]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from benchmarks.timing import random_model_dir
    from bertscope.training.frozen_weights import frozen_in
    from bertscope.training.steps import autocast_dtype
    from bertscope.training.task_model import build_task_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:bert-base-uncased", help="a folder or random:CONFIG")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "frozen_weights.py: needs a GPU (on the CPU nothing is cast)\n")
    folder = random_model_dir(args.model.removeprefix("random:"), "none") if args.model.startswith("random:") \
        else args.model
    labels = [str(i) for i in range(17)]
    model = build_task_model(folder, True, "tag", labels, 16, 32, seed=0).cuda().train(False)  # no dropout
    half = autocast_dtype(torch.device("cuda"))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 2000, (args.rows, args.tokens), generator=generator).cuda()  # [row, token]
    gold = torch.randint(0, len(labels), (args.rows, args.tokens), generator=generator).cuda()  # [row, token]

    def step() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=half):
            logits = model(input_ids=ids).logits  # [row, token, label]
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, len(labels)), gold.reshape(-1))
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    loss, grads = step()
    with frozen_in(model, half) as swapped:
        loss_held, grads_held = step()
    worst = max(float((grads[k] - grads_held[k]).abs().max()) for k in grads)
    print(f"{args.model} on {torch.cuda.get_device_name()}, {half}: {swapped} frozen tensors held; loss equal "
          f"{torch.equal(loss, loss_held)}, gradients equal {all(torch.equal(grads[k], grads_held[k]) for k in grads)} "
          f"(largest difference {worst})")
    ms = {}
    for held in (False, True):
        with frozen_in(model, half if held else None):
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
        ms[held] = (time.perf_counter() - start) / args.steps * 1e3
    print(f"a step of {args.rows} rows x {args.tokens} tokens: cast every pass {ms[False]:.1f} ms, held "
          f"{ms[True]:.1f} ms ({ms[False] / ms[True]:.2f}x)")


if __name__ == "__main__":
    main()
