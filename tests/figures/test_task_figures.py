"""A task model's figures: each label of the per-layer decision chart in a colour of its own, far apart
(Streamlit's theme would otherwise draw the first two in near blues)."""

from __future__ import annotations

import numpy as np

from bertscope.figures.tasks import layer_readings


def test_every_label_has_its_own_colour():
    fig = layer_readings(["embeddings", "0", "1"], ["negative", "neutral", "positive"], np.full((3, 3), 1 / 3))
    colours = [t.line.color for t in fig.data]
    assert len(set(colours)) == 3 and all(colours)
    assert [t.marker.color for t in fig.data] == colours


def test_the_distance_matrices_say_their_scales():
    from bertscope.figures.syntax import distance_matrices

    fig = distance_matrices(["a", "b", "c"], np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]]), np.ones((3, 3)))
    gold, probe = fig.data
    assert gold.showscale is not False and probe.showscale is not False
    assert gold.colorbar.title.text == "edges" and "distance" in probe.colorbar.title.text
    assert gold.colorbar.x < probe.colorbar.x  # one beside each matrix, not on top of each other


def test_the_shift_heatmaps_rows_are_named_by_their_sentences():
    from bertscope.analysis.shift import Occurrence, ShiftResult
    from bertscope.figures.shift import occurrence_names, snippet

    long = "After a long walk along the muddy path we finally sat down on the bank of the slow brown river ."
    result = ShiftResult("bank", [Occurrence(1, "She put the money in the bank .", "money", (6,)),
                                  Occurrence(12, long, "river", (15,))], np.zeros((2, 3, 4), np.float32), [])
    names = occurrence_names(result)
    assert names[0] == "money: She put the money in the bank ."
    assert names[1].startswith("river: …") and "bank" in names[1] and len(names[1]) <= len("river: ") + 46
    assert snippet("bank", "bank") == "bank"
