"""The training file of ``bundled-reranker``: SQuAD v1.1 train's questions against their paragraphs.

    python tools/reranker_pairs.py --questions 3000 --out runs/reranker-pairs.csv

Each sampled question gives one ``relevant`` row (its own paragraph) and two ``irrelevant`` rows: the paragraph
BM25 (``bm25s``, as ``retrieval-eval`` runs it) ranks highest among the others (a hard negative), and a paragraph
drawn at random (an easy one: with hard negatives alone the loss stayed at chance, 0.69, for 80 steps). Columns:
``text`` (the question), ``text_pair`` (the paragraph), ``label``, what ``bertscope finetune --task pairs`` reads.
Questions are drawn by seed from SQuAD's train split only: the dev split stays the held-out test.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import bm25s

    from bertscope.corpora.squad import read_squad

    train = read_squad("train")
    passages = list(dict.fromkeys(train.contexts))
    row = {p: i for i, p in enumerate(passages)}
    chosen = np.random.default_rng(args.seed).choice(len(train.questions), args.questions, replace=False)
    questions = [train.questions[i] for i in chosen]
    gold = np.array([row[train.contexts[i]] for i in chosen])
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords=None, show_progress=False), show_progress=False)
    top, _ = retriever.retrieve(bm25s.tokenize(questions, stopwords=None, show_progress=False), k=2,
                                show_progress=False)
    top = np.asarray(top)  # [question, 2]
    negative = np.where(top[:, 0] == gold, top[:, 1], top[:, 0])  # the best paragraph that is not the gold one
    drawn = np.random.default_rng(args.seed + 1).integers(0, len(passages) - 1, len(gold))
    drawn = np.where(drawn >= gold, drawn + 1, drawn)  # any paragraph but the gold one
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["text", "text_pair", "label"])
        for q, g, n, r in zip(questions, gold, negative, drawn):
            out.writerow([q, passages[g], "relevant"])
            out.writerow([q, passages[n], "irrelevant"])
            out.writerow([q, passages[r], "irrelevant"])
    print(f"{args.out}: {3 * len(questions):,} rows ({len(questions):,} questions of {len(train.questions):,}, "
          f"{len(passages):,} paragraphs; BM25's top paragraph was the gold one for "
          f"{(top[:, 0] == gold).mean():.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
