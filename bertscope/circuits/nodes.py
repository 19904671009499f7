"""Attribution patching over nodes: the effect of patching every hidden state at every position, every
head and every feed-forward output, estimated from one forward and one backward pass (Nanda 2023;
Syed, Rager & Conmy 2023; Kramár et al. 2024, AtP*), held to BertScope's exact patching
(``interventions.patching``) on the same cells.

Exact patching puts a piece of the clean run into the corrupted run and reads how much of the metric
(logit(answer) − logit(foil)) comes back. Attribution patching estimates it to first order:

    m(corrupted with the clean piece) − m(corrupted) ≈ (clean piece − corrupted piece) · ∂m/∂piece,

the gradient taken on the corrupted run (``atp``), or averaged over ``steps`` runs whose embeddings move
from the corrupted input to the clean one, k/steps of the way (``ig``: EAP-IG's path, Hanna et al. 2024,
the repair this module offers where the linear estimate breaks, e.g. at a saturated softmax or the
embedding of the very token that differs). Estimates are reported as recovered fractions, as exact
patching reports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.hook_points import every_layer, every_state
from bertscope.core.hooked_pass import merged, turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import repeat_feed, wide
from bertscope.errors import BertScopeError
from bertscope.interventions.patching import PatchSetup, patch, prepare, read_metric

NODE_METHODS = ("atp", "ig")


@dataclass(frozen=True)
class NodeScores:
    """Estimated recovered fractions of patching each node of the clean run into the corrupted run."""

    method: str
    steps: int
    setup: PatchSetup
    hidden: np.ndarray  # [state, pos]: "embeddings", then each layer's output
    heads: np.ndarray  # [layer, pos, head]: one head's context (attn.hook_z) at one position
    mlps: np.ndarray  # [layer, pos]: the feed-forward's output (hook_mlp_out)
    m_clean: float
    m_corrupt: float

    @property
    def head_totals(self) -> np.ndarray:
        """[layer, head]: a head patched at every position (to first order, the sum over positions)."""
        return self.heads.sum(axis=1)


def _points(lm: LoadedModel, fn) -> dict:  # noqa: ANN001 - fn(kind, index, x)
    return merged(every_state(lm.model, lambda s, x: fn("hidden", s, x)),
                  every_layer("attn.hook_z", lambda layer, x: fn("heads", layer, x), lm.num_layers),
                  every_layer("hook_mlp_out", lambda layer, x: fn("mlps", layer, x), lm.num_layers))


def attribute_nodes(lm: LoadedModel, clean: str, corrupt: str, candidates: Sequence[str], method: str = "atp",
                    steps: int = 5, setup: PatchSetup | None = None, context: str = "") -> NodeScores:
    """Every node's estimated recovered fraction from one forward and one backward (``ig``: ``steps`` rows).
    ``context``: a question-answering model's passage (``clean``/``corrupt`` two questions of it, ``candidates``
    two of its spans).

    Args:
        lm: the model.
        clean: the clean text.
        corrupt: the corrupted text (as many tokens).
        candidates: (answer, foil).
        method: "atp" or "ig".
        steps: rows of "ig".
        setup: a prepared ``PatchSetup``, when the caller has one.
        context: a question-answering model's passage.

    Returns:
        ``NodeScores``: the hidden-state and head grids of estimated recovered fractions.
    """
    if method not in NODE_METHODS:
        raise BertScopeError(f"Unknown node attribution {method!r}: use {', '.join(NODE_METHODS)}.")
    if method == "ig" and not 1 <= steps <= 100:
        raise BertScopeError(f"Integrated gradients take 1 to 100 steps; {steps} was asked.")
    setup = setup or prepare(lm, clean, corrupt, candidates, context)
    clean_acts: dict[tuple[str, int], torch.Tensor] = {}

    def keep(kind: str, index: int, x: torch.Tensor) -> None:
        clean_acts[(kind, index)] = wide(x[0].detach())
        return None

    with turn(lm), torch.no_grad():
        m_clean = float(read_metric(lm, setup.clean_feed, setup, _points(lm, keep), grad=None)[0])
    rows = 1 if method == "atp" else steps
    corrupt_acts: dict[tuple[str, int], torch.Tensor] = {}
    leaves: dict[tuple[str, int], torch.Tensor] = {}
    alphas = torch.tensor([k / steps for k in range(rows)] if method == "ig" else [0.0], device=lm.device)

    def watch(kind: str, index: int, x: torch.Tensor) -> torch.Tensor:
        if kind == "hidden" and index == 0 and method == "ig":  # the embeddings, moved toward the clean run
            base = x.detach()
            corrupt_acts[(kind, index)] = wide(base[0])
            x = base + alphas.view(-1, 1, 1).to(x.dtype) * (clean_acts[(kind, 0)].to(x.dtype) - base)
        else:  # row 0 is the corrupted run itself (k = 0)
            corrupt_acts[(kind, index)] = wide(x[0].detach())
        leaf = torch.zeros_like(x, requires_grad=True)
        leaves[(kind, index)] = leaf
        return x + leaf

    with turn(lm), torch.enable_grad():
        metric = read_metric(lm, repeat_feed(setup.corrupt_feed, rows), setup, _points(lm, watch), grad=True)
        metric.sum().backward()
    m_corrupt = float(metric[0].detach())  # row 0 is the corrupted run itself
    span = m_clean - m_corrupt
    if abs(span) < 1e-4:
        raise BertScopeError(f"The clean and corrupted runs give the same metric ({m_clean:.4f}): there is nothing "
                             "to recover.")

    def estimate(kind: str, index: int) -> np.ndarray:
        leaf = leaves[(kind, index)]
        grad = wide(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)).mean(dim=0)
        diff = clean_acts[(kind, index)] - corrupt_acts[(kind, index)]
        return ((diff * grad).sum(dim=-1) / span).cpu().numpy()  # [pos] or [pos, head]

    hidden = np.stack([estimate("hidden", s) for s in range(lm.num_layers + 1)])
    heads = np.stack([estimate("heads", layer) for layer in range(lm.num_layers)])
    mlps = np.stack([estimate("mlps", layer) for layer in range(lm.num_layers)])
    return NodeScores(method, steps if method == "ig" else 0, setup, hidden, heads, mlps, m_clean, m_corrupt)


@dataclass(frozen=True)
class GridAgreement:
    """An estimate of a grid against exact patching of the same cells."""

    grid: str  # "hidden" ([state, pos]) or "heads" ([layer, head], every position)
    method: str
    correlation: float  # Pearson, over every cell
    top_overlap: float  # share of the exact top-k cells (by |recovered|) among the estimate's top k
    k: int
    worst: dict  # the cell the estimate misses most: {"row", "column", "exact", "estimate"}
    exact: np.ndarray
    estimate: np.ndarray

    def to_json(self) -> dict:
        return {"grid": self.grid, "method": self.method, "correlation": round(self.correlation, 6),
                "top_overlap": round(self.top_overlap, 6), "k": self.k, "worst": self.worst}


def agreement(grid: str, method: str, exact: np.ndarray, estimate: np.ndarray, rows: list, k: int = 10
              ) -> GridAgreement:
    e, a = exact.ravel(), estimate.ravel()
    k = min(k, e.size)
    correlation = float(np.corrcoef(e, a)[0, 1]) if e.std() > 0 and a.std() > 0 else float("nan")
    top_e, top_a = set(np.argsort(-np.abs(e))[:k]), set(np.argsort(-np.abs(a))[:k])
    worst = int(np.argmax(np.abs(e - a)))
    r, c = divmod(worst, exact.shape[1])
    return GridAgreement(grid, method, correlation, len(top_e & top_a) / k, k,
                         {"row": rows[r], "column": int(c), "exact": round(float(e[worst]), 6),
                          "estimate": round(float(a[worst]), 6)}, exact, estimate)


def compare_with_patching(lm: LoadedModel, clean: str, corrupt: str, candidates: Sequence[str],
                          methods: Sequence[str] = NODE_METHODS, steps: int = 5, context: str = ""
                          ) -> list[GridAgreement]:
    """Each method's estimates against exact patching, on the hidden-state grid and the head grid (``context``: a
    question-answering model's passage).

    Args:
        lm: the model.
        clean: the clean text.
        corrupt: the corrupted text.
        candidates: (answer, foil).
        methods: the node methods compared.
        steps: rows of "ig".
        context: a question-answering model's passage.

    Returns:
        A ``GridAgreement`` a method and grid: its correlation with exact patching.
    """
    hidden = patch(lm, clean, corrupt, candidates, what="hidden", context=context)
    heads = patch(lm, clean, corrupt, candidates, what="heads", context=context)
    out = []
    for method in methods:
        scores = attribute_nodes(lm, clean, corrupt, candidates, method, steps, setup=hidden.setup)
        out.append(agreement("hidden", method, hidden.recovered, scores.hidden, hidden.layers))
        out.append(agreement("heads", method, heads.recovered, scores.head_totals, heads.layers))
    return out
