"""A SPLADE model trained from bundled-mlm with sentence-transformers' sparse-encoder trainer, on SQuAD train.

    python tools/reranker_pairs.py --questions 16000 --out runs/splade-pairs.csv        # the app's environment
    .venv-pylate/bin/python tools/train_splade.py --base ~/.cache/bertscope/models/bundled-mlm-* \\
        --pairs runs/splade-pairs.csv --out runs/bundled-splade --minutes 30

Runs in ``.venv-pylate`` (``requirements-pylate.txt``: sentence-transformers 5.3 with ``datasets`` and
``accelerate``, which its trainer needs and the app does not). The model: bundled-mlm's masked-LM head read by
``SpladePooling`` (max, relu: SPLADE v2), trained with ``SpladeLoss`` = in-batch negatives
(``SparseMultipleNegativesRankingLoss``) with each question's BM25 hard negative, plus the FLOPS regulariser
(query 5e-5, document 3e-5: sentence-transformers' SPLADE example weights) that makes the vectors sparse. The
pairs file is ``tools/reranker_pairs.py``'s (question, its paragraph, BM25's best other paragraph, a random
one): the relevant row and the first irrelevant one are used. Training stops at ``--minutes`` (a CPU budget) or
after one epoch; the folder saved is a sentence-transformers sparse encoder, which ``bertscope sparse`` and
``retrieval-eval --sparse`` read.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path


def triplets(path: Path) -> dict[str, list[str]]:
    """(anchor, positive, negative) columns from the pairs file: each question's relevant row and its hard one."""
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    out: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for i in range(0, len(rows) - 2, 3):
        relevant, hard = rows[i], rows[i + 1]
        assert relevant["label"] == "relevant" and hard["label"] == "irrelevant" and relevant["text"] == hard["text"]
        out["anchor"].append(relevant["text"])
        out["positive"].append(relevant["text_pair"])
        out["negative"].append(hard["text_pair"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="a BertForMaskedLM folder (bundled-mlm's, in the model cache)")
    parser.add_argument("--pairs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from datasets import Dataset
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder import SparseEncoderTrainer, SparseEncoderTrainingArguments
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss
    from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling
    from transformers import TrainerCallback

    torch.manual_seed(args.seed)
    model = SparseEncoder(modules=[MLMTransformer(args.base, max_seq_length=args.max_length),
                                   SpladePooling(pooling_strategy="max", activation_function="relu")], device="cpu")
    data = Dataset.from_dict(triplets(args.pairs))
    loss = SpladeLoss(model, loss=SparseMultipleNegativesRankingLoss(model), query_regularizer_weight=5e-5,
                      document_regularizer_weight=3e-5)
    started = time.monotonic()

    class Budget(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if time.monotonic() - started > args.minutes * 60:
                control.should_training_stop = True
            if state.global_step % 20 == 0:
                print(f"step {state.global_step}: {time.monotonic() - started:.0f} s", flush=True)

    training = SparseEncoderTrainingArguments(
        output_dir=str(args.out / "checkpoints"), num_train_epochs=1, per_device_train_batch_size=args.batch,
        learning_rate=args.lr, warmup_ratio=0.05, logging_steps=20, save_strategy="no", seed=args.seed,
        batch_sampler="no_duplicates", report_to="none", use_cpu=True, dataloader_num_workers=0)
    trainer = SparseEncoderTrainer(model=model, args=training, train_dataset=data, loss=loss, callbacks=[Budget()])
    result = trainer.train()
    model.save(str(args.out))
    seconds = time.monotonic() - started
    print(f"{args.out}: {result.global_step} steps of {args.batch} triplets in {seconds / 60:.1f} min; final loss "
          f"{result.training_loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
