"""Beyond one process: the Ray engine's overhead and start-up, and data-parallel pretraining on N
processes against one.

    python benchmarks/scale_out.py [--model bundled] [--sentences 10000] [--cpus 2]
    python benchmarks/scale_out.py --model random:bert-base-uncased --sentences 24 --tokens 512
    python benchmarks/scale_out.py --training [--processes 2] [--chunks 128] [--seq-len 128]
    python benchmarks/scale_out.py --job faithfulness --sentences 40
    python benchmarks/scale_out.py --job compare --sentences 2000

Ray: head statistics over ``--sentences`` Brown sentences (spread over the genres), first in
this process (``analysis.attention_stats.head_stats``), then through a local Ray cluster of
``--cpus`` CPUs started here (``engines.ray_engine.head_stats``: one actor per CPU, each with
the model), on the same machine: the cluster's start-up (``ray.init``), the first run (actors
start and load the model) and a second run on the warm cluster, each against the
single-process time, and the largest difference between the two results. ``--tokens N``:
each text is Brown sentences joined until it reaches N word-pieces (BERT's full 512), with
this process's peak RSS and the actors' (psutil) beside the times.

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

from benchmarks.timing import random_model_dir  # noqa: E402


def ray_figures(args: argparse.Namespace) -> None:
    import ray
    import torch

    from bertscope.analysis.attention_stats import head_stats
    from bertscope.core.models import load_model
    from bertscope.corpora.brown_tasks import brown_texts
    from bertscope.engines.ray_engine import RayEngine

    name = random_model_dir(args.model.removeprefix("random:"), "none") if args.model.startswith("random:") \
        else args.model
    lm = load_model(name, device=args.device)
    texts = brown_texts(args.sentences if not args.tokens else args.sentences * 40)
    if args.tokens:
        texts = long_texts(lm, texts, args.tokens, args.sentences)
    lengths = [len(e) for e in lm.tokenizer(texts, truncation=True, max_length=lm.max_length)["input_ids"]]
    print(f"{args.model}, {len(texts):,} Brown texts of {min(lengths)} to {max(lengths)} tokens, CPU with "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cores")
    head_stats(lm, texts[:64])  # warm-up
    started = time.perf_counter()
    local = head_stats(lm, texts)
    alone = time.perf_counter() - started
    print(f"  this process:                 {alone:7.1f} s  ({len(texts) / alone:,.1f} texts/s); peak RSS "
          f"{peak_rss_mib():,.0f} MiB")
    started = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    init = time.perf_counter() - started
    print(f"  ray.init (local, {args.cpus} CPUs):      {init:7.1f} s")
    for run in ("first (actors start)", "second (warm cluster)"):
        started = time.perf_counter()
        spread = head_stats(lm, texts, engine=RayEngine())
        took = time.perf_counter() - started
        worst = max(float(np.abs(spread.stats[k] - local.stats[k]).max()) for k in local.stats)
        print(f"  Ray, {run:<22} {took:7.1f} s  {took / alone:5.2f}x this process; largest difference {worst:.1e}; "
              f"this process's peak RSS {peak_rss_mib():,.0f} MiB, the largest actor's {actor_rss_mib():,.0f} MiB")
    ray.shutdown()


def job_figures(args: argparse.Namespace) -> None:
    """The faithfulness test (``--job faithfulness``: ``--sentences`` Brown items on bundled-mlm,
    every default method) or CKA (``--job compare``: bundled against bundled-mlm over
    ``--sentences`` Brown sentences) in this process and through a local Ray cluster."""
    import ray
    import torch

    from bertscope.core.models import load_model
    from bertscope.engines.ray_engine import RayEngine

    if args.job == "faithfulness":
        from bertscope.attribution.faithfulness import faithfulness
        from bertscope.attribution.items import brown_items

        lm = load_model(args.model, device=args.device)
        items = brown_items(lm, args.sentences, seed=0)
        what = f"faithfulness, {len(items)} Brown items, {args.model}, every default method"

        def once(engine):
            board = faithfulness(lm, items, engine=engine)
            return np.array([[board.summary()[m][k]["mean"] or 0.0 for k in ("comprehensiveness", "sufficiency",
                                                                             "loo_spearman")] for m in board.methods])

    else:
        from bertscope.analysis.compare import compare_layers
        from bertscope.corpora.brown_tasks import brown_task

        lm, other = load_model(args.model, device=args.device), load_model(args.model_b, device=args.device)
        task = brown_task("brown-pos", args.sentences)
        what = f"CKA, {args.model} against {args.model_b}, {len(task.texts):,} Brown sentences"

        def once(engine):
            return compare_layers(lm, other, task, engine=engine).cka

    print(f"{what}; CPU with {torch.get_num_threads()} threads, {os.cpu_count()} cores")
    started = time.perf_counter()
    local = once(None)
    alone = time.perf_counter() - started
    print(f"  this process:                 {alone:7.1f} s")
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    for label in ("first (actors start)", "second (warm cluster)"):
        started = time.perf_counter()
        spread = once(RayEngine())
        took = time.perf_counter() - started
        print(f"  Ray, {label:<22} {took:7.1f} s  {took / alone:5.2f}x this process; largest difference "
              f"{float(np.abs(spread - local).max()):.1e}")
    ray.shutdown()


def long_texts(lm, sentences: list[str], tokens: int, count: int) -> list[str]:
    """``count`` texts of Brown sentences joined until each reaches ``tokens`` word-pieces."""
    out, current, length = [], [], 0
    for sentence in sentences:
        current.append(sentence)
        length += len(lm.tokenizer(sentence, add_special_tokens=False)["input_ids"])
        if length >= tokens - 2:
            out.append(" ".join(current))
            current, length = [], 0
            if len(out) == count:
                break
    return out


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def actor_rss_mib() -> float:
    """The largest resident set among Ray's worker processes now (after a run: what an actor held)."""
    import psutil

    sizes = [p.memory_info().rss for p in psutil.process_iter(["cmdline"])
             if any("ray::" in part or "default_worker" in part for part in (p.info["cmdline"] or []))]
    return max(sizes, default=0) / 2**20


def training_figures(args: argparse.Namespace) -> None:
    rates = {}
    for n in (1, args.processes):
        with tempfile.TemporaryDirectory() as out:
            model = random_model_dir(args.model.removeprefix("random:"), "mlm") if args.model.startswith("random:") \
                else args.model
            command = [sys.executable, "-m", "bertscope", "pretrain", model, "--out", out, "--epochs", "1",
                       "--max-chunks", str(args.chunks), "--batch-size", str(args.batch_size), "--lora", "16",
                       "--seq-len", str(args.seq_len),
                       "--device", args.device, "--processes", str(n), "--cloze", "The capital of France is [MASK]."]
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
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=0, help="long texts of about this many tokens (0: sentences)")
    parser.add_argument("--device", default="auto", help="this process's model (auto: the GPU when there is one); "
                                                      "the Ray actors take one GPU each when the cluster has them")
    parser.add_argument("--job", choices=("heads", "faithfulness", "compare"), default="heads")
    parser.add_argument("--model-b", default="bundled-mlm", help="--job compare: the second model")
    args = parser.parse_args()
    if args.job != "heads":
        args.model = args.model or ("bundled-mlm" if args.job == "faithfulness" else "bundled")
        job_figures(args)
    elif args.training:
        args.model = args.model or "bundled-mlm"
        training_figures(args)
    else:
        args.model = args.model or "bundled"
        ray_figures(args)


if __name__ == "__main__":
    main()
