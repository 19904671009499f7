"""SAE training throughput against a plain PyTorch loop of the same SAE, side by side in one run.

    python benchmarks/sae.py [--d-in 384] [--expansion 8] [--k 32] [--tokens 65536] [--batch 2048]
                             [--repeats 3] [--device cpu]
    python benchmarks/sae.py --active SAE_FOLDER [--model bundled-mlm] [--layer 2] [--repeats 20]

``--active``: "features active on this text" (``features.active.active_features``: one pass to the
layer's hook point, the SAE on every token, the JSON) against the bare encoder's forward on the same
Brown sentences (``lm.run(..., encoder_only=True)``), interleaved; the ratio of medians (goal <= 1.2).

The same random float16 activations (``--tokens`` rows of ``--d-in``), the same TopK SAE and Adam
settings: ``bertscope.features.trainer.train_sae`` (one epoch: rows streamed from a memory-mapped
file in shuffled blocks, AuxK against dead latents, the decoder kept at unit norm, dead-latent
counters; its checkpoint after the epoch is not timed) against the plainest loop that trains the same
model (the rows in memory, dense TopK, normalised MSE, Adam, no AuxK, no checkpoint). Tokens/s, the
median of ``--repeats`` interleaved runs; the ratio is ours / plain (goal >= 0.9).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def plain_loop(rows: np.ndarray, d_sae: int, k: int, batch: int, lr: float, device: torch.device) -> float:
    """Seconds for one epoch of the plainest TopK SAE training loop."""
    x_all = torch.from_numpy(np.asarray(rows, np.float32)).to(device)
    d_in = x_all.shape[1]
    w_dec = torch.randn(d_sae, d_in, device=device)
    w_dec /= w_dec.norm(dim=1, keepdim=True)
    w_dec.requires_grad_(True)
    w_enc = w_dec.detach().t().contiguous().requires_grad_(True)
    b_enc = torch.zeros(d_sae, device=device, requires_grad=True)
    b_dec = torch.zeros(d_in, device=device, requires_grad=True)
    optimizer = torch.optim.Adam([w_enc, b_enc, w_dec, b_dec], lr=lr, eps=6.25e-10)
    variance = float((x_all - x_all.mean(0)).pow(2).sum(1).mean())
    order = torch.randperm(len(x_all), device=device)
    start = time.perf_counter()
    for s in range(0, len(x_all) - batch + 1, batch):
        x = x_all[order[s:s + batch]]
        pre = (x - b_dec) @ w_enc + b_enc
        top = pre.topk(k, dim=-1)
        latents = torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))
        loss = (x - (latents @ w_dec + b_dec)).pow(2).sum(1).mean() / variance
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            w_dec /= w_dec.norm(dim=1, keepdim=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def active(args) -> None:
    from bertscope import load_model
    from bertscope.corpora.brown_tasks import brown_texts
    from bertscope.features.active import active_features
    from bertscope.features.sae import load_sae

    lm = load_model(args.model, device=args.device)
    sae = load_sae(args.active, lm.device)
    texts = brown_texts(args.repeats)
    ours, bare = [], []
    for text in texts:
        active_features(lm, sae, text, args.layer)  # warm
        start = time.perf_counter()
        active_features(lm, sae, text, args.layer)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        lm.run(text, encoder_only=True)
        bare.append(time.perf_counter() - start)
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"features active on a text ({lm.name}, layer {args.layer}, {sae.d_sae:,} features, {len(texts)} Brown "
          f"sentences): {o * 1000:.1f} ms against the bare forward's {b * 1000:.1f} ms, ratio {o / b:.2f} (goal <= 1.2)")


def main() -> None:
    from bertscope.features.activations import ActivationSet
    from bertscope.features.sae import SaeInfo
    from bertscope.features.trainer import SaeTrainConfig, train_sae
    from bertscope.runtime.devices import resolve_device

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-in", type=int, default=384)
    parser.add_argument("--expansion", type=int, default=8)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=65_536)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    parser.add_argument("--active", help="an SAE folder: time features-on-a-text against a forward instead")
    parser.add_argument("--model", default="bundled-mlm")
    parser.add_argument("--layer", type=int, default=2)
    args = parser.parse_args()
    if args.active:
        active(args)
        return
    device = resolve_device(args.device)
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(args.tokens, args.d_in)).astype(np.float16)
    cfg = SaeTrainConfig(expansion=args.expansion, k=args.k, epochs=1, batch_tokens=args.batch)
    d_sae = args.expansion * args.d_in
    ours_rate, plain_rate = [], []
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "rows.npy", rows)
        mapped = np.load(Path(tmp) / "rows.npy", mmap_mode="r")
        acts = ActivationSet(Path(tmp), 0, mapped, np.zeros((len(rows), 2), np.int32), ())
        steps = args.tokens // args.batch
        for r in range(args.repeats):
            _, state = train_sae(acts, cfg, Path(tmp) / f"run{r}", SaeInfo("synthetic", "blocks.0.hook_resid_post"),
                                 device=str(device), resume=False)
            ours_rate.append(steps * args.batch / state.history[-1]["seconds"])
            plain_rate.append(steps * args.batch / plain_loop(rows, d_sae, args.k, args.batch, cfg.rate(d_sae), device))
    o, p = statistics.median(ours_rate), statistics.median(plain_rate)
    print(f"TopK SAE {args.d_in} -> {d_sae} (k={args.k}), {args.tokens:,} tokens in batches of {args.batch} on {device} "
          f"({torch.get_num_threads()} threads): train_sae {o:,.0f} tokens/s, plain loop {p:,.0f} tokens/s, "
          f"ratio {o / p:.2f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
