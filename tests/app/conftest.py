"""Every AppTest starts from empty Streamlit caches (models, results, the cost budget) and leaves them so."""

import pytest
import streamlit as st


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()
