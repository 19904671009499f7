"""Streamlit AppTest of the Circuits page: nothing costly on arrival, a run on uploaded pairs through the
budget (the drawn circuit, the curve beside random circuits, the edge table, a head to open, downloads),
and bad input as one line with the last result kept; a family the circuits do not cover is refused."""

from __future__ import annotations

import json

from tests.app.kit import start_with_url, texts

PAIRS = [{"clean": "the man [MASK] here .", "corrupted": "the dog [MASK] here .", "answer": "is", "foil": "was"},
         {"clean": "the dog sat by the [MASK] .", "corrupted": "the man sat by the [MASK] .", "answer": "river",
          "foil": "bank"},
         {"clean": "the woman [MASK] there .", "corrupted": "the child [MASK] there .", "answer": "was", "foil": "is"}]


def submit(at) -> None:
    next(b for b in at.button if "circ_form" in b.id).click()
    at.run(timeout=600)


def test_circuits_page(monkeypatch, tiny_mlm_dir):
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), "bertscope/app/circuits.py")
    assert not at.exception and not at.error
    assert at.selectbox(key="circ_task").options[:3] == ["agreement: Subject–verb agreement across an attractor",
                                                         "gender: Pronoun and gender", "capitals: Capital cities"]
    assert at.selectbox(key="circ_task").value == "gender"  # the task the docs' first try names
    assert any("Press *Find the circuit*" in i for i in texts(at.info))  # nothing costly on arrival
    at.selectbox(key="circ_task").set_value("Your own pairs…")
    submit(at)  # a form: the choice counts when it is sent
    assert texts(at.warning) == ["Upload a .csv or .jsonl file of pairs first."]
    at.file_uploader(key="circ_upload").upload("pairs.jsonl", "\n".join(json.dumps(p) for p in PAIRS).encode())
    at.select_slider(key="circ_size").set_value(8)
    at.selectbox(key="circ_method").set_value("eap")
    submit(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    labels = [m.label for m in at.metric]
    assert "CPR (random)" in labels and "80 % faithful at (share of edges)" in labels
    table = next(d.value for d in at.dataframe if "source" in d.value.columns)
    assert list(table.columns) == ["source", "target", "score"] and len(table) >= 1
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("The circuit:" in s for s in specs) and any("random circuits, same sizes" in s for s in specs)
    assert at.selectbox(key="circ_head").options  # a head of the circuit to open on Attention
    downloads = {b.proto.label: b.proto for b in at.get("download_button")}
    assert {"Download (JSON)", "Every edge's score (CSV)"} <= set(downloads)
    for label in ("Download (JSON)", "Every edge's score (CSV)"):  # written when clicked, not held at every rerun
        assert downloads[label].HasField("deferred_file_id") and not downloads[label].url
    # bad input: pairs of unequal length, one line naming the pair; the run above is not lost from the store
    bad = dict(PAIRS[0], corrupted="the big dog [MASK] here .")
    at.file_uploader(key="circ_upload").upload("bad.jsonl", json.dumps(bad).encode())
    submit(at)
    assert not at.exception
    assert any("Pair 1 has 7 tokens clean and 8 corrupted" in e for e in texts(at.error) + texts(at.warning))


def test_a_family_without_post_layernorm_blocks_is_one_line(monkeypatch, tiny_modernbert_dir):
    at = start_with_url(monkeypatch, str(tiny_modernbert_dir), "bertscope/app/circuits.py")
    assert not at.exception
    assert any("Circuits are built for post-LayerNorm encoders" in e for e in texts(at.error))


def test_a_question_answering_model_runs_on_uploaded_questions_of_a_context(monkeypatch, tiny_bert_dir, tmp_path):
    from tests.conftest import task_checkpoint

    qa = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 4, num_labels=2)
    at = start_with_url(monkeypatch, str(qa), "bertscope/app/circuits.py")
    assert not at.exception and not at.error
    assert at.selectbox(key="circ_task").options == ["Your own pairs…"]  # no built-in task reads spans
    assert texts(at.warning) == ["Upload a .csv or .jsonl file of pairs first."]
    context = "the man sat by the river and the dog was by the bank ."
    pairs = [{"clean": "who sat by the river ?", "corrupted": "what was by the river ?", "answer": "the man",
              "foil": "the dog", "context": context},
             {"clean": "where was the dog ?", "corrupted": "where was the man ?", "answer": "the bank",
              "foil": "the river", "context": context}] * 2
    at.file_uploader(key="circ_upload").upload("qa.jsonl", "\n".join(json.dumps(p) for p in pairs).encode())
    at.select_slider(key="circ_size").set_value(8)
    at.selectbox(key="circ_method").set_value("eap")
    submit(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "span score (start + end logits): answer − foil, clean" in [m.label for m in at.metric]
    assert any("The circuit:" in c.proto.spec for c in at.get("plotly_chart"))
