"""Why the model predicts a token at a mask: every method's reading of that one decision side by
side, and how far they agree (Spearman over the word pieces)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bertscope.attribution.blocks import block_measures
from bertscope.attribution.gradients import DEFAULT_STEPS, Target
from bertscope.attribution.methods import from_attentions, token_scores
from bertscope.attribution.results import TokenMatrices, TokenScores, chosen_layers
from bertscope.core.forward import inspect_ids
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError


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


def rows_at(matrices: dict[str, TokenMatrices], layer: int, query: int) -> dict[str, np.ndarray]:
    """Each method's row for token ``query`` after block ``layer`` (from 0): [key] per method."""
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
    e.g. with words masked). ``token`` defaults to the model's top prediction there.

    Args:
        lm: a masked LM.
        template: the input as run (``inspect``).
        position: the masked position explained.
        token: the prediction explained (default: the top one).
        steps: integrated gradients' steps.
        progress: called with (done, total).

    Returns:
        An ``Explanation``: integrated gradients, gradient × input, the attention-based rows, their agreement.
    """
    ig = token_scores(lm, None, None, "ig", Target("token", position, token), steps, progress, template)
    target = ig.attribution.target
    grad = token_scores(lm, None, None, "grad", target, template=template)
    last = lm.num_layers - 1  # the last block
    # two passes for the four methods: one with attention weights, one with the hooks of norm/ALTI
    ins = inspect_ids(lm, template, template.input_ids, with_logits=False, with_hidden_states=False)
    blocks = block_measures(lm, None, None, template)
    every = chosen_layers(lm.num_layers, None)
    matrices = {m: from_attentions(ins, m) for m in ("attention", "rollout")}
    matrices["norm"] = TokenMatrices(ins.tokens, "norm", every, blocks.norms)
    matrices["alti"] = TokenMatrices(ins.tokens, "alti", every, blocks.alti_aggregated())
    rows = {"grad": grad.scores, "ig": ig.scores, **rows_at(matrices, last, position)}
    # over the word pieces: IG gives special and mask tokens 0 by construction (they stay in its baseline)
    keep = ~template.special_mask & (template.input_ids != lm.tokenizer.mask_token_id)
    names, rho = agreement({name: row[keep] for name, row in rows.items()})
    return Explanation(ig.tokens, grad, ig, rows, names, rho)
