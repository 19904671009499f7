"""Streamlit AppTest of the Interventions page: ablation, importance, patching, links, bad input."""

from __future__ import annotations

from tests.app.kit import start, start_with_url, texts

PAGE = "bertscope/app/interventions.py"


def open_page(monkeypatch, model):
    at = start(monkeypatch, model)
    return at.switch_page(PAGE).run()


def press(at, form: str, label: str):
    next(b for b in at.button if b.label == label and form in b.id).click()
    return at.run()


def test_ablation_tab(monkeypatch, tiny_mlm_dir):
    at = open_page(monkeypatch, str(tiny_mlm_dir))
    assert not at.exception and not at.error
    assert any("Pick heads" in i for i in texts(at.info))
    at.multiselect(key="int_heads").set_value(["0:1", "1:2"]).run()
    at.text_area(key="int_text").input("the bank of the [MASK] was muddy .")
    at = press(at, "int_ablate_form", "Run")
    assert not at.exception and not at.error
    frames = [f.value for f in at.dataframe]
    assert any("intact" in f.columns for f in frames) and any("heads removed" in f.columns for f in frames)
    assert at.query_params["heads"] in ("0:1,1:2", ["0:1,1:2"])
    at.radio(key="int_mode").set_value("mean").run()  # means over 200 Brown sentences (or the shipped sample)
    assert not at.exception and not at.error
    assert any("means over" in c for c in texts(at.caption))
    at.toggle(key="int_heldout").set_value(True).run()
    assert not at.exception and not at.error
    assert "Top-1, heads zeroed" in {m.label for m in at.metric}


def test_importance_and_pruning_tab(monkeypatch, tiny_mlm_dir):
    at = open_page(monkeypatch, str(tiny_mlm_dir))
    at.select_slider(key="int_imp_n").set_value(32)
    at.toggle(key="int_prune").set_value(True)
    at = press(at, "int_importance_form", "Compute head importance")
    assert not at.exception and not at.error
    charts = at.get("plotly_chart")
    assert len(charts) >= 3  # the ablation grid (now coloured), the importance grid, the pruning curve
    assert any("random mean" in c for c in texts(at.caption))


def test_patching_tab_and_its_bad_input(monkeypatch, tiny_mlm_dir, tiny_saes_dir):
    at = open_page(monkeypatch, str(tiny_mlm_dir))
    assert any("Press *Patch*" in i for i in texts(at.info))
    at.text_input(key="int_clean").input("the river was [MASK] and the river .")
    at.text_input(key="int_corrupt").input("the money was [MASK] and the money .")
    at.text_input(key="int_a").input("muddy")
    at.text_input(key="int_b").input("good")
    at = press(at, "int_patch_form", "Patch")
    assert not at.exception and not at.error
    labels = {m.label for m in at.metric}
    assert {"Clean: logit A − logit B", "Corrupted", "Difference to recover"} <= labels
    assert len(at.get("plotly_chart")) >= 3  # the head board, the hidden-state grid, the head grid
    assert any("With SAEs for" in c for c in texts(at.caption))  # the tiny model ships none
    at.session_state["int_feat_sae"] = str(tiny_saes_dir)  # as typed on the Features tab
    at.run()
    assert any(t.startswith("Press *Patch the features*") for t in texts(at.info))
    at.button(key="int_patch_features").click().run()
    assert not at.exception and not at.error
    cells = next(d.value for d in at.dataframe if "recovered" in d.value.columns and "feature" in d.value.columns)
    assert len(cells) and set(cells["position"]) <= {2, 4, 7}  # river/money twice, and the mask
    at.text_input(key="int_corrupt").input("the money bank was [MASK] and the money .")
    at = press(at, "int_patch_form", "Patch")
    assert not at.exception
    (error,) = texts(at.error)
    assert "clean text has 10 tokens and the corrupted one 11" in error and "\n" not in error


def test_patching_link_runs_on_arrival(monkeypatch, tiny_mlm_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, int_tab="Patching", clean="the river was [MASK] .",
                        corrupt="the money was [MASK] .", a="muddy", b="good", heads="1:3")
    assert not at.exception and not at.error
    assert at.multiselect(key="int_heads").value == ["1:3"]
    assert "Corrupted" in {m.label for m in at.metric}


def test_page_without_a_masked_lm_head(monkeypatch, tiny_encoder_dir):
    at = open_page(monkeypatch, str(tiny_encoder_dir))
    assert not at.exception and not at.error
    warning = next(w for w in texts(at.warning) if "no masked-LM head or sequence classifier" in w)
    assert "which the Interventions page needs" in warning
    assert any("--probe" in c for c in texts(at.caption))  # the target it still has
    assert "bundled-mlm" in at.button(key="need_interventions_bundled-mlm").label
    assert not at.get("plotly_chart")


def test_ablation_watches_the_next_sentence_head(monkeypatch, tiny_bert_dir):
    at = open_page(monkeypatch, str(tiny_bert_dir))  # BERT's pretraining heads: the masked LM and NSP
    at.radio(key="int_watch").set_value("nsp").run()
    at.multiselect(key="int_heads").set_value(["0:0", "0:1", "0:2", "0:3"]).run()
    at.text_area(key="int_text_a").input("the man sat in the boat .")
    at.text_area(key="int_pair").input("he ate bread .")
    at = press(at, "int_ablate_form", "Run")
    assert not at.exception and not at.error
    values = {m.label: m.value for m in at.metric}
    assert "IsNext (NSP), intact" in values and "IsNext (NSP), heads removed" in values


def test_a_hosted_demo_refuses_a_long_linked_text_in_one_plain_line(monkeypatch, tiny_mlm_dir):
    """A link can carry more than the box takes; the refusal names the box once ("The clean text ...")."""
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", str(tiny_mlm_dir))
    long = "the river was [MASK] . " * 227  # 4,994 characters
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, int_tab="Patching", clean=long[:4994],
                        corrupt="the money was [MASK] .", a="muddy", b="good")
    assert not at.exception
    assert texts(at.error) == ["The clean text has 4,994 characters; this app takes up to 2,000."]


def test_the_patching_result_says_when_the_clean_run_fails_the_example(monkeypatch, tiny_mlm_dir):
    """A clean run that prefers B gets one line beside the result (the example would trace a failure)."""
    at = open_page(monkeypatch, str(tiny_mlm_dir))
    at.text_input(key="int_clean").input("the river was [MASK] and the river .")
    at.text_input(key="int_corrupt").input("the money was [MASK] and the money .")
    at.text_input(key="int_a").input("muddy")
    at.text_input(key="int_b").input("good")
    at = press(at, "int_patch_form", "Patch")
    clean = next(m.value for m in at.metric if m.label == "Clean: logit A − logit B")
    said = [w for w in texts(at.warning) if "the clean run does not prefer" in w]
    assert bool(said) == (float(clean) <= 0), (clean, said)
    at.text_input(key="int_a").input("good")  # the same texts with the candidates swapped: the other verdict
    at.text_input(key="int_b").input("muddy")
    at = press(at, "int_patch_form", "Patch")
    swapped = [w for w in texts(at.warning) if "the clean run does not prefer" in w]
    assert bool(swapped) != bool(said) and not at.exception


def test_features_tab_switches_a_feature_off_and_runs_the_causal_check(monkeypatch, tiny_mlm_dir, tiny_saes_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, int_tab="Features")
    assert not at.exception and not at.error
    assert any("ships no SAEs" in i for i in texts(at.info))
    at.text_input(key="int_feat_sae").input(str(tiny_saes_dir)).run()
    at.number_input(key="int_feat_feature").set_value(3)
    at.text_area(key="int_feat_text").input("the man walked to the [MASK] .")
    at = press(at, "int_feat_form", "Run")
    assert not at.exception and not at.error
    frames = [f.value for f in at.dataframe]
    assert any("feature switched off" in f.columns for f in frames)
    assert at.query_params["feature"] == "3"
    assert any(t.startswith("Press *Run the causal check*") for t in texts(at.info))  # nothing costly unasked
    at.radio(key="int_feat_mode").set_value("steer")
    at.number_input(key="int_feat_strength").set_value(40.0)
    at = press(at, "int_feat_form", "Run")
    assert any("feature steered by 40" in f.columns for f in (d.value for d in at.dataframe))
    at.selectbox(key="int_feat_tag_1_3").set_value("NOUN")
    at.button(key="int_feat_causal").click().run()
    assert not at.exception, at.exception[0].stack_trace if at.exception else ""
    assert not at.error
    check = next(d.value for d in at.dataframe if "controls off" in d.value.columns)
    assert check["measure"].iloc[0].startswith("probe for NOUN") and 0 <= check["intact"].iloc[0] <= 1
