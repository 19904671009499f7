"""A keyed choice's default is the choice the session holds (what a browser that lost the widget's state shows)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _script(default: str = "b") -> None:
    import streamlit as st

    from bertscope.app.kit.held import held_choice

    left, _ = st.columns(2)
    st.write(f"picked {held_choice('Method', ['a', 'b', 'c'], 'method', default, container=left)}")


def test_the_default_given_then_the_choice_held():
    at = AppTest.from_function(_script).run(timeout=30)
    assert not at.exception
    box = at.selectbox(key="method")
    assert box.value == "b" and box.proto.default == 1
    box.set_value("c").run()
    box = at.selectbox(key="method")
    assert box.value == "c" and box.proto.default == 2  # not the hard-coded "b": a lost state sends no wrong pick
    assert at.markdown[0].value == "picked c"


def test_a_default_that_is_no_option_falls_back_to_the_first():
    at = AppTest.from_function(_script, args=("z",)).run(timeout=30)
    assert not at.exception
    assert at.selectbox(key="method").value == "a" and at.selectbox(key="method").proto.default == 0


def _script_of(options: list[str]) -> None:
    import streamlit as st

    from bertscope.app.kit.held import held_choice

    st.write(f"picked {held_choice('Token', options, 'token', 'b')}")


def test_a_held_choice_no_longer_offered_gives_the_default_again():
    at = AppTest.from_function(_script_of, args=(["a", "b", "c"],)).run(timeout=30)
    at.selectbox(key="token").set_value("c").run()
    at = AppTest.from_function(_script_of, args=(["a", "b"],))  # a shorter text: "c" is gone
    at.session_state["token"] = "c"
    at.run(timeout=30)
    assert not at.exception
    assert at.selectbox(key="token").proto.default == 1  # the default, not the first option


def test_every_keyed_selectbox_of_the_app_is_a_held_choice():
    """A keyed ``selectbox`` drawn directly sends its hard-coded default back when the browser has lost its state
    (the pages' layer, head, word and task pickers are set by links and clicks elsewhere): each goes through
    ``held_choice``, which alone calls ``selectbox``."""
    import ast

    from tests.conftest import ROOT

    found = []
    for path in sorted((ROOT / "bertscope" / "app").rglob("*.py")):
        if path.name == "held.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "selectbox"
                    and any(k.arg == "key" for k in node.keywords)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"keyed selectboxes not drawn by held_choice: {found}"
