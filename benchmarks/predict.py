"""What ``predict`` costs beside transformers' own pipelines on the same fine-tuned model.

    python benchmarks/predict.py [--model bundled|random:bert-base-uncased] [--device cuda]
                                 [--texts 32] [--tokens 0 (Brown sentences as they are) | 512]

A task head (seeded) is put on the model's encoder and saved as a fine-tuned checkpoint is; then
the same texts go through ``bertscope.tasks.predict`` and through ``pipeline("text-classification",
top_k=None)`` / ``pipeline("token-classification", aggregation_strategy="simple")`` with the same
batch size, interleaved, medians. ``--importance N``: head importance on the classifier's own
loss over N Brown sentences (labelled with the model's own decisions) against a plain forward +
backward (parameter gradients) of the same batches. ``--decisions``: each view of a decision timed on
the classifier beside the same view of the masked-LM head on the same encoder (ablation, IG with
16 steps, patching every head, one faithfulness item at its 64-token cap): the ratio says whether
a task model's views hold the pretraining head's cost. Figures only.
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
    parser.add_argument("--importance", type=int, default=0, help="N: also head importance on the task loss")
    parser.add_argument("--decisions", action="store_true", help="each decision view: classifier against masked LM")
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
        if args.importance and kind == "text-classification":
            task_importance(lm, args.importance, max(1, args.repeats // 2))
        if args.decisions and kind == "text-classification":
            mlm_source = random_model_dir(args.model.removeprefix("random:"), "pretraining") \
                if args.model.startswith("random:") else "bundled-mlm" if base == "bundled" else base
            decisions(lm, load_model(mlm_source, device=args.device, dtype=args.dtype), texts[0],
                      max(1, args.repeats // 3))


def decisions(cls, mlm, text: str, repeats: int) -> None:
    """Each view of a decision on the classifier and on the masked-LM head, interleaved, medians."""
    from bertscope.attribution.class_items import class_items
    from bertscope.attribution.faithfulness import faithfulness
    from bertscope.attribution.items import MAX_ITEM_TOKENS, text_items
    from bertscope.attribution.methods import attribute
    from bertscope.attribution.targets import Target
    from bertscope.interventions.ablation import ablate_heads
    from bertscope.interventions.patching import patch
    from bertscope.interventions.task_importance import classes_with_heads_removed

    words = text.split()
    swap = next(i for i, w in enumerate(words) if w.lower() == "the")
    corrupt = " ".join(words[:swap] + ["a"] + words[swap + 1:])
    masked = lambda t: " ".join(t.split()[:-2] + [mlm.tokenizer.mask_token] + t.split()[-1:])  # noqa: E731
    mask_at = mlm.tokenizer(masked(text))["input_ids"].index(mlm.tokenizer.mask_token_id)
    heads = [(0, h) for h in range(cls.num_heads)]
    short = " ".join(words[:40])
    while len(cls.tokenizer(short)["input_ids"]) > MAX_ITEM_TOKENS:
        short = " ".join(short.split()[:-4])
    labels = cls.task.labels
    views = {
        "ablation (layer 0's heads)": (lambda: classes_with_heads_removed(cls, text, None, heads),
                                       lambda: ablate_heads(mlm, masked(text), heads)),
        "integrated gradients, 16 steps": (
            lambda: attribute(cls, text, method="ig", target=Target("class"), steps=16),
            lambda: attribute(mlm, masked(text), method="ig", target=Target("token", mask_at), steps=16)),
        "patching every head": (lambda: patch(cls, text, corrupt, (labels[0], labels[-1]), "heads"),
                                lambda: patch(mlm, masked(text), masked(corrupt), ("the", "a"), "heads")),
        f"faithfulness, one item of <= {MAX_ITEM_TOKENS} tokens (rollout, ig, random)": (
            lambda: faithfulness(cls, class_items(cls, [short])[0], ["rollout", "ig", "random"], steps=16),
            lambda: faithfulness(mlm, text_items(mlm, [masked(short)])[0], ["rollout", "ig", "random"], steps=16)),
    }
    n = len(cls.tokenizer(text)["input_ids"])
    print(f"each view of a decision at {n} tokens: the classifier beside the masked-LM head on the same encoder")
    for name, (ours, reference) in views.items():
        times = interleaved({"mlm": reference, "cls": ours}, repeats, cls.device)
        m, c = statistics.median(times["mlm"]), statistics.median(times["cls"])
        print(f"  {name}: masked LM {m:.2f} s, classifier {c:.2f} s, ratio {c / m:.2f}")


def task_importance(lm, sentences: int, repeats: int) -> None:
    import torch.nn.functional as F

    from bertscope.corpora.brown_tasks import brown_split_texts
    from bertscope.interventions.task_importance import labelled_batches, task_head_importance
    from bertscope.tasks.classify import classify

    texts = brown_split_texts(sentences, held_out=False)
    gold = [r.predicted for r in classify(lm, texts)]
    batches = labelled_batches(lm, texts, gold, batch_size=16)

    def plain():
        lm.model.zero_grad(set_to_none=True)
        with torch.enable_grad(), lm.attention_kernel(False):
            for _, feed, labels in batches:
                F.cross_entropy(lm.model(**feed, return_dict=True).logits.float(), labels).backward()
        lm.model.zero_grad(set_to_none=True)

    for p in lm.model.parameters():
        p.requires_grad_(True)
    times = interleaved({"plain": plain, "ours": lambda: task_head_importance(lm, texts, gold, batch_size=16)},
                        repeats, lm.device)
    for p in lm.model.parameters():
        p.requires_grad_(False)
    p, o = statistics.median(times["plain"]), statistics.median(times["ours"])
    tokens = sum(int(f["attention_mask"].sum()) for _, f, _ in batches)
    print(f"head importance on the task loss: {sentences} Brown sentences, {tokens:,} tokens, {len(batches)} "
          f"batches: plain forward + backward {p:.2f} s, ours {o:.2f} s, ratio {o / p:.2f}x (goal <= 2.5x)")


if __name__ == "__main__":
    main()
