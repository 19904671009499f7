"""What an attribution method returns: token-to-token matrices per layer (``TokenMatrices``,
``[layer, query, key]``) or one score per token for one decision (``TokenScores``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertscope.attribution.gradients import Attribution
from bertscope.attribution.registry import METHODS
from bertscope.errors import BertScopeError


@dataclass(frozen=True, eq=False)
class TokenMatrices:
    tokens: list[str]
    method: str
    layers: tuple[int, ...]  # encoder blocks, from 0 (``core.layers``): matrices[k] is the state after block layers[k]
    matrices: np.ndarray  # [len(layers), query, key] float32
    warnings: tuple[str, ...] = ()

    def at(self, layer: int) -> np.ndarray:
        """[query, key] after block ``layer`` (from 0)."""
        if layer not in self.layers:
            raise BertScopeError(f"Layer {layer} was not computed: have {list(self.layers)}.")
        return self.matrices[self.layers.index(layer)]

    def to_json(self, decimals: int = 6) -> dict:
        return {"tokens": self.tokens, "method": self.method, "rows_sum_to_1": METHODS[self.method].rows_sum_to_one,
                "numbering": "layer = encoder block from 0; each matrix is the state after that block",
                "layers": [{"layer": layer, "matrix": np.round(m.astype(np.float64), decimals).tolist()}
                           for layer, m in zip(self.layers, self.matrices)],
                **({"warnings": list(self.warnings)} if self.warnings else {})}


@dataclass(frozen=True, eq=False)
class TokenScores:
    tokens: list[str]
    method: str
    attribution: Attribution
    warnings: tuple[str, ...] = ()

    @property
    def scores(self) -> np.ndarray:  # [token]
        return self.attribution.scores

    @property
    def completeness_error(self) -> float | None:
        return self.attribution.completeness_error

    def to_json(self, decimals: int = 6) -> dict:
        a = self.attribution
        out = {"tokens": self.tokens, "method": self.method, "target": a.target.to_json(),
               "scores": np.round(a.scores.astype(np.float64), decimals).tolist(), "f": a.f_input}
        if self.method == "ig":
            out.update(completeness_error=a.completeness_error, f_baseline=a.f_baseline, steps=a.steps)
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


def chosen_layers(n_layers: int, layers: Sequence[int] | None) -> tuple[int, ...]:
    """``layers`` (encoder blocks from 0) sorted and checked; all of them when None."""
    every = tuple(range(n_layers))
    chosen = every if layers is None else tuple(sorted(set(int(x) for x in layers)))
    if not chosen or not set(chosen) <= set(every):
        raise BertScopeError(f"Layers are numbered 0 to {n_layers - 1} (encoder blocks, as in `attention`); got "
                             f"{list(layers or [])}.")
    return chosen
