"""``pretrain`` (BERT's first stage: masked-LM, NSP/SOP) and ``finetune`` (its second: a task head), on one
process or many."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, finite_float, seed_int
from bertscope.errors import BertScopeError


@contextmanager
def step_bar() -> Iterator[Callable[[int, int, dict], None]]:
    """A training run's progress callback drawing one bar of steps on stderr (opened at the first
    step, so an input error prints only its line)."""
    from tqdm import tqdm

    bars: list = []
    shown = [0.0]  # when the loss was last read

    def progress(step: int, total: int, info: dict) -> None:
        if not bars:
            bars.append(tqdm(total=total, initial=step - 1, unit="step", file=sys.stderr, dynamic_ncols=True))
        bars[0].n = step
        now = time.monotonic()
        if now - shown[0] >= 0.5 or step == total:  # reading the loss waits for the GPU: twice a second at most
            shown[0] = now
            bars[0].set_postfix(epoch=info["epoch"], loss=f"{float(info['loss']):.3f}", refresh=False)
        bars[0].refresh()

    try:
        yield progress
    finally:
        for bar in bars:
            bar.close()


def cmd_pretrain(args: argparse.Namespace) -> Any:
    from bertscope.corpora.documents import brown_documents, file_documents
    from bertscope.training.config import CLOZE, RecipeConfig
    from bertscope.training.recipe import train

    cfg = RecipeConfig(seq_len=args.seq_len, masking=args.masking, lora_rank=args.lora, epochs=args.epochs,
                       batch_size=args.batch_size, lr=args.lr, seed=args.seed, max_chunks=args.max_chunks,
                       pair_task=args.pair, max_held_out=args.max_held_out)
    cfg.check()
    from bertscope.training.processes import launched_world

    world = launched_world()
    if world == 1 and args.processes != 1:  # start this command again as N data-parallel processes
        from bertscope.training.launch import check_processes, launch

        check_processes(args.processes, args.device)
        launch(args.processes, args.argv, Path(args.out))
        return None  # the main process printed the summary
    if world > 1 and args.processes not in (1, world):
        raise BertScopeError(f"This command was launched as {world} processes, not --processes {args.processes}.")
    if args.corpus == "brown":
        train_docs, held_docs = brown_documents(args.genres, args.seed)
    else:
        train_docs, held_docs = file_documents(args.corpus, args.seed)
    with step_bar() as progress:
        state = train(args.model, train_docs, held_docs, args.out, cfg, args.device, progress,
                      cloze_texts=args.cloze or CLOZE)
    if int(os.environ.get("RANK", "0")) != 0:
        return None  # one summary, from the main process
    last = state.history[-1]["held_out"]
    summary = {"out": args.out, "epochs": state.epoch, "held_out_top1": round(last["top1"], 4),
               "held_out_top5": round(last["top5"], 4), "held_out_loss": round(last["loss"], 4)}
    if "pair_accuracy" in last:
        summary[f"held_out_{args.pair}_accuracy"] = round(last["pair_accuracy"], 4)
    written = json.loads((Path(args.out) / "metrics.json").read_text())
    summary["train_chunks"], summary["held_out_chunks"] = written["train_chunks"], written["held_out_chunks"]
    return summary  # printed as JSON whether or not --json is given (scripts read it)


def _pretrain_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.training.config import RecipeConfig

    p.add_argument("model", help="preset, hub id or local folder (bundled, bert-base-uncased, ./my-model)")
    p.add_argument("--corpus", default="brown", help="'brown' or a text file (one sentence a line, blank lines "
                                                     "between documents)")
    p.add_argument("--genres", help="brown: comma-separated genres (default: all 15)")
    p.add_argument("--out", required=True, help="run folder: checkpoint, model/, adapter/, metrics.json, curves.png")
    defaults = RecipeConfig()
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--lora", type=int, default=defaults.lora_rank, help="LoRA rank; 0 = full fine-tuning")
    p.add_argument("--lr", type=finite_float, default=defaults.lr)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--seq-len", type=int, default=defaults.seq_len)
    p.add_argument("--masking", choices=["dynamic", "static"], default=defaults.masking)
    p.add_argument("--pair", choices=["none", "nsp", "sop"], default=defaults.pair_task,
                   help="also train on sentence pairs: BERT's next-sentence head (nsp) or ALBERT's "
                        "sentence-order head (sop)")
    p.add_argument("--max-chunks", type=int, help="train on at most this many chunks (a budget; the held-out chunks "
                                                  "scored each epoch are cut in proportion, at least 64)")
    p.add_argument("--max-held-out", type=int, help="score at most this many held-out chunks each epoch (default: "
                                                    "all, or in proportion to --max-chunks)")
    p.add_argument("--cloze", action="append", metavar="SENTENCE",
                   help="a sentence with [MASK] whose predictions metrics.json compares before and after "
                        "(repeat for more; default: six everyday sentences)")
    p.add_argument("--seed", type=seed_int, default=defaults.seed)
    p.add_argument("--device", default="auto")
    p.add_argument("--processes", type=int, default=1,
                   help="train data-parallel on N processes of this machine through Accelerate (N GPUs, or N "
                        "CPU processes with gloo); the same as `accelerate launch --multi_gpu --num_processes N -m "
                        "bertscope pretrain ...`, which also runs it across machines")


def cmd_finetune(args: argparse.Namespace) -> Any:
    from bertscope.training.config import FinetuneConfig
    from bertscope.training.fine_tuning import finetune
    from bertscope.training.processes import launched_world
    from bertscope.training.task_data import load_task_data

    if args.lora is not None and args.full:
        raise BertScopeError("Give --lora R or --full, not both.")
    rank = 0 if args.full or args.lora is None else args.lora
    lr = args.lr if args.lr is not None else (5e-4 if rank else 5e-5)
    cfg = FinetuneConfig(task=args.task, seq_len=args.seq_len, lora_rank=rank, epochs=args.epochs,
                         batch_size=args.batch_size, lr=lr, seed=args.seed, held_out=args.held_out,
                         class_weights=args.class_weights, max_examples=args.max_examples,
                         max_held_out=args.max_held_out, group_by_length=args.group_by_length)
    cfg.check()
    world = launched_world()
    if world == 1 and args.processes != 1:  # start this command again as N data-parallel processes
        from bertscope.training.launch import check_processes, launch

        check_processes(args.processes, args.device)
        launch(args.processes, args.argv, Path(args.out))
        return None
    if world > 1 and args.processes not in (1, world):
        raise BertScopeError(f"This command was launched as {world} processes, not --processes {args.processes}.")
    data = load_task_data(args.task, args.data, args.text_column, args.label_column, args.pair_column,
                          args.held_out, args.seed)
    with step_bar() as progress:
        state = finetune(args.model, data, args.out, cfg, args.device, progress)
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    from bertscope.training.task_metrics import SpanScores, read_task_metrics

    m = read_task_metrics(args.out)
    last = m.after
    summary = {"out": args.out, "task": args.task, "data": data.source, "epochs": state.epoch,
               **({"held_out_exact_match": round(last.exact_match, 4), "held_out_f1": round(last.f1, 4)}
                  if isinstance(last, SpanScores) else
                  {"held_out_accuracy": round(last.accuracy, 4), "held_out_macro_f1": round(last.macro_f1, 4)}),
               "held_out_loss": round(last.loss, 4)}
    if m.test is not None:
        summary["test_accuracy"] = round(m.test.accuracy, 4)
    return summary  # printed as JSON whether or not --json is given (scripts read it)


def _finetune_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.training.config import FinetuneConfig
    from bertscope.training.task_data import SHIPPED, TASKS

    defaults = FinetuneConfig()
    p.add_argument("model", help="preset, hub id or local folder (bundled, bert-base-uncased, ./my-model)")
    p.add_argument("--task", required=True, choices=TASKS,
                   help="classify: a label per text; pairs: per text pair (NLI-style); tag: a label per word; "
                        "span: an answer span per question in its context (SQuAD)")
    p.add_argument("--data", required=True, help=f"{', '.join(SHIPPED)} (installed by `corpus install`), or a file: "
                                                 ".csv/.tsv/.jsonl records (classify, pairs), .conllu / .jsonl "
                                                 "{tokens, tags} (tag), SQuAD .json / .jsonl {question, context, "
                                                 "answers} (span)")
    p.add_argument("--text-column", default="text")
    p.add_argument("--pair-column", help="pairs: the second segment's column (default text_pair)")
    p.add_argument("--label-column", default="label")
    p.add_argument("--out", required=True, help="run folder: checkpoint, model/, adapter/, metrics.json, curves.png")
    p.add_argument("--lora", type=int, help="train LoRA adapters of this rank (the head, pooler and LayerNorms in "
                                            "full); default: --full")
    p.add_argument("--full", action="store_true", help="train every weight, as BERT's fine-tuning does (default)")
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--lr", type=finite_float, help="default 5e-5 (full) or 5e-4 (LoRA)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--seq-len", type=int, default=defaults.seq_len, help="tokens at most per input; longer ones are "
                                                                         "cut and counted (span: contexts are cut "
                                                                         "into overlapping windows)")
    p.add_argument("--held-out", type=finite_float, default=defaults.held_out,
                   help="share held out (stratified, by seed) where the data has no split of its own")
    p.add_argument("--class-weights", action="store_true", help="weigh the loss by inverse class frequency")
    p.add_argument("--max-examples", type=int, help="train on at most this many examples (a seeded sample)")
    p.add_argument("--max-held-out", type=int, help="score at most this many held-out examples every epoch (a "
                                                    "seeded sample; default all)")
    p.add_argument("--group-by-length", action="store_true",
                   help="batch inputs of like length together (transformers' group_by_length): less padding, "
                        "faster when lengths vary")
    p.add_argument("--seed", type=seed_int, default=defaults.seed)
    p.add_argument("--device", default="auto")
    p.add_argument("--processes", type=int, default=1,
                   help="train data-parallel on N processes of this machine through Accelerate")


COMMANDS = [
    Command("pretrain", "continue BERT's masked-LM pretraining (and NSP/SOP) on the Brown corpus or your text",
            cmd_pretrain, _pretrain_arguments, takes_model=False),
    Command("finetune", "BERT's second stage: fine-tune an encoder under a task head (classify, pairs, tag, "
            "span) on the tweets, the BBC topics, EWT's UPOS, Brown's tags or your file", cmd_finetune, _finetune_arguments,
            takes_model=False),
]
