"""Is a similarity explanation faithful? The deletion test of the faithfulness scoreboard, for a pair of texts: remove
the tokens of text b an explanation ranks highest (each replaced by the padding token, as in the references, the
special tokens kept), and watch the model's score fall; a faithful ranking makes it fall faster than a random one
(DeYoung et al. 2020, ERASER's comprehensiveness; for similarity, Moeller et al. 2023 §5 delete by the same rule).

    curves = deletion_curves(lm, "How do I open a bank account?", "Steps to create a new account at your bank")
    {c.method: round(c.area, 3) for c in curves}      # the mean fall of the score: higher is more faithful

Each method ranks b's tokens by their share of the score: ``ij`` and ``first-order`` by the pair map's column sums,
``ig`` by b's integrated gradients with a's embedding held fixed, ``random`` by a seeded shuffle (the floor). The
score is re-read after removing the top 0, 1, 2, ... of b's ordinary tokens, up to ``share`` of them; ``area`` is the
mean fall of the score over those steps (the comprehensiveness of ERASER, averaged over the deletion's sizes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.models import LoadedModel
from bertscope.core.passes import pass_bytes
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import finish, max_tokens, pool, prepared, settings_of
from bertscope.retrieval.similarity import DEFAULT_STEPS, explain_pair

METHODS = ("ij", "first-order", "ig", "random")
METHOD_NAMES = {"ij": "Integrated Jacobians", "first-order": "First-order", "ig": "Integrated gradients"}


@dataclass(frozen=True)
class DeletionCurve:
    """One method's ranking of b's tokens put to the deletion test."""

    method: str
    removed: list[int]  # tokens removed at each step (0, 1, 2, ...)
    scores: list[float]  # the model's score after each removal
    order: list[int]  # b's token positions, most important first
    seconds: float  # what the explanation cost

    @property
    def area(self) -> float:
        """The mean fall of the score over the deletion's sizes (higher: the ranking finds what the score rests on)."""
        return float(np.mean([self.scores[0] - s for s in self.scores[1:]])) if len(self.scores) > 1 else 0.0

    def to_json(self) -> dict:
        return {"method": self.method, "removed": self.removed, "scores": self.scores, "area": self.area,
                "order": self.order, "seconds": self.seconds}


def _scores_without(lm: LoadedModel, a: str, b: str, kinds: tuple[str | None, str | None], order: list[int],
                    steps: int) -> list[float]:
    """The score of a against b with b's first 0..steps tokens of ``order`` replaced by the padding token."""
    settings = settings_of(lm)
    (a_in,), (b_in,) = prepared(lm, [a], kinds[0], settings), prepared(lm, [b], kinds[1], settings)
    cut = max_tokens(lm, settings)
    feed_a = lm.tokenizer([a_in], truncation=True, max_length=cut, return_tensors="pt")
    ids = lm.tokenizer([b_in], truncation=True, max_length=cut, return_tensors="pt")["input_ids"][0]
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.unk_token_id
    rows = []
    for k in range(steps + 1):
        row = ids.clone()
        row[order[:k]] = pad
        rows.append(row)
    size = max(1, DEFAULT_BATCH_BYTES // pass_bytes(lm, len(ids)))  # deletion sizes a pass, within the byte budget
    with torch.no_grad():
        def encode(input_ids: torch.Tensor) -> torch.Tensor:
            mask = torch.ones_like(input_ids)
            hidden = lm.run({"input_ids": input_ids.to(lm.device), "attention_mask": mask.to(lm.device)},
                            encoder_only=True).last_hidden_state
            e = finish(pool(hidden, mask.to(lm.device), settings), settings)
            return torch.nn.functional.normalize(e, dim=1) if settings.similarity == "cosine" else e
        ea = encode(feed_a["input_ids"])[0]
        eb = torch.cat([encode(torch.stack(rows[i:i + size])) for i in range(0, len(rows), size)])  # [step, dim]
    return (eb @ ea).double().cpu().tolist()


def deletion_curves(lm: LoadedModel, a: str, b: str, methods: tuple[str, ...] = METHODS, share: float = 0.5,
                    steps: int = DEFAULT_STEPS, kinds: tuple[str | None, str | None] = (None, None),
                    seed: int = 0, progress: Callable[[int, int, str], None] | None = None) -> list[DeletionCurve]:
    """Each method's deletion curve on the pair (see the module's docstring); ``progress(done, total, stage)`` a
    stage a method explained and a batch done (where a Stop acts)."""
    import time

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise BertScopeError(f"Unknown method {unknown[0]!r}: {', '.join(METHODS)}.")
    if not 0 < share <= 1:
        raise BertScopeError("--share must be above 0 and at most 1: the share of b's tokens removed at most.")
    explained, seconds = {}, {}
    for method in methods:
        if method != "random":
            started = time.perf_counter()
            staged = None if progress is None else _labelled(progress, METHOD_NAMES.get(method, method))
            explained[method] = explain_pair(lm, a, b, method, steps, 0, kinds, progress=staged)
            seconds[method] = time.perf_counter() - started
    words = (next(iter(explained.values())) if explained else explain_pair(lm, a, b, "first-order", 1, 0, kinds)).b.words
    ordinary = [i for i, w in enumerate(words) if w is not None]  # b's tokens a deletion may remove
    if not ordinary:
        raise BertScopeError("Text b has no ordinary token to remove.")
    removals = max(1, int(round(share * len(ordinary))))
    curves = []
    for method in methods:
        if method == "random":
            order = [int(i) for i in np.random.default_rng(seed).permutation(ordinary)]
        else:
            order = sorted(ordinary, key=lambda i: -explained[method].b_scores[i])
        scores = _scores_without(lm, a, b, kinds, order, removals)
        curves.append(DeletionCurve(method, list(range(removals + 1)), scores, order, seconds.get(method, 0.0)))
        if progress:
            progress(len(curves), len(methods), "Deleting b's top tokens, methods")
    return curves


def _labelled(progress: Callable[[int, int, str], None], method: str) -> Callable[[int, int, str], None]:
    """An explanation's staged progress, its stages named after the method ("integrated Jacobians: text a")."""
    return lambda done, total, stage: progress(done, total, f"{method}: {stage}")
