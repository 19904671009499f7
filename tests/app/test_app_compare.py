"""Streamlit AppTest of the Compare page: CKA of two models over Brown, predictions side by side,
a link, and a model B that cannot be had."""

from __future__ import annotations

from tests.app.kit import address, open_link, start, start_with_url, stopped_while_running, texts

PAGE = "bertscope/app/compare.py"


def test_cka_and_predictions(monkeypatch, tiny_mlm_dir, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_mlm_dir)).switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert any("Press *Compare*" in i for i in texts(at.info))  # nothing costly on arrival
    assert "n" not in at.query_params  # the link's flag: with no result on screen a reload runs nothing
    at.text_input(key="cmp_b").input(str(tiny_bert_dir)).run()
    at.select_slider(key="cmp_n").set_value(100)
    next(b for b in at.button if b.label == "Compare" and "cmp_form" in b.id).click()
    at.run()
    assert not at.exception and not at.error
    assert at.query_params["n"] in ("100", ["100"])  # the view on screen, copied as a link
    at.session_state["cmp_tab"] = "Predictions"  # another tab: a link copied there does not run the comparison
    at.run()
    assert "n" not in at.query_params and not at.exception
    at.session_state["cmp_tab"] = "Layers (CKA)"
    at.run()
    assert at.query_params["n"] in ("100", ["100"])
    heatmap = at.get("plotly_chart")[0].proto.spec
    assert "Linear CKA" in heatmap and "embeddings" in heatmap
    assert any("Same depth" in c for c in texts(at.caption))
    frames = [f.value for f in at.dataframe]
    assert frames and {"token", "rank in B", "rank change"} <= set(frames[0].columns)


def test_link_and_a_model_b_that_cannot_be_had(monkeypatch, tiny_mlm_dir, tiny_bert_dir, tmp_path):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, b=str(tiny_mlm_dir), n="100", pool="first")
    assert not at.exception and not at.error
    assert "first piece" in at.get("plotly_chart")[0].proto.spec  # a shared link compares on arrival
    at.text_input(key="cmp_b").input(str(tiny_bert_dir)).run()  # another request: the link asked for its own, once
    assert not at.exception and not at.error
    assert "n" not in at.query_params  # no comparison on screen: a reload runs nothing
    assert any("Press *Compare*" in i for i in texts(at.info)) and not any(
        "Linear CKA" in c.proto.spec for c in at.get("plotly_chart"))
    at.text_input(key="cmp_b").input(str(tmp_path / "nowhere")).run()
    assert not at.exception
    (error,) = texts(at.error)
    assert "nowhere" in error and "\n" not in error


def test_heads_tab(monkeypatch, tiny_mlm_dir, tiny_bert_dir, tiny_roberta_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, b=str(tiny_bert_dir), cmp_tab="Heads", heads="1")
    assert not at.exception and not at.error  # a shared link with the heads on screen: compared on arrival
    spec = next(c.proto.spec for c in at.get("plotly_chart") if "moved from the same head" in c.proto.spec)
    assert "JS" in spec
    assert any("heads of A are closest to the same head of B" in c for c in texts(at.caption))
    at.text_input(key="cmp_b").input(str(tiny_roberta_dir)).run()  # another tokenizer: said, nothing drawn
    assert not at.exception and not at.error
    assert any("cut text into different tokens" in i for i in texts(at.info))


def test_heads_tab_waits_for_its_button(monkeypatch, tiny_mlm_dir, tiny_bert_dir, tmp_path):
    """Opening the tab computes nothing (it read every attention map of both models on opening); the button
    does, and the heatmap's title counts the sentences that were used."""
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, b=str(tiny_bert_dir), cmp_tab="Heads")  # a reload
    assert not at.exception and not at.error  # of the open tab, its heads not on screen: nothing runs
    assert any(t.startswith("Press *Compare heads*") for t in texts(at.info))
    assert not any("moved from the same head" in c.proto.spec for c in at.get("plotly_chart"))
    assert "heads" not in at.query_params
    at.button(key="cmp_heads_run").click().run()
    spec = next(c.proto.spec for c in at.get("plotly_chart") if "moved from the same head" in c.proto.spec)
    assert "sentences)" in spec and not at.exception
    copied = address(at)  # the link's flag and its tab, with the result on screen
    assert copied["heads"] == "1" and copied["cmp_tab"] == "Heads"
    from bertscope.app.kit.results import shared_results

    shared_results().clear()  # another server: the link's own flag runs it, not a result kept here
    unflagged = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, **{**copied, "heads": "0"})
    assert any(t.startswith("Press *Compare heads*") for t in texts(unflagged.info))  # the control
    linked = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, **copied)  # the link copied: compared on arrival
    assert any("moved from the same head" in c.proto.spec for c in linked.get("plotly_chart"))
    linked.text_input(key="cmp_b").input(str(tmp_path / "nowhere")).run()  # a B that cannot be loaded: the page
    assert not linked.exception and texts(linked.error)  # stops before its tabs, and no flag stays for a link
    assert "heads" not in linked.query_params and "cmp_tab" not in linked.query_params
    at.session_state["cmp_tab"] = "Layers (CKA)"  # another tab picked: it opens at once, the flag and tab go
    at.run()
    assert at.session_state["cmp_tab"] == "Layers (CKA)" and "heads" not in at.query_params
    assert "cmp_tab" not in at.query_params


def test_a_model_b_picked_from_the_presets_is_in_the_link(monkeypatch):
    """b names model B whether typed or picked (a link that dropped a picked B compared A with the default B); a
    link's preset sets the picker, not the typed field; the default B is left out of the address."""
    at = start_with_url(monkeypatch, "bundled", PAGE)
    assert "b" not in at.query_params  # bundled-mlm, the default B beside bundled
    at.selectbox(key="cmp_b_preset").set_value("bundled-upos").run()
    assert not at.exception and not at.error
    copied = address(at)
    assert copied["b"] == "bundled-upos"
    at.selectbox(key="cmp_b_preset").set_value("bundled-sentiment").run()  # a second pick: the b the page wrote
    assert at.selectbox(key="cmp_b_preset").value == "bundled-sentiment"  # is never read back as a link's
    assert address(at)["b"] == "bundled-sentiment"
    linked = start_with_url(monkeypatch, "bundled", PAGE, **copied)
    assert not linked.exception and not linked.error
    assert linked.selectbox(key="cmp_b_preset").value == "bundled-upos" and not linked.text_input(key="cmp_b").value
    linked.text_input(key="cmp_b").input("org/x").run()
    linked.text_input(key="cmp_b").input("org/y").run()
    assert linked.text_input(key="cmp_b").value == "org/y" and address(linked)["b"] == "org/y"
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")  # the hosted demo has no typed field: a name that is no preset is
    demo = start_with_url(monkeypatch, "bundled", PAGE, b="/some/folder", n="100")  # ignored, said in one line,
    assert not demo.exception and not demo.error  # and the link's comparison (of another B) does not run
    assert any("Ignored the link's b=/some/folder" in w for w in texts(demo.warning))
    assert any("Press *Compare*" in i for i in texts(demo.info))
    assert not any("Linear CKA" in c.proto.spec for c in demo.get("plotly_chart"))
    other = start_with_url(monkeypatch, "bundled", PAGE, model="/their/model", n="100")  # a model the demo ignores
    assert not other.exception and not other.error  # (said on arrival): nothing runs on the fallback
    assert any("Press *Compare*" in i for i in texts(other.info))
    assert not any("Linear CKA" in c.proto.spec for c in other.get("plotly_chart"))
    assert not any(t.key == "cmp_b" for t in demo.text_input) and "b" not in demo.query_params


def test_probes_tab(monkeypatch, tiny_mlm_dir, tiny_bert_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, b=str(tiny_bert_dir), cmp_tab="Probes")
    assert not at.exception and not at.error
    assert any("Probe both" in i for i in texts(at.info))  # nothing runs before it is asked
    at.selectbox(key="cmp_suite").set_value("pos")
    next(b for b in at.button if b.label == "Probe both" and "cmp_probe_form" in b.id).click()
    at.run()
    assert not at.exception, at.exception[0].stack_trace
    assert not at.error
    spec = next(c.proto.spec for c in at.get("plotly_chart") if "Probe accuracy by layer" in c.proto.spec)
    assert spec.count(": task") == 2  # one accuracy line per model
    assert any(c.startswith("Best layer:") for c in texts(at.caption))


def test_latents_tab_on_the_shipped_pair(monkeypatch):
    """bundled (A) with bundled-upos (B): nothing runs on arrival; the button reads the shipped crosscoder, draws the
    histogram and the causal check, and lists the fine-tuned-only latents. A pair with no crosscoder is said (an
    info line), a typed folder that holds none is an error line."""
    at = start_with_url(monkeypatch, "bundled", PAGE, b="bundled-upos", cmp_tab="Latents")
    assert not at.exception and not at.error
    assert any(t.startswith("Press *Read the crosscoder*") for t in texts(at.info))
    at.select_slider(key="diff_examples").set_value(100)
    next(b for b in at.button if b.label == "Read the crosscoder").click()
    at.run()
    assert not at.exception and not at.error
    assert any("latents by relative decoder norm" in c.proto.spec for c in at.get("plotly_chart"))
    frames = [f.value for f in at.dataframe]
    causal = next(v for v in frames if "B's held-out accuracy" in v.columns)
    assert len(causal) == 5 and causal["accuracy"].between(0, 1).all()
    latents = next(v for v in frames if "relative norm" in v.columns)
    assert (latents["relative norm"] >= 0.9).all() and latents["switched off"].any() and latents["pushes"].str.len().gt(0).all()
    metrics = [m.label for m in at.metric]
    assert "Fine-tuned-only (real)" in metrics
    at.text_input(key="diff_cc").input("/nowhere/at/all").run()
    assert not at.exception
    (error,) = texts(at.error)
    assert "/nowhere/at/all" in error and "\n" not in error


def test_latents_tab_says_when_no_crosscoder_is_shipped(monkeypatch):
    at = start_with_url(monkeypatch, "bundled", PAGE, b="bundled-mlm", cmp_tab="Latents")
    assert not at.exception and not at.error
    assert any("No crosscoder is shipped for bundled and bundled-mlm" in i and "bundled-upos (B)" in i
               for i in texts(at.info))


def test_latents_tab_on_the_sentiment_pair_reads_cls_at_the_last_layer(monkeypatch):
    """bundled (A) with bundled-sentiment (B): the shipped crosscoders are of word pieces at layer 4 and of [CLS] at
    the last layer, which opens first; its causal check says that only [CLS] is edited."""
    at = start_with_url(monkeypatch, "bundled", PAGE, b="bundled-sentiment", cmp_tab="Latents")
    assert not at.exception and not at.error
    assert at.selectbox(key="diff_layer").options == ["4", "5"] and at.selectbox(key="diff_layer").value == 5
    at.select_slider(key="diff_examples").set_value(100)
    next(b for b in at.button if b.label == "Read the crosscoder").click()
    at.run()
    assert not at.exception and not at.error
    assert any("Only [CLS] is edited" in c for c in texts(at.caption))
    causal = next(f.value for f in at.dataframe if "B's held-out accuracy" in f.value.columns)
    assert len(causal) == 5



def test_a_tab_opened_later_is_no_link(monkeypatch, tiny_mlm_dir, tiny_bert_dir):
    """The address carries the open tab once a visitor picks it: a link's flag read then (not on arrival) ran the
    heads' comparison unasked. A page opened without a link never runs a costly job unasked."""
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, b=str(tiny_bert_dir))
    at.query_params["cmp_tab"] = "Heads"
    at.session_state["cmp_tab"] = "Heads"
    at.run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press *Compare heads*") for t in texts(at.info))


def test_a_link_that_cannot_be_honoured_runs_nothing_later(monkeypatch, tiny_mlm_dir, tiny_bert_dir, tmp_path):
    """A link whose model B cannot be loaded stops before its tabs; the visitor's next B with the Heads tab open
    waits for its button (the link's request, spent, ran unasked on a pair the link never named)."""
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, b=str(tmp_path / "nowhere"), cmp_tab="Heads",
                        heads="1")
    assert not at.exception and texts(at.error)
    assert "heads" not in at.query_params and "cmp_tab" not in at.query_params
    at.text_input(key="cmp_b").input(str(tiny_bert_dir))
    at.session_state["cmp_tab"] = "Heads"
    at.run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press *Compare heads*") for t in texts(at.info))
    assert not any("moved from the same head" in c.proto.spec for c in at.get("plotly_chart"))


def test_a_stopped_heads_comparison_takes_the_links_flag_out(monkeypatch, tiny_mlm_dir, tiny_bert_dir):
    """Stop pressed on a link's head comparison while it still runs: Stopped, and the tab and its flag leave the
    address before the page ends (written after st.stop() they stayed, and a reload ran the comparison again)."""
    at = open_link(monkeypatch, str(tiny_mlm_dir), b=str(tiny_bert_dir), cmp_tab="Heads", heads="1")
    key = ((str(tiny_mlm_dir), "auto", "auto"), (str(tiny_bert_dir), "auto", "auto"))
    with stopped_while_running(at, "compare_heads", key, "compare_heads"):
        at.switch_page(PAGE).run()
        assert not at.exception and not at.error
        assert any(t.startswith("Stopped (heads") for t in texts(at.info))
    assert "heads" not in at.query_params and "cmp_tab" not in at.query_params
    assert at.query_params["b"] in (str(tiny_bert_dir), [str(tiny_bert_dir)])


def test_a_stopped_layer_comparison_takes_the_links_n_out(monkeypatch, tiny_mlm_dir, tiny_bert_dir):
    """The same for the Layers tab's CKA: a link's comparison stopped while it runs leaves ``n`` (its flag) out of
    the address, so a reload runs nothing."""
    at = open_link(monkeypatch, str(tiny_mlm_dir), b=str(tiny_bert_dir), n="100", pool="first")
    request = ((str(tiny_mlm_dir), "auto", "auto"), (str(tiny_bert_dir), "auto", "auto"), 100, "first")
    with stopped_while_running(at, "compare", request, "compare"):
        at.switch_page(PAGE).run()
        assert not at.exception and not at.error
        assert any(t.startswith("Stopped (both models over the sentences") for t in texts(at.info))
    assert "n" not in at.query_params and at.query_params["pool"] in ("first", ["first"])
