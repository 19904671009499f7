"""BERT's corruption of a batch, drawn every step (dynamic masking) or once (static), by the rule of
``heads.masking``.
"""

from __future__ import annotations

from typing import Any

import torch

from bertscope.mlm.masking import IGNORE_INDEX
from bertscope.training.config import RecipeConfig


def mask_tokens(ids: torch.Tensor, special: torch.Tensor, replacements: torch.Tensor, mask_id: int,
                cfg: RecipeConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of a batch: (inputs [batch, token], labels [batch, token]).

    Per row, exactly max(1, round(n x select_rate)) of its n ordinary tokens are chosen
    uniformly; each chosen token becomes ``mask_id`` with probability mask_rate, a random
    ordinary token with random_rate, and stays otherwise. Labels hold the original id at the
    chosen positions and -100 (ignored by the loss) everywhere else."""
    b, t = ids.shape
    candidate = ~special  # [batch, token]
    n = candidate.sum(dim=1)  # [batch]
    count = torch.clamp((n.float() * cfg.select_rate).round().long(), min=1)
    count = torch.minimum(count, n)
    scores = torch.rand(b, t, generator=generator)
    scores[~candidate] = -1.0  # never chosen before an ordinary token
    rank = torch.argsort(torch.argsort(scores, dim=1, descending=True), dim=1)  # [batch, token] 0 = best
    chosen = (rank < count[:, None]) & candidate
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    u = torch.rand(b, t, generator=generator)
    to_mask = chosen & (u < cfg.mask_rate)
    to_random = chosen & (u >= cfg.mask_rate) & (u < cfg.mask_rate + cfg.random_rate)
    random_ids = replacements[torch.randint(len(replacements), (b, t), generator=generator)]
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


def special_mask(tokenizer: Any, ids: torch.Tensor) -> torch.Tensor:
    """[batch, token] bool: special tokens and padding (never chosen)."""
    return torch.isin(ids, torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=ids.dtype))
