"""Streamlit AppTest of the Probes page's Syntax tab: structural probes on EWT at every hidden state,
the scores beside the chain, a test sentence's trees and distance matrices, a typed sentence's tree,
and the label probes on the same treebank, through the budget."""

from __future__ import annotations

from tests.app.kit import start, start_with_url, texts


def test_structural_probes_on_ewt(monkeypatch, tiny_bert_dir, tmp_path):
    from bertscope.runtime.user_cache import user_cache_dir

    corpora = (user_cache_dir() / "corpora").resolve()  # the installed treebank, read through a link
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # the hidden-state cache goes there
    (tmp_path / "corpora").symlink_to(corpora)
    at = start_with_url(monkeypatch, str(tiny_bert_dir), "bertscope/app/probes.py", probe_tab="Syntax")
    assert not at.exception and not at.error
    assert any("Press *Train the probes*" in i for i in texts(at.info))  # nothing costly on arrival
    at.select_slider(key="syntax_train").set_value(300)
    at.select_slider(key="syntax_test").set_value(100)
    at.selectbox(key="syntax_rank").set_value(32)
    next(b for b in at.button if "syntax_form" in b.id).click()
    at.run(timeout=600)
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "uuas" in d.value.columns)
    assert list(table["hidden state"]) == ["embeddings", "0", "1"] and table["uuas"].between(0, 1).all()
    assert any("against the chain's" in c for c in texts(at.caption))
    assert len(at.get("plotly_chart")) >= 3  # the scores by layer, the trees, the matrices
    at.selectbox(key="syntax_sentence").set_value(3).run()
    assert not at.exception and not at.error
    # a typed sentence: its predicted tree from the best layer's probe, downloadable; bad ones in one line
    assert at.text_input(key="syntax_typed").value  # an example is there to start from
    at.text_input(key="syntax_typed").input("The dog chased the cat .").run()
    assert not at.exception and not at.error
    typed = [c.proto.spec for c in at.get("plotly_chart") if "no gold: a typed sentence" in c.proto.spec]
    assert len(typed) == 1 and '"chased"' in typed[0] and '"cabinet"' not in typed[0]  # the new sentence, drawn
    at.text_input(key="syntax_typed").input("Hello .").run()
    assert not at.exception
    (error,) = texts(at.error)
    assert "at least two words" in error and "\n" not in error
    at.text_input(key="syntax_typed").input("The dog chased the cat .").run()
    # the label probes on the same treebank wait for their button, then draw each layer with its control
    assert any("Press *Probe every layer*" in i for i in texts(at.info))
    at.radio(key="syntax_label_task").set_value("ewt-deprel")
    next(b for b in at.button if "syntax_labels_form" in b.id).click()
    at.run(timeout=600)
    assert not at.exception and not at.error
    labels = next(d.value for d in at.dataframe if "selectivity" in d.value.columns)
    assert list(labels["hidden state"]) == ["embeddings", "0", "1"] and labels["accuracy"].between(0, 1).all()
    assert any(c.startswith("ewt-deprel: best at") for c in texts(at.caption))


def test_the_labels_tab_is_still_the_first(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir)).switch_page("bertscope/app/probes.py").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="probe_task").value == "brown-pos"
