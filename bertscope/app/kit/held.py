"""Choice widgets whose default is the choice the session holds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import streamlit as st


def held_choice(label: str, options: Iterable, key: str, default: Any = None, *, container: Any = None,
                **kwargs) -> Any:
    """A selectbox (in ``container``: a column, say; else the page) whose default is the choice the session holds
    (else ``default``, else the first option). The browser shows a widget's default whenever it has lost the
    widget's state while the session kept it, and sends that back as a choice with the next click: with the first
    option as the default, a visitor who pressed a button on bundled-mlm found the page redrawn on ``bundled`` (a CI
    run's browser test, twice). Every keyed selectbox goes through here, its first option the default or not: a
    link or a click elsewhere sets many of them to another option (the Attention page's layer and head, say)."""
    options = list(options)
    held = st.session_state.get(key, default)
    pick = held if held in options else default  # a held choice no longer offered: the default again
    where = container if container is not None else st
    return where.selectbox(label, options, index=options.index(pick) if pick in options else 0, key=key, **kwargs)
