"""Fine-tuning throughput against transformers' ``Trainer``, side by side in one run; what batching
inputs of like length buys; and the memory of a BERT-base-sized run at 512 tokens.

    python benchmarks/finetune.py [--model bundled] [--task tag|classify|span] [--examples 1024]
                                  [--lora 16] [--batch-size 32] [--repeats 2] [--group-by-length]
    python benchmarks/finetune.py --memory [--task classify|span] [--model random:bert-base-uncased]
                                  [--seq-len 512]
    python benchmarks/finetune.py --padding [--model bundled] [--batch-size 32]

The same model, data (a seeded sample of ``--examples`` EWT training sentences for ``tag``, of the
tweets for ``classify``, of SQuAD's training questions for ``span``), batch size, optimiser settings
(AdamW, weight decay 0.01, linear warm-up 10% and decay, clipping at 1.0, seed 0) and LoRA
configuration (peft, the same target modules and extras trained in full) go through
``bertscope.training.fine_tuning.finetune`` (one epoch; the figure is its epoch's steps alone, as the
loop records them) and through ``Trainer.train`` (one epoch, no evaluation, no saving; its
``train_runtime``), interleaved, after one untimed warm-up epoch of each on 64 examples. Tokens/s
counts non-padding tokens of the epoch for both. With ``--group-by-length`` both batch inputs of like
length (``Trainer``'s ``train_sampling_strategy="group_by_length"``) and ours also runs without it:
the speed-up is the ratio of the two in the same run. ``--memory``: one fine-tuning epoch of a few
batches of ``--seq-len``-token inputs (``span``: the longest SQuAD dev contexts, full windows) with the
process's peak RSS (psutil; on a GPU, RSS is the host side only). ``--padding``: the cells an epoch on
EWT computes per real token, by how rows are batched (no model runs). Figures only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def data_of(task: str, examples: int):
    import numpy as np

    from bertscope.training.task_data import load_task_data

    data = load_task_data(task, {"tag": "ewt-upos", "classify": "sentiment", "span": "squad"}[task])
    rows = sorted(np.random.default_rng(0).choice(len(data.train), min(examples, len(data.train)),
                                                  replace=False).tolist())  # a seeded sample: the tweets are sorted by label
    train = data.train.take(rows)
    return type(data)(data.task, data.source, train, data.held_out.take(range(64)), None, "")  # scoring is not timed


def ours(model: str, data, cfg, out: Path, device: str) -> tuple[float, float]:
    """(seconds, non-padding tokens) of one epoch of ``finetune``."""
    from bertscope.training.fine_tuning import finetune

    state = finetune(model, data, out, cfg, device=device)
    epoch = state.history[-1]
    return epoch["seconds"], epoch["tokens_per_s"] * epoch["seconds"]


def ours_casting_every_pass(model: str, data, cfg, out: Path, device: str) -> tuple[float, float]:
    """``ours`` as before ``training.frozen_weights``: autocast casts a LoRA run's frozen weights every pass."""
    from bertscope.training import frozen_weights, loop

    held = loop.frozen_in
    loop.frozen_in = lambda model, dtype: frozen_weights.frozen_in(model, None)
    try:
        return ours(model, data, cfg, out, device)
    finally:
        loop.frozen_in = held


def trainers(model_name: str, data, cfg, out: Path, device: str) -> tuple[float, float]:
    """One epoch of ``Trainer`` on the same encoded rows, model and settings."""
    from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding, Trainer, TrainingArguments

    from bertscope.runtime.devices import resolve_device
    from bertscope.sources.resolve import resolve_source
    from bertscope.training.fine_tuning import task_tokenizer
    from bertscope.training.span_objective import encode_spans
    from bertscope.training.task_model import build_task_model
    from bertscope.training.task_objective import encode

    source, local_only = resolve_source(model_name)
    tokenizer = task_tokenizer(model_name, source, local_only, cfg.task)
    span = cfg.task == "span"
    encoded = encode_spans(tokenizer, data.train, cfg.seq_len) if span else \
        encode(tokenizer, cfg.task, data.train, data.labels, cfg.seq_len)
    rows = []
    for i in range(len(encoded)):
        row = {"input_ids": encoded.ids[i]}
        if span:  # the question-answering head's own loss: (CE(start) + CE(end)) / 2
            row["start_positions"], row["end_positions"] = (int(v) for v in encoded.labels[i])
        else:
            row["labels"] = encoded.labels[i]
        if encoded.types is not None:
            row["token_type_ids"] = encoded.types[i]
        rows.append(row)
    model = build_task_model(source, local_only, cfg.task, data.labels, cfg.lora_rank, cfg.lora_alpha, cfg.seed)
    collator = DataCollatorForTokenClassification(tokenizer) if cfg.task == "tag" else DataCollatorWithPadding(tokenizer)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=cfg.batch_size, num_train_epochs=1,
                             learning_rate=cfg.lr, weight_decay=cfg.weight_decay,
                             warmup_steps=max(1, int(-(-len(rows) // cfg.batch_size) * cfg.warmup)),  # as ours
                             lr_scheduler_type="linear", max_grad_norm=1.0, seed=cfg.seed, save_strategy="no",
                             eval_strategy="no", logging_strategy="no", report_to=[],
                             use_cpu=resolve_device(device).type == "cpu",
                             dataloader_num_workers=0, disable_tqdm=True,
                             train_sampling_strategy="group_by_length" if cfg.group_by_length else "random")
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collator)
    out_metrics = trainer.train().metrics
    tokens = sum(len(r["input_ids"]) for r in rows)
    return out_metrics["train_runtime"], tokens


def memory(model: str, task: str, seq_len: int, batch_size: int, device: str) -> None:
    import psutil

    from benchmarks.timing import random_model_dir
    from bertscope.corpora.labelled import LabelledTexts
    from bertscope.training.config import FinetuneConfig
    from bertscope.training.fine_tuning import finetune
    from bertscope.training.task_data import TaskData

    base = random_model_dir(model.removeprefix("random:"), "none") if model.startswith("random:") else model
    if task == "span":  # the longest contexts of SQuAD's dev side: every window full
        from bertscope.corpora.squad import read_squad

        dev = read_squad("dev")
        longest = sorted(range(len(dev)), key=lambda i: -len(dev.contexts[i]))[:5 * batch_size]
        side, held = dev.take(longest[:4 * batch_size], "long"), dev.take(longest[4 * batch_size:], "held")
    else:
        words = ("the bank of the river was wide and muddy after the rain " * 60).split()
        text = " ".join(words[:seq_len])
        side = LabelledTexts("long", [text] * (4 * batch_size), ["a", "b"] * (2 * batch_size))
        held = side.take(range(8))
    data = TaskData(task, "long texts", side, held, None, "")
    cfg = FinetuneConfig(task=task, seq_len=seq_len, epochs=1, batch_size=batch_size, lr=5e-5)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        state = finetune(base, data, Path(tmp) / "run", cfg, device=device)
        metrics = json.loads((Path(tmp) / "run" / "metrics.json").read_text())
    peak = psutil.Process().memory_info().rss
    try:
        import resource

        peak = max(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    except ImportError:
        pass
    rows = f"{len(side)} questions ({metrics['windows']['train']} windows)" if task == "span" else f"{len(side)} texts"
    print(f"{model}, {task}: {rows} of {seq_len} tokens, batches of {batch_size}, full fine-tuning: "
          f"{state.history[-1]['tokens_per_s']:.0f} tokens/s; rows per pass {metrics['memory']['rows_per_pass']} "
          f"(activations {metrics['memory']['activation_bytes_per_row'] / 2**20:.0f} MiB a row, budget "
          f"{metrics['memory']['budget_bytes'] / 2**30:.1f} GiB); process peak RSS {peak / 2**30:.2f} GiB; "
          f"{time.perf_counter() - start:.0f} s in all")


def padding(model: str, seq_len: int, batch_size: int) -> None:
    """Cells computed per real token over an epoch of EWT training sentences: random batches with each
    micro-batch in drawn order (before), the same batches with a process's rows longest first (now),
    and batches grouped by length; for several micro-batch sizes. No model runs."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from bertscope.sources.resolve import resolve_source
    from bertscope.training.fine_tuning import task_tokenizer
    from bertscope.training.task_data import load_task_data
    from bertscope.training.task_objective import encode

    data = load_task_data("tag", "ewt-upos")
    source, local_only = resolve_source(model)
    encoded = encode(task_tokenizer(model, source, local_only, "tag"), "tag", data.train, data.labels, seq_len)
    lengths = [len(ids) for ids in encoded.ids]

    def cells(order: list[int], micro: int, longest_first: bool) -> int:
        total = 0
        for s in range(0, len(order), batch_size):
            rows = order[s:s + batch_size]
            rows = sorted(rows, key=lambda r: -lengths[r]) if longest_first else rows
            total += sum(len(rows[m:m + micro]) * max(lengths[r] for r in rows[m:m + micro])
                         for m in range(0, len(rows), micro))
        return total

    drawn = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0)).tolist()
    grouped = get_length_grouped_indices(lengths, batch_size, generator=torch.Generator().manual_seed(0))
    real = sum(lengths)
    print(f"{model}: EWT train, {len(lengths):,} sentences, {real:,} pieces (mean {real / len(lengths):.1f}, "
          f"longest {max(lengths)}), batches of {batch_size}; cells computed per real token:")
    for micro in sorted({batch_size, batch_size // 2, 8, 3}, reverse=True):
        print(f"  micro-batches of {micro}: random, drawn order {cells(drawn, micro, False) / real:.2f}; random, "
              f"longest first {cells(drawn, micro, True) / real:.2f}; grouped by length "
              f"{cells(grouped, micro, True) / real:.2f}")


def main() -> None:
    from bertscope.training.config import FinetuneConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda")
    parser.add_argument("--task", choices=["tag", "classify", "span"],
                        help="default tag (EWT sentences); with --memory, classify (long texts)")
    parser.add_argument("--examples", type=int, default=1024)
    parser.add_argument("--lora", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--group-by-length", action="store_true")
    parser.add_argument("--cast-every-pass", action="store_true",
                        help="also run ours with the frozen weights cast by autocast every pass (the speed-up of "
                             "holding them in half precision for an epoch; GPU only)")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--padding", action="store_true", help="cells per real token by batching (no model runs)")
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()
    if args.padding:
        padding(args.model, args.seq_len, args.batch_size)
        return
    if args.memory:
        if args.task == "tag":
            parser.error("--memory runs --task classify (long texts) or span (the longest SQuAD contexts)")
        memory(args.model, args.task or "classify", args.seq_len, min(args.batch_size, 8), args.device)
        return
    torch.set_num_threads(torch.get_num_threads())
    args.task = args.task or "tag"
    data = data_of(args.task, args.examples)
    grouped = args.group_by_length
    cfg = FinetuneConfig(task=args.task, seq_len=args.seq_len, lora_rank=args.lora, epochs=1,
                         batch_size=args.batch_size, lr=5e-4 if args.lora else 5e-5, group_by_length=grouped)
    arms = {"ours": (ours, cfg), "Trainer": (trainers, cfg)}
    if grouped:  # the speed-up of length groups, in the same run
        arms["ours, random batches"] = (ours, replace(cfg, group_by_length=False))
    if args.cast_every_pass:
        arms["ours, cast every pass"] = (ours_casting_every_pass, cfg)
    times: dict[str, list[float]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory() as tmp:
        # one untimed epoch of each on a small sample first: on a GPU the first run in a process pays for
        # CUDA's context, cuBLAS's handles and kernel loading (measured on an H100: ours run cold first read
        # 0.38x Trainer, warm 0.87x), which is no property of either loop
        spread = range(0, len(data.train), max(1, len(data.train) // 64))  # every label (the rows are sorted)
        warm = type(data)(data.task, data.source, data.train.take(spread),
                          data.held_out, None, "")
        for name, (fn, run_cfg) in arms.items():
            fn(args.model, warm, run_cfg, Path(tmp) / f"{name}-warm", args.device)
        for r in range(args.repeats):
            for name, (fn, run_cfg) in arms.items():
                seconds, tokens = fn(args.model, data, run_cfg, Path(tmp) / f"{name}-{r}", args.device)
                times[name].append(tokens / seconds)
    speed = {name: statistics.median(v) for name, v in times.items()}
    o, t = speed["ours"], speed["Trainer"]
    grouping = " (both grouped by length)" if grouped else ""
    print(f"{args.model}, {args.task} on {len(data.train)} examples, batches of {args.batch_size}, "
          f"{'LoRA r=' + str(args.lora) if args.lora else 'full'}{grouping}: finetune {o:.0f} tokens/s, Trainer "
          f"{t:.0f} tokens/s, ratio {o / t:.2f} (goal >= 0.9); torch threads {torch.get_num_threads()}")
    if grouped:
        plain = speed["ours, random batches"]
        print(f"finetune with random batches {plain:.0f} tokens/s: length groups are {o / plain:.2f}x as fast")
    if args.cast_every_pass:
        cast = speed["ours, cast every pass"]
        print(f"finetune with the frozen weights cast every pass {cast:.0f} tokens/s ({cast / t:.2f} of Trainer): "
              f"holding them in half precision is {o / cast:.2f}x as fast")


if __name__ == "__main__":
    main()
