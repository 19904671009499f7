"""BertScope: ``streamlit run app.py``. Routes to the pages and draws the shared sidebar."""

import streamlit as st

from pages.shared import sidebar

st.set_page_config(page_title="BertScope", page_icon=":material/biotech:", layout="wide")

PAGES = [
    st.Page("pages/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("pages/attention.py", title="Attention", icon=":material/visibility:"),
    st.Page("pages/masked.py", title="Masked tokens", icon=":material/masks:"),
    st.Page("pages/shift.py", title="Embedding shift", icon=":material/explore:"),
    st.Page("pages/align.py", title="Cross-lingual", icon=":material/translate:"),
    st.Page("pages/params.py", title="Parameters", icon=":material/calculate:"),
    st.Page("pages/probes.py", title="Probes", icon=":material/troubleshoot:"),
]

sidebar()
page = st.navigation(PAGES)
page.run()
