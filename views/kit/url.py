"""A page's inputs live in its URL, so a copied link reproduces the view."""

from __future__ import annotations

import streamlit as st

from views.kit.chrome import plain
from views.kit.limits import TRUTHY


def to_bool(value: str) -> bool:
    if value.lower() in TRUTHY | {"0", "false", "no", "off"}:
        return value.lower() in TRUTHY
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
