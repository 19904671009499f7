"""BERT's masking rule, in one place (Devlin et al. 2019, §3.1 and appendix A.1;
google-research/bert's ``create_pretraining_data.py``).

- which positions may be chosen for the loss: every token that is neither special nor padding;
- how many: ``max(1, round(n x select_rate))`` of a sequence's n ordinary tokens (round half to
  even, as Python's and torch's ``round``), never more than n;
- which ids a "random token" may be: the vocabulary without special tokens and without
  bracketed placeholders such as BERT's ``[unused0]``...``[unused993]``, which no text contains
  (google's code draws from the whole vocabulary, placeholders included);
- of the chosen: ``mask_rate`` become the mask token, ``random_rate`` a random id, the rest stay.

The per-text view of the recipe (``heads.mlm_recipe``, the Masked page and ``bertscope
mlm-recipe``) and the trainer (``training.batches``) both count with ``selection_count`` and draw
from ``replacement_ids``; a test holds them to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertscope.errors import BertScopeError

IGNORE_INDEX = -100  # the label of every position outside the loss (PyTorch's cross-entropy default)


def check_rates(select_rate: float, mask_rate: float, random_rate: float) -> None:
    if not 0 < select_rate <= 1:
        raise BertScopeError("The selection rate must be above 0 and at most 1.")
    if mask_rate < 0 or random_rate < 0 or mask_rate + random_rate > 1 + 1e-9:
        raise BertScopeError("The [MASK] and random shares must be >= 0 and add up to at most 1.")


def selection_count(ordinary: int, select_rate: float) -> int:
    """Positions chosen for the loss in a sequence with ``ordinary`` maskable tokens."""
    return min(ordinary, max(1, int(round(ordinary * select_rate))))


def is_placeholder(piece: str) -> bool:
    """A bracketed vocabulary entry that is not a word: [unused12], [PAD], [CLS], …"""
    return piece.startswith("[") and piece.endswith("]") and len(piece) > 2


def replacement_ids(tokenizer: Any, vocab_size: int) -> np.ndarray:
    """[n] int64, sorted: the ids a chosen token may be replaced by (see the module docstring)."""
    special = set(tokenizer.all_special_ids)
    keep = sorted(i for piece, i in tokenizer.get_vocab().items()
                  if i < vocab_size and i not in special and not is_placeholder(piece))
    return np.asarray(keep, np.int64)
