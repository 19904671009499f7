"""What the AppTest files share: the app's entry point, starting it on a model or a link, reading texts."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager

from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT

APP = str(ROOT / "app.py")


def start(monkeypatch, model: str | None) -> AppTest:
    if model is None:
        monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)
    else:
        monkeypatch.setenv("BERTSCOPE_MODEL", model)
    return AppTest.from_file(APP, default_timeout=180).run()


def fill(at: AppTest, text: str) -> AppTest:
    """Type into the Masked page's text and press its Run button (the text sits in a form)."""
    at.text_area(key="mlm_text").input(text)
    next(b for b in at.button if b.label == "Run" and "mlm_fill_form" in b.id).click()
    return at.run()


def texts(elements) -> list[str]:
    """Element texts as a reader sees them (Markdown backslash escapes removed)."""
    return [re.sub(r"\\(.)", r"\1", str(e.value)) for e in elements]


def open_link(monkeypatch, default_model, **params) -> AppTest:
    """The app opened by a link (``params`` in its address) on the home page, which runs no page's job."""
    if default_model is None:
        monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)
    else:
        monkeypatch.setenv("BERTSCOPE_MODEL", default_model)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(params)
    return at.run()


def start_with_url(monkeypatch, default_model, page, **params) -> AppTest:
    return open_link(monkeypatch, default_model, **params).switch_page(page).run()


def address(at: AppTest) -> dict[str, str]:
    """The app's address as a visitor would copy it."""
    return {k: (v[0] if isinstance(v, list) else v) for k, v in ((k, at.query_params[k]) for k in at.query_params)}


@contextmanager
def stopped_while_running(at: AppTest, store: str, key, link: str):
    """The state a visitor leaves by pressing Stop on a link's job while it still runs: the link's request made
    (``link``: its ``link_asks`` name), the job marked stopped in this session, and the job still in the registry
    (it ends at its next progress report). The job ends when the block does."""
    from bertscope.app.kit.jobs import running_jobs
    from bertscope.app.kit.results import stop_mark

    release = threading.Event()
    job = running_jobs().start((store, key), "a job being stopped", lambda progress: release.wait(60), lambda j: None)
    at.session_state[f"_link_{link}"] = None
    at.session_state["_stopped_jobs"] = {stop_mark(store, key)}
    try:
        yield
    finally:
        release.set()
        job.done.wait(30)
