"""The address's writer (kit.url.to_url): what changes, set or taken out, goes in one write (each write is an entry
in the browser's history), and a parameter bound to a widget is left to the widget."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _writes_script():
    import streamlit as st
    from streamlit.runtime.state.query_params import QueryParams

    from bertscope.app.kit.url import to_url

    sent = []
    original = QueryParams._send_query_param_msg

    def counted(self):
        sent.append(dict(self._query_params))
        original(self)

    QueryParams._send_query_param_msg = counted
    try:
        if st.query_params.get("bound"):
            st.tabs(["one", "two"], key="bound", bind="query-params")
        to_url(a=None, b=None, c="3", d="4", keep="k", absent=None)
        to_url(c="3", d="4")  # nothing changed: nothing written
    finally:
        QueryParams._send_query_param_msg = original
    st.write(f"writes={len(sent)}")


def _address(at: AppTest) -> dict[str, str]:
    return {k: at.query_params[k][-1] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in at.query_params}


def test_one_write_for_what_is_set_and_taken_out():
    at = AppTest.from_function(_writes_script)
    at.query_params.update({"a": "1", "b": "2", "keep": "k"})
    at.run(timeout=30)
    assert not at.exception
    assert [m.value for m in at.markdown] == ["writes=1"]
    assert _address(at) == {"keep": "k", "c": "3", "d": "4"}


def test_a_parameter_bound_to_a_widget_is_kept():
    at = AppTest.from_function(_writes_script)
    at.query_params.update({"a": "1", "b": "2", "bound": "two"})
    at.run(timeout=30)
    assert not at.exception
    assert _address(at) == {"bound": "two", "c": "3", "d": "4", "keep": "k"}
