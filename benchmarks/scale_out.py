"""Beyond one process: the Ray engine's overhead and start-up, and data-parallel pretraining on N
processes against one.

    python benchmarks/scale_out.py [--model bundled] [--sentences 10000] [--cpus 2]
    python benchmarks/scale_out.py --training [--processes 2] [--chunks 128]

Ray: head statistics over ``--sentences`` Brown sentences (spread over the genres), first in
this process (``analysis.attention_stats.head_stats``), then through a local Ray cluster of
``--cpus`` CPUs started here (``engines.ray_engine.head_stats``: one actor per CPU, each with
the model), on the same machine: the cluster's start-up (``ray.init``), the first run (actors
start and load the model) and a second run on the warm cluster, each against the
single-process time, and the largest difference between the two results.

Training: ``python -m bertscope pretrain`` on the Brown corpus (one epoch, ``--chunks``
128-token chunks, batches of 64, LoRA 16) with ``--processes 1`` and ``--processes N``; training
tokens per second as each run's metrics.json records them (the main process's clock over the
epoch's steps; the batch's tokens are the whole global batch's). Figures only; nothing passes
or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def ray_figures(args: argparse.Namespace) -> None:
    import ray
    import torch

    from bertscope.analysis.attention_stats import head_stats
    from bertscope.core.models import load_model
    from bertscope.corpora.brown_tasks import brown_texts
    from bertscope.engines.ray_engine import RayEngine, head_stats as ray_head_stats

    lm = load_model(args.model, device="cpu")
    texts = brown_texts(args.sentences)
    print(f"{args.model}, {len(texts):,} Brown sentences, CPU with {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores")
    head_stats(lm, texts[:64])  # warm-up
    started = time.perf_counter()
    local = head_stats(lm, texts)
    alone = time.perf_counter() - started
    print(f"  this process:                 {alone:7.1f} s  ({len(texts) / alone:,.0f} sentences/s)")
    started = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    init = time.perf_counter() - started
    print(f"  ray.init (local, {args.cpus} CPUs):      {init:7.1f} s")
    for run in ("first (actors start)", "second (warm cluster)"):
        started = time.perf_counter()
        spread = ray_head_stats(lm, texts, RayEngine())
        took = time.perf_counter() - started
        worst = max(float(np.abs(spread.stats[k] - local.stats[k]).max()) for k in local.stats)
        print(f"  Ray, {run:<22} {took:7.1f} s  {took / alone:5.2f}x this process; largest difference {worst:.1e}")
    ray.shutdown()


def training_figures(args: argparse.Namespace) -> None:
    rates = {}
    for n in (1, args.processes):
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, "-m", "bertscope", "pretrain", args.model, "--out", out, "--epochs", "1",
                       "--max-chunks", str(args.chunks), "--batch-size", "64", "--lora", "16",
                       "--device", "cpu", "--processes", str(n), "--cloze", "The capital of France is [MASK]."]
            started = time.perf_counter()
            subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - started
            metrics = json.loads((Path(out) / "metrics.json").read_text())
            rates[n] = metrics["epochs"][0]["tokens_per_s"]
            print(f"  {n} process(es): {rates[n]:8,.0f} training tokens/s over the epoch's steps; "
                  f"{wall:5.1f} s wall in all (loading, scoring, writing); rows a pass {metrics['memory']['rows_per_pass']}")
    print(f"  {args.processes} processes / 1: {rates[args.processes] / rates[1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--training", action="store_true")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=128)
    args = parser.parse_args()
    if args.training:
        args.model = args.model or "bundled-mlm"
        training_figures(args)
    else:
        args.model = args.model or "bundled"
        ray_figures(args)


if __name__ == "__main__":
    main()
