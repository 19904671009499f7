"""Streamlit AppTest of the Features page: the features on a text, one feature opened from there (and
from its link), the corpus statistics behind a button, search by tag and by word; a model without
SAEs and a folder that holds none, each in one line."""

from __future__ import annotations

from tests.app.kit import start, start_with_url, texts

PAGE = "bertscope/app/features.py"


def search(at):
    next(b for b in at.button if b.label == "Search" and "feat_token_form" in b.id).click()
    at.run()


def test_text_then_open_a_feature_then_index_the_corpus(monkeypatch, tiny_mlm_dir, tiny_saes_dir):
    at = start(monkeypatch, str(tiny_mlm_dir)).switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert any("ships no SAEs" in i for i in texts(at.info))
    at.text_input(key="feat_sae").input(str(tiny_saes_dir)).run()
    assert not at.exception and not at.error
    assert at.selectbox(key="feat_layer").options == ["0", "1"]
    at.selectbox(key="feat_layer").set_value(1).run()
    spec = next(c.proto.spec for c in at.get("plotly_chart") if "fire hardest" in c.proto.spec)
    assert "layer 1's output" in spec and "hook_resid_post" not in spec  # words, not a hook name
    assert "feature " in spec and ("“" in spec or "\\u201c" in spec)  # each row names the pieces it fires on
    frame = at.dataframe[0].value
    assert frame["token"].iloc[0] == "[CLS]" and "features (activation)" in frame.columns
    picked = at.selectbox(key="feat_pick").value
    shown = at.selectbox(key="feat_pick").format_func(picked)
    assert shown.startswith(f"feature {picked} · “")  # a number and the word pieces it fires on here
    at.button(key="feat_open").click().run()
    assert not at.exception and not at.error
    assert at.session_state["feat_tab"] == "Feature" and at.number_input(key="feat_feature").value == picked
    assert at.query_params["feature"] == str(picked) and at.query_params["layer"] == "1"
    assert any(t.startswith("Press *Index the corpus*") for t in texts(at.info))  # nothing costly on opening
    assert any("promotes" in str(d.value.columns.tolist()) for d in at.dataframe)
    at.selectbox(key="feat_n_brown").set_value(1000)
    at.button(key="feat_index").click().run()
    assert not at.exception, at.exception[0].stack_trace if at.exception else ""
    assert not at.error
    assert {m.label for m in at.metric} >= {"Fires on", "Mean activation when firing", "Best gold-tag label"}
    assert any("firings of" in c.proto.spec for c in at.get("plotly_chart"))
    assert any(m.startswith("**Top contexts** over") for m in (str(e.value) for e in at.markdown))  # bold, not \*\*


def test_link_opens_the_feature_and_search(monkeypatch, tiny_mlm_dir, tiny_saes_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, sae=str(tiny_saes_dir), layer="0", feature="7",
                        feat_tab="Feature")
    assert not at.exception and not at.error
    assert at.number_input(key="feat_feature").value == 7 and at.selectbox(key="feat_layer").value == 0
    assert any("?layer=0&feature=7" in c for c in texts(at.caption))
    at.session_state["feat_tab"] = "Search"
    at.run()
    at.radio(key="feat_by").set_value("by the word they promote").run()
    assert any(t.startswith("Press *Search*") for t in texts(at.info)) and not at.error  # the pick runs nothing
    at.text_input(key="feat_token").input("bank")
    search(at)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table.columns) == ["feature", "logit change"] and len(table) == 20
    from bertscope.app.kit.budget import cost_budget

    spent = cost_budget().spent("local")
    at.text_input(key="feat_token").input("bank river")
    search(at)
    (error,) = texts(at.error)
    assert "word pieces" in error and "\n" not in error
    at.run()
    assert cost_budget().spent("local") == spent  # refused before the job, on the press and on every rerun
    at.radio(key="feat_by").set_value("by gold tag").run()
    assert any(t.startswith("Press *Index the corpus*") for t in texts(at.info))
    at.selectbox(key="feat_search_n_brown").set_value(1000)
    at.button(key="feat_search_index").click().run()
    assert not at.exception and not at.error
    at.selectbox(key="feat_tag_universal").set_value("NOUN").run()
    table = at.dataframe[0].value
    assert list(table.columns) == ["feature", "precision", "recall", "f1", "fires on"] and len(table)


def test_a_folder_without_saes_is_one_line(monkeypatch, tiny_mlm_dir, tmp_path):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, sae=str(tmp_path))
    assert not at.exception
    (error,) = texts(at.error)
    assert "holds no SAE" in error and "\n" not in error


def test_a_tab_keeps_its_inputs_while_another_is_shown(monkeypatch, tiny_mlm_dir, tiny_saes_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, sae=str(tiny_saes_dir), layer="0", feature="7",
                        feat_tab="Feature")
    at.number_input(key="feat_feature").set_value(9).run()
    at.session_state["feat_tab"] = "Search"
    at.run()
    at.session_state["feat_tab"] = "Feature"
    at.run()
    assert not at.exception and at.number_input(key="feat_feature").value == 9


def test_the_shipped_saes_say_where_they_were_scored(monkeypatch):
    at = start(monkeypatch, "bundled-mlm").switch_page(PAGE).run()
    assert not at.exception and not at.error
    shown = " ".join(m.value for m in at.markdown)
    assert "on held-out brown, ewt, tweets, bbc, squad:" in shown and "of the variance explained (lowest " in shown
