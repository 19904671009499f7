"""Next-sentence prediction with BERT's NSP head, in both orders; ALBERT's sentence-order head.

Devlin et al. (2019), section 3.1, task #2: IsNext vs NotNext for a pair (A, B). The swapped
order (B, A) beside it is the idea behind ALBERT's sentence-order prediction (Lan et al. 2020,
§4.1: two consecutive segments, in order or swapped, so topic cannot give the answer away),
which ``sentence_order`` reads from ALBERT's own SOP head where the checkpoint has it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertscope.core.forward import inspect
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.sources.presets import PRESETS


@dataclass(frozen=True)
class NextSentence:
    is_next: float  # probability that B follows A
    not_next: float

    def to_json(self) -> dict:
        return {"is_next": self.is_next, "not_next": self.not_next}


def next_sentence(lm: LoadedModel, text_a: str, text_b: str) -> NextSentence:
    """BERT's next-sentence head on the pair (A, B): does B follow A?

    Args:
        lm: a BERT pretraining checkpoint with the NSP head.
        text_a: segment A.
        text_b: segment B (not empty).

    Returns:
        ``NextSentence``: the probabilities of IsNext (B follows A) and NotNext, summing to 1.
    """
    if "nsp" not in lm.outputs:
        with_head = ", ".join(n for n, p in PRESETS.items() if "nsp" in p.outputs)
        raise BertScopeError(
            f"{lm.name} has no next-sentence head: choose a BERT pretraining checkpoint, e.g. {with_head}."
        )
    if not isinstance(text_b, str) or not text_b.strip():
        raise BertScopeError("Sentence B is empty: NSP needs two sentences.")
    logits = inspect(lm, text_a, text_b, with_logits=False).nsp_logits  # [2]: IsNext, NotNext
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return NextSentence(float(p[0]), float(p[1]))


def both_orders(lm: LoadedModel, text_a: str, text_b: str) -> tuple[NextSentence, NextSentence]:
    """(A then B, B then A)."""
    return next_sentence(lm, text_a, text_b), next_sentence(lm, text_b, text_a)


@dataclass(frozen=True)
class SentenceOrder:
    in_order: float  # probability that A then B is the original order
    swapped: float

    def to_json(self) -> dict:
        return {"in_order": self.in_order, "swapped": self.swapped}


def sentence_order(lm: LoadedModel, text_a: str, text_b: str) -> SentenceOrder:
    """ALBERT's SOP head on the pair (A, B): class 0 = the original order (A then B).

    Args:
        lm: an ALBERT pretraining checkpoint with the sentence-order head.
        text_a: segment A.
        text_b: segment B (not empty).

    Returns:
        ``SentenceOrder``: the probabilities that A then B is the original order (``in_order``) and that it is
            swapped, summing to 1.
    """
    if "sop" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has no sentence-order head: choose an ALBERT pretraining checkpoint "
                             "that carries it (AlbertForPreTraining).")
    if not isinstance(text_b, str) or not text_b.strip():
        raise BertScopeError("Sentence B is empty: SOP needs two segments.")
    logits = inspect(lm, text_a, text_b, with_logits=False).sop_logits  # [2]: in order, swapped
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return SentenceOrder(float(p[0]), float(p[1]))

