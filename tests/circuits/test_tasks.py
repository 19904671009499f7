"""The built-in tasks run offline on the shipped models, keep only pairs the model gets right, and say
which model to use when asked on the wrong one."""

from __future__ import annotations

import pytest

from bertscope import load_model
from bertscope.circuits.tasks import TASKS, brown_nouns, task_pairs, tasks_for
from bertscope.errors import BertScopeError


def test_brown_gives_the_agreement_task_its_nouns():
    nouns = brown_nouns()
    assert len(nouns) == 80 and all(p == s + "s" for s, p in nouns)
    assert ("man", "mans") not in nouns and ("year", "years") in nouns


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TASKS))
def test_each_task_on_its_model(name):
    task = TASKS[name]
    lm = load_model(task.model)
    assert name in tasks_for(lm)
    found = task_pairs(lm, name, size=16)
    assert len(found.pairs) == 16 and found.tried >= 16 and found.unusable == 0
    assert len({(p.clean, p.corrupted) for p in found.pairs}) == 16
    assert task_pairs(lm, name, size=16).pairs == found.pairs  # seeded


@pytest.mark.slow
def test_a_task_on_the_wrong_model_names_the_right_one():
    lm = load_model("bundled-sentiment")
    with pytest.raises(BertScopeError, match="run it on bundled-mlm, or on bundled-sentiment run negation"):
        task_pairs(lm, "agreement")
    with pytest.raises(BertScopeError, match="Unknown circuit task 'ioi'"):
        task_pairs(lm, "ioi")
    with pytest.raises(BertScopeError, match="1 to 1,000 pairs"):
        task_pairs(lm, "negation", size=0)
