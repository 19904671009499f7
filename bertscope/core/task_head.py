"""The task head of a fine-tuned checkpoint: what it decides and with which labels (the BERT paper's
second stage, §3.2 and Figure 4: a layer over [CLS] for classification and sentence pairs, over
every token for tagging, start/end vectors for spans).

A checkpoint saved as ``*ForSequenceClassification``, ``*ForTokenClassification`` or
``*ForQuestionAnswering`` (its config's ``architectures``) is loaded with that class; its head
counts only when every one of its weights came from the file, as for the pretraining heads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bertscope.errors import BertScopeError

SEQUENCE, TOKEN, SPANS = "sequence-classification", "token-classification", "question-answering"
TASK_KINDS = (SEQUENCE, TOKEN, SPANS)
# the ending of the class a checkpoint was saved as -> its task
ARCHITECTURE_SUFFIXES = {"ForSequenceClassification": SEQUENCE, "ForTokenClassification": TOKEN,
                         "ForQuestionAnswering": SPANS}
SINGLE, MULTI, REGRESSION = "single_label_classification", "multi_label_classification", "regression"
_GENERIC = re.compile(r"^LABEL_\d+$")
MAX_TEXTS = 100_000  # texts decided in one call


@dataclass(frozen=True)
class TaskHead:
    """What a loaded task model decides."""

    kind: str  # one of TASK_KINDS
    labels: tuple[str, ...]  # id2label in id order; question answering: ("start", "end")
    problem_type: str | None = None  # sequence classification: single/multi-label or regression

    @property
    def generic_labels(self) -> bool:
        """The checkpoint did not name its labels (``LABEL_0``, ``LABEL_1``, …)."""
        return self.kind != SPANS and all(_GENERIC.match(label) for label in self.labels)

    @property
    def scoring(self) -> str:
        """How logits become scores: softmax, sigmoid (each label on its own) or none (regression)."""
        if self.kind != SEQUENCE:
            return "softmax"
        return {MULTI: "sigmoid", REGRESSION: "none"}.get(self.problem_type or "", "softmax")

    def describe(self) -> str:
        if self.kind == SPANS:
            return "question answering (answer spans: start and end of each token)"
        what = {SEQUENCE: "sequence classification", TOKEN: "token classification"}[self.kind]
        if self.scoring == "none":
            return f"{what} (regression: one value)"
        kind = ", multi-label" if self.scoring == "sigmoid" else ""
        shown = ", ".join(self.labels[:12]) + (", …" if len(self.labels) > 12 else "")
        return f"{what} ({len(self.labels)} labels{kind}: {shown})"


def task_kind(config: Any) -> str | None:
    """The task a checkpoint was saved for, from its config's ``architectures``."""
    for name in getattr(config, "architectures", None) or []:
        for suffix, kind in ARCHITECTURE_SUFFIXES.items():
            if name.endswith(suffix):
                return kind
    return None


def task_head(config: Any, kind: str) -> TaskHead:
    """The head of ``kind`` as the config describes it."""
    if kind == SPANS:
        return TaskHead(SPANS, ("start", "end"))
    n = int(config.num_labels)
    id2label = getattr(config, "id2label", None) or {}
    labels = tuple(str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n))
    problem = getattr(config, "problem_type", None)
    if kind == SEQUENCE and problem is None:
        problem = REGRESSION if n == 1 else SINGLE  # what the model's own loss assumes
    return TaskHead(kind, labels, problem if kind == SEQUENCE else None)


def require_task(lm: Any, kind: str) -> None:
    """One line naming what ``lm`` has, when it is not a ``kind`` model."""
    if lm.task is None:
        raise BertScopeError(f"{lm.name} has no task head (it is not a fine-tuned checkpoint): load a model saved "
                             f"for {kind.replace('-', ' ')}.")
    if lm.task.kind != kind:
        raise BertScopeError(f"{lm.name} is a {lm.task.kind.replace('-', ' ')} model, not {kind.replace('-', ' ')}.")


def task_inputs(lm: Any, kind: str, texts: Any, verb: str) -> list[str]:
    """``texts`` as a list, once ``lm`` is a ``kind`` model and there are 1 to MAX_TEXTS of them."""
    require_task(lm, kind)
    listed: list[str] = list(texts)
    if not listed:
        raise BertScopeError(f"No texts to {verb}.")
    if len(listed) > MAX_TEXTS:
        raise BertScopeError(f"{len(listed):,} texts; at most {MAX_TEXTS:,} at once.")
    return listed
