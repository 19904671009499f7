"""Streamlit AppTest of the Circuits page's *Attribution graph* tab: nothing costly on arrival, the graph traced
behind its button on bundled-mlm's shipped transcoders (value, scores, the drawing, a feature switched off in the
real model, and doubled, beside the graph's prediction, the hovers' top contexts read when asked, the head read to first order, JSON), bad input in one line; a model without transcoders
is told so."""

from __future__ import annotations

from tests.app.kit import start_with_url, texts

PAGE = "bertscope/app/circuits.py"


def test_the_graph_behind_its_button(monkeypatch):
    at = start_with_url(monkeypatch, "bundled-mlm", PAGE, circuit_tab="Attribution graph")
    assert not at.exception and not at.error
    assert any(i.startswith("Press *Trace the graph*") for i in texts(at.info))
    at.text_input(key="graph_target").input("river")
    next(b for b in at.button if b.label == "Trace the graph").click()
    at.run(timeout=600)
    assert not at.exception and not at.error, [e.value for e in at.error]
    labels = {m.label for m in at.metric}
    assert {"Target", "Its value", "Replacement score", "Completeness score", "The graph predicts",
            "The model gives", "With its LayerNorm scales held"} <= labels
    assert next(m for m in at.metric if m.label == "Target").value == "river"
    assert any("Attribution graph:" in c.proto.spec for c in at.get("plotly_chart"))
    assert any(b.label == "Download the graph (JSON)" for b in at.get("download_button"))
    # the hovers' top contexts are read when asked, never charged to a visitor unasked
    assert any(i.startswith("The graph is drawn without its features' top contexts") for i in texts(at.info))
    assert not any("Hover a feature" in c for c in texts(at.caption))
    monkeypatch.setattr("bertscope.app.sections.graph_tab.EXAMPLE_SENTENCES", 20)  # a short read for the test
    next(b for b in at.button if b.label.startswith("Add where each feature fires")).click()
    at.run(timeout=600)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Hover a feature: where it fires most over" in c for c in texts(at.caption))
    assert not any(b.label.startswith("Add where each feature fires") for b in at.button)
    at.text_input(key="graph_group_name").input("river words")  # a supernode: this graph's own
    at.multiselect(key="graph_group_members").select(at.multiselect(key="graph_group_members").options[0])
    next(b for b in at.button if b.label == "Add the group").click()
    at.run(timeout=600)
    assert not at.exception and len(at.dataframe) == 1 and at.dataframe[0].value["supernode"].tolist() == ["river words"]
    off = float(next(m for m in at.metric if m.label == "The graph predicts").value)
    at.selectbox(key="graph_steer").select("doubled (× 2)").run(timeout=600)  # steered: minus the switch-off's
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert float(next(m for m in at.metric if m.label == "The graph predicts").value) == -off
    value = next(m for m in at.metric if m.label == "Its value").value
    at.selectbox(key="graph_head").select("linear")  # the head to first order: the same decision, other sizes
    next(b for b in at.button if b.label == "Trace the graph").click()
    at.run(timeout=600)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert next(m for m in at.metric if m.label == "Its value").value == value
    assert not at.dataframe  # another graph: the first one's supernodes are not summed over its nodes
    assert float(next(m for m in at.metric if m.label == "The graph predicts").value) != -off


def test_a_rerun_reads_no_transcoder_file(monkeypatch):
    """The shipped set is read once a model and process, through the shared byte budget: a rerun reads no file."""
    import bertscope.app.sections.graph_tab as tab

    reads, read = [], tab.transcoder_set
    monkeypatch.setattr(tab, "transcoder_set", lambda lm, *a, **k: reads.append(lm.name) or read(lm, *a, **k))
    at = start_with_url(monkeypatch, "bundled-mlm", PAGE, circuit_tab="Attribution graph")
    assert not at.exception and not at.error
    first = len(reads)
    assert first <= 1  # none when an earlier test of this process read it already
    at.text_input(key="graph_target").input("water")
    at.run(timeout=600)
    assert not at.exception and len(reads) == first


def test_no_mask_is_one_line(monkeypatch):
    at = start_with_url(monkeypatch, "bundled-mlm", PAGE, circuit_tab="Attribution graph")
    at.text_input(key="graph_text").input("The bank of the river was muddy.")
    next(b for b in at.button if b.label == "Trace the graph").click()
    at.run(timeout=600)
    assert not at.exception and texts(at.error) == ["No [MASK] in the text: put one where the prediction to explain "
                                                    "is."]


def test_a_model_without_transcoders_is_told_so(monkeypatch):
    at = start_with_url(monkeypatch, "bundled-upos", PAGE, circuit_tab="Attribution graph")
    assert not at.exception and not at.error
    assert any("No transcoders are shipped for bundled-upos" in w for w in texts(at.warning))


def test_a_classifiers_decision_on_its_shipped_transcoders(monkeypatch):
    """bundled-sentiment's class at [CLS], against the other class: the graph on its own shipped skip transcoders."""
    at = start_with_url(monkeypatch, "bundled-sentiment", PAGE, circuit_tab="Attribution graph")
    assert not at.exception and not at.error
    at.text_input(key="graph_contrast").input("negative")
    next(b for b in at.button if b.label == "Trace the graph").click()
    at.run(timeout=600)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert next(m for m in at.metric if m.label == "Target").value == "positive"
    assert any("Attribution graph:" in c.proto.spec for c in at.get("plotly_chart"))


def test_a_word_the_vocabulary_lacks_is_one_line_before_any_trace(monkeypatch):
    """The decision is checked before the trace is charged: a typo costs the hosted demo's budget nothing."""
    import bertscope.app.sections.graph_tab as tab

    traced = []
    monkeypatch.setattr(tab, "attribution_graph", lambda *a, **k: traced.append(a))
    at = start_with_url(monkeypatch, "bundled-mlm", PAGE, circuit_tab="Attribution graph")
    at.text_input(key="graph_target").input("zzzzqqqq")
    next(b for b in at.button if b.label == "Trace the graph").click()
    at.run(timeout=600)
    errors = texts(at.error)
    assert not at.exception and not traced and len(errors) == 1, errors
    assert "(--target); the model's top predictions here:" in errors[0]


def test_a_graph_takes_a_third_of_the_shared_store(monkeypatch):
    """The page's adjacency budget: a graph it traced stays in the store for the clicks after (a hosted demo's
    384 MiB store dropped a 512 MiB graph, and every click asked for a new trace)."""
    from bertscope.app.sections.graph_tab import graph_bytes
    from bertscope.graphs.build import MAX_GRAPH_BYTES

    monkeypatch.setenv("BERTSCOPE_CACHE_MB", "384")
    assert graph_bytes() == 128 * 2**20
    monkeypatch.setenv("BERTSCOPE_CACHE_MB", "4096")
    assert graph_bytes() == MAX_GRAPH_BYTES
