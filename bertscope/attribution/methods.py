"""Attribution beyond raw attention, one entry point for every method.

    >>> from bertscope import load_model
    >>> from bertscope.attribution import attribute, Target
    >>> lm = load_model("bundled-mlm")
    >>> m = attribute(lm, "The bank of the [MASK] was muddy.", method="alti")
    >>> m.matrices.shape                                   # [layer, query, key]
    (6, 10, 10)
    >>> s = attribute(lm, "The bank of the [MASK] was muddy.", method="ig", target=Target("token", 5, "river"))
    >>> s.tokens[2], bool(s.scores[2] > 0), s.completeness_error < 0.01   # "bank" supports "river"
    ('bank', True, True)

Token-to-token methods (``TokenMatrices``; ``matrices[l][i][j]`` = how much input token j
contributes to token i after encoder block ``layers[l]``, blocks numbered from 0 as ``attention`` does):
- ``attention``: raw attention, heads averaged (for comparison; not an attribution);
- ``rollout`` and ``flow`` (``attribution.rollout``: Abnar & Zuidema 2020), rows sum to 1;
- ``norm``: ‖Σ_h α_ij^h f_h(x_j)‖ of each layer alone (``attribution.blocks``: Kobayashi et al.
  2020); magnitudes in the model's hidden units, rows do not sum to 1;
- ``alti``: ALTI contributions composed through the layers (Ferrando et al. 2022), rows sum to 1.

Per-token methods (``TokenScores``): ``grad`` (gradient × input) and ``ig`` (integrated
gradients), for a ``Target`` (``attribution.gradients``).

The methods themselves are records of ``attribution.registry``; these are the entry points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from bertscope.attribution.gradients import DEFAULT_STEPS, Target
from bertscope.attribution.registry import find_method
from bertscope.attribution.results import TokenMatrices, TokenScores, chosen_layers
from bertscope.core.forward import inspect, inspect_ids
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError

COMPLETENESS_TOLERANCE = 0.01  # IG's relative completeness error above which a result says so


def token_matrices(lm: LoadedModel, text: str | None, pair: str | None, method: str,
                   layers: Sequence[int] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   template: Inspection | None = None) -> TokenMatrices:
    """A matrix method for every layer (flow: ``layers`` only, blocks from 0); on the ids of
    ``template`` instead of ``text`` when given (a pass already run, or an input edited by ids).

    The one choice of pass: a method that reads attention weights alone uses ``template``'s when it
    has them, else a pass with attentions; the others run their own pass, with hooks.

    Args:
        lm: the model.
        text: segment A (or None with ``template``).
        pair: segment B.
        method: a matrix method of the registry (attention, rollout, flow, alti, …).
        layers: flow's layers (blocks from 0).
        progress: called with (done, total).
        template: an inspection whose ids are used instead of ``text``.

    Returns:
        ``TokenMatrices``: [state, token, token] attributions.
    """
    record = _matrix_method(method)
    weights = record.from_attentions
    if template is None:
        ins = inspect(lm, text, pair, with_logits=False, with_hidden_states=False, with_attentions=weights)
    elif weights and template.attentions is None:
        ins = inspect_ids(lm, template, template.input_ids, with_logits=False, with_hidden_states=False)
    else:
        ins = template
    return _run(lm, ins, record, layers, progress)


def from_attentions(ins: Inspection, method: str, layers: Sequence[int] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> TokenMatrices:
    """A method that reads only attention weights (attention, rollout, flow), from a pass already
    run: no forward pass of its own."""
    record = _matrix_method(method)
    if not record.from_attentions:
        raise BertScopeError(f"{method} needs the model's modules, not only attentions: use token_matrices.")
    return _run(None, ins, record, layers, progress)


def _matrix_method(name: str):
    record = find_method(name)
    if record.kind != "matrix":
        raise BertScopeError(f"{name} scores tokens for one decision: use token_scores.")
    return record


def _run(lm: LoadedModel | None, ins: Inspection, record, layers: Sequence[int] | None,
         progress: Callable[[int, int], None] | None) -> TokenMatrices:
    if record.from_attentions and ins.attentions is None:
        raise BertScopeError("This result was computed without attentions.")
    chosen = chosen_layers(lm.num_layers if lm is not None else ins.n_layers, layers)
    data = np.asarray(record.compute(lm, ins, chosen, progress), np.float32)  # [layer, q, k]
    if len(data) != len(chosen):  # every layer was computed: keep the chosen ones
        data = data[list(chosen)]
    return TokenMatrices(ins.tokens, record.name, chosen, data, ins.warnings)


def token_scores(lm: LoadedModel, text: str | None, pair: str | None, method: str, target: Target,
                 steps: int = DEFAULT_STEPS, progress: Callable[[int, int], None] | None = None,
                 template: Inspection | None = None) -> TokenScores:
    """A score method for ``target``; on the ids of ``template`` instead of ``text`` when given.

    Args:
        lm: the model.
        text: segment A (or None with ``template``).
        pair: segment B.
        method: a score method of the registry (grad, ig, lime, kernelshap, …).
        target: the decision explained.
        steps: steps or samples.
        progress: called with (done, total).
        template: an inspection whose ids are used instead of ``text``.

    Returns:
        ``TokenScores``: one score a token, with the method's completeness where it has one.
    """
    record = find_method(method)
    if record.kind != "scores":
        raise BertScopeError(f"{method} is a token-to-token method: use token_matrices.")
    ins = template if template is not None else inspect(
        lm, text, pair, with_logits=False, with_attentions=False, with_hidden_states=False)
    a = record.compute(lm, ins, target, steps, progress)
    warnings = ins.warnings
    if a.completeness_error is not None and a.completeness_error > COMPLETENESS_TOLERANCE:
        unit = "steps" if record.name == "ig" else "samples"
        warnings += (f"Completeness error {a.completeness_error:.1%} at {a.steps} {unit} (attributions sum to "
                     f"{a.scores.sum():.4f}, f(x) - f(x') is {a.f_input - a.f_baseline:.4f}): raise the {unit}.",)
    return TokenScores(ins.tokens, record.name, a, warnings)


def attribute(lm: LoadedModel, text: str, pair: str | None = None, method: str = "rollout",
              target: Target | None = None, layers: Sequence[int] | None = None, steps: int = DEFAULT_STEPS,
              progress: Callable[[int, int], None] | None = None) -> TokenMatrices | TokenScores:
    """Any registered method on ``text``: matrices for every layer, or scores for ``target``.

    Args:
        lm: the model.
        text: segment A.
        pair: segment B, for a sentence pair.
        method: a registry name (``attribution.registry.METHODS``: rollout, alti, ig, lime, …).
        target: the decision a gradient or perturbation method explains (a token at a position, a class, …).
        layers: layers a costly matrix method computes (default every one).
        steps: steps of a path method, samples of a sampling one.
        progress: called with (done, total).

    Returns:
        ``TokenMatrices`` (token × token at every layer) or ``TokenScores`` (one score a token for ``target``).
    """
    record = find_method(method)
    if record.kind == "matrix":
        return token_matrices(lm, text, pair, record.name, layers, progress)
    if target is None:
        raise BertScopeError(f"{record.name} explains one decision: give a target (a position and token, nsp, "
                             "or a probe).")
    return token_scores(lm, text, pair, record.name, target, steps, progress)
