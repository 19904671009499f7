"""The patching examples teach what they name on the default model: the clean run prefers candidate A,
the corrupted run prefers B (so the difference patching recovers is that behaviour, not a failure)."""

import pytest

from bertscope import load_model
from bertscope.interventions.examples import PATCH_EXAMPLES
from bertscope.interventions.patching import patch, prepare


@pytest.fixture(scope="module")
def bundled_mlm():
    return load_model("bundled-mlm", device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PATCH_EXAMPLES))
def test_each_example_holds_on_bundled_mlm(bundled_mlm, name):
    clean, corrupt, a, b = PATCH_EXAMPLES[name]
    mask = prepare(bundled_mlm, clean, corrupt, (a, b)).position
    result = patch(bundled_mlm, clean, corrupt, (a, b), "hidden", positions=[mask])  # one column: the mask
    assert result.m_clean > 0 > result.m_corrupt, (name, result.m_clean, result.m_corrupt)
    assert result.caveat is None


@pytest.mark.slow
def test_the_classic_agreement_example_is_flagged_on_bundled_mlm(bundled_mlm):
    """The example the page used to open on: the model prefers "is", and the result says so in one line."""
    result = patch(bundled_mlm, "The keys to the cabinet [MASK] on the table.",
                   "The key to the cabinet [MASK] on the table.", ("are", "is"), "hidden", positions=[6])
    assert result.m_clean < 0
    assert result.caveat.startswith("On this model the clean run does not prefer “are”")
    assert result.to_json()["caveat"] == result.caveat
