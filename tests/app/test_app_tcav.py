"""Streamlit AppTest of the Probes page's tab "Concepts (TCAV)": nothing costly on arrival, a run through the
budget, the chart and the table with the test's verdicts, the JSON, bad input as one line with the last
result kept, and a model without a head it can explain told so."""

from __future__ import annotations

from tests.app.kit import start_with_url, texts

TAB = "Concepts (TCAV)"
INPUTS = "\n".join(["the bank of the [MASK] was muddy .", "she sat by the [MASK] all day .", "a boat on the [MASK] .",
                    "the [MASK] flooded the town .", "we swam in the [MASK] ."])


def submit(at) -> None:
    next(b for b in at.button if "tcav_form" in b.id).click()
    at.run(timeout=600)


def test_tcav_tab_on_a_masked_lm(monkeypatch, tiny_mlm_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), "bertscope/app/probes.py", probe_tab=TAB)
    assert not at.exception and not at.error
    assert any("Press *Test the concept*" in i for i in texts(at.info))  # nothing costly on arrival
    assert at.text_input(key="tcav_word").value == "river"
    at.text_area(key="tcav_inputs_text").set_value(INPUTS)
    submit(at)
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "CAV accuracy (held out)" in d.value.columns)
    assert list(table["layer"])[0] == "embeddings" and len(table) >= 2
    assert table["TCAV"].between(0, 1).all() and table["p"].between(0, 1).all()
    assert any("Significant at:" in c for c in texts(at.caption))
    chart = next(c.proto.spec for c in at.get("plotly_chart") if "TCAV score" in c.proto.spec)
    assert "random CAVs" in chart
    assert any("tcav_json" in b.proto.id for b in at.get("download_button"))
    # bad input: too few examples, a word that is not one vocabulary item: one line each, the last result kept
    at.text_area(key="tcav_concept").set_value("one\ntwo\nthree")
    submit(at)
    assert not at.exception and any("at least 10" in w for w in texts(at.warning))
    assert any("CAV accuracy (held out)" in d.value.columns for d in at.dataframe)
    at.text_area(key="tcav_concept").set_value("\n".join(f"the water number {i} ran cold ." for i in range(12)))
    at.text_input(key="tcav_word").set_value("zzqxv")
    submit(at)
    assert not at.exception and any("zzqxv" in w for w in texts(at.warning))
    assert any("CAV accuracy (held out)" in d.value.columns for d in at.dataframe)


def test_tcav_tab_without_a_head_says_so(monkeypatch, tiny_encoder_dir):
    at = start_with_url(monkeypatch, str(tiny_encoder_dir), "bertscope/app/probes.py", probe_tab=TAB)
    assert not at.exception and not at.error
    assert any("neither a sequence-classification head, a tagger's head nor a masked-LM head" in w
               for w in texts(at.warning))


def test_tcav_tab_on_a_tagger_offers_its_tags(monkeypatch):
    at = start_with_url(monkeypatch, "bundled-upos", "bertscope/app/probes.py", probe_tab=TAB)
    assert not at.exception and not at.error
    assert at.selectbox(key="tcav_tag").value == "VERB"
    assert "swam" in at.text_area(key="tcav_concept").value


def test_an_input_without_its_mask_is_refused_before_the_job(monkeypatch, tiny_mlm_dir):
    """A missing [MASK] was found in the job, after the charge; now one line before it, nothing charged."""
    from bertscope.app.kit.budget import cost_budget

    at = start_with_url(monkeypatch, str(tiny_mlm_dir), "bertscope/app/probes.py", probe_tab=TAB)
    spent = cost_budget().spent("local")
    at.text_area(key="tcav_inputs_text").set_value(INPUTS + "\nno mask in this one .")
    submit(at)
    assert not at.exception and any("exactly one [MASK]" in w and "no mask in this one" in w
                                    for w in texts(at.warning))
    assert not any("CAV accuracy (held out)" in d.value.columns for d in at.dataframe)
    assert cost_budget().spent("local") == spent
