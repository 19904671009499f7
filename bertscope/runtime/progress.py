"""Progress callbacks: a job's ``progress(done, total, stage)`` handed to a step that reports ``(done, total)``."""

from __future__ import annotations

from collections.abc import Callable


def staged(progress: Callable[[int, int, str], None] | None, stage: str) -> Callable[[int, int], None] | None:
    """``progress`` with its stage named ("what, unit", as the app's bars and the command line's take it); None
    stays None."""
    if progress is None:
        return None
    report = progress
    return lambda done, total: report(done, total, stage)


def within(progress: Callable[[int, int], None] | None, start: int, total: int
           ) -> Callable[[int, int], None] | None:
    """A part's ``(done, its own total)`` reported as ``(start + done, total)`` of the whole: the parts of one job
    on one bar; None stays None."""
    if progress is None:
        return None
    report = progress
    return lambda done, _part: report(start + done, total)
