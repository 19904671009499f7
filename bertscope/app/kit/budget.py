"""One cost budget for every costly job of a hosted demo, kept by the server, not the browser.

Enforced where a job starts (``ResultStore.compute(..., costly="head statistics")``), so a page
cannot forget it:
- it counts computations, not views: a result served from the shared cache costs nothing, and one
  job's variants (``charge_key``: the UMAP of the same vectors at another layer) are charged once;
- it is kept per visitor as the server sees them (the connection's address, or the header named by
  ``BERTSCOPE_VISITOR_HEADER`` behind a proxy that sets it, e.g. ``X-Forwarded-For``), in this
  process, so reloading the page does not reset it;
- a server-wide cap on costly jobs running at once (``BERTSCOPE_COSTLY_AT_ONCE``; 2 on a demo)
  keeps one visitor from starving the rest;
- a refusal says when the next run is possible.
Locally the budget is 10,000 jobs per 10 minutes and there is no cap: it never shows.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterator

import streamlit as st

from bertscope.app.kit.limits import Limits, demo
from bertscope.errors import BertScopeError

WINDOW_S = 600.0


class BudgetRefused(BertScopeError):
    """A costly job refused by the budget (the message says when to try again)."""


def _wait_words(seconds: float) -> str:
    seconds = max(1, int(round(seconds)))
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


class CostBudget:
    """Costly jobs per visitor in a sliding window, and jobs running at once, for this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.charges: dict[str, deque[tuple[float, Hashable]]] = {}
        self.running = 0

    def _recent(self, visitor: str, now: float) -> deque[tuple[float, Hashable]]:
        charges = self.charges.setdefault(visitor, deque())
        while charges and now - charges[0][0] >= WINDOW_S:
            charges.popleft()
        return charges

    def start(self, visitor: str, action: str, charge_key: Hashable, per_window: int, at_once: int | None,
              grouped: bool = False, now: float | None = None) -> bool:
        """Count the job in (or refuse it in one line); True when it was charged. ``grouped``: a
        variant of a job (same ``charge_key``) charged within the window is free; otherwise every
        computation is charged, the same job computed again too."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if at_once is not None and self.running >= at_once:
                raise BudgetRefused(f"The server is running {self.running} costly jobs for its visitors; "
                                    f"try the {action} again in a minute.")
            charges = self._recent(visitor, now)
            charged = grouped and any(key == charge_key for _, key in charges)
            if not charged and len(charges) >= per_window:
                wait = WINDOW_S - (now - charges[0][0])
                raise BudgetRefused(f"This demo runs {per_window} costly jobs per visitor in 10 minutes; the next "
                                    f"{action} is possible in {_wait_words(wait)}.")
            if not charged:
                charges.append((now, charge_key))
            self.running += 1
            return not charged

    def finish(self, visitor: str, charge_key: Hashable, refund: bool) -> None:
        """The job ended; ``refund``: it computed nothing (its input was refused), so it costs nothing."""
        with self.lock:
            self.running = max(0, self.running - 1)
            if refund:
                charges = self.charges.get(visitor, deque())
                for item in reversed(charges):
                    if item[1] == charge_key:
                        charges.remove(item)
                        break


@st.cache_resource(show_spinner=False)
def cost_budget() -> CostBudget:
    """The one budget of this process (shared by every session)."""
    return CostBudget()


def visitor() -> str:
    """Who is asking, as the server sees them (not the browser session: a reload keeps it)."""
    header = os.environ.get("BERTSCOPE_VISITOR_HEADER", "").strip()
    if header:
        value = st.context.headers.get(header)
        if isinstance(value, str) and value.split(",")[0].strip():
            return value.split(",")[0].strip()
    address = st.context.ip_address
    return address if isinstance(address, str) and address else "local"  # no connection (a test): one visitor


def jobs_at_once() -> int | None:
    raw = os.environ.get("BERTSCOPE_COSTLY_AT_ONCE", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return 2 if demo() else None


@contextlib.contextmanager
def costly_job(action: str, charge_key: Hashable, grouped: bool = False) -> Iterator[None]:
    """Inside the block a costly job runs, charged to this visitor (refused in one line when over)."""
    who = visitor()
    charged = cost_budget().start(who, action, charge_key, Limits.expensive_per_10_min, jobs_at_once(), grouped)
    refund = False
    try:
        yield
    except BertScopeError:
        refund = charged  # refused input: nothing was computed
        raise
    finally:
        cost_budget().finish(who, charge_key, refund)
