"""Streamlit AppTest of the Interventions page's tab "Causal variables (DAS)": nothing costly on arrival, a search
through the budget on bundled-mlm's agreement (IIA beside its controls, the chart, the JSON), the map's button
waiting, a classifier's tab offering its own causal model, and a model without a head the page can watch told so."""

from __future__ import annotations

from tests.app.kit import start_with_url, texts

TAB = "Causal variables (DAS)"
PAGE = "bertscope/app/interventions.py"


def submit(at) -> None:
    next(b for b in at.button if "das_form" in b.id).click()
    at.run(timeout=600)


def test_das_tab_searches_a_layer(monkeypatch):
    at = start_with_url(monkeypatch, "bundled-mlm", PAGE, int_tab=TAB)
    assert not at.exception and not at.error
    assert any("Press *Search*" in i for i in texts(at.info))  # nothing costly on arrival
    assert at.selectbox(key="das_task").value == "agreement"
    at.selectbox(key="das_layer").set_value("1")
    at.select_slider(key="das_pairs").set_value(400)
    submit(at)
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "IIA" in d.value.columns)
    scores = dict(zip(table["JSON key"], table["IIA"]))
    assert scores["iia"] >= 0.85 and scores["iia_random_rotation"] < scores["iia"]
    assert any("interchange intervention accuracy" in c.proto.spec for c in at.get("plotly_chart"))
    assert any("das_json" in b.proto.id for b in at.get("download_button"))
    assert any("Press *Map every layer" in i for i in texts(at.info))  # the map waits for its own button


def test_das_tab_on_a_classifier_offers_negation(monkeypatch):
    at = start_with_url(monkeypatch, "bundled-sentiment", PAGE, int_tab=TAB)
    assert not at.exception and not at.error
    assert at.selectbox(key="das_task").options[0].startswith("negation")


def test_a_bare_encoder_is_told_what_the_page_needs(monkeypatch, tiny_encoder_dir):
    at = start_with_url(monkeypatch, str(tiny_encoder_dir), PAGE, int_tab=TAB)
    assert not at.exception and not at.error
    assert any("which the Interventions page needs" in w for w in texts(at.warning)), texts(at.warning)
