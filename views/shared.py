"""Streamlit pieces every page uses: the sidebar model picker and the shared model cache.

Models are loaded once per process through ``st.cache_resource`` and shared read-only by all
sessions. A load failure is shown as one ``st.error`` line and the page stops; it is never a
traceback, and nothing else in the app is affected.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import streamlit as st

from bertscope import BertScopeError, LoadedModel, default_model, load_model
from bertscope.devices import available_devices
from bertscope.bundled import BUNDLED_PACKAGE
from bertscope.bundled_multilingual import MULTILINGUAL
from bertscope.bundled_multilingual import PACKAGE as MULTILINGUAL_PACKAGE
from bertscope.presets import BUNDLED, PRESETS

OTHER = "Other (hub id or local folder)…"
# Every chart's toolbar exports a PNG at twice the screen resolution.
PLOT_CONFIG = {"toImageButtonOptions": {"format": "png", "scale": 2}, "displaylogo": False}
_TRUTHY = {"1", "true", "yes", "on"}
DEFAULT_ALLOWLIST = ("bert-base-uncased,bert-base-multilingual-cased,distilbert-base-uncased,roberta-base,"
                     "bundled,bundled-multilingual,bundled-mlm")


def demo() -> bool:
    """Hosted demo mode (BERTSCOPE_DEMO=1): allowlisted models only, no local paths, small inputs."""
    return os.environ.get("BERTSCOPE_DEMO", "").strip().lower() in _TRUTHY


def demo_allowlist() -> tuple[str, ...]:
    names = os.environ.get("BERTSCOPE_ALLOWLIST", DEFAULT_ALLOWLIST)
    return tuple(m.strip() for m in names.split(",") if m.strip()) or ("bundled",)


MAX_RESIDENT_MODELS = max(1, int(os.environ.get("BERTSCOPE_MAX_MODELS", "2" if demo() else "4")))


class _Limits:
    """Input caps: generous locally, tight on a hosted demo (read at use, so tests can switch)."""

    @property
    def input_chars(self) -> int:
        return 2_000 if demo() else 100_000

    @property
    def corpus_lines(self) -> int:
        return 500 if demo() else 5_000

    @property
    def upload_bytes(self) -> int:
        return 1_000_000 if demo() else 20_000_000

    @property
    def bertviz_bytes(self) -> int:  # one bertviz page (it holds every weight as JSON text)
        return int(float(os.environ.get("BERTSCOPE_BERTVIZ_MB", "3" if demo() else "8")) * 2**20)

    @property
    def expensive_per_10_min(self) -> int:  # head statistics runs and UMAP maps per session
        return 5 if demo() else 10_000


Limits = _Limits()
MODEL_KEY = "model_choice"
CUSTOM_KEY = "model_custom"
DEVICE_KEY = "device"
DTYPE_KEY = "dtype"


@st.cache_resource(show_spinner=False)
def startup_default() -> tuple[str, str | None]:
    """Decided once per process: BERTSCOPE_MODEL, else bert-base-uncased if it can be had."""
    return default_model()


@st.cache_resource(show_spinner=False, max_entries=MAX_RESIDENT_MODELS)
def cached_model(name: str, device: str, dtype: str) -> LoadedModel:
    """At most MAX_RESIDENT_MODELS stay loaded (least recently used goes first)."""
    if demo() and name not in demo_allowlist():
        raise BertScopeError(f"This demo serves only: {', '.join(demo_allowlist())}.")
    lm = load_model(name, device=device, dtype=dtype)
    if lm.device.type == "cuda":  # hand back what an evicted model left in the CUDA cache
        import torch

        torch.cuda.empty_cache()
    return lm


def check_text(text: str, what: str = "text") -> None:
    """The page's cap on one input (tighter on a hosted demo)."""
    if text and len(text) > Limits.input_chars:
        raise BertScopeError(f"The {what} has {len(text):,} characters; this app takes up to "
                             f"{Limits.input_chars:,}.")


def check_upload(uploaded) -> None:
    if uploaded is not None and uploaded.size > Limits.upload_bytes:
        raise BertScopeError(f"The upload has {uploaded.size:,} bytes; this app takes up to "
                             f"{Limits.upload_bytes:,}.")


def allow_expensive(action: str) -> None:
    """A per-session budget for costly actions (head statistics, UMAP) on a shared server."""
    now = time.monotonic()
    recent = [t for t in st.session_state.get("_expensive", []) if now - t < 600]
    if len(recent) >= Limits.expensive_per_10_min:
        raise BertScopeError(f"This session has run {len(recent)} costly actions in 10 minutes; "
                             f"wait a few minutes before another {action}.")
    st.session_state["_expensive"] = [*recent, now]


# ---- shareable state: a page's inputs live in the URL, so a copied link reproduces the view


def to_bool(value: str) -> bool:
    if value.lower() in _TRUTHY | {"0", "false", "no", "off"}:
        return value.lower() in _TRUTHY
    raise ValueError(value)


def from_url(param: str, key: str, convert=str, valid=None) -> None:
    """Once per session, before the widget ``key`` is drawn: take its value from ?param=."""
    restored = st.session_state.setdefault("_from_url", set())
    if key in restored:
        return
    restored.add(key)
    if param not in st.query_params:
        return
    raw = st.query_params[param]
    try:
        value = convert(raw)
        ok = valid is None or valid(value)
    except (TypeError, ValueError):
        ok = False
    if ok:
        st.session_state[key] = value
    else:
        st.warning(plain(f"Ignored the link's {param}={raw[:40]}: not a valid value here."))


def to_url(**params) -> None:
    """Write the page's current inputs into the URL (None leaves a parameter out)."""
    for name, value in params.items():
        if value is None or value == "":
            st.query_params.pop(name, None)
        else:
            text = str(int(value)) if isinstance(value, bool) else str(value)
            if st.query_params.get(name) != text:
                st.query_params[name] = text


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain(text: str) -> str:
    """Escape Markdown so user text (a typed model id, a token) is shown, never rendered."""
    return _MARKDOWN.sub(r"\\\1", text)


def show_error(err: Exception) -> None:
    st.error(plain(str(err)))


def model_options() -> list[str]:
    if demo():
        return list(demo_allowlist())
    return [*PRESETS, OTHER]


def _init_state() -> None:
    if MODEL_KEY in st.session_state:
        return
    name, _ = startup_default()
    linked = st.query_params.get("model")
    if linked:
        name = linked
    if name in model_options() and name != OTHER:
        st.session_state[MODEL_KEY] = name
    elif demo():
        allowed = demo_allowlist()
        if linked:
            st.warning(plain(f"Ignored the link's model={linked[:60]}: this demo serves {', '.join(allowed)}."))
        fallback = startup_default()[0]
        st.session_state[MODEL_KEY] = fallback if fallback in allowed else allowed[0]
    else:
        st.session_state[MODEL_KEY] = OTHER
        st.session_state[CUSTOM_KEY] = name


def sidebar() -> None:
    """Model picker and device, drawn in the sidebar of every page."""
    _init_state()
    with st.sidebar:
        st.subheader("Model")
        st.selectbox(
            "Encoder", model_options(), key=MODEL_KEY,
            help="Presets other than 'bundled' need the Hugging Face hub or a local cache copy.",
        )
        if st.session_state[MODEL_KEY] == OTHER:
            st.text_input("Hub id or local folder", key=CUSTOM_KEY, placeholder="org/model or /path")
        if demo():
            st.caption("Hosted demo: a fixed list of models and smaller inputs.")
        devices = ["auto", *available_devices()]
        st.selectbox("Device", devices, key=DEVICE_KEY, help="auto picks cuda, then mps, then cpu.")
        if any(d.startswith(("cuda", "mps")) for d in devices[1:]):
            st.selectbox("Precision", ["auto", "float16", "bfloat16"], key=DTYPE_KEY)


def chosen_model_name() -> str:
    choice = st.session_state.get(MODEL_KEY) or startup_default()[0]
    if choice == OTHER:
        choice = (st.session_state.get(CUSTOM_KEY) or "").strip()
    if choice and choice != startup_default()[0]:
        to_url(model=choice)
    else:
        st.query_params.pop("model", None)
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
    from bertscope.result_cache import ResultCache

    return ResultCache(cache_budget_bytes())


class ResultStore:
    """One page's corner of the shared cache: keys are namespaced, bytes are shared."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self, key):
        return shared_results().get((self.name, key))

    def put(self, key, value) -> None:
        shared_results().put((self.name, key), value)

    def get_or_compute(self, key, compute):
        return shared_results().get_or_compute((self.name, key), compute)


def result_store(name: str) -> ResultStore:
    return ResultStore(name)


def cached_inspection(key: tuple[str, str, str], text: str, pair: str | None):
    """One forward pass per (model, text, pair), shared read-only across reruns and sessions.

    Kept lean for the attention views: attentions in float16 (144 MiB -> 72 MiB for BERT-base
    at 512 tokens), no hidden states, no MLM logits.
    """
    from bertscope import inspect

    return result_store("inspection").get_or_compute((key, text, pair), lambda: inspect(
        cached_model(*key), text, pair, with_logits=False, with_hidden_states=False, precision="float16"))


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


# offline preset -> the package it is built from (bundled-mlm: the bundled package + a shipped delta)
BUNDLED_PACKAGES = {BUNDLED: BUNDLED_PACKAGE, MULTILINGUAL: MULTILINGUAL_PACKAGE, "bundled-mlm": BUNDLED_PACKAGE}


def obtainable(name: str) -> bool:
    """Whether ``name`` could be loaded now without a long wait (bundled, cached, or hub up)."""
    from bertscope.hub import hub_reachable, is_cached

    if demo() and name not in demo_allowlist():
        return False
    if name in BUNDLED_PACKAGES:
        import importlib.util

        return importlib.util.find_spec(BUNDLED_PACKAGES[name]) is not None
    return Path(name).is_dir() or is_cached(name) or hub_reachable()


@st.cache_resource(show_spinner=False)
def warm_umap_in_background() -> None:
    """Compile UMAP's numba kernels once per process, off the request path
    (BERTSCOPE_WARM_UMAP=0 turns it off, e.g. in tests)."""
    if os.environ.get("BERTSCOPE_WARM_UMAP", "1").strip().lower() in {"0", "false", "no", "off"}:
        return
    from bertscope.projection import warm_umap

    threading.Thread(target=warm_umap, name="umap-warmup", daemon=True).start()
