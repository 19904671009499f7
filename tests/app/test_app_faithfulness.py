"""Streamlit AppTest of the Faithfulness page: the scoreboard on the user's sentences, its link,
bad input, and a model without a masked-LM head."""

from __future__ import annotations

from tests.app.kit import open_link, start, start_with_url, stopped_while_running, texts

PAGE = "bertscope/app/faithfulness.py"
LINES = "the bank of the [MASK] was muddy .\nshe deposited the money in the [MASK] .\nthe dog sat in the [MASK] ."


def run_test(at):
    next(b for b in at.button if b.label == "Run the test" and "faith_form" in b.id).click()
    return at.run()


def test_scoreboard_on_my_sentences(monkeypatch, tiny_mlm_dir):
    at = start(monkeypatch, str(tiny_mlm_dir)).switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert any("Press *Run the test*" in i for i in texts(at.info))  # nothing costly runs on arrival
    assert "methods" not in at.query_params  # the link's flag: with no scoreboard on screen a reload runs nothing
    at.radio(key="faith_source").set_value("text")
    at.text_area(key="faith_text").input(LINES)
    at.multiselect(key="faith_methods").set_value(["attention", "alti", "valuezeroing", "grad", "random"])
    at.select_slider(key="faith_steps").set_value(8)
    at = run_test(at)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["method"]) == ["raw attention (heads averaged)", "ALTI (composed)", "Value Zeroing (composed)",
                                     "gradient × input", "random (floor)"]
    assert all("[" in v for v in table["comprehensiveness ↑"])  # a mean and its interval
    assert len(at.get("plotly_chart")) >= 3  # the bars, the curves, one item's scores
    links = next(m for m in texts(at.markdown) if m.startswith("Open in the Masked page"))
    assert links.count("./masked?") == len(at.dataframe[1].value) and "mlm_tab=Why+this+prediction%3F" in links
    assert at.query_params["methods"] in ("attention,alti,valuezeroing,grad,random",
                                          ["attention,alti,valuezeroing,grad,random"])
    assert any("3 items" in c for c in texts(at.caption))


def test_link_runs_on_arrival_and_bad_input_gets_one_line(monkeypatch, tiny_mlm_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, source="text", methods="attention,random", steps="8")
    assert not at.exception
    # the example sentences of the page: masks typed, so no lexicon is needed
    assert not at.error and at.dataframe[0].value.shape[0] == 2
    at.text_area(key="faith_text").input("of the and\nin a")
    at = run_test(at)
    assert not at.exception
    (error,) = texts(at.error)
    assert "No line has a content word" in error and "\n" not in error
    at.text_area(key="faith_text").input("\n".join(["the [MASK] is red ."] * 201))
    at = run_test(at)
    (error,) = texts(at.error)
    assert "201 sentences" in error and "\n" not in error
    at.multiselect(key="faith_methods").set_value([])
    at = run_test(at)
    (error,) = texts(at.error)
    assert "at least one method" in error


def test_page_without_a_masked_lm_head(monkeypatch, tiny_encoder_dir):
    at = start(monkeypatch, str(tiny_encoder_dir)).switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert any("no masked-LM head" in w for w in texts(at.warning))


def test_a_stopped_test_takes_the_links_methods_out(monkeypatch, tiny_mlm_dir):
    """Stop pressed on a link's test while it still runs: Stopped, and ``methods`` (the link's flag) leaves the
    address before the page ends, so a reload runs nothing; the other settings stay."""
    from bertscope.app.faithfulness import EXAMPLE

    at = open_link(monkeypatch, str(tiny_mlm_dir), source="text", methods="attention,random", steps="8")
    request = ((str(tiny_mlm_dir), "auto", "auto"), "text", EXAMPLE, ("attention", "random"), "attention", 0, 8)
    with stopped_while_running(at, "faithfulness", request, "faithfulness"):
        at.switch_page(PAGE).run()
        assert not at.exception and not at.error
        assert any(t.startswith("Stopped (faithfulness test") for t in texts(at.info))
    assert "methods" not in at.query_params and at.query_params["steps"] in ("8", ["8"])
