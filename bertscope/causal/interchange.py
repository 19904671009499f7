"""Interchange interventions (Geiger et al. 2021, 2024): run the network on a base input with the
representation at chosen positions of one hidden state replaced, in a subspace, by what it computed on a
source input; read the decision the base's output head makes (logit(answer) − logit(foil), as the
circuits read it: ``circuits.pairs.decisions``).

The replacement, for a base state ``b`` and a source state ``s`` ([d_model]) and an orthonormal basis
``R`` ([d_model, k]) of the subspace, is pyvene's ``LowRankRotatedSpaceIntervention``:

    b' = b + (s R − b R) Rᵀ

so the part of ``b`` in the subspace becomes the source's and the rest stays the base's. It runs through the
hidden state's named hook point (``core.hook_points.state_hook``): ``embeddings`` is the embedding output,
layer l the output of block l.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from bertscope.causal.variables import Counterfactual
from bertscope.circuits.pairs import MASK, Pair, PreparedPair, decisions, prepare, reads
from bertscope.core.hook_points import state_hook
from bertscope.core.hooked_pass import run_with_cache, turn
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError

Swap = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (base [.., d], source [.., d]) -> new base [.., d]
BATCH = 32


@dataclass(frozen=True)
class Prepared:
    """Counterfactual pairs tokenised for one network: each row's base is ``clean_feed`` and its source
    ``corrupted_feed`` (the circuits' pair type, one token count a pair), the aligned positions of each."""

    where: str  # "mask", "class" or "tag": where the network decides
    rows: list[PreparedPair]
    positions: list[tuple[int, ...]]  # [pair][aligned position]: token indices, the same in base and source

    def batches(self, chosen: Sequence[int], size: int = BATCH) -> list[list[int]]:
        """``chosen`` rows in batches of one token count and at most ``size`` (no padding to mask)."""
        by_length: dict[int, list[int]] = {}
        for i in chosen:
            by_length.setdefault(self.rows[i].length, []).append(i)
        return [group[j:j + size] for group in by_length.values() for j in range(0, len(group), size)]


def word_piece(lm: LoadedModel, text: str, word: int) -> int:
    """The first word piece of word ``word`` (from 0, split at spaces) of ``text``."""
    enc = lm.tokenizer(text, truncation=True, max_length=lm.max_length, return_offsets_mapping=True)
    starts, at = [], 0
    for part in text.split(" "):
        if part:
            starts.append(text.index(part, at))
        at += len(part) + 1
    if word >= len(starts):
        raise BertScopeError(f"“{text[:60]}” has {len(starts)} words; the variable's word is word {word} (from 0).")
    for i, (start, end) in enumerate(enc["offset_mapping"]):
        if end > start and start >= starts[word]:
            return i
    raise BertScopeError(f"Word {word} of “{text[:60]}” is past the model's {lm.max_length} tokens.")


def prepare_pairs(lm: LoadedModel, pairs: Sequence[Counterfactual], positions: Sequence[int] | None = None,
                  slot: int | None = None) -> Prepared:
    """``pairs`` for ``lm`` with the positions an interchange aligns: ``positions`` (token indices, the same in
    every pair) or the first piece of word ``slot`` of each base text. One line for the first pair that cannot
    be used (base and source of different token counts, a position past a pair's end, an answer the network
    cannot output)."""
    if not pairs:
        raise BertScopeError("No counterfactual pairs: an interchange needs at least one base and source.")
    where = reads(lm)
    rows = [prepare(lm, Pair(p.base, p.source, p.answer, p.foil, p.word), where, i, ("base", "source"))
            for i, p in enumerate(pairs)]
    if positions is None and slot is None:
        raise BertScopeError("Say which positions the interchange aligns (token indices from 0, [CLS] is 0).")
    at: list[tuple[int, ...]] = []
    for i, row in enumerate(rows):
        chosen = tuple(positions) if positions is not None else (word_piece(lm, row.pair.clean, int(slot or 0)),)
        if not chosen or len(set(chosen)) != len(chosen):
            raise BertScopeError("Give each aligned position once.")
        if not all(0 <= p < row.length for p in chosen):
            raise BertScopeError(f"Pair {i + 1} has {row.length} tokens (0-{row.length - 1}); position "
                                 f"{max(chosen)} is past its end.")
        at.append(chosen)
    return Prepared(where, rows, at)


def _feed(rows: Sequence[PreparedPair], which: str) -> dict[str, torch.Tensor]:
    key_feeds = [getattr(r, which) for r in rows]
    return {key: torch.cat([f[key] for f in key_feeds]) for key in key_feeds[0]}  # [rows, token]


def _index(prepared: Prepared, chosen: Sequence[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    at = torch.tensor([prepared.positions[i] for i in chosen], device=device)  # [rows, aligned]
    return torch.arange(len(chosen), device=device)[:, None].expand_as(at), at


def source_states(lm: LoadedModel, prepared: Prepared, state: int, chosen: Sequence[int]) -> torch.Tensor:
    """[rows, aligned, d_model] hidden state ``state`` of the chosen rows' sources at their aligned positions."""
    name = state_hook(lm.model, state)
    rows = [prepared.rows[i] for i in chosen]
    _, cache = run_with_cache(lm, _feed(rows, "corrupted_feed"), [name], encoder_only=True)
    rows_at, at = _index(prepared, chosen, cache[name].device)
    return cache[name][rows_at, at].float()


def intervened(lm: LoadedModel, prepared: Prepared, state: int, chosen: Sequence[int], swap: Swap | None,
               source: torch.Tensor | None = None, grad: bool = False) -> torch.Tensor:
    """[rows] logit(answer) − logit(foil) of the chosen rows (one token count) run on their bases with
    ``swap`` applied at their aligned positions of hidden state ``state`` (None: the base alone).
    ``source``: the rows' ``source_states``, when the caller has them already."""
    rows = [prepared.rows[i] for i in chosen]
    hooks = {}
    if swap is not None:
        if source is None:
            source = source_states(lm, prepared, state, chosen)
        rows_at, at = _index(prepared, chosen, source.device)

        def interchange(x: torch.Tensor, hook: object) -> torch.Tensor:  # [rows, token, d_model]
            base = x[rows_at, at].float()  # [rows, aligned, d_model]
            return x.index_put((rows_at, at), swap(base, source).to(x.dtype))

        hooks = {state_hook(lm.model, state): interchange}
    with turn(lm):
        out = lm.run(_feed(rows, "clean_feed"), hooks=hooks, grad=grad, encoder_only=prepared.where == MASK)
        return decisions(lm, out, rows, prepared.where).float()


def factual(lm: LoadedModel, prepared: Prepared, progress: Callable[[int, int], None] | None = None
            ) -> tuple[list[float], list[float]]:
    """([pair] the base's own logit(answer) − logit(foil), [pair] the source's own), no intervention: a causal
    model holds on a pair where the network gives each input its own output. ``progress(done, total)`` after
    each batch."""
    base, source = [0.0] * len(prepared.rows), [0.0] * len(prepared.rows)
    batches = prepared.batches(range(len(prepared.rows)))
    for done, chosen in enumerate(batches, 1):
        rows = [prepared.rows[i] for i in chosen]
        feed = {key: torch.cat([_feed(rows, "clean_feed")[key], _feed(rows, "corrupted_feed")[key]])
                for key in rows[0].clean_feed}  # [2 x rows, token]
        with turn(lm):
            out = lm.run(feed, encoder_only=prepared.where == MASK)
            margins = decisions(lm, out, rows + rows, prepared.where).float().tolist()
        for j, i in enumerate(chosen):
            base[i], source[i] = margins[j], margins[len(rows) + j]
        if progress:
            progress(done, len(batches))
    return base, source
