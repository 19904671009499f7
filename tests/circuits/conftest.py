"""What the circuit tests share: the tiny masked LM in float64 (identities to 1e-9), and pairs its
vocabulary spells with the same token count on both sides."""

from __future__ import annotations

import pytest

from bertscope import load_model
from bertscope.circuits.pairs import Pair

PAIRS = [Pair("the man [MASK] here .", "the dog [MASK] here .", "is", "was"),
         Pair("the dog sat by the [MASK] .", "the man sat by the [MASK] .", "river", "bank"),
         Pair("the woman [MASK] there .", "the child [MASK] there .", "was", "is")]


@pytest.fixture(scope="module")
def lm(tiny_mlm_dir):
    model = load_model(str(tiny_mlm_dir))
    model.model.double()
    return model
