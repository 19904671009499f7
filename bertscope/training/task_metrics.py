"""What a fine-tuning run measured, as typed records: the page and the command line read attributes,
never keys. ``metrics.json`` (the run folder's file, its layout unchanged) is written from the run
and read back with ``read_task_metrics``.

    >>> m = read_task_metrics("runs/sentiment")                      # doctest: +SKIP
    >>> m.after.accuracy, m.after.count, m.after.unit                  # doctest: +SKIP
    (0.8, 2000, 'examples')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class LabelScores:
    """One side scored by its labels: a classifier over examples, a tagger over words."""

    loss: float
    accuracy: float
    macro_f1: float
    per_label: dict[str, dict[str, float]]  # label -> precision, recall, f1, support
    labels: list[str]
    confusion: list[list[int]]  # [gold, predicted]
    count: int  # the examples (or words) scored
    unit: str  # "examples" or "words"
    name: str = ""  # a test side's name

    @classmethod
    def from_json(cls, d: dict, name: str = "") -> LabelScores:
        unit = "words" if "words" in d else "examples"
        return cls(float(d["loss"]), float(d["accuracy"]), float(d["macro_f1"]), dict(d["per_label"]),
                   list(d["labels"]), [list(r) for r in d["confusion"]], int(d[unit]), unit, d.get("name", name))


@dataclass(frozen=True)
class SpanScores:
    """Held-out answer spans scored as SQuAD scores them (exact match and F1 over questions)."""

    loss: float
    exact_match: float
    f1: float
    questions: int
    windows: int  # a long context is cut into overlapping windows
    no_answer: int  # questions answered "no answer"

    @classmethod
    def from_json(cls, d: dict) -> SpanScores:
        return cls(float(d["loss"]), float(d["exact_match"]), float(d["f1"]), int(d["questions"]), int(d["windows"]),
                   int(d.get("no_answer", 0)))


Scores = LabelScores | SpanScores


def scores_from_json(d: dict) -> Scores:
    return SpanScores.from_json(d) if "exact_match" in d else LabelScores.from_json(d)


@dataclass(frozen=True)
class Epoch:
    epoch: int  # from 1
    train_loss: float
    held_out: Scores
    seconds: float
    tokens_per_s: float


@dataclass(frozen=True)
class SpanCounts:
    """How questions met windows (span runs only), per side."""

    windows: dict[str, int]  # "train", "held_out"
    several_windows: dict[str, int]  # questions whose context took more than one window
    too_long: dict[str, int]  # questions that left no room for any context (unanswered)
    doc_stride: int  # tokens two windows share


@dataclass(frozen=True)
class FinetuneMetrics:
    """Everything ``metrics.json`` holds for one fine-tuning run."""

    model: str
    task: str  # classify, pairs, tag or span
    data: str
    split: str  # how the held-out side was chosen, in words
    labels: list[str]
    config: dict[str, Any]  # the FinetuneConfig's fields
    train_examples: int
    held_out_examples: int
    truncated: dict[str, int]  # "train", "held_out": rows cut at seq_len
    unscored_words: dict[str, int]
    trainable_parameters: int
    memory: dict[str, Any]
    device: str
    before: Scores  # the untrained head
    epochs: list[Epoch]
    after: Scores  # the last epoch's held-out scoring
    test: LabelScores | None  # the data's own test side, scored once at the end
    worst: list[dict]  # the held-out examples (questions) the model finds least likely (answers worst)
    spans: SpanCounts | None = None

    @property
    def is_span(self) -> bool:
        return isinstance(self.after, SpanScores)

    @property
    def unit(self) -> str:
        """What the held-out side counts: questions, words or examples."""
        return "questions" if self.is_span else self.after.unit  # type: ignore[union-attr]

    @classmethod
    def from_json(cls, m: dict) -> FinetuneMetrics:
        try:
            spans = SpanCounts(dict(m["windows"]), dict(m["questions_over_several_windows"]),
                               dict(m["questions_too_long_for_a_window"]), int(m["doc_stride"])) \
                if m["task"] == "span" else None
            test = m["after"].get("test")
            return cls(
                m["model"], m["task"], m["data"], m["split"], list(m["labels"]), dict(m["config"]),
                int(m["train_examples"]), int(m["held_out_examples"]), dict(m["truncated"]),
                dict(m.get("unscored_words", {})), int(m["trainable_parameters"]), dict(m.get("memory", {})),
                str(m.get("device", "")), scores_from_json(m["before"]["held_out"]),
                [Epoch(int(e["epoch"]), float(e["train_loss"]), scores_from_json(e["held_out"]), float(e["seconds"]),
                       float(e["tokens_per_s"])) for e in m["epochs"]],
                scores_from_json(m["after"]["held_out"]),
                LabelScores.from_json(test, test.get("name", "")) if test else None,
                list(m.get("worst_held_out", [])), spans)
        except (KeyError, TypeError, ValueError) as err:
            raise BertScopeError(f"This metrics.json is not a fine-tuning run's ({type(err).__name__}: {err}).") from err


def read_task_metrics(run: str | Path) -> FinetuneMetrics:
    """A finished fine-tuning run's figures (``run``: its folder, or its metrics.json)."""
    path = Path(run)
    path = path / "metrics.json" if path.is_dir() else path
    if not path.is_file():
        raise BertScopeError(f"{path} does not exist: is the run finished?")
    return FinetuneMetrics.from_json(json.loads(path.read_text(encoding="utf-8")))
