"""BertScope: ``streamlit run app.py``. Routes to the pages and draws the shared sidebar."""

from pathlib import Path

import streamlit as st

from views.kit.model_picker import PAGE_KEY, sidebar
from views.kit.pages import PAGES
from views.kit.results import new_run

# a local image: a :material/…: page icon makes every browser fetch it from Google's font server
ICON = Path(__file__).parent / "views" / "assets" / "icon.png"
st.set_page_config(page_title="BertScope", page_icon=str(ICON), layout="wide")

new_run()
sidebar()
page = st.navigation([st.Page(p.script, title=p.title, icon=p.icon, default=p.default) for p in PAGES])
st.session_state[PAGE_KEY] = next(p for p in PAGES if p.url_path == page.url_path)  # what require_model gates by
page.run()
