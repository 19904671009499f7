"""Streamlit pieces every page uses: the sidebar model picker and the shared model cache.

Models are loaded once per process through ``st.cache_resource`` and shared read-only by all
sessions. A load failure is shown as one ``st.error`` line and the page stops; it is never a
traceback, and nothing else in the app is affected.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

import streamlit as st

from bertscope import BertScopeError, LoadedModel, default_model, load_model
from bertscope.devices import available_devices
from bertscope.presets import PRESETS

OTHER = "Other (hub id or local folder)…"
MODEL_KEY = "model_choice"
CUSTOM_KEY = "model_custom"
DEVICE_KEY = "device"
DTYPE_KEY = "dtype"


@st.cache_resource(show_spinner=False)
def startup_default() -> tuple[str, str | None]:
    """Decided once per process: BERTSCOPE_MODEL, else bert-base-uncased if it can be had."""
    return default_model()


@st.cache_resource(show_spinner=False, max_entries=4)
def cached_model(name: str, device: str, dtype: str) -> LoadedModel:
    return load_model(name, device=device, dtype=dtype)


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain(text: str) -> str:
    """Escape Markdown so user text (a typed model id, a token) is shown, never rendered."""
    return _MARKDOWN.sub(r"\\\1", text)


def show_error(err: Exception) -> None:
    st.error(plain(str(err)))


def _init_state() -> None:
    if MODEL_KEY in st.session_state:
        return
    name, _ = startup_default()
    if name in PRESETS:
        st.session_state[MODEL_KEY] = name
    else:
        st.session_state[MODEL_KEY] = OTHER
        st.session_state[CUSTOM_KEY] = name


def sidebar() -> None:
    """Model picker and device, drawn in the sidebar of every page."""
    _init_state()
    with st.sidebar:
        st.subheader("Model")
        options = [*PRESETS, OTHER]
        st.selectbox(
            "Encoder", options, key=MODEL_KEY,
            format_func=lambda n: n if n == OTHER else f"{n}",
            help="Presets other than 'bundled' need the Hugging Face hub or a local cache copy.",
        )
        if st.session_state[MODEL_KEY] == OTHER:
            st.text_input("Hub id or local folder", key=CUSTOM_KEY, placeholder="org/model or /path")
        devices = ["auto", *available_devices()]
        st.selectbox("Device", devices, key=DEVICE_KEY, help="auto picks cuda, then mps, then cpu.")
        if any(d.startswith(("cuda", "mps")) for d in devices[1:]):
            st.selectbox("Precision", ["auto", "float16", "bfloat16"], key=DTYPE_KEY)


def chosen_model_name() -> str:
    choice = st.session_state.get(MODEL_KEY) or startup_default()[0]
    if choice == OTHER:
        return (st.session_state.get(CUSTOM_KEY) or "").strip()
    return choice


def fallback_notice() -> str | None:
    """The notice to show while the app runs on the bundled model because of the fallback."""
    name, notice = startup_default()
    return notice if chosen_model_name() == name else None


def model_key() -> tuple[str, str, str]:
    """(name, device, dtype) of the picked model: what the shared caches are keyed by."""
    return (
        chosen_model_name(),
        st.session_state.get(DEVICE_KEY, "auto"),
        st.session_state.get(DTYPE_KEY, "auto"),
    )


def current_model() -> LoadedModel | None:
    """The picked model, loaded once per process; None (with one error line) if it fails."""
    key = model_key()
    if not key[0]:
        st.info("Type a hub id (org/name) or a local model folder in the sidebar.")
        return None
    try:
        with st.spinner(f"Loading {key[0]}…"):
            return cached_model(*key)
    except BertScopeError as err:
        show_error(err)
        return None


class ResultStore:
    """A small least-recently-used store shared by all sessions, for results computed with
    visible progress (which a cached function may not draw)."""

    def __init__(self, limit: int) -> None:
        self._items: OrderedDict = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            return None

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)


@st.cache_resource(show_spinner=False)
def result_store(name: str, limit: int = 16) -> ResultStore:
    return ResultStore(limit)


@st.cache_resource(show_spinner=False, max_entries=64)
def cached_inspection(key: tuple[str, str, str], text: str, pair: str | None):
    """One forward pass per (model, text, pair), shared read-only across reruns and sessions."""
    from bertscope import inspect

    return inspect(cached_model(*key), text, pair)


def figure_downloads(fig, name: str) -> None:
    """PNG comes from the chart's own toolbar; this adds a self-contained HTML file."""
    st.download_button(
        "Download HTML", data=lambda: fig.to_html(include_plotlyjs=True, full_html=True),
        file_name=f"{name}.html", mime="text/html", key=f"download-{name}", on_click="ignore",
    )


def require_model() -> LoadedModel:
    """The picked model, or stop the page after its error line."""
    lm = current_model()
    if lm is None:
        st.stop()
    return lm


def planned(title: str, issue: int, what: str) -> None:
    """An honest page for a view that is not built yet."""
    st.title(title)
    st.info(f"Not built yet (issue #{issue}). When it lands this page will show: {what}")
