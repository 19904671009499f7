"""Questions with answer spans in a context, for the second stage's span task (BERT, §4.2: SQuAD).

Two file forms:
- SQuAD's own JSON (v1.1 and v2.0): ``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id",
  "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``;
- JSONL, a question a line, as Hugging Face ``datasets`` writes SQuAD: ``{"id", "question",
  "context", "answers": {"text": […], "answer_start": […]}}`` (or ``"answers": [{"text",
  "answer_start"}]``).
Every answer must be found in its context at its ``answer_start``; a question with no answer
(SQuAD 2.0's unanswerable ones) is allowed, and then the model may answer "no answer" ([CLS]).
Training uses each question's first answer (as Devlin et al. and Hugging Face's ``run_qa.py``);
scoring takes the best over all of them (SQuAD's official script). The held-out side is a seeded
share of the *contexts*, so no paragraph is on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertscope.corpora.labelled import read_jsonl
from bertscope.errors import BertScopeError

SPAN_LABELS = ["start", "end"]  # the question-answering head's two outputs (its ``id2label``)
MAX_QUESTIONS = 200_000
MAX_CONTEXT_CHARS = 100_000


@dataclass(frozen=True)
class Questions:
    """Questions, each with its context and its gold answers ((text, first character) pairs; none:
    unanswerable)."""

    name: str
    questions: list[str]
    contexts: list[str]
    answers: list[list[tuple[str, int]]]
    ids: list[str]

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def classes(self) -> list[str]:
        return list(SPAN_LABELS)

    @property
    def unanswerable(self) -> int:
        return sum(not a for a in self.answers)

    def take(self, rows: Sequence[int], name: str | None = None) -> Questions:
        return Questions(name or self.name, [self.questions[i] for i in rows], [self.contexts[i] for i in rows],
                         [self.answers[i] for i in rows], [self.ids[i] for i in rows])


def _answers(raw, where: str) -> list[tuple[str, int]]:
    if isinstance(raw, dict):  # datasets' columnar form
        texts, starts = raw.get("text"), raw.get("answer_start")
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise BertScopeError(f"{where}: \"answers\" needs \"text\" and \"answer_start\" lists of one length.")
        raw = [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]
    if not isinstance(raw, list):
        raise BertScopeError(f"{where}: \"answers\" must be a list of {{\"text\", \"answer_start\"}}.")
    found = []
    for a in raw:
        start = a.get("answer_start") if isinstance(a, dict) else None
        if not isinstance(a.get("text") if isinstance(a, dict) else None, str) or type(start) is not int or start < 0:
            raise BertScopeError(f"{where}: each answer needs a \"text\" and an \"answer_start\" (a character "
                                 "number from 0).")
        found.append((a["text"], a["answer_start"]))
    return found


def _question(record: dict, context, where: str) -> tuple[str, str, list[tuple[str, int]]]:
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BertScopeError(f"{where}: no question.")
    if not isinstance(context, str) or not context.strip():
        raise BertScopeError(f"{where}: no context.")
    if len(context) > MAX_CONTEXT_CHARS:
        raise BertScopeError(f"{where}: the context has {len(context):,} characters; at most {MAX_CONTEXT_CHARS:,}.")
    answers = [] if record.get("is_impossible") else _answers(record.get("answers", []), where)
    for text, start in answers:
        if not text.strip():
            raise BertScopeError(f"{where}: an answer is empty.")
        if context[start:start + len(text)] != text:
            raise BertScopeError(f"{where}: the answer {text[:40]!r} is not at character {start:,} of its context.")
    return question.strip(), context, answers


def _json_lines(text: str) -> bool:
    """Whether a text is JSON Lines (its first line a whole object, and more than one line)."""
    first, _, rest = text.strip().partition("\n")
    if not rest.strip():
        return False
    try:
        return isinstance(json.loads(first), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def read_squad_file(text: str, name: str) -> Questions:
    """Questions from SQuAD JSON or JSONL (module docstring); one line naming the first bad record."""
    questions, contexts, answers, ids = [], [], [], []

    def add(record: dict, context, where: str) -> None:
        q, c, a = _question(record, context, where)
        questions.append(q)
        contexts.append(c)
        answers.append(a)
        ids.append(str(record.get("id", f"q{len(ids) + 1}")))
        if len(questions) > MAX_QUESTIONS:
            raise BertScopeError(f"{name} has more than {MAX_QUESTIONS:,} questions.")

    if name.lower().endswith(".jsonl") or _json_lines(text):  # datasets' to_json writes JSON Lines, named .json
        for n, record in enumerate(read_jsonl(text, name), 1):
            add(record, record.get("context"), f"{name}, record {n}")
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise BertScopeError(f"{name} is not JSON (line {err.lineno}: {err.msg}).") from None
        except RecursionError:
            raise BertScopeError(f"{name}: JSON nested too deeply to read.") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise BertScopeError(f"{name}: SQuAD JSON has a \"data\" list of articles (or give JSONL records).")
        for a, article in enumerate(doc["data"], 1):
            paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
            if not isinstance(paragraphs, list):
                raise BertScopeError(f"{name}, article {a}: no \"paragraphs\" list.")
            for p, paragraph in enumerate(paragraphs, 1):
                qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
                if not isinstance(qas, list):
                    raise BertScopeError(f"{name}, article {a}, paragraph {p}: no \"qas\" list.")
                for q, record in enumerate(qas, 1):
                    if not isinstance(record, dict):
                        raise BertScopeError(f"{name}, article {a}, paragraph {p}, question {q}: not an object.")
                    add(record, paragraph.get("context"), f"{name}, article {a}, paragraph {p}, question {q}")
    if not questions:
        raise BertScopeError(f"{name} has no questions.")
    return Questions(Path(name).name, questions, contexts, answers, ids)


def split_by_context(data: Questions, held_out: float, seed: int) -> tuple[Questions, Questions]:
    """A seeded ``held_out`` share of the contexts (at least one) held out with all their questions;
    both sides in file order."""
    contexts = list(dict.fromkeys(data.contexts))
    if len(contexts) < 2:
        raise BertScopeError(f"{data.name} has one context: holding some out needs two or more.")
    order = np.random.default_rng(seed).permutation(len(contexts))
    held = {contexts[i] for i in order[:max(1, round(held_out * len(contexts)))]}
    train = [i for i, c in enumerate(data.contexts) if c not in held]
    kept = [i for i, c in enumerate(data.contexts) if c in held]
    return data.take(train, f"{data.name} (train)"), data.take(kept, f"{data.name} (held out)")
