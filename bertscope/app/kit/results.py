"""Results shared by every session of the process, within one byte budget (``BERTSCOPE_CACHE_MB``),
and the one way a page computes something slow: from the store, or now with a progress bar."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import streamlit as st

from bertscope.analysis.projection import warm_umap
from bertscope.app.kit.budget import BudgetRefused, Slot, charge
from bertscope.app.kit.chrome import PageEnds, show_error
from bertscope.app.kit.estimates import record
from bertscope.app.kit.jobs import Job, Stopped, running_jobs
from bertscope.app.kit.limits import demo
from bertscope.runtime.result_cache import ResultCache

T = TypeVar("T")

def cache_budget_bytes() -> int:
    """BERTSCOPE_CACHE_MB (default 1,024 locally, 384 on a hosted demo): every result the
    pages share across sessions (inspections, statistics, maps, probe runs) fits in it."""
    default = "384" if demo() else "1024"
    try:
        megabytes = float(os.environ.get("BERTSCOPE_CACHE_MB", default) or default)
    except ValueError:
        megabytes = float(default)
    return int(max(16.0, megabytes) * 2**20)


@st.cache_resource(show_spinner=False)
def shared_results():
    """The one byte-bounded, least-recently-used cache of this process."""
    return ResultCache(cache_budget_bytes())


class StageClock:
    """Time left in a job's stage, measured on this machine from the stage's own steps (no constant
    guessed in advance). Says nothing until a step is done and a second has passed.

    Steps need not cost alike: the passes over a corpus run its sentences shortest first, so a stage's
    later steps cost more than its first (issue 54: "about 30 s left" at 192 of 780, done 77 s later).
    So the clock fits the stage's elapsed time to the steps done, T(d) = a·d + b·d²/2 (each step's cost
    growing linearly, b ≥ 0, least squares over the reports so far), and says the range from "the next
    steps cost what the recent ones did" to "their cost keeps growing as it has"; one figure when the
    two agree within a third."""

    AGREE = 1.34  # high / low under this: one figure
    RECENT = 0.25  # the share of the stage's reports the recent rate is read over

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now, self.stage = now, None
        self.points: list[tuple[int, float]] = []  # (steps done since the stage began, seconds since)
        self.first = 0

    def estimate(self, stage: str, done: int, total: int) -> tuple[float, float] | None:
        """(low, high) seconds left, or None while nothing is measured."""
        if stage != self.stage:  # a new stage: its own clock, from its first report
            self.stage, self.first, self.start = stage, done, self.now()
            self.points = [(0, 0.0)]
            return None
        elapsed, steps = self.now() - self.start, done - self.first
        if steps <= 0 or elapsed < 1.0 or done >= total:
            return None
        if steps > self.points[-1][0]:
            self.points.append((steps, elapsed))
        left_steps, end = total - done, total - self.first
        back = self.points[max(0, int(len(self.points) * (1 - self.RECENT)) - 1)]
        recent = (elapsed - back[1]) / (steps - back[0]) if steps > back[0] else elapsed / steps
        low = recent * left_steps
        d = np.array([p[0] for p in self.points], float)
        t = np.array([p[1] for p in self.points], float)
        if len(self.points) >= 3:
            (a, b), *_ = np.linalg.lstsq(np.stack([d, d ** 2 / 2], 1), t, rcond=None)
            a, b = (max(a, 0.0), max(b, 0.0)) if a >= 0 or b >= 0 else (elapsed / steps, 0.0)
            trend = a * (end - steps) + b * (end ** 2 - steps ** 2) / 2
        else:
            trend = elapsed / steps * left_steps
        return min(low, trend), max(low, trend)

    def left(self, stage: str, done: int, total: int) -> str | None:
        found = self.estimate(stage, done, total)
        if found is None:
            return None
        low, high = found
        if high <= max(low, 1.0) * self.AGREE:
            return f"about {_duration(high)} left"
        return f"{_duration(low)} to {_duration(high)} left"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class ResultStore:
    """One page's corner of the shared cache: keys are namespaced, bytes are shared."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self, key):
        return shared_results().get((self.name, key))

    def put(self, key, value) -> None:
        shared_results().put((self.name, key), value)

    def last(self):
        """The last result this session computed or was shown here (for a page that refuses new input
        in one line and keeps what was there), or None."""
        key = st.session_state.get(("_last_result", self.name))
        return self.get(key) if key is not None else None

    def showing(self, key) -> bool:
        """Whether what this session has on screen here is ``key``'s result (a refusal shows the last one instead)."""
        return st.session_state.get(("_last_result", self.name)) == key

    def refuse(self, message: str, show: Callable[[T], None]) -> None:
        """One line (``message`` as given: Markdown the caller has escaped where it must), and below it the last
        result this session had here, drawn by ``show``, unchanged."""
        st.warning(message)
        kept = self.last()
        if kept is not None:
            st.caption("Below: your last result here, with the settings it was computed with.")
            show(kept)

    def get_or_compute(self, key, compute):
        return shared_results().get_or_compute((self.name, key), compute)

    def compute(self, key, work: Callable[..., T], what: str, asked: bool = False, *, costly: str | None,
                charge_key=None, wait: str | None = None, measure: tuple[str, int] | None = None,
                optional: bool = False) -> T | None:
        """The stored result of ``key``, or ``work(progress)`` as a job (``kit.jobs``) watched under a progress bar
        that says ``what: done/total`` (removed when done); a job of several stages passes its own label,
        ``progress(done, total, "Probes, layers")``.

        **One rule for every long job**: it runs in its own thread keyed by its parameters, so it survives its tab
        (closed, reloaded, left for another page); whoever asks for the same parameters while it runs finds it and
        watches it, and its result goes to the shared store, where a later visit finds it. A Stop button beside the
        bar ends the job at its next progress report when nobody else watches it (else this session stops
        watching), keeps nothing half-done, and marks it stopped here so the rerun does not start it again; the
        page then says so and offers to run it again. ``asked``: the user asked for this run just now (a form's
        button), which starts a stopped job again.

        ``costly``: the job's name on a hosted demo's cost budget (``kit.budget``), or None for a job that costs
        about a view; every call says which. A started job is charged (whatever ends it) and holds its slot until
        its thread ends; a stored result or a running job watched is not charged; ``charge_key`` groups variants
        charged once (default: ``key``). A refusal is one line; the last result this session computed here stays on
        screen below it.

        ``wait``: a job that runs only when asked (a page or tab does costly work only when its button is pressed):
        when nothing is stored or running and ``asked`` is false, ``wait`` is shown (one line saying which button to
        press and what it will cost) and None is returned.

        ``measure``: (the model's name, the job's size in the unit its cost grows with): a job that runs to its end
        records its rate (``kit.estimates``), which the next wait text of this kind states before the press.

        ``optional``: what the page can draw without (the graph's hover examples): once stopped, or refused by the
        budget, None is returned below the line that says so, and the rest of the page is drawn, rather than the page
        ending there. Otherwise the page ends on the line (``chrome.PageEnds``: after the callers' ``finally`` blocks
        have run, so a link's flag they take out of the address reaches the browser). Call it from a page's run, not
        from an ``st.fragment`` (a fragment's rerun does not pass the router's ``page_ends``)."""
        found = self.get(key)
        if found is not None:
            st.session_state[("_last_result", self.name)] = key
            return found
        job = running_jobs().find((self.name, key))
        if job is None and wait is not None and not asked:
            st.info(wait)
            return None
        stopped = st.session_state.setdefault("_stopped_jobs", set())
        mark = stop_mark(self.name, key)
        if asked:
            stopped.discard(mark)
        if mark in stopped:
            st.info(f"Stopped ({what.split(',')[0].lower()}). Nothing of it was kept.")
            if st.button("Run it again", key=f"again-{self.name}", icon=":material/replay:"):
                stopped.discard(mark)
                st.rerun()
            if optional:
                return None
            raise PageEnds()
        if job is None:
            charge_of = (key, False) if charge_key is None else (charge_key, True)
            try:
                slot = charge(costly, *charge_of) if costly else None
            except BudgetRefused as refused:
                if optional:  # the page goes on without it: one line
                    show_error(refused)
                    return None
                return self._refused(refused, charge_of[0])
            job = running_jobs().start((self.name, key), what, work,
                                       lambda ended: self._ended(ended, key, slot, measure))
        result = self._watch(job, what, mark)
        st.session_state[("_last_result", self.name)] = key
        return result

    def _ended(self, job: Job, key, slot: Slot | None, measure: tuple[str, int] | None) -> None:
        """In the job's thread, when it ends: its slot goes back, its result (if any) is stored for every session,
        and a whole run's rate is recorded for the next estimate."""
        if slot is not None:
            slot.release()
        if job.error is None:
            self.put(key, job.result)
            if measure is not None:
                record(self.name, measure[0], measure[1], time.monotonic() - job.started)

    def _watch(self, job: Job, what: str, mark):
        """Show ``job``'s progress until it ends (this script is interrupted if the tab closes: the job goes on)."""
        bar = st.progress(0.0, text=f"{what}…")
        stop = st.empty()
        stop.button("Stop", key=f"stop-{self.name}", icon=":material/stop_circle:", on_click=_stop_job,
                    args=(job, mark), help="Stops this job at its next step (or, if another session watches it too, "
                                           "stops showing it here); the page stays usable and keeps nothing half-done.")
        note = st.empty()
        note.caption("This job goes on if you close the tab or leave the page: ask for the same settings again to "
                     "find it, or its result.")
        clock = StageClock()
        job.watch()
        shown, pause = None, 0.005
        try:
            while not job.done.wait(pause):  # a short job's result at once, a long one looked at four times a second
                pause = min(0.25, pause * 2)
                done, total, stage = job.progress
                left = clock.left(stage or what, done, total) if total else None
                text = (f"{stage or what}: {done:,}/{total:,}" if total else f"{what}…") + (f" · {left}" if left else "")
                text += f" · {time.monotonic() - job.started:.0f} s so far"
                if text != shown:  # at least once a second: also where a closed tab or a Stop ends this script
                    bar.progress(min(1.0, done / max(total, 1)), text=text)
                    shown = text
        finally:
            job.leave()
            bar.empty()
            stop.empty()
            note.empty()
        if isinstance(job.error, Stopped):
            st.session_state.setdefault("_stopped_jobs", set()).add(mark)
            st.rerun()
        if job.error is not None:
            raise job.error
        return job.result

    def _refused(self, refused: BudgetRefused, charge_key):
        last = st.session_state.get(("_last_result", self.name))
        kept = self.get(last) if last is not None else None
        if kept is None:
            raise refused
        said = (st.session_state.get("_run"), charge_key)  # one line per refused job and rerun
        if st.session_state.get("_refusal_said") != said:
            st.session_state["_refusal_said"] = said
            show_error(refused)
            st.caption("Below: your last result on this page, with the settings it was computed with.")
        return kept


def stop_mark(store: str, key) -> tuple[str, str]:
    """How a session marks the job of ``key`` in ``store`` as stopped (its ``_stopped_jobs``): a short, hashable
    name for any key."""
    return store, hashlib.sha256(repr(key).encode()).hexdigest()


def _stop_job(job: Job, mark) -> None:
    """Stop's callback: this session no longer watches the job (its interrupted run has left it already); the job
    ends if nobody else watches it."""
    st.session_state.setdefault("_stopped_jobs", set()).add(mark)
    job.stop_unless_watched()


def new_run() -> None:
    """Count the session's reruns (the router calls this first): a refusal is said once per rerun."""
    st.session_state["_run"] = st.session_state.get("_run", 0) + 1


def result_store(name: str) -> ResultStore:
    return ResultStore(name)


def cached_inspection(lm, key: tuple[str, str, str], text: str, pair: str | None):
    """One forward pass per (model, text, pair), shared read-only across reruns and sessions.

    Kept lean for the attention views: attentions in float16 (144 MiB -> 72 MiB for BERT-base
    at 512 tokens), no hidden states, no MLM logits.
    """
    from bertscope import inspect

    return result_store("inspection").get_or_compute((key, text, pair), lambda: inspect(
        lm, text, pair, with_logits=False, with_hidden_states=False, precision="float16"))


@st.cache_resource(show_spinner=False)
def warm_umap_in_background() -> None:
    """Compile UMAP's numba kernels once per process, off the request path
    (BERTSCOPE_WARM_UMAP=0 turns it off, e.g. in tests)."""
    if os.environ.get("BERTSCOPE_WARM_UMAP", "1").strip().lower() in {"0", "false", "no", "off"}:
        return
    threading.Thread(target=warm_umap, name="umap-warmup", daemon=True).start()
