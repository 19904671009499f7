"""The circuit drawn readably (the newcomer's row 16: 400 edges over 72 heads at once were a tangle): a few dozen
of the strongest edges by default, and a followed node's paths to the decision."""

from __future__ import annotations

import numpy as np

from bertscope.figures.circuits import on_paths


def test_a_followed_nodes_paths_to_the_decision_and_its_inputs_are_lit():
    #   0 -> 1 -> 3 (decision);  0 -> 2 -> 3;  4 -> 1;  2 -> 5 (a dead end)
    senders = np.array([0, 1, 0, 2, 4, 2])
    targets = np.array([1, 3, 2, 3, 1, 5])
    assert on_paths(senders, targets, 1, 3).tolist() == [True, True, False, False, True, False]
    assert on_paths(senders, targets, 0, 3).tolist() == [True, True, True, True, False, False]
    assert on_paths(senders, targets, 5, 3).tolist() == [False, False, False, False, False, True]  # only its input
