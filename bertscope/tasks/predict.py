"""One entry point for every task head: texts (or a file of records) -> the decisions as JSON with
the pipelines' own keys, and, when the records carry gold labels, how often the model is right.

Records: a CSV (header ``text`` and optionally ``pair``/``text_pair`` and ``label``; for question
answering ``question`` and ``context``) or JSONL (one object a line with those keys); every label
of a labelled file must be one of the model's.
Classification scores: accuracy, macro-F1 (scikit-learn's ``f1_score(average="macro")``) and the
confusion matrix, with the misclassified records listed (LIT's per-example inspection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bertscope.core.models import LoadedModel
from bertscope.core.task_head import MAX_TEXTS, SEQUENCE, SPANS, TOKEN
from bertscope.corpora.labelled import read_jsonl
from bertscope.corpora.records import csv_records
from bertscope.errors import BertScopeError
from bertscope.tasks.classify import ClassScores, classify
from bertscope.tasks.spans import answer
from bertscope.tasks.tag import tag

MAX_MISCLASSIFIED = 200


@dataclass(frozen=True)
class Records:
    """Inputs read from a file: texts, their second segments (or None) and gold labels (or None)."""

    texts: list[str]  # the texts (question answering: the contexts)
    pairs: list[str | None] | None
    gold: list[str] | None
    questions: list[str] | None = None


def read_records(content: str, name: str) -> Records:
    """A CSV or JSONL file's records (see the module docstring), or one line saying what is wrong."""
    rows: list[dict] = []
    if name.lower().endswith((".jsonl", ".json")):
        rows = read_jsonl(content, name)
    else:
        fields, records = csv_records(content, name)
        if not {"text", "context"} & set(fields):
            raise BertScopeError(f"{name}: the first line must name a text column (text[,pair][,label], or "
                                 "question,context).")
        rows = [row for _, row in records]
    if not rows:
        raise BertScopeError(f"{name} has no records.")
    if len(rows) > MAX_TEXTS:
        raise BertScopeError(f"{name} has {len(rows):,} records; at most {MAX_TEXTS:,} at once.")
    texts, pairs, gold, questions = [], [], [], []
    for number, row in enumerate(rows, 1):
        text = row.get("text", row.get("context"))
        if not isinstance(text, str) or not text.strip():
            raise BertScopeError(f"{name}, record {number}: no text.")
        texts.append(text)
        question = row.get("question")
        questions.append(None if question in (None, "") else str(question))
        pair = row.get("pair", row.get("text_pair"))
        pairs.append(None if pair in (None, "") else str(pair))
        label = row.get("label")
        gold.append(None if label in (None, "") else str(label))
    has_pairs, has_gold = any(p is not None for p in pairs), any(g is not None for g in gold)
    if has_pairs and not all(p is not None for p in pairs):
        raise BertScopeError(f"{name}: give a pair for every record, or for none.")
    if has_gold and not all(g is not None for g in gold):
        raise BertScopeError(f"{name}: give a label for every record, or for none.")
    has_questions = any(q is not None for q in questions)
    if has_questions and not all(q is not None for q in questions):
        raise BertScopeError(f"{name}: give a question for every record, or for none.")
    return Records(texts, pairs if has_pairs else None, gold if has_gold else None,
                   questions if has_questions else None)


def evaluation(results: Sequence[ClassScores], gold: Sequence[str], labels: Sequence[str]) -> dict:
    """Accuracy, macro-F1, the confusion matrix ([gold, predicted] in label order) and the
    misclassified records of a labelled file."""
    from sklearn.metrics import confusion_matrix, f1_score

    unknown = sorted(set(gold) - set(labels))
    if unknown:
        raise BertScopeError(f"The file's labels {', '.join(unknown[:10])} are not the model's: it has "
                             f"{', '.join(labels)}.")
    predicted = [r.predicted for r in results]
    matrix = confusion_matrix(gold, predicted, labels=list(labels))
    wrong = [{"index": i, "text": r.text, "pair": r.pair, "gold": g, "predicted": r.predicted,
              "score": r.ranked[0][1]} for i, (r, g) in enumerate(zip(results, gold)) if r.predicted != g]
    return {"records": len(gold), "accuracy": float(np.mean([p == g for p, g in zip(predicted, gold)])),
            "macro_f1": float(f1_score(gold, predicted, labels=list(labels), average="macro", zero_division=0)),
            "labels": list(labels), "confusion": matrix.tolist(), "misclassified": wrong[:MAX_MISCLASSIFIED],
            "misclassified_count": len(wrong)}


def predict(lm: LoadedModel, texts: Sequence[str], pairs: Sequence[str | None] | None = None,
            top_k: int | None = None, gold: Sequence[str] | None = None, batch_size: int = 32,
            progress: Callable[[int, int], None] | None = None, questions: Sequence[str] | None = None) -> dict:
    """The model's decisions on ``texts`` as JSON (``predict``'s output), with an evaluation when
    ``gold`` labels are given (classification). Question answering: ``texts`` are the contexts of
    ``questions``; ``top_k`` answers (default 1).

    Args:
        lm: a task model (a classifier, a tagger, a question answerer) or a masked LM.
        texts: the inputs (question answering: the contexts).
        pairs: second segments, for sentence pairs.
        top_k: labels (or answers) kept a text.
        gold: labels to evaluate against (classification).
        batch_size: texts a batch.
        progress: called with (done, total).
        questions: question answering: the questions, one a context.

    Returns:
        The decisions as JSON (a dict), with the evaluation when ``gold`` is given.
    """
    if lm.task is None:
        raise BertScopeError(f"{lm.name} has no task head (not a fine-tuned checkpoint): predict reads a "
                             "classifier, a tagger or a question-answering model.")
    if top_k is not None and top_k < 1:
        raise BertScopeError("--top-k takes a number from 1.")
    kind = lm.task.kind
    if questions is not None and kind != SPANS:
        raise BertScopeError(f"A question goes to a question-answering model; {lm.name} is a "
                             f"{kind.replace('-', ' ')} model.")
    if kind == SEQUENCE:
        results = classify(lm, texts, pairs, batch_size, progress)
        out = {"task": kind, "labels": list(lm.task.labels), "scoring": lm.task.scoring,
               "items": [r.to_json(top_k) for r in results]}
        if gold is not None:
            out["evaluation"] = evaluation(results, gold, lm.task.labels)
        return out
    if kind == TOKEN:
        if pairs is not None:
            raise BertScopeError("A tagger labels one text at a time: leave out the second segment.")
        if gold is not None:
            raise BertScopeError("Labelled files are scored for classifiers; a tagger's file gives texts only.")
        return {"task": kind, "labels": list(lm.task.labels),
                "items": [t.to_json() for t in tag(lm, texts, batch_size, progress)]}
    if kind == SPANS:
        if questions is None:
            raise BertScopeError("A question-answering model needs a question for each context (--question).")
        if pairs is not None or gold is not None:
            raise BertScopeError("A question-answering model takes a question and a context, no pair or label.")
        results = answer(lm, questions, texts, top_k or 1, batch_size=batch_size, progress=progress)
        return {"task": kind, "items": [r.to_json() for r in results]}
    raise BertScopeError(f"Unknown task {kind!r}.")
