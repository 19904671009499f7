"""The router: page config, the shared sidebar, and the navigation over every page's record. Run on every
rerun by the main script (the checkout's ``app.py``, or the one ``bertscope app`` writes)."""

from __future__ import annotations

import streamlit as st

from bertscope.app.kit.model_picker import PAGE_KEY, sidebar
from bertscope.app.kit.pages import APP_DIR, PAGES
from bertscope.app.kit.results import new_run

# a local image: a :material/…: page icon makes every browser fetch it from Google's font server
ICON = APP_DIR / "assets" / "icon.png"


def run() -> None:
    st.set_page_config(page_title="BertScope", page_icon=str(ICON), layout="wide")
    new_run()
    sidebar()
    # expanded: every page listed (collapsed, Streamlit hid the last four behind "View 4 more")
    page = st.navigation([st.Page(p.path, title=p.title, icon=p.icon, default=p.default) for p in PAGES], expanded=True)
    st.session_state[PAGE_KEY] = next(p for p in PAGES if p.url_path == page.url_path)  # what require_model gates by
    page.run()
