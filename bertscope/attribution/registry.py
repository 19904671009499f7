"""Every attribution method, one record each: what the CLI offers, what the figures title, what the
pages list, and what computes it (after inseq's ``list_feature_attribution_methods`` and captum's
one-method-per-file ``attr/_core``).

    >>> from bertscope.attribution.registry import METHODS
    >>> [m.name for m in METHODS.values() if m.kind == "matrix"]
    ['attention', 'rollout', 'flow', 'norm', 'alti', 'valuezeroing']

A matrix method maps (model, a pass of the input, the layers wanted) to ``[layer, query, key]``:
how much input token j contributes to token i after each layer; a score method maps (model, the
input, a ``Target``) to one score per token for that decision; the floor (``random``) ranks tokens
at random, seeded, so the faithfulness scoreboard has a line every method must clear. Adding a
method is a file with its function and one ``Method`` record below (``faithfulness_default``:
whether the scoreboard runs it unless told otherwise); ``tests/attribution/test_attribution.py`` runs every
record, and every list of methods (CLI, pages, figures, the home page) is read from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from bertscope.attribution import blocks, gradients, rollout, value_zeroing
from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class Method:
    name: str  # what the CLI's --method and the pages' links say
    title: str  # figure and page label
    kind: Literal["matrix", "scores", "floor"]  # token-to-token per layer, per-token scores for one
    # target, or the random floor of the faithfulness scoreboard (per-token scores of no method)
    rows_sum_to_one: bool  # matrix methods: each token's row is a distribution over the input tokens
    needs_target: bool  # scores: explains one decision (a masked token, NSP/SOP, a probe's class)
    from_attentions: bool  # computed from a pass's attention weights alone (no model call of its own)
    compute: Callable[..., Any]  # matrix: (lm, inspection, layers, progress) -> [layer, q, k];
    # scores: (lm, inspection, target, steps, progress) -> Attribution; floor: (inspection, seed) -> [token]
    cite: str  # the paper it follows
    on_request: bool = False  # costly (seconds to minutes for one layer): a page runs it when asked
    max_tokens: int | None = None  # refused above this length (with a one-line reason)
    faithfulness_default: bool = True  # the scoreboard runs it unless told which methods to run

    def describe(self) -> str:
        return f"{self.name}: {self.title} ({self.cite})"


def _attention(lm, ins, layers, progress) -> np.ndarray:
    return ins.attentions.astype(np.float32).mean(axis=1)  # [layer, q, k] heads averaged


def _rollout(lm, ins, layers, progress) -> np.ndarray:
    return rollout.rollout(ins.attentions.astype(np.float32))


def _flow(lm, ins, layers, progress) -> np.ndarray:
    return rollout.flow(ins.attentions.astype(np.float32), layers, progress=progress)


def _norm(lm, ins, layers, progress) -> np.ndarray:
    return blocks.block_measures(lm, None, None, ins, with_alti=False).norms


def _alti(lm, ins, layers, progress) -> np.ndarray:
    return blocks.block_measures(lm, None, None, ins).alti_aggregated()


def _valuezeroing(lm, ins, layers, progress) -> np.ndarray:
    return value_zeroing.value_zeroing_composed(lm, ins, up_to=max(layers), progress=progress)  # layers 0..max


def _grad(lm, ins, target, steps, progress) -> gradients.Attribution:
    return gradients.gradient_x_input(lm, ins, target)


def _ig(lm, ins, target, steps, progress) -> gradients.Attribution:
    return gradients.integrated_gradients(lm, ins, target, steps=steps, progress=progress)


def _random(ins, seed: int) -> np.ndarray:
    """[token] uniform in [0, 1), seeded by the run's seed and the input (the same item, the same ranking)."""
    n = ins.n_tokens
    return np.random.default_rng([seed, int(ins.input_ids.sum()), n]).random(n)


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method("attention", "raw attention (heads averaged)", "matrix", True, False, True, _attention,
               "for comparison; not an attribution"),
        Method("rollout", "rollout", "matrix", True, False, True, _rollout, "Abnar & Zuidema 2020"),
        Method("flow", "attention flow", "matrix", True, False, True, _flow, "Abnar & Zuidema 2020",
               on_request=True, max_tokens=rollout.MAX_FLOW_TOKENS, faithfulness_default=False),
        Method("norm", "‖Σ α f(x)‖ (norm-based)", "matrix", False, False, False, _norm, "Kobayashi et al. 2020"),
        Method("alti", "ALTI (composed)", "matrix", True, False, False, _alti, "Ferrando et al. 2022"),
        Method("valuezeroing", "Value Zeroing (composed)", "matrix", True, False, False, _valuezeroing,
               "Mohebbi et al. 2023", on_request=True),
        Method("grad", "gradient × input", "scores", False, True, False, _grad, "Shrikumar et al. 2017"),
        Method("ig", "integrated gradients", "scores", False, True, False, _ig, "Sundararajan et al. 2017"),
        Method("random", "random (floor)", "floor", False, False, False, _random,
               "the floor: a seeded random ranking of the tokens"),
    ]
}
MATRIX_METHODS = tuple(name for name, m in METHODS.items() if m.kind == "matrix")
SCORE_METHODS = tuple(name for name, m in METHODS.items() if m.kind == "scores")
ATTRIBUTION_METHODS = MATRIX_METHODS + SCORE_METHODS  # what `attribute` computes (the floor explains nothing)
FLOOR = next(name for name, m in METHODS.items() if m.kind == "floor")
FAITHFULNESS_DEFAULTS = tuple(name for name, m in METHODS.items() if m.faithfulness_default)


def find_method(name: str, among: tuple[str, ...] = ATTRIBUTION_METHODS) -> Method:
    """The record of ``name`` (one of ``among``), or one line that lists them."""
    if name not in among:
        raise BertScopeError(f"Unknown method {name!r}: use one of {', '.join(among)}.")
    return METHODS[name]
