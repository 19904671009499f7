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
method is a file with its function and one ``register(Method(...))`` (built by keyword; here for the
shipped ones, or from a user's own module before the lists are read: every list below is derived
when it is read, so a method registered later is in the matrix methods and the scoreboard's defaults
too); ``tests/attribution/test_attribution.py`` runs every record, and every list of methods (CLI,
pages, figures, the home page) is read from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from bertscope.attribution.rollout import MAX_FLOW_TOKENS  # numpy alone: light
from bertscope.errors import BertScopeError


@dataclass(frozen=True, kw_only=True)
class Method:
    name: str  # what the CLI's --method and the pages' links say
    title: str  # figure and page label
    kind: Literal["matrix", "scores", "floor"]  # token-to-token per layer, per-token scores for one
    # target, or the random floor of the faithfulness scoreboard (per-token scores of no method)
    compute: Callable[..., Any]  # matrix: (lm, inspection, layers, progress) -> [layer, q, k];
    # scores: (lm, inspection, target, steps, progress) -> Attribution; floor: (inspection, seed) -> [token]
    cite: str  # the paper it follows
    rows_sum_to_one: bool = False  # matrix methods: each token's row is a distribution over the input tokens
    needs_target: bool = False  # scores: explains one decision (a masked token, NSP/SOP, a probe's class)
    from_attentions: bool = False  # computed from a pass's attention weights alone (no model call of its own)
    needs_blocks: bool = False  # reads BERT's post-LayerNorm block weights (``core.block_modules.reads_blocks``)
    on_request: bool = False  # costly (seconds to minutes for one layer): a page runs it when asked
    max_tokens: int | None = None  # refused above this length (with a one-line reason)
    faithfulness_default: bool = True  # the scoreboard runs it unless told which methods to run

    def applies_to(self, lm: Any) -> bool:
        """Whether this method can run on ``lm`` (block-reading methods need BERT's post-LayerNorm blocks)."""
        if not self.needs_blocks:
            return True
        from bertscope.core.block_modules import reads_blocks

        return reads_blocks(lm)

    def describe(self) -> str:
        return f"{self.name}: {self.title} ({self.cite})"


# each method's function, its module imported when first computed (listing the methods imports no torch)
def _attention(lm, ins, layers, progress) -> np.ndarray:
    return ins.attentions.astype(np.float32).mean(axis=1)  # [layer, q, k] heads averaged


def _rollout(lm, ins, layers, progress) -> np.ndarray:
    from bertscope.attribution import rollout

    return rollout.rollout(ins.attentions.astype(np.float32))


def _flow(lm, ins, layers, progress) -> np.ndarray:
    from bertscope.attribution import rollout

    return rollout.flow(ins.attentions.astype(np.float32), layers, progress=progress)


def _norm(lm, ins, layers, progress) -> np.ndarray:
    from bertscope.attribution import blocks

    return blocks.block_measures(lm, None, None, ins, with_alti=False).norms


def _alti(lm, ins, layers, progress) -> np.ndarray:
    from bertscope.attribution import blocks

    return blocks.block_measures(lm, None, None, ins).alti_aggregated()


def _valuezeroing(lm, ins, layers, progress) -> np.ndarray:
    from bertscope.attribution import value_zeroing

    return value_zeroing.value_zeroing_composed(lm, ins, up_to=max(layers), progress=progress)  # layers 0..max


def _grad(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import gradients

    return gradients.gradient_x_input(lm, ins, target)


def _ig(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import gradients

    return gradients.integrated_gradients(lm, ins, target, steps=steps, progress=progress)


def _occlusion(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import perturbation

    return perturbation.occlusion(lm, ins, target, progress=progress)


def _lime(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import perturbation

    return perturbation.lime(lm, ins, target, progress=progress)


def _kernelshap(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import perturbation

    return perturbation.kernel_shap(lm, ins, target, progress=progress)


def _smoothgrad(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import perturbation

    return perturbation.noise_tunnel(lm, ins, target, "smoothgrad", progress=progress)


def _vargrad(lm, ins, target, steps, progress) -> Any:
    from bertscope.attribution import perturbation

    return perturbation.noise_tunnel(lm, ins, target, "vargrad", progress=progress)


def _random(ins, seed: int) -> np.ndarray:
    """[token] uniform in [0, 1), seeded by the run's seed and the input (the same item, the same ranking)."""
    n = ins.n_tokens
    return np.random.default_rng([seed, int(ins.input_ids.sum()), n]).random(n)


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` to the registry (one line if its name is taken); returns it."""
    if method.name in METHODS:
        raise BertScopeError(f"An attribution method called {method.name!r} is registered already.")
    if method.kind not in ("matrix", "scores", "floor"):
        raise BertScopeError(f"{method.name}: kind is matrix, scores or floor, not {method.kind!r}.")
    METHODS[method.name] = method
    return method


for _method in (
    Method(name="attention", title="raw attention (heads averaged)", kind="matrix", rows_sum_to_one=True,
           from_attentions=True, compute=_attention, cite="for comparison; not an attribution"),
    Method(name="rollout", title="rollout", kind="matrix", rows_sum_to_one=True, from_attentions=True,
           compute=_rollout, cite="Abnar & Zuidema 2020"),
    Method(name="flow", title="attention flow", kind="matrix", rows_sum_to_one=True, from_attentions=True,
           compute=_flow, cite="Abnar & Zuidema 2020", on_request=True, max_tokens=MAX_FLOW_TOKENS,
           faithfulness_default=False),
    Method(name="norm", title="‖Σ α f(x)‖ (norm-based)", kind="matrix", needs_blocks=True, compute=_norm,
           cite="Kobayashi et al. 2020"),
    Method(name="alti", title="ALTI (composed)", kind="matrix", rows_sum_to_one=True, needs_blocks=True,
           compute=_alti, cite="Ferrando et al. 2022"),
    Method(name="valuezeroing", title="Value Zeroing (composed)", kind="matrix", rows_sum_to_one=True,
           needs_blocks=True, compute=_valuezeroing, cite="Mohebbi et al. 2023", on_request=True),
    Method(name="grad", title="gradient × input", kind="scores", needs_target=True, compute=_grad,
           cite="Shrikumar et al. 2017"),
    Method(name="ig", title="integrated gradients", kind="scores", needs_target=True, compute=_ig,
           cite="Sundararajan et al. 2017"),
    # the peers' methods, computed by captum's implementations (``perturbation``)
    Method(name="occlusion", title="occlusion", kind="scores", needs_target=True, compute=_occlusion,
           cite="Zeiler & Fergus 2014 (captum)"),
    Method(name="lime", title="LIME", kind="scores", needs_target=True, compute=_lime,
           cite="Ribeiro et al. 2016 (captum)"),
    Method(name="kernelshap", title="KernelSHAP", kind="scores", needs_target=True, compute=_kernelshap,
           cite="Lundberg & Lee 2017 (shap)"),
    Method(name="smoothgrad", title="SmoothGrad (gradient × input)", kind="scores", needs_target=True,
           compute=_smoothgrad, cite="Smilkov et al. 2017 (captum)"),
    Method(name="vargrad", title="VarGrad (gradient × input)", kind="scores", needs_target=True,
           compute=_vargrad, cite="Adebayo et al. 2018 (captum)"),
    Method(name="random", title="random (floor)", kind="floor", compute=_random,
           cite="the floor: a seeded random ranking of the tokens"),
):
    register(_method)


def matrix_methods(lm: Any = None) -> tuple[str, ...]:
    """Token-to-token methods, in registration order (those that apply to ``lm`` when given)."""
    return tuple(n for n, m in METHODS.items() if m.kind == "matrix" and (lm is None or m.applies_to(lm)))


def score_methods(lm: Any = None) -> tuple[str, ...]:
    """Methods that score tokens for one decision (those that apply to ``lm`` when given)."""
    return tuple(n for n, m in METHODS.items() if m.kind == "scores" and (lm is None or m.applies_to(lm)))


def attribution_methods(lm: Any = None) -> tuple[str, ...]:
    """What ``attribute`` computes: every matrix and score method (the floor explains nothing)."""
    return matrix_methods(lm) + score_methods(lm)


def floor() -> str:
    """The random floor of the faithfulness scoreboard."""
    return next(n for n, m in METHODS.items() if m.kind == "floor")


def faithfulness_defaults(lm: Any = None) -> tuple[str, ...]:
    """What the scoreboard runs unless told which methods to run (those that apply to ``lm`` when given)."""
    return tuple(n for n, m in METHODS.items() if m.faithfulness_default and (lm is None or m.applies_to(lm)))


def find_method(name: str, among: tuple[str, ...] | None = None) -> Method:
    """The record of ``name`` (one of ``among``, by default every attribution method), or one line that
    lists them.

    Args:
        name: a method's name, as the CLI's ``--method`` says it ("rollout", "alti", ...).
        among: the names allowed (default: ``attribution_methods()``, every matrix and score method, not the
            random floor).

    Returns:
        Its ``Method``: name, title, kind ("matrix", "scores" or "floor"), the function that computes it, what it
            cites and needs.
    """
    among = attribution_methods() if among is None else among
    if name not in among:
        raise BertScopeError(f"Unknown method {name!r}: use one of {', '.join(among)}.")
    return METHODS[name]
