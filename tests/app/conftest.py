"""Every AppTest starts from empty Streamlit caches (models, results, the cost budget) and leaves them so."""

import pytest
import streamlit as st


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()


@pytest.fixture(autouse=True)
def address_as_a_browser_gets_it(monkeypatch):
    """AppTest reads the address from the script's context, set before the message that carries it is sent; after
    ``st.stop()`` that send raises, and a browser never gets the address the context already holds. Here an address
    whose message was not sent is not the test's either, so a test of a link's flag sees what a visitor's address
    bar would."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    from streamlit.runtime.state.query_params import QueryParams

    send = QueryParams._send_query_param_msg

    def as_sent(self) -> None:
        ctx = get_script_run_ctx()
        before = ctx.query_string if ctx is not None else None
        try:
            send(self)
        except BaseException:
            if ctx is not None:
                ctx.query_string = before
            raise

    monkeypatch.setattr(QueryParams, "_send_query_param_msg", as_sent)
