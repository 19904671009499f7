"""Probe tasks: labelled words (token level) or labelled sentences, shipped or brought.

Formats a user can bring (malformed input -> one error naming the line):
- CoNLL-U: the UPOS column (4th) of every word line; comments, multiword ranges (``3-4``) and
  empty nodes (``5.1``) are skipped;
- CSV with ``sentence,label`` (sentence level) or ``tokens,tags`` (token level, both
  space-separated and of equal length);
- JSONL, one object per line: ``{"sentence": ..., "label": ...}`` or
  ``{"tokens": [...], "tags": [...]}``.
A tag ``_`` marks a word without a label (it is run through the model but not probed).

The suites shipped in these formats are catalogued in ``corpora.suites``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bertscope.corpora.records import csv_records, numbered_json_records
from bertscope.errors import BertScopeError

UNLABELLED = "_"
MAX_SENTENCES = 50_000
Level = Literal["token", "sentence"]


@dataclass(frozen=True)
class ProbeTask:
    """Sentences with a label per sentence, or a tag per word."""

    name: str
    level: Level
    words: tuple[tuple[str, ...], ...]  # [sentence][word]; a sentence-level task keeps one "word": the text
    labels: tuple[tuple[str, ...], ...]  # [sentence][word] tags, or [sentence][0] the sentence's label
    # Optional, for corpora with their own tokenisation (Brown): the text the model reads per
    # sentence and each word's [start, end) characters in it (default: words joined by spaces)
    sentences: tuple[str, ...] | None = None
    spans: tuple[tuple[tuple[int, int], ...], ...] | None = None
    # [sentence] -> split group (e.g. its document): no group is on both sides of a split
    # (default: each sentence its own group)
    groups: tuple[int, ...] | None = None

    @property
    def texts(self) -> list[str]:
        if self.sentences is not None:
            return list(self.sentences)
        return [" ".join(w) for w in self.words]

    def word_spans(self, sentence: int) -> list[tuple[int, int]]:
        """[start, end) of each word of ``sentence`` in ``texts[sentence]``."""
        if self.spans is not None:
            return list(self.spans[sentence])
        spans, at = [], 0
        for w in self.words[sentence]:
            spans.append((at, at + len(w)))
            at += len(w) + 1
        return spans

    @property
    def n_examples(self) -> int:
        return sum(1 for row in self.labels for tag in row if tag != UNLABELLED)

    @property
    def classes(self) -> list[str]:
        return sorted({tag for row in self.labels for tag in row if tag != UNLABELLED})

    def digest(self) -> str:
        parts = [self.level, self.words, self.labels]
        if self.sentences is not None or self.spans is not None or self.groups is not None:
            parts += [self.sentences, self.spans, self.groups]  # absent: the digest of earlier versions
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def finish_task(name: str, level: Level, words: list, labels: list) -> ProbeTask:
    if not words:
        raise BertScopeError("The file has no labelled sentences.")
    if len(words) > MAX_SENTENCES:
        raise BertScopeError(f"{len(words):,} sentences; the limit is {MAX_SENTENCES:,}.")
    task = ProbeTask(name, level, tuple(map(tuple, words)), tuple(map(tuple, labels)))
    if len(task.classes) < 2:
        raise BertScopeError("A probe needs at least two different labels.")
    return task


def read_conllu(text: str, name: str = "custom") -> ProbeTask:
    words, tags, sentence, sentence_tags = [], [], [], []
    for n, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            if sentence:
                words.append(sentence)
                tags.append(sentence_tags)
            sentence, sentence_tags = [], []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise BertScopeError(f"Line {n}: a CoNLL-U word line has 10 tab-separated fields, this one {len(fields)}.")
        if "-" in fields[0] or "." in fields[0]:
            continue  # multiword range or empty node: the words themselves follow
        if not fields[0].isdigit() or not fields[1] or not fields[3]:
            raise BertScopeError(f"Line {n}: expected a word id, a form and a UPOS tag.")
        sentence.append(fields[1])
        sentence_tags.append(fields[3])
    if sentence:
        words.append(sentence)
        tags.append(sentence_tags)
    return finish_task(name, "token", words, tags)


def _row(n: int, record: dict, name: str) -> tuple[Level, list[str], list[str]]:
    if "sentence" in record and "label" in record:
        sentence, label = str(record["sentence"] or "").strip(), str(record["label"] or "").strip()
        if not sentence or not label:
            raise BertScopeError(f"Line {n}: the sentence and the label must not be empty.")
        return "sentence", [sentence], [label]
    if "tokens" in record and "tags" in record:
        tokens, tags = record["tokens"], record["tags"]
        if isinstance(tokens, str):
            tokens, tags = tokens.split(), str(tags or "").split()
        if not isinstance(tokens, list) or not isinstance(tags, list) or not tokens:
            raise BertScopeError(f"Line {n}: tokens and tags must be lists (or space-separated text).")
        if len(tokens) != len(tags):
            raise BertScopeError(f"Line {n}: {len(tokens)} tokens but {len(tags)} tags.")
        return "token", [str(t) for t in tokens], [str(t) for t in tags]
    raise BertScopeError(f"Line {n}: expected sentence,label or tokens,tags.")


def _collect(rows: list[tuple[int, dict]], name: str) -> ProbeTask:
    levels, words, labels = set(), [], []
    for n, record in rows:
        level, w, lab = _row(n, record, name)
        levels.add(level)
        if len(levels) > 1:
            raise BertScopeError(f"Line {n}: mixes sentence labels and token tags in one file.")
        words.append(w)
        labels.append(lab)
    return finish_task(name, levels.pop() if levels else "sentence", words, labels)


def read_csv_task(text: str, name: str = "custom") -> ProbeTask:
    header, records = csv_records(text, name)
    fields = [f.strip().lower() for f in header]
    if not ({"sentence", "label"} <= set(fields) or {"tokens", "tags"} <= set(fields)):
        raise BertScopeError("Line 1: the CSV header needs sentence,label or tokens,tags.")
    rows = []
    for n, row in records:
        if None in row:
            raise BertScopeError(f"Line {n} has more fields than the header.")
        rows.append((n, {k.strip().lower(): v for k, v in row.items()}))
    return _collect(rows, name)


def read_jsonl_task(text: str, name: str = "custom") -> ProbeTask:
    return _collect(numbered_json_records(text, name), name)


def read_task(text: str, filename: str) -> ProbeTask:
    """By extension: .conllu, .csv, .jsonl / .json.

    Args:
        text: the file's text.
        filename: its name (the extension says the format).

    Returns:
        A ``ProbeTask`` (one line for a file that is not one).
    """
    suffix = Path(filename).suffix.lower()
    name = Path(filename).stem or "custom"
    if suffix == ".conllu":
        return read_conllu(text, name)
    if suffix == ".csv":
        return read_csv_task(text, name)
    if suffix in (".jsonl", ".json"):
        return read_jsonl_task(text, name)
    raise BertScopeError(f"{filename}: use a .conllu, .csv or .jsonl file.")
