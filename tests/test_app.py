"""Streamlit AppTest: the app and every page run without an exception."""

from __future__ import annotations

import re

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from pages.shared import CUSTOM_KEY, MODEL_KEY, OTHER

from .conftest import ROOT

APP = str(ROOT / "app.py")
PAGES = ["pages/attention.py", "pages/masked.py", "pages/shift.py", "pages/align.py",
         "pages/params.py", "pages/probes.py"]


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
    st.cache_resource.clear()


def start(monkeypatch, model: str | None) -> AppTest:
    if model is None:
        monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)
    else:
        monkeypatch.setenv("BERTSCOPE_MODEL", model)
    return AppTest.from_file(APP, default_timeout=180).run()


def texts(elements) -> list[str]:
    """Element texts as a reader sees them (Markdown backslash escapes removed)."""
    return [re.sub(r"\\(.)", r"\1", str(e.value)) for e in elements]


def test_home_shows_model_card(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    assert not at.exception
    assert not at.error and not at.warning  # no fallback notice when a model was chosen
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers"] == "2" and metrics["Heads per layer"] == "4"
    assert metrics["Hidden size"] == "32"
    assert "masked-LM, next-sentence" in at.table[0].value.to_string()


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs(monkeypatch, tiny_bert_dir, page):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page(page).run()
    assert not at.exception
    assert any("Not built yet" in t for t in texts(at.info)), f"{page} must say it is not built"


@pytest.mark.parametrize(
    "custom, message",
    [
        ("nobody-xyz/no-such-model", "hub is unreachable"),
        ("./missing/folder", "No model folder"),
        ("{gpt2}", "not a BERT-family encoder"),
    ],
)
def test_bad_model_choice_is_one_error_line(monkeypatch, tiny_bert_dir, gpt2_dir, custom, message):
    # AppTest drops sidebar widgets from its tree on reruns of file-based st.Page scripts, so
    # the picker is driven through its session-state keys here and by clicks in the browser test.
    at = start(monkeypatch, str(tiny_bert_dir))
    at.session_state[MODEL_KEY] = OTHER
    at.session_state[CUSTOM_KEY] = custom.format(gpt2=gpt2_dir)
    at.run()
    assert not at.exception
    errors = texts(at.error)
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0]
    assert not at.metric
    # the app still works: picking a good model again brings the card back
    at.session_state[CUSTOM_KEY] = str(tiny_bert_dir)
    at.run()
    assert not at.error and {m.label: m.value for m in at.metric}["Layers"] == "2"


@pytest.mark.slow
def test_offline_default_is_bundled_with_notice(monkeypatch):
    at = start(monkeypatch, None)
    assert not at.exception
    assert any("bundled all-MiniLM-L6-v2" in w for w in texts(at.warning))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers"] == "6" and metrics["Heads per layer"] == "12"
    assert metrics["Hidden size"] == "384"
    assert "none (encoder only)" in at.table[0].value.to_string()


def test_empty_custom_model_prompts_instead_of_failing(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.session_state[MODEL_KEY] = OTHER
    at.session_state[CUSTOM_KEY] = "   "
    at.run()
    assert not at.exception and not at.error and not at.metric
    assert any("Type a hub id" in t for t in texts(at.info))


def test_typed_model_id_is_shown_not_rendered(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.session_state[MODEL_KEY] = OTHER
    at.session_state[CUSTOM_KEY] = "[click](http://evil.example) <b>x</b> :red[y]"
    at.run()
    assert not at.exception
    (error,) = [str(e.value) for e in at.error]  # the raw Markdown: every mark escaped
    assert r"\[click\]\(http\://evil\.example\)" in error
    assert r"\<b\>x\</b\>" in error and r"\:red\[y\]" in error
