"""The router: page config, the shared sidebar, and the navigation over every page's record. Run on every
rerun by the main script (the checkout's ``app.py``, or the one ``bertscope app`` writes)."""

from __future__ import annotations

import streamlit as st

from bertscope.app.kit.chrome import install_outcome, page_ends
from bertscope.app.kit.limits import Limits
from bertscope.app.kit.model_picker import PAGE_KEY, sidebar
from bertscope.app.kit.pages import APP_DIR, PAGES
from bertscope.app.kit.results import new_run
from bertscope.app.kit.url import arrival
from bertscope.runtime.atomic import sweep
from bertscope.runtime.disk_quota import set_disk_quota
from bertscope.runtime.user_cache import user_cache_dir

# a local image: a :material/…: page icon makes every browser fetch it from Google's font server
ICON = APP_DIR / "assets" / "icon.png"


@st.cache_resource(show_spinner=False)
def swept() -> int:
    """Once per process: what writers stopped by a kill left in the user cache goes (``atomic.sweep``)."""
    return len(sweep(user_cache_dir()))


def run() -> None:
    st.set_page_config(page_title="BertScope", page_icon=str(ICON), layout="wide")
    arrival()  # the address as the session began: a shared link's settings, before any page writes its own
    set_disk_quota(Limits.disk_bytes)  # a hosted demo's one quota for what it writes for visitors (None locally)
    swept()
    install_outcome()
    new_run()
    sidebar()
    # expanded: every page listed (collapsed, Streamlit hid the last four behind "View 4 more")
    page = st.navigation([st.Page(p.path, title=p.title, icon=p.icon, default=p.default) for p in PAGES], expanded=True)
    st.session_state[PAGE_KEY] = next(p for p in PAGES if p.url_path == page.url_path)  # what require_model gates by
    with page_ends():  # a page ended by a stopped job, after its own finally blocks
        page.run()
