"""Sentences with a target word and its sense: the shipped presets (``bertscope/data/senses.csv``:
bank, crane, cell, …) and a user's CSV with a ``sentence`` column and an optional ``label``."""

from __future__ import annotations

import csv

from bertscope.corpora import DATA_DIR
from bertscope.corpora.records import csv_records
from bertscope.errors import BertScopeError


def sense_presets() -> dict[str, list[tuple[str, str]]]:
    """word -> [(sentence, sense label)] from bertscope/data/senses.csv."""
    presets: dict[str, list[tuple[str, str]]] = {}
    with open(DATA_DIR / "senses.csv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            presets.setdefault(row["word"], []).append((row["sentence"], row["label"]))
    return presets


def read_labelled_csv(text: str) -> list[tuple[str, str | None]]:
    """(sentence, label) rows from CSV text with a ``sentence`` column and optional ``label``."""
    fields, records = csv_records(text, "The CSV")
    if "sentence" not in [f.strip().lower() for f in fields]:
        raise BertScopeError("The CSV needs a header with a 'sentence' column (and optionally 'label').")
    names = {f.strip().lower(): f for f in fields}
    rows = []
    for line, row in records:
        sentence = (row.get(names["sentence"]) or "").strip()
        if None in row:
            raise BertScopeError(f"Line {line} of the CSV has more fields than its header.")
        label = (row.get(names["label"]) or "").strip() or None if "label" in names else None
        rows.append((sentence, label))
    if not rows:
        raise BertScopeError("The CSV has a header but no rows.")
    return rows
