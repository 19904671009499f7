"""Activation patching at the level of SAE features (the sparse feature circuits of Marks et al.
2024, read exactly rather than by their gradient approximation): which features of a layer carry
the difference between a clean and a corrupted input?

The setup is ``interventions.patching``'s (two inputs of the same length, the logit difference of
two candidates at the corrupted input's mask). At each position asked (default: where the texts
differ, and the mask), every feature whose activation differs between the two runs is patched
alone: the corrupted run's layer output gets (z_clean - z_corrupt) W_dec[f] added at that position,
so exactly that feature's part of the clean reconstruction is put back. The recovered fraction
(m_patched - m_corrupt) / (m_clean - m_corrupt) is read as for hidden states; beside it, the
position's whole hidden state patched (the ceiling the features share, with the SAE's error).
Cells run as rows of a batch within the pass's byte budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.hooked_pass import turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import repeat_feed, rows_within_budget
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.sae import TopKSAE
from bertscope.interventions.patching import MIN_DIFFERENCE, PatchSetup, prepare, read_metric

MAX_CELLS = 4096


@dataclass(frozen=True)
class FeatureCell:
    position: int
    token: str  # the corrupted input's token there
    feature: int
    clean: float  # its activation in the clean run
    corrupt: float  # and in the corrupted run
    recovered: float

    def to_json(self) -> dict:
        return {"position": self.position, "token": self.token, "feature": self.feature,
                "clean": round(self.clean, 6), "corrupt": round(self.corrupt, 6), "recovered": round(self.recovered, 6)}


@dataclass(frozen=True)
class FeaturePatchResult:
    setup: PatchSetup
    layer: int
    m_clean: float
    m_corrupt: float
    cells: list[FeatureCell]  # every feature patched, largest |recovered| first
    whole: dict[int, float]  # position -> the hidden state patched whole at this layer

    def top(self, n: int = 20) -> list[FeatureCell]:
        return self.cells[:n]

    def to_json(self, top: int = 20) -> dict:
        s = self.setup
        return {"metric": "logit_diff", "candidates": list(s.candidates), "position": s.position, "clean": s.clean,
                "corrupt": s.corrupt, "tokens": s.tokens, "hook": resid_post(self.layer), "m_clean": self.m_clean,
                "m_corrupt": self.m_corrupt, "features_patched": len(self.cells),
                "whole_state": [{"position": p, "token": s.tokens[p], "recovered": round(v, 6)}
                                for p, v in sorted(self.whole.items())],
                "features": [c.to_json() for c in self.cells[:top]]}


@torch.no_grad()
def patch_features(lm: LoadedModel, sae: TopKSAE, layer: int, clean: str, corrupt: str, candidates: Sequence[str],
                   positions: Sequence[int] | None = None, max_batch_bytes: int = DEFAULT_BATCH_BYTES,
                   progress: Callable[[int, int], None] | None = None) -> FeaturePatchResult:
    layer = check_layer(lm, layer)
    sae.check_for(lm, resid_post(layer))
    if lm.task is not None:  # said before ``prepare`` asks a question-answering model for its context
        raise BertScopeError("Feature patching reads a masked-token prediction (the SAEs are of masked LMs).")
    setup = prepare(lm, clean, corrupt, candidates)
    if setup.reads != "mask":
        raise BertScopeError("Feature patching reads a masked-token prediction (the SAEs are of masked LMs).")
    n = len(setup.tokens)
    if positions is None:
        positions = sorted({i for i, (a, b) in enumerate(zip(setup.tokens, setup.clean_tokens)) if a != b}
                           | {setup.position})
    positions = sorted({int(p) for p in positions})
    if not positions or not all(0 <= p < n for p in positions):
        raise BertScopeError(f"Positions to patch are token positions 0-{n - 1}.")
    name = resid_post(layer)
    sae = sae.to(lm.device)
    with turn(lm), torch.inference_mode():
        _, clean_cache = lm.run_with_cache(setup.clean_feed, [name], encoder_only=True)
        _, corrupt_cache = lm.run_with_cache(setup.corrupt_feed, [name], encoder_only=True)
        m_clean = float(read_metric(lm, setup.clean_feed, setup)[0])
        m_corrupt = float(read_metric(lm, setup.corrupt_feed, setup)[0])
    if abs(m_clean - m_corrupt) < MIN_DIFFERENCE:
        raise BertScopeError(f"The clean and corrupted runs give the same logit difference ({m_clean:.4f}): there is "
                             "nothing to recover; change the corrupted text or the candidates.")
    x_clean, x_corrupt = clean_cache[name][0].float(), corrupt_cache[name][0].float()  # [token, d_model]
    z_clean, z_corrupt = sae.encode(x_clean), sae.encode(x_corrupt)  # [token, d_sae]
    cells: list[tuple[int, int | None]] = [(p, None) for p in positions]  # None: the whole state
    for p in positions:
        changed = torch.nonzero(z_clean[p] != z_corrupt[p]).flatten().tolist()
        cells += [(p, f) for f in changed]
    if len(cells) > MAX_CELLS:
        raise BertScopeError(f"{len(cells):,} cells is more than {MAX_CELLS:,}: patch fewer positions.")
    w_dec = sae.W_dec.float()
    deltas = torch.stack([x_clean[p] - x_corrupt[p] if f is None else (z_clean[p, f] - z_corrupt[p, f]) * w_dec[f]
                          for p, f in cells])  # [cell, d_model]
    where = torch.tensor([p for p, _ in cells], device=lm.device)
    per_batch = rows_within_budget(lm, n, max_batch_bytes)
    metrics = np.empty(len(cells))
    for start in range(0, len(cells), per_batch):
        stop = min(start + per_batch, len(cells))
        rows = torch.arange(stop - start, device=lm.device)

        def put(x: torch.Tensor, hook) -> torch.Tensor:  # [rows, token, d_model]
            new = x.clone()
            new[rows, where[start:stop]] += deltas[start:stop].to(x.dtype)
            return new

        with turn(lm), torch.inference_mode():
            metric = read_metric(lm, repeat_feed(setup.corrupt_feed, stop - start), setup, {name: put})
        metrics[start:stop] = metric.double().cpu().numpy()
        if progress:
            progress(stop, len(cells))
    recovered = (metrics - m_corrupt) / (m_clean - m_corrupt)
    whole = {p: float(r) for (p, f), r in zip(cells, recovered) if f is None}
    found = [FeatureCell(p, setup.tokens[p], f, float(z_clean[p, f]), float(z_corrupt[p, f]), float(r))
             for (p, f), r in zip(cells, recovered) if f is not None]
    found.sort(key=lambda c: -abs(c.recovered))
    return FeaturePatchResult(setup, layer, m_clean, m_corrupt, found, whole)
