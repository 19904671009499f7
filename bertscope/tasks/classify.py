"""Sequence classification: each text (or text pair) -> every label's score (BERT, §4.1: a layer over
the pooled [CLS] vector; for pairs, both segments in one input, as in MNLI).

Scores as transformers' ``text-classification`` pipeline computes them (``postprocess``): a
softmax over the labels for single-label heads, a sigmoid per label for multi-label ones
(``problem_type == "multi_label_classification"``), the raw value for regression
(``problem_type == "regression"``, or one label without a problem type: what the model's own loss
takes it for, where the pipeline would apply a sigmoid). Checked against the pipeline to 1e-5 in
``tests/tasks/test_predict.py``. Texts run in batches bounded by bytes (``core.passes``), through
the one owner of a pass; a text past the model's limit is cut and said to be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches, wide
from bertscope.core.task_head import SEQUENCE, task_inputs
from bertscope.errors import BertScopeError


def scores_of(logits: torch.Tensor, scoring: str) -> torch.Tensor:
    """[..., label] logits -> scores, on their device, float32."""
    logits = wide(logits)
    if scoring == "softmax":
        return torch.softmax(logits, dim=-1)
    if scoring == "sigmoid":
        return torch.sigmoid(logits)
    return logits


@dataclass(frozen=True)
class ClassScores:
    """One input's decision."""

    text: str
    pair: str | None
    labels: tuple[str, ...]
    scores: np.ndarray  # [label] in label order (probabilities, or the value for regression)
    logits: np.ndarray  # [label]
    truncated: bool  # the input was longer than the model's limit and was cut

    @property
    def ranked(self) -> list[tuple[str, float]]:
        """Every label with its score, highest first."""
        order = np.argsort(-self.scores, kind="stable")
        return [(self.labels[i], float(self.scores[i])) for i in order]

    @property
    def predicted(self) -> str:
        return self.ranked[0][0]

    def to_json(self, top_k: int | None = None) -> dict:
        ranked = self.ranked if top_k is None else self.ranked[:top_k]
        out = {"text": self.text, "pair": self.pair,
               "scores": [{"label": label, "score": score} for label, score in ranked]}
        if self.truncated:
            out["truncated"] = True
        return out


def classify(lm: LoadedModel, texts: Sequence[str], pairs: Sequence[str | None] | None = None,
             batch_size: int = 32, progress: Callable[[int, int], None] | None = None) -> list[ClassScores]:
    """Every label's score for each text (and its pair), in the order given.

    Args:
        lm: a sequence classifier.
        texts: the inputs.
        pairs: second segments, for sentence pairs.
        batch_size: texts a batch.
        progress: called with (done, total).

    Returns:
        A ``ClassScores`` a text.
    """
    texts = task_inputs(lm, SEQUENCE, texts, "classify")
    if pairs is not None and len(pairs) != len(texts):
        raise BertScopeError(f"{len(texts)} texts but {len(pairs)} second segments.")
    out: list[ClassScores | None] = [None] * len(texts)
    done = 0
    for rows, padded, feed in batches(lm, texts, batch_size, pairs=pairs):
        logits = lm.run(feed).logits  # [batch, label]
        scores = scores_of(logits, lm.task.scoring).cpu().numpy()  # [batch, label]
        logits = wide(logits).cpu().numpy()
        for r, row in enumerate(rows):
            out[row] = ClassScores(texts[row], None if pairs is None else pairs[row], lm.task.labels, scores[r],
                                   logits[r], padded.original[r] > lm.max_length)
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return out
