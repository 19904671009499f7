"""BertScope: ``streamlit run app.py``. Routes to the pages and draws the shared sidebar."""

from pathlib import Path

import streamlit as st

from views.kit.models import sidebar
from views.kit.results import new_run

# a local image: a :material/…: page icon makes every browser fetch it from Google's font server
ICON = Path(__file__).parent / "views" / "assets" / "icon.png"
st.set_page_config(page_title="BertScope", page_icon=str(ICON), layout="wide")

PAGES = [
    st.Page("views/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("views/attention.py", title="Attention", icon=":material/visibility:"),
    st.Page("views/masked.py", title="Masked tokens", icon=":material/masks:"),
    st.Page("views/shift.py", title="Embedding shift", icon=":material/explore:"),
    st.Page("views/align.py", title="Cross-lingual", icon=":material/translate:"),
    st.Page("views/params.py", title="Parameters", icon=":material/calculate:"),
    st.Page("views/probes.py", title="Probes", icon=":material/troubleshoot:"),
    st.Page("views/interventions.py", title="Interventions", icon=":material/science:"),
    st.Page("views/faithfulness.py", title="Faithfulness", icon=":material/fact_check:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("views/pretrain.py", title="Pretraining", icon=":material/model_training:"),
]

new_run()
sidebar()
page = st.navigation(PAGES)
page.run()
