"""The one rule for a long job: it runs in a thread of its own, keyed by its parameters, so it **survives its tab**
(a closed tab, a reload, a page left for another) and whoever asks for the same parameters while it runs finds it
and watches it; its result then goes to the shared result store. Stop ends it when nobody else watches it (else the
session that pressed Stop only stops watching). It holds its budget slot until its thread ends.

Pages never use this directly: ``ResultStore.compute`` starts and watches jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from bertscope.errors import BertScopeError


class Stopped(BertScopeError):
    """A job's work ended by Stop (raised inside the work at its next progress report)."""


@dataclass(eq=False)
class Job:
    """One running computation: its progress as its work reports it, and its end."""

    key: Hashable
    what: str
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    progress: tuple[int, int, str | None] = (0, 0, None)  # (done, total, stage) as last reported
    result: Any = None
    error: BaseException | None = None
    watchers: int = 0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, done: int, total: int, stage: str | None = None) -> None:
        """The work's progress callback: records where it is, and ends the work when Stop was pressed."""
        self.progress = (done, total, stage)
        if self.stop.is_set():
            raise Stopped(f"Stopped ({self.what.split(',')[0].lower()}). Nothing of it was kept.")

    def watch(self) -> None:
        with self.lock:
            self.watchers += 1

    def leave(self) -> None:
        """A session stops watching."""
        with self.lock:
            self.watchers = max(0, self.watchers - 1)

    def stop_unless_watched(self) -> bool:
        """Stop: the job ends (at its next progress report) when no session watches it any more. True when it ends."""
        with self.lock:
            if self.watchers == 0:
                self.stop.set()
            return self.stop.is_set()


class Jobs:
    """The jobs running in this process, by key (a job leaves when it ends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[Hashable, Job] = {}

    def find(self, key: Hashable) -> Job | None:
        with self.lock:
            return self.running.get(key)

    def start(self, key: Hashable, what: str, work: Callable[[Callable[..., None]], Any],
              finished: Callable[[Job], None]) -> Job:
        """``work(progress)`` in a new thread (with this session's script context, so what it reads of the session
        stays readable), ``finished(job)`` when it ends however it ends (the slot's release, the result's store)."""
        job = Job(key, what)
        context = get_script_run_ctx()

        def run() -> None:
            try:
                job.result = work(job.report)
            except BaseException as err:  # noqa: BLE001 - handed to whoever watches, in their script thread
                job.error = err
            finally:
                with self.lock:
                    self.running.pop(key, None)
                try:
                    finished(job)
                finally:
                    job.done.set()

        with self.lock:
            self.running[key] = job
        thread = threading.Thread(target=run, name=f"job-{what[:40]}", daemon=True)
        if context is not None:
            add_script_run_ctx(thread, context)
        thread.start()
        return job


@st.cache_resource(show_spinner=False)
def running_jobs() -> Jobs:
    """The one registry of this process (shared by every session)."""
    return Jobs()
