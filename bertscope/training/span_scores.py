"""Exact match and F1 of predicted answer spans, as SQuAD's official evaluation script (v2.0,
which is v1.1's plus unanswerable questions) computes them: answers compared after lower-casing
and removing punctuation, the articles a/an/the and extra spaces; F1 over the bags of words; the
best over a question's gold answers; an unanswerable question's gold answer is the empty string,
so only an empty prediction scores there."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", s).split())


def exact(gold: str, predicted: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(predicted))


def f1(gold: str, predicted: str) -> float:
    gold_words, predicted_words = normalize_answer(gold).split(), normalize_answer(predicted).split()
    if not gold_words or not predicted_words:  # an unanswerable question, or an empty prediction
        return float(gold_words == predicted_words)
    same = sum((Counter(gold_words) & Counter(predicted_words)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted_words), same / len(gold_words)
    return 2 * precision * recall / (precision + recall)


def question_scores(golds: Sequence[str], predicted: str) -> tuple[int, float]:
    """(exact match, F1) of one prediction against a question's gold answers (none: unanswerable)."""
    golds = [g for g in golds if normalize_answer(g)] or [""]
    return max(exact(g, predicted) for g in golds), max(f1(g, predicted) for g in golds)
