"""Attribution beyond raw attention, one entry point for every method.

    >>> from bertscope import load_model
    >>> from bertscope.attribution import attribute, Target
    >>> lm = load_model("bundled-mlm")
    >>> m = attribute(lm, "The bank of the [MASK] was muddy.", method="alti")
    >>> m.matrices.shape                                   # [layer, query, key]
    >>> s = attribute(lm, "The bank of the [MASK] was muddy.", method="ig", target=Target("token", 5, "river"))
    >>> s.scores, s.completeness_error

Token-to-token methods (``TokenMatrices``; ``matrices[l][i][j]`` = how much input token j
contributes to token i after layer l + 1):
- ``attention``: raw attention, heads averaged (for comparison; not an attribution);
- ``rollout`` and ``flow`` (``attention_flow``: Abnar & Zuidema 2020), rows sum to 1;
- ``norm``: ‖Σ_h α_ij^h f_h(x_j)‖ of each layer alone (``attention_blocks``: Kobayashi et al.
  2020); magnitudes in the model's hidden units, rows do not sum to 1;
- ``alti``: ALTI contributions composed through the layers (Ferrando et al. 2022), rows sum to 1.

Per-token methods (``TokenScores``): ``grad`` (gradient × input) and ``ig`` (integrated
gradients), for a ``Target`` (``gradients``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .errors import BertScopeError
from .gradients import DEFAULT_STEPS, Attribution, Target, gradient_x_input, integrated_gradients
from .inspect import inspect
from .models import LoadedModel

MATRIX_METHODS = ("attention", "rollout", "flow", "norm", "alti")
SCORE_METHODS = ("grad", "ig")
METHODS = MATRIX_METHODS + SCORE_METHODS
COMPLETENESS_TOLERANCE = 0.01  # IG's relative completeness error above which a result says so
ROWS_SUM_TO_ONE = {"attention": True, "rollout": True, "flow": True, "norm": False, "alti": True}


@dataclass(frozen=True, eq=False)
class TokenMatrices:
    tokens: list[str]
    method: str
    layers: tuple[int, ...]  # counted from 1 (after the first encoder layer)
    matrices: np.ndarray  # [len(layers), query, key] float32
    warnings: tuple[str, ...] = ()

    def at(self, layer: int) -> np.ndarray:
        """[query, key] after ``layer`` (counted from 1)."""
        if layer not in self.layers:
            raise BertScopeError(f"Layer {layer} was not computed: have {list(self.layers)}.")
        return self.matrices[self.layers.index(layer)]

    def to_json(self, decimals: int = 6) -> dict:
        return {"tokens": self.tokens, "method": self.method, "rows_sum_to_1": ROWS_SUM_TO_ONE[self.method],
                "layers": [{"layer": layer, "matrix": m.round(decimals).tolist()}
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


def token_matrices(lm: LoadedModel, text: str, pair: str | None, method: str,
                   layers: Sequence[int] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> TokenMatrices:
    """One of ``MATRIX_METHODS`` for every layer (flow: ``layers`` only, counted from 1)."""
    if method in ("norm", "alti"):
        from .attention_blocks import block_measures

        m = block_measures(lm, text, pair)
        ins, data = m.inspection, (m.norms if method == "norm" else m.alti_aggregated())
    else:
        from .attention_flow import flow, rollout

        ins = inspect(lm, text, pair, with_logits=False, with_hidden_states=False)
        if method == "attention":
            data = ins.attentions.mean(axis=1)  # [layer, q, k]
        elif method == "rollout":
            data = rollout(ins.attentions)
        elif method == "flow":
            data = flow(ins.attentions, layers, progress=progress)
            chosen = tuple(sorted(set(layers))) if layers is not None else tuple(range(1, ins.n_layers + 1))
            return TokenMatrices(ins.tokens, method, chosen, data, ins.warnings)
        else:
            raise BertScopeError(f"Unknown method {method!r}: use one of {', '.join(METHODS)}.")
    every = tuple(range(1, ins.n_layers + 1))
    chosen = every if layers is None else tuple(sorted(set(layers)))
    if not set(chosen) <= set(every):
        raise BertScopeError(f"Layers are counted from 1 to {ins.n_layers}; got {list(layers)}.")
    return TokenMatrices(ins.tokens, method, chosen, np.asarray(data, np.float32)[[c - 1 for c in chosen]], ins.warnings)


def token_scores(lm: LoadedModel, text: str, pair: str | None, method: str, target: Target,
                 steps: int = DEFAULT_STEPS, progress: Callable[[int, int], None] | None = None) -> TokenScores:
    """``grad`` or ``ig`` for ``target``."""
    ins = inspect(lm, text, pair, with_logits=False, with_attentions=False, with_hidden_states=False)
    if method == "grad":
        a = gradient_x_input(lm, ins, target)
    elif method == "ig":
        a = integrated_gradients(lm, ins, target, steps=steps, progress=progress)
        if a.completeness_error > COMPLETENESS_TOLERANCE:
            return TokenScores(ins.tokens, method, a, ins.warnings + (
                f"Completeness error {a.completeness_error:.1%} at {steps} steps (attributions sum to "
                f"{a.scores.sum():.4f}, f(x) - f(x') is {a.f_input - a.f_baseline:.4f}): raise the steps.",))
    else:
        raise BertScopeError(f"Unknown method {method!r}: use one of {', '.join(METHODS)}.")
    return TokenScores(ins.tokens, method, a, ins.warnings)


def attribute(lm: LoadedModel, text: str, pair: str | None = None, method: str = "rollout",
              target: Target | None = None, layers: Sequence[int] | None = None, steps: int = DEFAULT_STEPS,
              progress: Callable[[int, int], None] | None = None) -> TokenMatrices | TokenScores:
    if method in MATRIX_METHODS:
        return token_matrices(lm, text, pair, method, layers, progress)
    if method in SCORE_METHODS:
        if target is None:
            raise BertScopeError(f"{method} explains one decision: give a target (a position and token, nsp, or a probe).")
        return token_scores(lm, text, pair, method, target, steps, progress)
    raise BertScopeError(f"Unknown method {method!r}: use one of {', '.join(METHODS)}.")


def agreement(rows: dict[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    """Spearman rank correlation between methods over the tokens, for one target token: each
    entry is one method's [token] scores (a matrix method's row, or a gradient method's scores,
    compared by magnitude). Returns (names, [method, method] correlations)."""
    from scipy.stats import spearmanr

    names = list(rows)
    if len(names) < 2:
        raise BertScopeError("Agreement needs at least two methods.")
    data = np.stack([np.abs(np.asarray(rows[n], np.float64)) for n in names])  # [method, token]
    if data.shape[1] < 3:
        raise BertScopeError("Agreement needs at least three tokens.")
    rho = spearmanr(data, axis=1).statistic
    return names, np.atleast_2d(np.asarray(rho, np.float64))


def parse_target(spec: str | None, probe_dir: str | None = None, layer: int | None = None,
                 label: str | None = None, position: int | None = None) -> Target | None:
    """The CLI's target: ``POSITION:TOKEN``, ``POSITION`` (the model's top prediction), ``nsp``,
    or a probe (run folder, layer, class)."""
    if probe_dir is not None:
        if layer is None or label is None:
            raise BertScopeError("A probe target needs --layer and --class.")
        return Target("probe", position=position, layer=layer, label=label, probe_dir=probe_dir)
    if spec is None:
        return None
    if spec.strip().lower() == "nsp":
        return Target("nsp")
    where, _, token = spec.partition(":")
    try:
        pos = int(where)
    except ValueError:
        raise BertScopeError(f"--target {spec!r}: use POSITION:TOKEN (e.g. 5:river), POSITION or nsp.") from None
    return Target("token", pos, token or None)
