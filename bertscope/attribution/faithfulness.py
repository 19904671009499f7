"""Which attribution to trust: a deletion test of every method on the model's own predictions.

For each item (``attribution.items``: a sentence with one content word-piece masked, y = the
model's top-1 there; or, for a fine-tuned classifier, ``attribution.class_items``: a text and the
class it predicts, read at [CLS]) every method scores the candidate tokens (all but the special
tokens and the mask) for p(y): the mask's (or [CLS]'s) row after the last layer for the matrix methods (raw attention
heads averaged, rollout, norm-based attention, ALTI and Value Zeroing composed through the
layers), the signed scores of gradient x input and integrated gradients for log p(y), and a
seeded random ranking as the floor. Then, removing tokens (``attribution.deletion``):

- comprehensiveness: p(y|x) − p(y|x without the method's top k), and sufficiency:
  p(y|x) − p(y|x with only the top k of the candidates), each averaged over k = 1, 5, 10, 20
  and 50% of the candidates (rounded up, at least one): the AOPC of DeYoung et al. 2020
  (ERASER). High comprehensiveness and low sufficiency are good;
- the Spearman correlation between the method's scores and leave-one-out: the drop in p(y)
  when each single candidate is removed (as Ferrando et al. 2022 correlate with blank-out).

Every removal variant of an item (all methods' top-k, the leave-one-outs, the intact input)
runs as rows of one batch, identical rows once. Means carry 95% bootstrap intervals over items.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import spearmanr

from bertscope.attribution.deletion import REMOVALS, Removal, class_probabilities, target_probabilities
from bertscope.attribution.gradients import Target
from bertscope.attribution.items import Item
from bertscope.attribution.methods import token_matrices, token_scores
from bertscope.attribution.registry import METHODS, faithfulness_defaults, find_method, floor
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.runtime.engine import Engine

FRACTIONS = (0.01, 0.05, 0.10, 0.20, 0.50)
RANDOM = floor()  # the registry's floor record
BOOTSTRAP = 1_000
METRICS = ("comprehensiveness", "sufficiency", "loo_spearman")


def check_methods(names: Sequence[str]) -> tuple[str, ...]:
    """The methods asked for, in order, each one the registry has (the floor included)."""
    chosen = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not chosen:
        raise BertScopeError(f"Give at least one method: {', '.join(faithfulness_defaults())}.")
    for name in chosen:
        find_method(name, tuple(METHODS))
    return chosen


def method_scores(lm: LoadedModel, item: Item, method: str, steps: int = 50, seed: int = 0) -> np.ndarray:
    """[token] the method's scores of every input token for the item's decision."""
    record = find_method(method, tuple(METHODS))
    if record.kind == "floor":
        return record.compute(item.inspection, seed)
    if record.kind == "matrix":
        layers = [lm.num_layers - 1] if record.name == "flow" else None
        matrices = token_matrices(lm, None, None, record.name, layers, template=item.inspection).matrices
        return matrices[-1][item.mask_position].astype(np.float64)  # [key] the mask's row after the last layer
    if item.decision == "class":
        target = Target("class", label=item.target)
    else:
        target = Target("token", item.mask_position, item.target, item.target_id)
    return token_scores(lm, None, None, record.name, target, steps, template=item.inspection).scores.astype(np.float64)


def top_k_counts(candidates: int, fractions: Sequence[float] = FRACTIONS) -> list[int]:
    """k for each fraction of the candidates: rounded up, at least one."""
    return [max(1, math.ceil(f * candidates - 1e-9)) for f in fractions]


@dataclass(frozen=True)
class ItemResult:
    item: Item
    scores: dict[str, np.ndarray]  # method -> [token]
    p_full: float  # p(y) on the intact input, in the deletion batch
    p_without: dict[str, list[float]]  # method -> p(y) with the top k removed, per fraction
    p_only: dict[str, list[float]]  # method -> p(y) with only the top k of the candidates kept
    loo_drop: np.ndarray  # [candidate] p(y|x) − p(y|x without that candidate)
    spearman: dict[str, float]  # method -> Spearman(scores of the candidates, loo_drop); nan if undefined
    seconds: dict[str, float]  # method -> seconds to score this item

    def comprehensiveness(self, method: str) -> list[float]:
        return [self.p_full - p for p in self.p_without[method]]

    def sufficiency(self, method: str) -> list[float]:
        return [self.p_full - p for p in self.p_only[method]]

    def aopc(self, method: str, metric: str) -> float:
        values = self.comprehensiveness(method) if metric == "comprehensiveness" else self.sufficiency(method)
        return float(np.mean(values))

    def to_json(self) -> dict:
        it = self.item
        return {"decision": it.decision, "text": it.text, **({"pair": it.pair} if it.pair is not None else {}),
                "masked_text": it.masked_text, "source": it.source, "word": it.word, "tag": it.tag,
                "tokens": it.inspection.tokens,
                "input_ids": it.input_ids.tolist(), "mask_position": it.mask_position, "target_id": it.target_id,
                "target": it.target, "p_full": self.p_full,
                "scores": {m: np.round(s, 8).tolist() for m, s in self.scores.items()},
                "comprehensiveness": {m: self.comprehensiveness(m) for m in self.scores},
                "sufficiency": {m: self.sufficiency(m) for m in self.scores},
                "loo_spearman": {m: (None if math.isnan(v) else v) for m, v in self.spearman.items()},
                "seconds": self.seconds}


@dataclass(frozen=True)
class RemovalPlan:
    """Every removal variant one item needs, identical rows once."""

    keeps: np.ndarray  # [variant, token] bool: the tokens each variant keeps
    full: int  # the intact input's row
    without: dict[str, list[int]]  # method -> the row with its top k removed, per fraction
    only: dict[str, list[int]]  # method -> the row with only its top k of the candidates kept
    loo: list[int]  # per candidate, the row without it


def plan_removals(item: Item, scores: dict[str, np.ndarray], fractions: Sequence[float] = FRACTIONS) -> RemovalPlan:
    candidates = item.candidates()
    n = item.inspection.n_tokens
    if len(candidates) == 0:
        raise BertScopeError(f"{item.text[:60]!r} has no token to remove besides the mask.")
    counts = top_k_counts(len(candidates), fractions)
    rows: dict[bytes, int] = {}
    keeps: list[np.ndarray] = []

    def row(keep: np.ndarray) -> int:
        key = keep.tobytes()
        if key not in rows:
            rows[key] = len(keeps)
            keeps.append(keep)
        return rows[key]

    def without_these(removed) -> np.ndarray:
        keep = np.ones(n, bool)
        keep[removed] = False
        return keep

    full = row(np.ones(n, bool))
    without, only = {}, {}
    for method, s in scores.items():
        order = candidates[np.argsort(-s[candidates], kind="stable")]  # most important first
        without[method] = [row(without_these(order[:k])) for k in counts]
        only[method] = [row(without_these(order[k:])) for k in counts]
    loo = [row(without_these([c])) for c in candidates]
    return RemovalPlan(np.stack(keeps), full, without, only, loo)


def deletion_test(lm: LoadedModel, item: Item, scores: dict[str, np.ndarray], removal: Removal = "attention",
            fractions: Sequence[float] = FRACTIONS) -> ItemResult:
    """Every removal variant of one item as rows of one batch, and what they say of each method."""
    plan = plan_removals(item, scores, fractions)
    candidates = item.candidates()
    if item.decision == "class":
        p = class_probabilities(lm, item.input_ids, item.inspection.token_type_ids, plan.keeps, item.mask_position,
                                item.target_id, removal)
    else:
        p = target_probabilities(lm, item.input_ids, item.inspection.token_type_ids, plan.keeps,
                                 item.mask_position, item.target_id, removal)
    drop = p[plan.full] - p[plan.loo]
    spearman = {}
    for method, s in scores.items():
        values = s[candidates]
        if len(candidates) < 3 or np.ptp(values) == 0 or np.ptp(drop) == 0:
            spearman[method] = float("nan")
        else:
            spearman[method] = float(spearmanr(values, drop).statistic)
    return ItemResult(item, scores, float(p[plan.full]), {m: p[r].tolist() for m, r in plan.without.items()},
                      {m: p[r].tolist() for m, r in plan.only.items()}, drop, spearman, {})


def bootstrap(values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP) -> dict:
    """Mean and 95% percentile interval over items (undefined values left out)."""
    x = np.asarray([v for v in values if not math.isnan(v)], np.float64)
    if len(x) == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    means = x[np.random.default_rng(seed).integers(0, len(x), (resamples, len(x)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"mean": float(x.mean()), "low": float(low), "high": float(high), "n": int(len(x))}


@dataclass(frozen=True)
class Scoreboard:
    model: str
    methods: tuple[str, ...]
    removal: str
    fractions: tuple[float, ...]
    results: list[ItemResult]
    source: str  # where the items came from
    skipped: int = 0  # lines of a file left out (too long, no content word)
    # summaries computed once: a page redraws the same board on every interaction
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def summary(self, seed: int = 0) -> dict[str, dict]:
        if ("summary", seed) not in self.memo:
            self.memo[("summary", seed)] = self._summary(seed)
        return self.memo[("summary", seed)]

    def _summary(self, seed: int) -> dict[str, dict]:
        out = {}
        for method in self.methods:
            entry = {metric: bootstrap([r.aopc(method, metric) if metric != "loo_spearman" else r.spearman[method]
                                        for r in self.results], seed) for metric in METRICS}
            entry["seconds_per_item"] = float(np.mean([r.seconds[method] for r in self.results]))
            out[method] = entry
        return out

    def curves(self) -> dict[str, dict[str, list[float]]]:
        """Mean p(y) per fraction removed (comprehensiveness) and kept (sufficiency), per method."""
        return {m: {"without_top": np.mean([r.p_without[m] for r in self.results], axis=0).tolist(),
                    "only_top": np.mean([r.p_only[m] for r in self.results], axis=0).tolist()}
                for m in self.methods}

    def disagreement(self) -> list[float]:
        """Per item: 1 − the mean pairwise Spearman of the methods' candidate scores (random left out)."""
        if "disagreement" not in self.memo:
            self.memo["disagreement"] = self._disagreement()
        return self.memo["disagreement"]

    def _disagreement(self) -> list[float]:
        out = []
        for r in self.results:
            names = [m for m in self.methods if m != RANDOM]
            c = r.item.candidates()
            pairs = [spearmanr(r.scores[a][c], r.scores[b][c]).statistic
                     for i, a in enumerate(names) for b in names[i + 1:]
                     if len(c) >= 3 and np.ptp(r.scores[a][c]) > 0 and np.ptp(r.scores[b][c]) > 0]
            out.append(float(1 - np.mean(pairs)) if pairs else float("nan"))
        return out

    @property
    def decision(self) -> str:
        """What the items' y is: "token" (a masked-token prediction) or "class" (a predicted class)."""
        return self.results[0].item.decision if self.results else "token"

    def to_json(self, with_items: bool = True) -> dict:
        out = {"model": self.model, "decision": self.decision, "removal": self.removal, "fractions": list(self.fractions),
               "source": self.source, "n_items": len(self.results), "skipped": self.skipped,
               "methods": self.summary(), "curves": self.curves()}
        if with_items:
            out["items"] = [r.to_json() for r in self.results]
        return out


def faithfulness(lm: LoadedModel, items: Sequence[Item], methods: Sequence[str] | None = None,
                 removal: Removal = "attention", steps: int = 50, seed: int = 0, source: str = "",
                 skipped: int = 0, progress: Callable[[int, int], None] | None = None,
                 engine: Engine | None = None) -> Scoreboard:
    """Score every item with every method, erase, and keep what each method's removals did.
    ``engine``: who does the items' work (``runtime.engine``: a Ray cluster's actors); by default
    this process, item after item. Either way each item is ``item_result``. ``methods``: by default the
    registry's scoreboard defaults that apply to ``lm``.

    Args:
        lm: the model.
        items: the decisions explained (``brown_items``, ``text_items``, …).
        methods: registry names (default: the scoreboard's defaults that apply to ``lm``).
        removal: how a token is removed: "attention" (masked out) or a baseline token.
        steps: steps of path methods, samples of sampling ones.
        seed: the random method's and the sampling methods' seed.
        source: where the items came from, for the result.
        skipped: items left out before, for the result.
        progress: called with (done, total) items.
        engine: who scores the items (``runtime.engine``).

    Returns:
        A ``Scoreboard``: comprehensiveness, sufficiency and leave-one-out agreement per method, with their
        intervals and seconds per item.
    """
    methods = check_methods(faithfulness_defaults(lm) if methods is None else methods)
    if removal not in REMOVALS:
        raise BertScopeError(f"Unknown removal {removal!r}: use attention or mask.")
    if not items:
        raise BertScopeError("No items to test.")
    for name in methods:
        record = METHODS.get(name)
        if record is not None and record.max_tokens is not None:
            longest = max(it.inspection.n_tokens for it in items)
            if longest > record.max_tokens:
                raise BertScopeError(f"{name} is capped at {record.max_tokens} tokens; an item has {longest}.")
    if engine is None:
        results = []
        for done, item in enumerate(items, 1):
            results.append(item_result(lm, item, methods, removal, steps, seed))
            if progress:
                progress(done, len(items))
    else:
        results = engine.item_results(lm, items, methods, removal, steps, seed, progress)
    return Scoreboard(lm.name, methods, removal, FRACTIONS, results, source, skipped)


def item_result(lm: LoadedModel, item: Item, methods: Sequence[str], removal: Removal = "attention", steps: int = 50,
                seed: int = 0) -> ItemResult:
    """One item: every method's scores (timed), then the deletion batch."""
    scores, seconds = {}, {}
    for name in methods:
        start = time.perf_counter()
        scores[name] = method_scores(lm, item, name, steps, seed)
        seconds[name] = time.perf_counter() - start
    return replace(deletion_test(lm, item, scores, removal), seconds=seconds)
