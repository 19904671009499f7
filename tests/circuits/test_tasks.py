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


@pytest.mark.parametrize("model", ["tiny-mlm", "bundled-sentiment", "bundled-upos"])
def test_pairs_judged_together_are_judged_as_one_at_a_time(model, tiny_mlm_dir):
    """``_behaving`` runs the pairs of one length in one pass; each row's decision is the one-pair pass's."""
    import torch

    from bertscope.circuits.pairs import decision, decisions, prepare, reads
    from bertscope.circuits.tasks import _behaving
    from bertscope.core.hooked_pass import turn

    lm = load_model(str(tiny_mlm_dir) if model == "tiny-mlm" else model)
    where = reads(lm)
    if model == "tiny-mlm":
        from tests.circuits.conftest import PAIRS as pairs
    else:
        task = next(t for t in TASKS.values() if t.model == model)
        import random
        from dataclasses import replace

        pairs = random.Random(1).sample(task.build(random.Random(0)), 24)
        pairs += [replace(p, clean=f"Honestly, {p.clean}", corrupted=f"Honestly, {p.corrupted}") for p in pairs[:6]]
    prepared = [prepare(lm, p, where) for p in pairs]
    assert len({p.length for p in prepared}) > 1  # several lengths in one call
    with turn(lm), torch.inference_mode():
        alone = [(float(decision(lm, lm.run(p.clean_feed, encoder_only=where == "mask"), p, where)[0]),
                  float(decision(lm, lm.run(p.corrupted_feed, encoder_only=where == "mask"), p, where)[0]))
                 for p in prepared]
    expected = [clean > 0 > corrupted for clean, corrupted in alone]
    clear = [min(abs(c), abs(r)) > 1e-3 for c, r in alone]  # a decision at 0 may flip with the batch's rounding
    assert [b for b, c in zip(_behaving(lm, prepared, where), clear) if c] == [e for e, c in zip(expected, clear) if c]
    assert sum(clear) >= len(clear) - 2
    assert model == "tiny-mlm" or any(expected)  # the shipped models get some right: the check is not all False
    length = prepared[0].length  # the rows of one pass, each read at its own position and ids
    rows = [p for p in prepared if p.length == length]
    feed = {key: torch.cat([p.clean_feed[key] for p in rows]) for key in rows[0].clean_feed}
    with turn(lm), torch.inference_mode():
        together = decisions(lm, lm.run(feed, encoder_only=where == "mask"), rows, where)
    assert together.tolist() == pytest.approx([alone[prepared.index(p)][0] for p in rows], abs=1e-4)
