"""What ``predict`` costs beside transformers' own pipelines on the same fine-tuned model.

    python benchmarks/predict.py [--model bundled|random:bert-base-uncased] [--device cuda]
                                 [--texts 32] [--tokens 0 (Brown sentences as they are) | 512]

A task head (seeded) is put on the model's encoder and saved as a fine-tuned checkpoint is; then
the same texts go through ``bertscope.tasks.predict`` and through ``pipeline("text-classification",
top_k=None)`` / ``pipeline("token-classification", aggregation_strategy="simple")`` with the same
batch size, interleaved, medians. Figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, describe, interleaved, random_model_dir  # noqa: E402

LABELS = {"AutoModelForSequenceClassification": ["negative", "neutral", "positive"],
          "AutoModelForTokenClassification": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]}


def checkpoint(base: str, auto: str) -> str:
    """``base``'s encoder under a seeded ``auto`` head, saved once into the user cache."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    from bertscope.runtime.user_cache import user_cache_dir
    from bertscope.sources.resolve import resolve_source

    source, _ = resolve_source(base)
    folder = user_cache_dir() / "task-models" / f"{Path(base).name}-{auto}"
    if not (folder / "config.json").is_file():
        names = LABELS[auto]
        torch.manual_seed(0)
        cfg = AutoConfig.from_pretrained(source, num_labels=len(names), id2label=dict(enumerate(names)),
                                         label2id={n: i for i, n in enumerate(names)})
        getattr(transformers, auto).from_pretrained(source, config=cfg).save_pretrained(folder)
        AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return str(folder)


def texts_of(n: int, tokens: int, tokenizer) -> list[str]:
    from bertscope.corpora.brown_tasks import brown_split_texts

    sentences = brown_split_texts(max(n * 40, 400), held_out=True)
    if not tokens:
        return sentences[:n]
    words = " ".join(sentences).split()
    out, start = [], 0
    for _ in range(n):  # consecutive Brown text cut to about ``tokens`` pieces
        end = start + tokens
        while len(tokenizer(" ".join(words[start:end]))["input_ids"]) > tokens:
            end -= 8
        out.append(" ".join(words[start:end]))
        start = end
    return out


def main() -> None:
    from transformers import pipeline

    from bertscope import load_model
    from bertscope.tasks.predict import predict

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--texts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=0, help="0: Brown sentences; N: texts of about N tokens")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    base = random_model_dir(args.model.removeprefix("random:"), "none") if args.model.startswith("random:") \
        else args.model
    for auto, kind, options in (("AutoModelForSequenceClassification", "text-classification", {"top_k": None}),
                                ("AutoModelForTokenClassification", "token-classification",
                                 {"aggregation_strategy": "simple"})):
        folder = checkpoint(base, auto)
        lm = load_model(folder, device=args.device, dtype=args.dtype)
        texts = texts_of(args.texts, args.tokens, lm.tokenizer)
        reference = pipeline(kind, model=lm.model, tokenizer=lm.tokenizer, device=lm.device, **options)
        batch = min(32, len(texts))
        times = interleaved({"pipeline": lambda: reference(texts, batch_size=batch),
                             "ours": lambda: predict(lm, texts, batch_size=batch)}, args.repeats, lm.device)
        p, o = statistics.median(times["pipeline"]), statistics.median(times["ours"])
        lengths = [len(lm.tokenizer(t)["input_ids"]) for t in texts]
        print(describe(lm))
        print(f"{kind}: {len(texts)} texts of {min(lengths)}-{max(lengths)} tokens, batches of {batch}: "
              f"pipeline {p * 1e3:.1f} ms, predict {o * 1e3:.1f} ms, ratio {o / p:.3f} (goal <= 1.1)")


if __name__ == "__main__":
    main()
