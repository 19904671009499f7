"""A page's fixed furniture: Markdown-safe text, one-line errors (never a traceback), chart config
and downloads."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import streamlit as st

from bertscope.errors import BertScopeError

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


def figure_downloads(fig, name: str) -> None:
    """PNG comes from the chart's own toolbar; this adds a self-contained HTML file."""
    st.download_button(
        "Download HTML", data=lambda: fig.to_html(include_plotlyjs=True, full_html=True),
        file_name=f"{name}.html", mime="text/html", key=f"download-{name}", on_click="ignore",
    )
