"""Continue masked-LM pretraining headlessly (the recipe of ``pretraining``).

    python -m bertscope.pretrain bundled --corpus brown --out runs/bundled-mlm --epochs 16 --lora 16 --lr 1e-3
    python -m bertscope.pretrain bert-base-uncased --corpus my_text.txt --out runs/mine --lora 0 --lr 1e-4
    python -m bertscope.pretrain bundled --out runs/nsp --pair nsp      # with BERT's next-sentence task

``--corpus brown`` takes the Brown corpus (``make brown``), split by document: 10% of each
genre's documents held out (``brown.split_documents``, seeded). A text file: one sentence per
line, documents separated by blank lines; every tenth document is held out (the last tenth of
the lines when there is only one document). Rerunning with the same ``--out`` resumes after
the last finished epoch. Progress on stderr; one-line errors with exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Sequence

from .errors import BertScopeError
from .pretraining import CLOZE, RecipeConfig, train

Documents = list[list[str]]


def brown_documents(genres: str | None, seed: int) -> tuple[Documents, Documents]:
    from .brown import read_brown, split_documents

    corpus = read_brown(genres=[g.strip() for g in genres.split(",")] if genres else None)
    train_ids, held_ids = split_documents([d.id for d in corpus.documents], seed=seed)
    by_id = {d.id: [s.text for s in d.sentences] for d in corpus.documents}
    return [by_id[d] for d in train_ids], [by_id[d] for d in held_ids]


def file_documents(path: str, seed: int) -> tuple[Documents, Documents]:
    file = Path(path)
    if not file.is_file():
        raise BertScopeError(f"No corpus file at {path}.")
    try:
        text = file.read_text("utf-8")
    except UnicodeDecodeError as err:
        raise BertScopeError(f"{path} is not UTF-8 text.") from err
    documents = [[line.strip() for line in block.splitlines() if line.strip()] for block in text.split("\n\n")]
    documents = [d for d in documents if d]
    if not documents:
        raise BertScopeError(f"{path} has no text.")
    if len(documents) == 1:
        lines = documents[0]
        cut = max(1, len(lines) - max(1, len(lines) // 10))
        if cut >= len(lines):
            raise BertScopeError(f"{path} needs at least two lines: one to train on, one to hold out.")
        return [lines[:cut]], [lines[cut:]]
    rank = lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()  # noqa: E731
    held = set(sorted(range(len(documents)), key=rank)[:max(1, len(documents) // 10)])
    return ([d for i, d in enumerate(documents) if i not in held], [d for i, d in enumerate(documents) if i in held])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bertscope.pretrain", description=__doc__.splitlines()[0])
    p.add_argument("model", help="preset, hub id or local folder (bundled, bert-base-uncased, ./my-model)")
    p.add_argument("--corpus", default="brown", help="'brown' or a text file (one sentence a line, blank lines "
                                                     "between documents)")
    p.add_argument("--genres", help="brown: comma-separated genres (default: all 15)")
    p.add_argument("--out", required=True, help="run folder: checkpoint, model/, adapter/, metrics.json, curves.png")
    defaults = RecipeConfig()
    p.add_argument("--epochs", type=int, default=defaults.epochs)
    p.add_argument("--lora", type=int, default=defaults.lora_rank, help="LoRA rank; 0 = full fine-tuning")
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--seq-len", type=int, default=defaults.seq_len)
    p.add_argument("--masking", choices=["dynamic", "static"], default=defaults.masking)
    p.add_argument("--pair", choices=["none", "nsp", "sop"], default=defaults.pair_task,
                   help="also train on sentence pairs: BERT's next-sentence head (nsp) or ALBERT's "
                        "sentence-order head (sop)")
    p.add_argument("--max-chunks", type=int, help="train on at most this many chunks (a budget)")
    p.add_argument("--cloze", action="append", metavar="SENTENCE",
                   help="a sentence with [MASK] whose predictions metrics.json compares before and after "
                        "(repeat for more; default: six everyday sentences)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--device", default="auto")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cfg = RecipeConfig(seq_len=args.seq_len, masking=args.masking, lora_rank=args.lora, epochs=args.epochs,
                       batch_size=args.batch_size, lr=args.lr, seed=args.seed, max_chunks=args.max_chunks,
                       pair_task=args.pair)
    try:
        cfg.check()
        if args.corpus == "brown":
            train_docs, held_docs = brown_documents(args.genres, args.seed)
        else:
            train_docs, held_docs = file_documents(args.corpus, args.seed)
        from tqdm import tqdm

        bars: list = []  # opened at the first step, so an input error prints only its line

        def progress(step: int, total: int, info: dict) -> None:
            if not bars:
                bars.append(tqdm(total=total, initial=step - 1, unit="step", file=sys.stderr, dynamic_ncols=True))
            bars[0].n = step
            bars[0].set_postfix(epoch=info["epoch"], loss=f"{info['loss']:.3f}", refresh=False)
            bars[0].refresh()

        try:
            state = train(args.model, train_docs, held_docs, args.out, cfg, args.device, progress,
                          cloze_texts=args.cloze or CLOZE)
        finally:
            for bar in bars:
                bar.close()
    except BertScopeError as err:
        print(f"bertscope: error: {err}", file=sys.stderr)
        return 2
    last = state.history[-1]["held_out"]
    summary = {"out": args.out, "epochs": state.epoch, "held_out_top1": round(last["top1"], 4),
               "held_out_top5": round(last["top5"], 4), "held_out_loss": round(last["loss"], 4)}
    if "pair_accuracy" in last:
        summary[f"held_out_{args.pair}_accuracy"] = round(last["pair_accuracy"], 4)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
