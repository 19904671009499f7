"""One cost budget for every costly job of a hosted demo, kept by the server, not the browser.

Enforced where a job starts (``ResultStore.compute(..., costly="head statistics")``, a model load, a
training run), so a page cannot forget it:
- **work done is charged**: a page checks its inputs before the job starts; once it starts, it is charged
  whatever happens to it (an error, a Stop, a closed tab). Only a refusal by the budget itself costs nothing;
- it counts computations, not views: a result served from the shared cache costs nothing, and one
  job's variants (``charge_key``: the UMAP of the same vectors at another layer) are charged once;
- it is kept per visitor as the server sees them (``visitor``: the connection's address, or the client's
  address as the operator's trusted proxy wrote it), in this process, so reloading the page does not reset it;
  a visitor's entry goes when its last charge leaves the window;
- a server-wide cap on costly jobs running at once (``BERTSCOPE_COSTLY_AT_ONCE``; 2 on a demo) keeps one visitor
  from starving the rest; a job holds its slot for its whole run (a training run: until its thread ends);
- a refusal says when the next run is possible.
Locally the budget is 10,000 jobs per 10 minutes and there is no cap: it never shows.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterator, Mapping

import streamlit as st

from bertscope.app.kit.limits import Limits, demo
from bertscope.errors import BertScopeError

WINDOW_S = 600.0
FORWARDED = "x-forwarded-for"


class BudgetRefused(BertScopeError):
    """A costly job refused by the budget (the message says when to try again)."""


def _wait_words(seconds: float) -> str:
    seconds = max(1, int(round(seconds)))
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


class Slot:
    """A running job's place under the cap on jobs at once, held until ``release`` (idempotent: a job's end and
    its page's cleanup may both release it)."""

    def __init__(self, budget: CostBudget) -> None:
        self._budget, self._held = budget, True

    def release(self) -> None:
        with self._budget.lock:
            if self._held:
                self._held = False
                self._budget.running = max(0, self._budget.running - 1)


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

    def _expire(self, now: float) -> None:
        """Forget visitors whose last charge has left the window (the table grows with visitors of the last ten
        minutes, not with every address ever seen)."""
        for visitor in [v for v, c in self.charges.items() if not c or now - c[-1][0] >= WINDOW_S]:
            del self.charges[visitor]

    def start(self, visitor: str, action: str, charge_key: Hashable, per_window: int, at_once: int | None,
              grouped: bool = False, now: float | None = None) -> Slot:
        """Charge the job (or refuse it in one line, charging nothing) and take a slot under ``at_once``.
        ``grouped``: a variant of a job (same ``charge_key``) charged within the window is free; otherwise every
        computation is charged, the same job computed again too. The charge stays whatever the job does next."""
        now = time.monotonic() if now is None else now
        with self.lock:
            self._expire(now)
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
            return Slot(self)

    def spent(self, visitor: str, now: float | None = None) -> int:
        """Jobs charged to ``visitor`` in the window."""
        now = time.monotonic() if now is None else now
        with self.lock:
            return len(self._recent(visitor, now)) if visitor in self.charges else 0


@st.cache_resource(show_spinner=False)
def cost_budget() -> CostBudget:
    """The one budget of this process (shared by every session)."""
    return CostBudget()


def trusted_proxies() -> int:
    """BERTSCOPE_TRUSTED_PROXIES: how many proxies of the operator's stand before the app, each appending the
    address it was reached from to X-Forwarded-For (default 1)."""
    raw = os.environ.get("BERTSCOPE_TRUSTED_PROXIES", "1").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def client_address(header: str, values: list[str], proxies: int) -> str | None:
    """The client's address in the header the operator's proxy writes, or None when it is not there.

    X-Forwarded-For is a list the client starts (any value it likes) and each proxy extends with the address it
    was reached from; only the entries the operator's ``proxies`` wrote can be believed, so the client is the
    ``proxies``-th entry from the right, never the leftmost. Another header (X-Real-IP, CF-Connecting-IP) is one
    the proxy sets whole: its last value is the proxy's."""
    entries = [e.strip() for value in values for e in value.split(",") if e.strip()]
    if header.strip().lower() == FORWARDED:
        return entries[-proxies] if len(entries) >= proxies else None
    return entries[-1] if entries else None


def _header_values(headers: Mapping, name: str) -> list[str]:
    every = getattr(headers, "get_all", None)
    values = every(name) if every is not None else [headers.get(name)]
    return [v for v in values if isinstance(v, str)]


def visitor() -> str:
    """Who is asking, as the server sees them (not the browser session: a reload keeps it). Behind a proxy, the
    operator names the header it writes (``BERTSCOPE_VISITOR_HEADER``) and how many proxies stand before the app
    (``BERTSCOPE_TRUSTED_PROXIES``): see ``client_address``. Where that header lacks the proxy's entry, the
    connection's address stands (every such request one visitor: stricter, never looser)."""
    header = os.environ.get("BERTSCOPE_VISITOR_HEADER", "").strip()
    if header:
        found = client_address(header, _header_values(st.context.headers, header), trusted_proxies())
        if found:
            return found[:64]
    address = st.context.ip_address
    return address if isinstance(address, str) and address else "local"  # no connection (a test): one visitor


def jobs_at_once() -> int | None:
    raw = os.environ.get("BERTSCOPE_COSTLY_AT_ONCE", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return 2 if demo() else None


def charge(action: str, charge_key: Hashable, grouped: bool = False) -> Slot:
    """Charge this visitor for a costly job that starts now, and take its slot (refused in one line when over):
    the caller releases the slot when the job ends (a background job: from its thread)."""
    return cost_budget().start(visitor(), action, charge_key, Limits.expensive_per_10_min, jobs_at_once(), grouped)


@contextlib.contextmanager
def costly_job(action: str, charge_key: Hashable, grouped: bool = False) -> Iterator[None]:
    """Inside the block a costly job runs, charged to this visitor whatever happens inside (an error, a Stop)."""
    slot = charge(action, charge_key, grouped)
    try:
        yield
    finally:
        slot.release()
