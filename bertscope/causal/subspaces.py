"""The subspaces an interchange swaps (``causal.interchange``), each a small torch module ``(base, source) ->
new base`` over [..., d_model] states:

- ``Rotation``: a learned k-dimensional subspace (DAS, Geiger et al. 2024): pyvene's ``LowRankRotateLayer``
  under torch's orthogonal parametrisation, so its columns stay orthonormal while Adam moves them.
- ``Boundless``: boundless DAS (Wu et al. 2023): a full rotation and a learned boundary ``b`` on its
  dimensions; the first ``b × d_model`` rotated dimensions are swapped through a sigmoid mask whose
  temperature anneals, so the width is learned (pyvene's ``BoundlessRotatedSpaceIntervention``).
- ``Neurons``: the control on the model's own basis: a learned mask over neurons, a sigmoid of logits (as
  MIB's desiderata-based masking), read as the ``k`` strongest neurons swapped whole when evaluated.
- ``FullVector``: the whole state swapped (the ceiling any subspace of it can reach).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torch.nn.utils import parametrizations


def _orthogonal(d: int, k: int, seed: int) -> nn.Module:
    """A [d, k] orthonormal basis under torch's orthogonal parametrisation, the same for the same seed (the
    parametrisation completes a non-square basis with ``torch.randn``: drawn here under the seed too)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return parametrizations.orthogonal(_Basis(d, k, torch.Generator().manual_seed(seed)))


class _Basis(nn.Module):
    def __init__(self, d: int, k: int, generator: torch.Generator) -> None:
        super().__init__()
        weight = torch.empty(d, k)
        nn.init.orthogonal_(weight, generator=generator)
        self.weight = nn.Parameter(weight)  # [d_model, k]


class Rotation(nn.Module):
    """b' = b + (s R − b R) Rᵀ with R [d_model, k] orthonormal."""

    def __init__(self, d: int, k: int, seed: int = 0) -> None:
        super().__init__()
        self.basis = _orthogonal(d, k, seed)

    @property
    def weight(self) -> torch.Tensor:
        return cast(torch.Tensor, self.basis.weight)  # [d_model, k]

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    def forward(self, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        r = self.weight.to(base.dtype)
        return base + ((source - base) @ r) @ r.T


class Boundless(nn.Module):
    """A full rotation R [d, d] and a boundary: b' = (m ⊙ sR + (1 − m) ⊙ bR) Rᵀ, m_i = σ(i/τ) σ((b d − i)/τ)."""

    def __init__(self, d: int, seed: int = 0, start: float = 0.5, temperature: float = 50.0) -> None:
        super().__init__()
        self.basis = _orthogonal(d, d, seed)
        self.boundary = nn.Parameter(torch.tensor([start]))
        self.temperature = temperature
        self.width = d
        self.population: torch.Tensor
        self.register_buffer("population", torch.arange(d, dtype=torch.float32))

    @property
    def weight(self) -> torch.Tensor:
        return cast(torch.Tensor, self.basis.weight)  # [d_model, d_model]

    def mask(self) -> torch.Tensor:  # [d_model]
        b = self.boundary.clamp(1e-3, 1.0)[0] * self.width
        t = self.temperature
        return torch.sigmoid(self.population / t) * torch.sigmoid((b - self.population) / t)

    @property
    def dim(self) -> int:
        """The learned width: the boundary's place, b × d_model rotated dimensions (at least 1)."""
        return max(1, round(float(self.boundary.detach().clamp(1e-3, 1.0)[0]) * self.width))

    def forward(self, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        r = self.weight.to(base.dtype)
        m = self.mask().to(base.dtype)
        return (m * (source @ r) + (1 - m) * (base @ r)) @ r.T


class Neurons(nn.Module):
    """b' = b + σ(w) ⊙ (s − b) while trained; ``hard`` swaps the k neurons of largest w whole."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(d))
        self.k = k
        self.hard = False

    @property
    def dim(self) -> int:
        return self.k

    def chosen(self) -> torch.Tensor:
        return torch.topk(self.logits.detach(), self.k).indices  # [k]

    def mask(self) -> torch.Tensor:  # [d_model]
        if self.hard:
            out = torch.zeros_like(self.logits)
            out[self.chosen()] = 1.0
            return out
        return torch.sigmoid(self.logits)

    def forward(self, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        return base + self.mask().to(base.dtype) * (source - base)


class FullVector(nn.Module):
    def forward(self, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        return source
