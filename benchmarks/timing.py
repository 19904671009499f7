"""Interleaved timing shared by the benchmark scripts (figures, never pass/fail)."""

from __future__ import annotations

import time
from typing import Callable


def interleaved(functions: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Run each function once to warm up, then ``repeats`` rounds in turn (drift hits all alike).

    Returns seconds per call for each name.
    """
    for fn in functions.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times
