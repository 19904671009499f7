"""Texts with gold labels, as a classifier trains and is scored on them, and the seeded stratified
split a corpus without its own held-out part gets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertscope.corpora.records import json_records
from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class LabelledTexts:
    """Records of one classification corpus (or one side of its split)."""

    name: str
    texts: list[str]
    labels: list[str]
    pairs: list[str] | None = None  # second segments (NLI-style pairs), or None
    ids: list[str] | None = None  # where each record came from ("tech/001", "row 17")

    def __post_init__(self):
        if len(self.texts) != len(self.labels) or (self.pairs is not None and len(self.pairs) != len(self.texts)):
            raise BertScopeError(f"{self.name}: texts, labels (and pairs) differ in number.")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def classes(self) -> list[str]:
        """The labels in sorted order (a model's ``id2label``)."""
        return sorted(set(self.labels))

    def counts(self) -> dict[str, int]:
        c = Counter(self.labels)
        return {label: c[label] for label in self.classes}

    def take(self, rows: Sequence[int], name: str | None = None) -> LabelledTexts:
        rows = list(rows)
        return LabelledTexts(name or self.name, [self.texts[i] for i in rows], [self.labels[i] for i in rows],
                             None if self.pairs is None else [self.pairs[i] for i in rows],
                             None if self.ids is None else [self.ids[i] for i in rows])


def stratified_split(labels: Sequence[str], held_out: float = 0.1, seed: int = 0) -> tuple[list[int], list[int]]:
    """(train rows, held-out rows): each class's rows shuffled with the seed and ``held_out`` of
    them (rounded, at least one where a class has two or more) held out; both sides in corpus order."""
    if not 0 < held_out < 1:
        raise BertScopeError("The held-out share must be between 0 and 1.")
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(label, []).append(i)
    train, held = [], []
    for label in sorted(by_class):
        rows = np.array(by_class[label])
        rng.shuffle(rows)
        n = max(1, round(len(rows) * held_out)) if len(rows) > 1 else 0
        held += rows[:n].tolist()
        train += rows[n:].tolist()
    return sorted(train), sorted(held)


def split(data: LabelledTexts, held_out: float = 0.1, seed: int = 0) -> tuple[LabelledTexts, LabelledTexts]:
    train, held = stratified_split(data.labels, held_out, seed)
    return data.take(train, f"{data.name} (train)"), data.take(held, f"{data.name} (held out)")


read_jsonl = json_records  # the one JSON Lines reader (``records``)
