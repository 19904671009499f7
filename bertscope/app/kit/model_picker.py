"""The sidebar's model picker and the one shared copy of each model: loaded once per process through
``st.cache_resource``, shared read-only by all sessions, a failed load shown as one line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

import streamlit as st

from bertscope import BertScopeError, LoadedModel, default_model, load_model
from bertscope.app.kit.budget import costly_job
from bertscope.app.kit.chrome import plain, show_error
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, demo, demo_allowlist
from bertscope.app.kit.pages import Page
from bertscope.app.kit.resident import resident_models
from bertscope.app.kit.url import spend_links, to_url
from bertscope.runtime.devices import available_devices
from bertscope.sources import hub
from bertscope.sources.bundled import BUNDLED_MODELS
from bertscope.sources.presets import PRESETS

OTHER = "Other (hub id or local folder)…"


MODEL_KEY = "model_choice"


CUSTOM_KEY = "model_custom"


DEVICE_KEY = "device"


DTYPE_KEY = "dtype"


@st.cache_resource(show_spinner=False)
def startup_default() -> tuple[str, str | None]:
    """Decided once per process: BERTSCOPE_MODEL, else bert-base-uncased if it can be had."""
    return default_model()


def cached_model(name: str, device: str, dtype: str) -> LoadedModel:
    """The model, resident or loaded now (``resident.resident_models``: a few stay loaded, least recently used
    goes first). On a hosted demo a load is a costly job, charged to the visitor who asks for it (switching
    among the allowlisted models evicts other visitors' models), except the startup default's."""
    if demo() and name not in demo_allowlist():
        raise BertScopeError(f"This demo serves only: {', '.join(served_models())}.")
    key = (name, device, dtype)
    found = resident_models().get(key)
    if found is not None:
        return found
    default = name == startup_default()[0] and device == "auto" and dtype == "auto"
    with nullcontext() if default else costly_job("model load", ("load", key)):
        return resident_models().load(key, lambda: _load(name, device, dtype))


def _load(name: str, device: str, dtype: str) -> LoadedModel:
    lm = load_model(name, device=device, dtype=dtype)
    if lm.device.type == "cuda":  # hand back what an evicted model left in the CUDA cache
        import torch

        torch.cuda.empty_cache()
    return lm


def served_models() -> list[str]:
    """The hosted demo's allowlist, less the models that cannot be had here now (offline, not cached):
    what its picker offers and its refusals name. All of it when none can be had (the error then says why)."""
    allowed = demo_allowlist()
    return [m for m in allowed if _here(m)] or list(allowed)


def model_options() -> list[str]:
    if demo():
        return served_models()
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
            st.warning(plain(f"Ignored the link's model={linked[:60]}: this demo serves {', '.join(served_models())}."))
            spend_links()  # what the link asked of its model never runs on the fallback
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
        held_choice("Encoder", model_options(), MODEL_KEY,
                    help="Presets other than 'bundled' need the Hugging Face hub or a local cache copy.")
        if st.session_state[MODEL_KEY] == OTHER:
            st.text_input("Hub id or local folder", st.session_state.get(CUSTOM_KEY, ""), key=CUSTOM_KEY,
                          placeholder="org/model or /path", max_chars=Limits.name_chars)  # its default: as held
        if demo():
            st.caption("Hosted demo: a fixed list of models and smaller inputs.")
        devices = ["auto", *available_devices()]
        held_choice("Device", devices, DEVICE_KEY, help="auto picks cuda, then mps, then cpu.")
        if any(d.startswith(("cuda", "mps")) for d in devices[1:]):
            held_choice("Precision", ["auto", "float16", "bfloat16"], DTYPE_KEY)


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
    """The picked model, loaded once per process; None (with one error line, and the default offered)
    if it fails."""
    key = model_key()
    if not key[0]:
        spend_links()
        st.info("Type a hub id (org/name) or a local model folder in the sidebar.")
        return None
    try:
        with st.spinner(f"Loading {key[0]}…"):
            return cached_model(*key)
    except BertScopeError as err:  # a busy demo's refusal too: the link's requests never run later on a model picked
        spend_links()  # since (its own model, retried, waits for its button as every other request does)
        show_error(err)
        default = startup_default()[0]
        if default != key[0]:
            offer_models((default,), "load_failed")
        return None


PAGE_KEY = "page_record"  # the record of the page this run draws (set by app.py before the page runs)


def current_page() -> Page | None:
    return st.session_state.get(PAGE_KEY)


def require_model(fallback: Callable[[LoadedModel], None] | None = None) -> LoadedModel:
    """The picked model, meeting what the current page's record needs (``pages.Page.needs``); else one line
    naming what is missing, the bundled models that have it offered, ``fallback(lm)`` (what the page can
    still show), and the page stops. The other pages are not affected."""
    lm = current_model()
    if lm is None:
        st.stop()
    page = current_page()
    unmet = page.unmet(lm) if page is not None else []
    if unmet:
        need = unmet[0]
        others = [n for n in dict.fromkeys((*need.offer, *need.presets)) if n != lm.name and n in model_options()]
        ready = [n for n in others if obtainable(n)]
        later = [n for n in others if n not in ready]
        hint = f" Models with one that can be loaded here: {', '.join(ready)}." if ready else \
            " No model with one can be loaded here."
        if later:
            hint += (f" {len(later)} other presets with one, e.g. {later[0]}, need the Hugging Face hub or a copy "
                     "in its local cache, and neither is available now.")
        st.warning(plain(f"{lm.name} has no {need.what}, which the {page.title} page needs.{hint}"))
        offer_models(need.offer, f"need_{page.url_path or 'home'}")
        if fallback is not None:
            fallback(lm)
        spend_links()
        st.stop()
    return lm


def offer_models(names: Sequence[str], key: str) -> None:
    """A button per model of ``names`` that can be had here, switching the sidebar to it."""
    for name in names:
        if name in model_options() and obtainable(name):
            description = PRESETS[name].description if name in PRESETS else name
            st.button(f"Switch to {name} ({description})", key=f"{key}_{name}", icon=":material/arrow_forward:",
                      on_click=lambda n=name: st.session_state.__setitem__(MODEL_KEY, n))  # the sidebar's picker


def obtainable(name: str) -> bool:
    """Whether ``name`` could be loaded now without a long wait (bundled, cached, or hub up)."""
    if demo() and name not in demo_allowlist():
        return False
    return _here(name)


def _here(name: str) -> bool:
    if name in BUNDLED_MODELS:
        return BUNDLED_MODELS[name].installed()
    return Path(name).is_dir() or hub.is_cached(name) or hub.hub_reachable()


