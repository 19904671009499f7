"""Widget values that outlive the runs in which their tab is closed.

A tab drawn only when open (``if tab.open:``) does not draw its widgets while another tab is shown,
and Streamlit forgets the state of a widget that a run did not draw: the feature picked, the text
typed, the corpus chosen would be back at their defaults on return. ``persist(keys)``, called at the
top of the page on every run, copies each widget's value aside while the widget exists and puts it
back when Streamlit has dropped it.
"""

from __future__ import annotations

import streamlit as st

PREFIX = "_kept_"


def persist(*keys: str) -> None:
    for key in keys:
        if key in st.session_state:
            st.session_state[PREFIX + key] = st.session_state[key]
        elif PREFIX + key in st.session_state:
            st.session_state[key] = st.session_state[PREFIX + key]
