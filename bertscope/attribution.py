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
from .inspect import Inspection, inspect, inspect_ids
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


def token_matrices(lm: LoadedModel, text: str | None, pair: str | None, method: str,
                   layers: Sequence[int] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   template: Inspection | None = None) -> TokenMatrices:
    """One of ``MATRIX_METHODS`` for every layer (flow: ``layers`` only, counted from 1); on the
    ids of ``template`` instead of ``text`` when given (an input edited by ids)."""
    if method in ("norm", "alti"):
        from .attention_blocks import block_measures

        m = block_measures(lm, text, pair, template, with_alti=method == "alti")
        ins, data = m.inspection, (m.norms if method == "norm" else m.alti_aggregated())
    else:
        if template is None:
            ins = inspect(lm, text, pair, with_logits=False, with_hidden_states=False)
        else:
            ins = inspect_ids(lm, template, template.input_ids, with_logits=False, with_hidden_states=False)
        return from_attentions(ins, method, layers, progress)
    chosen = _chosen_layers(ins.n_layers, layers)
    return TokenMatrices(ins.tokens, method, chosen, np.asarray(data, np.float32)[[c - 1 for c in chosen]], ins.warnings)


def _chosen_layers(n_layers: int, layers: Sequence[int] | None) -> tuple[int, ...]:
    """``layers`` (counted from 1) sorted and checked; all of them when None."""
    every = tuple(range(1, n_layers + 1))
    chosen = every if layers is None else tuple(sorted(set(layers)))
    if not chosen or not set(chosen) <= set(every):
        raise BertScopeError(f"Layers are counted from 1 to {n_layers}; got {list(layers or [])}.")
    return chosen


def from_attentions(ins: Inspection, method: str, layers: Sequence[int] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> TokenMatrices:
    """``attention``, ``rollout`` or ``flow`` from a pass already run (no forward pass)."""
    from .attention_flow import flow, rollout

    if ins.attentions is None:
        raise BertScopeError("This result was computed without attentions.")
    chosen = _chosen_layers(ins.n_layers, layers)
    attentions = ins.attentions.astype(np.float32)  # [layer, head, q, k]
    if method == "flow":
        return TokenMatrices(ins.tokens, method, chosen, flow(attentions, chosen, progress=progress), ins.warnings)
    if method == "attention":
        data = attentions.mean(axis=1)  # [layer, q, k]
    elif method == "rollout":
        data = rollout(attentions)
    else:
        raise BertScopeError(f"{method} needs the model's modules, not only attentions: use token_matrices.")
    return TokenMatrices(ins.tokens, method, chosen, data[[c - 1 for c in chosen]], ins.warnings)


def token_scores(lm: LoadedModel, text: str | None, pair: str | None, method: str, target: Target,
                 steps: int = DEFAULT_STEPS, progress: Callable[[int, int], None] | None = None,
                 template: Inspection | None = None) -> TokenScores:
    """``grad`` or ``ig`` for ``target``; on the ids of ``template`` instead of ``text`` when given."""
    ins = template if template is not None else inspect(
        lm, text, pair, with_logits=False, with_attentions=False, with_hidden_states=False)
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
    rho = np.asarray(spearmanr(data, axis=1).statistic, np.float64)
    if rho.ndim == 0:  # two methods: scipy gives the one coefficient
        rho = np.array([[1.0, float(rho)], [float(rho), 1.0]])
    return names, rho


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
    if spec.strip().lower() in ("nsp", "sop"):
        return Target(spec.strip().lower())
    where, _, token = spec.partition(":")
    try:
        pos = int(where)
    except ValueError:
        raise BertScopeError(f"--target {spec!r}: use POSITION:TOKEN (e.g. 5:river), POSITION, nsp or sop.") from None
    return Target("token", pos, token or None)


def rows_at(matrices: dict[str, TokenMatrices], layer: int, query: int) -> dict[str, np.ndarray]:
    """Each method's row for token ``query`` after ``layer`` (counted from 1): [key] per method."""
    out = {}
    for name, m in matrices.items():
        if not 0 <= query < len(m.tokens):
            raise BertScopeError(f"Token {query} does not exist: the input has {len(m.tokens)} tokens.")
        out[name] = m.at(layer)[query]
    return out


@dataclass(frozen=True, eq=False)
class Explanation:
    """Why the model predicts ``target`` at a masked position: gradient methods beside the
    token-to-token methods' rows for that position after the last layer, and their agreement."""

    tokens: list[str]
    grad: TokenScores
    ig: TokenScores
    rows: dict[str, np.ndarray]  # method -> [token]: grad, ig, attention, rollout, norm, alti
    names: list[str]  # agreement order
    spearman: np.ndarray  # [method, method] over the word pieces (special and mask tokens left out)

    @property
    def target(self) -> Target:
        return self.ig.attribution.target


def explain_prediction(lm: LoadedModel, template: Inspection, position: int, token: str | None = None,
                       steps: int = DEFAULT_STEPS, progress: Callable[[int, int], None] | None = None
                       ) -> Explanation:
    """Every method for one masked-token prediction of the input ``template`` (its ids as run,
    e.g. with words masked). ``token`` defaults to the model's top prediction there."""
    ig = token_scores(lm, None, None, "ig", Target("token", position, token), steps, progress, template)
    target = ig.attribution.target
    grad = token_scores(lm, None, None, "grad", target, template=template)
    last = lm.num_layers
    # two passes for the four methods: one with attention weights, one with the hooks of norm/ALTI
    from .attention_blocks import block_measures

    ins = inspect_ids(lm, template, template.input_ids, with_logits=False, with_hidden_states=False)
    blocks = block_measures(lm, None, None, template)
    every = _chosen_layers(lm.num_layers, None)
    matrices = {m: from_attentions(ins, m) for m in ("attention", "rollout")}
    matrices["norm"] = TokenMatrices(ins.tokens, "norm", every, blocks.norms)
    matrices["alti"] = TokenMatrices(ins.tokens, "alti", every, blocks.alti_aggregated())
    rows = {"grad": grad.scores, "ig": ig.scores, **rows_at(matrices, last, position)}
    # over the word pieces: IG gives special and mask tokens 0 by construction (they stay in its baseline)
    keep = ~template.special_mask & (template.input_ids != lm.tokenizer.mask_token_id)
    names, rho = agreement({name: row[keep] for name, row in rows.items()})
    return Explanation(ig.tokens, grad, ig, rows, names, rho)
