"""What the second stage trains on: labelled texts (classification, text pairs) or tagged sentences
(tagging), from a shipped corpus or a user's file, split into train / held-out (/ test) sides.

- ``sentiment`` (the tweets), ``topics`` (BBC News): classification, a stratified 10% held out by
  seed (the corpora have no split of their own);
- ``ewt-upos``: UD English-EWT's UPOS, its own train / dev (held out every epoch) / test;
- ``squad``: SQuAD v1.1's questions with answer spans, its own train / dev (held out);
- ``brown-pos``: Brown's 12 universal tags, documents split by genre (``brown.split_documents``);
- a file: ``.csv`` / ``.tsv`` / ``.jsonl`` records (text[, text_pair], label; other column names
  with ``--text-column`` …) for classification; ``.conllu`` (UPOS) or ``.jsonl`` records
  ``{"tokens": […], "tags": […]}`` for tagging; a stratified share held out by seed; SQuAD's
  ``.json`` or ``.jsonl`` questions for answer spans (``corpora.questions``), a share of the
  contexts held out by seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertscope.corpora.labelled import LabelledTexts, read_jsonl, split, stratified_split
from bertscope.corpora.questions import Questions, read_squad_file, split_by_context
from bertscope.corpora.records import csv_records
from bertscope.errors import BertScopeError

CLASSIFY, PAIRS, TAG, SPAN = "classify", "pairs", "tag", "span"
TASKS = (CLASSIFY, PAIRS, TAG, SPAN)
SHIPPED = {"sentiment": CLASSIFY, "topics": CLASSIFY, "ewt-upos": TAG, "brown-pos": TAG, "squad": SPAN}
MAX_RECORDS = 1_000_000


@dataclass(frozen=True)
class Tagged:
    """Sentences of words, each word with its tag."""

    name: str
    words: list[list[str]]
    tags: list[list[str]]

    def __post_init__(self):
        for n, (w, t) in enumerate(zip(self.words, self.tags), 1):
            if len(w) != len(t):
                raise BertScopeError(f"{self.name}, sentence {n}: {len(w)} tokens but {len(t)} tags.")
            if not w:
                raise BertScopeError(f"{self.name}, sentence {n}: no tokens.")

    def __len__(self) -> int:
        return len(self.words)

    @property
    def classes(self) -> list[str]:
        return sorted({t for tags in self.tags for t in tags})

    def take(self, rows: Sequence[int], name: str | None = None) -> Tagged:
        return Tagged(name or self.name, [self.words[i] for i in rows], [self.tags[i] for i in rows])


@dataclass(frozen=True)
class TaskData:
    """One task's sides and its labels (the model's ``id2label``, sorted)."""

    task: str  # classify, pairs, tag or span
    source: str  # "sentiment", "ewt-upos", a file's name
    train: LabelledTexts | Tagged | Questions
    held_out: LabelledTexts | Tagged | Questions
    test: LabelledTexts | Tagged | Questions | None = None
    how_split: str = ""  # one phrase: "stratified 10% held out (seed 0)", "EWT's own train/dev/test"

    @property
    def labels(self) -> list[str]:
        return self.train.classes

    def check(self) -> None:
        labels = set(self.labels)
        if len(labels) < 2:
            raise BertScopeError(f"{self.source} has one class ({', '.join(labels) or 'none'}): a classifier needs "
                                 "two or more.")
        for side in (self.held_out, self.test):
            if side is None:
                continue
            unseen = sorted(set(side.classes) - labels)
            if unseen:
                raise BertScopeError(f"{side.name} has labels the training side never shows: "
                                     f"{', '.join(unseen[:10])}.")


def decode(raw: bytes, name: str) -> str:
    """UTF-8 text (a byte-order mark dropped), or one line saying the file is in another encoding."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise BertScopeError(f"{name} is not UTF-8 (byte {err.start:,} is 0x{raw[err.start]:02x}): save it as UTF-8 "
                             "and try again.") from None


def read_records_file(text: str, name: str, text_column: str = "text", label_column: str = "label",
                      pair_column: str | None = None) -> LabelledTexts:
    """Classification records from CSV, TSV or JSONL."""
    if name.lower().endswith((".jsonl", ".json")):
        rows = read_jsonl(text, name)
        columns = set().union(*rows) if rows else set()
    else:
        fields, records = csv_records(text, name, "\t" if name.lower().endswith(".tsv") else ",")
        rows, columns = [row for _, row in records], set(fields)
    if not rows:
        raise BertScopeError(f"{name} has no records.")
    if len(rows) > MAX_RECORDS:
        raise BertScopeError(f"{name} has {len(rows):,} records; at most {MAX_RECORDS:,}.")
    pair_column = pair_column or ("text_pair" if "text_pair" in columns else None)
    for column, what in ((text_column, "--text-column"), (label_column, "--label-column"), (pair_column, None)):
        if column is not None and column not in columns:
            raise BertScopeError(f"{name} has no column {column!r} ({what or '--pair-column'}); its columns: "
                                 f"{', '.join(sorted(columns))}.")
    texts, labels, pairs = [], [], []
    for n, row in enumerate(rows, 1):
        text, label = row.get(text_column), row.get(label_column)
        if not isinstance(text, str) or not text.strip():
            raise BertScopeError(f"{name}, record {n}: no text.")
        if label is None or str(label).strip() == "":
            raise BertScopeError(f"{name}, record {n}: no label.")
        texts.append(text.strip())
        labels.append(str(label).strip())
        if pair_column:
            pair = row.get(pair_column)
            if not isinstance(pair, str) or not pair.strip():
                raise BertScopeError(f"{name}, record {n}: no {pair_column}.")
            pairs.append(pair.strip())
    return LabelledTexts(Path(name).name, texts, labels, pairs or None, [f"record {i}" for i in range(1, len(rows) + 1)])


def read_tagged_file(text: str, name: str) -> Tagged:
    """Tagged sentences from CoNLL-U (UPOS) or JSONL ``{"tokens": […], "tags": […]}``."""
    if name.lower().endswith(".conllu"):
        from bertscope.corpora.ewt import parse_conllu

        sentences = parse_conllu(text, Path(name).name)
        if not sentences:
            raise BertScopeError(f"{name} has no sentences.")
        return Tagged(Path(name).name, [s.tokens for s in sentences], [s.upos for s in sentences])
    words, tags = [], []
    for n, row in enumerate(read_jsonl(text, name), 1):
        if not isinstance(row.get("tokens"), list) or not isinstance(row.get("tags"), list):
            raise BertScopeError(f"{name}, record {n}: a record needs \"tokens\" and \"tags\" lists.")
        if len(row["tokens"]) != len(row["tags"]):
            raise BertScopeError(f"{name}, record {n}: {len(row['tokens'])} tokens but {len(row['tags'])} tags.")
        words.append([str(w) for w in row["tokens"]])
        tags.append([str(t) for t in row["tags"]])
    if not words:
        raise BertScopeError(f"{name} has no sentences.")
    return Tagged(Path(name).name, words, tags)


def _held_out_tagged(data: Tagged, held_out: float, seed: int) -> tuple[Tagged, Tagged]:
    # stratified by each sentence's most frequent tag: every common tag on both sides
    from collections import Counter

    key = [Counter(t).most_common(1)[0][0] for t in data.tags]
    train, held = stratified_split(key, held_out, seed)
    return data.take(train, f"{data.name} (train)"), data.take(held, f"{data.name} (held out)")


def load_task_data(task: str, data: str, text_column: str = "text", label_column: str = "label",
                   pair_column: str | None = None, held_out: float = 0.1, seed: int = 0) -> TaskData:
    """The sides of ``data`` (a shipped name or a file) for ``task``.

    Args:
        task: "classify", "pairs" (sentence pairs), "tag" or "span" (``TASKS``).
        data: a shipped data set's name or a file.
        text_column: a CSV's text column.
        label_column: a CSV's label column.
        pair_column: a CSV's second-segment column, for sentence pairs.
        held_out: the share held out when the data has no split.
        seed: the split's seed.

    Returns:
        ``TaskData``: the training and held-out sides and the labels.
    """
    if task not in TASKS:
        raise BertScopeError(f"Unknown task {task!r}: use {', '.join(TASKS)}.")
    if data in SHIPPED:
        kind = SHIPPED[data]
        if kind == SPAN and task != SPAN or task == SPAN and kind != SPAN:
            raise BertScopeError(f"{data} has questions with answer spans: use --task span." if kind == SPAN else
                                 f"{data} has no answer spans: use squad or a SQuAD-style .json or .jsonl file.")
        if kind == TAG and task != TAG or kind != TAG and task == TAG:
            raise BertScopeError(f"{data} is a {'tagging' if kind == TAG else 'classification'} corpus: "
                                 f"use --task {'tag' if kind == TAG else 'classify'}.")
        if task == PAIRS:
            raise BertScopeError(f"{data} has single texts, not pairs: use --task classify.")
        return _shipped(data, held_out, seed)
    path = Path(data)
    if not path.is_file():
        raise BertScopeError(f"No data {data!r}: give {', '.join(SHIPPED)} or a file (.csv, .tsv, .jsonl, .conllu).")
    text = decode(path.read_bytes(), path.name)
    how = f"stratified {held_out:.0%} held out (seed {seed})"
    if task == SPAN:
        if not path.name.lower().endswith((".json", ".jsonl")):
            raise BertScopeError(f"{path.name}: answer spans read SQuAD's .json or .jsonl records.")
        train, held = split_by_context(read_squad_file(text, path.name), held_out, seed)
        out = TaskData(task, path.name, train, held, None, f"{held_out:.0%} of the contexts held out (seed {seed})")
    elif task == TAG:
        if not path.name.lower().endswith((".conllu", ".jsonl")):
            raise BertScopeError(f"{path.name}: tagging reads .conllu or .jsonl (tokens, tags).")
        tagged = read_tagged_file(text, path.name)
        train, held = _held_out_tagged(tagged, held_out, seed)
        out = TaskData(task, path.name, train, held, None, how)
    else:
        if not path.name.lower().endswith((".csv", ".tsv", ".jsonl", ".json")):
            raise BertScopeError(f"{path.name}: classification reads .csv, .tsv or .jsonl records.")
        records = read_records_file(text, path.name, text_column, label_column, pair_column)
        if task == PAIRS and records.pairs is None:
            raise BertScopeError(f"{path.name} has no second segment: name it with --pair-column (or a "
                                 "text_pair column), or use --task classify.")
        if task == CLASSIFY and records.pairs is not None:
            raise BertScopeError(f"{path.name} has text pairs: use --task pairs.")
        if len(set(records.labels)) < 2:
            raise BertScopeError(f"{path.name}'s label column has one class ({records.labels[0]}): a classifier "
                                 "needs two or more.")
        train, held = split(records, held_out, seed)
        out = TaskData(task, path.name, train, held, None, how)
    out.check()
    return out


def _shipped(name: str, held_out: float, seed: int) -> TaskData:
    if name == "sentiment":
        from bertscope.corpora.sentiment import read_sentiment

        train, held = split(read_sentiment(), held_out, seed)
        return TaskData(CLASSIFY, name, train, held, None, f"stratified {held_out:.0%} held out (seed {seed})")
    if name == "topics":
        from bertscope.corpora.topics import read_topics

        train, held = split(read_topics(), held_out, seed)
        return TaskData(CLASSIFY, name, train, held, None, f"stratified {held_out:.0%} held out (seed {seed})")
    if name == "squad":
        from bertscope.corpora.squad import read_squad

        return TaskData(SPAN, name, read_squad("train"), read_squad("dev"), None, "SQuAD v1.1's own train / dev")
    if name == "ewt-upos":
        from bertscope.corpora.ewt import read_ewt

        sides = [read_ewt(s) for s in ("train", "dev", "test")]
        train, dev, test = (Tagged(f"EWT {s}", [x.tokens for x in side], [x.upos for x in side])
                            for s, side in zip(("train", "dev", "test"), sides))
        return TaskData(TAG, name, train, dev, test, "EWT's own train / dev (held out) / test")
    from bertscope.corpora.brown import read_brown, split_documents

    corpus = read_brown()
    train_ids, held_ids = split_documents([d.id for d in corpus.documents], held_out, seed)
    sides = []
    for ids, side in ((set(train_ids), "train"), (set(held_ids), "held out")):
        sentences = [s for d in corpus.documents if d.id in ids for s in d.sentences]
        sides.append(Tagged(f"Brown ({side})", [list(s.tokens) for s in sentences],
                            [list(s.universal) for s in sentences]))
    return TaskData(TAG, name, sides[0], sides[1], None, f"Brown documents split by genre ({held_out:.0%}, seed {seed})")
