"""Predictions: what a fine-tuned model decides (its task head): every label's probability for a
text or a pair, each word's tag and the entities, the answer to a question in its context; and a
labelled file's accuracy, macro-F1, confusion matrix and misclassified records."""

import hashlib

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.app.kit.chrome import PLOT_CONFIG, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.uploads import uploaded_text
from bertscope.app.kit.url import from_url, to_url
from bertscope.attribution.gradients import Target, parse_target
from bertscope.attribution.methods import attribute
from bertscope.core.task_head import SEQUENCE, SPANS, TOKEN
from bertscope.figures.attribution import token_strip
from bertscope.figures.masked import lens_kl_figure
from bertscope.figures.tasks import confusion_heatmap, label_bars, layer_readings, marked_text
from bertscope.lenses.readings import lens_readings
from bertscope.lenses.shipped import find_lens, has_lens
from bertscope.tasks.classify import classify
from bertscope.tasks.layer_lens import layer_decisions
from bertscope.tasks.predict import predict, read_records
from bertscope.tasks.spans import answer
from bertscope.tasks.tag import tag

DEFAULTS = {SEQUENCE: "What a wonderful day at the beach with friends!", TOKEN: "John Smith moved from Paris to "
            "London to work for the BBC.", SPANS: "The Brown Corpus was compiled at Brown University in Providence "
            "in the 1960s; it holds 500 samples of American English prose."}


def inputs(task):
    """(the question or None, the text, the second text or ""): the form, and the link that restores it."""
    question, pair = None, ""
    from_url("text", "pred_text")
    with st.form("pred_form"):
        if task.kind == SPANS:
            question = st.text_input("Question", "Where was the corpus compiled?", key="pred_question",
                                     max_chars=Limits.input_chars)
        text = st.text_area("Context" if task.kind == SPANS else "Text", DEFAULTS[task.kind], key="pred_text",
                            max_chars=Limits.input_chars)
        if task.kind == SEQUENCE:
            pair = st.text_input("Second text (optional: sentence-pair classifiers such as NLI)", key="pred_pair",
                                 max_chars=Limits.input_chars)
        st.form_submit_button("Predict", type="primary")
    to_url(text=text)
    return question, text, pair


def class_decision(lm, key, task, text: str, pair: str, store):
    """A sequence classifier's scores (or value), and optionally its reading at every layer; the decided label."""
    check_text(pair, "second text")
    result = store.get_or_compute((key, text, pair or None), lambda: classify(
        lm, [text], [pair] if pair else None)[0])
    decided = result.predicted
    if result.truncated:
        st.warning(f"The input is longer than {lm.max_length} tokens: the model read its first {lm.max_length}.")
    if task.scoring == "none":
        st.metric("Predicted value (regression)", f"{result.scores[0]:.4f}")
    else:
        what = "probability, each label on its own (multi-label)" if task.scoring == "sigmoid" else "probability"
        st.plotly_chart(label_bars(result.ranked, f"Decision: {result.predicted}", what), config=PLOT_CONFIG,
                        width="stretch", key="pred_bars")
    if st.toggle("Read the decision at every layer (a pass per hidden state)", key="pred_by_layer"):
        lens = result_store("predict_layers").compute((key, text, pair or None), lambda progress: layer_decisions(
            lm, text, pair or None), "Every layer's reading", costly="layer reading")
        st.plotly_chart(layer_readings(lens.states, lens.labels, lens.scores,
                                       "value" if task.scoring == "none" else "probability"),
                        config=PLOT_CONFIG, width="stretch", key="pred_layers")
        pooler = "the pooler and " if getattr(lm.model.base_model, "pooler", None) is not None else ""
        st.caption(plain(f"The head read at every hidden state (put where the last layer's output goes; "
                         f"{pooler}the classifier as the model applies them): the decision is "
                         f"“{lens.predicted[-1]}” from hidden state {lens.first_final()} on."))
        if has_lens(lm):
            tuned = result_store("predict_tuned_lens").compute(
                (key, text, pair or None), lambda progress: lens_readings(lm, find_lens(lm), text, pair=pair or None),
                "The tuned lens's reading", costly="tuned lens")  # the head through every state: 2L + 3 passes
            st.plotly_chart(lens_kl_figure(tuned.layers, [str(r.layer) for r in tuned.layers], "decision"),
                            config=PLOT_CONFIG, width="stretch", key="pred_tuned_chart")
            st.caption(plain("The tuned lens (Belrose et al. 2023) reads each state through a translator trained "
                             "so the head reads it as the last layer's: its decision by layer is "
                             + ", ".join(f"{r.layer}: {r.tuned[0][0]}" for r in tuned.layers) + "."))
    return decided


def tag_decision(lm, key, task, text: str, store) -> None:
    """A tagger's words and entities marked in the text, and the table of words."""
    result = store.get_or_compute((key, text), lambda: tag(lm, [text])[0])
    if any(label[:2] in ("B-", "I-") for label in task.labels):  # entities (BIO): a chip per entity
        spans = [(e["start"], e["end"], e["entity_group"], e["score"]) for e in result.entities]
    else:  # a tag per word (parts of speech): a chip per word, never two words merged under one tag
        spans = [(w["start"], w["end"], w["label"], w["score"]) for w in result.words]
    st.html(marked_text(text, spans))  # HTML with the text escaped, and no Markdown read in it
    if not spans:
        st.caption("No entity: every word's label is O (or the tagger's outside label).")
    st.caption("Each word, as the BERT paper labels it: the label of its first piece.")
    st.dataframe(pd.DataFrame(result.words), hide_index=True, width="stretch")


def span_decision(lm, key, question: str, text: str, store) -> None:
    """A question answerer's best spans marked in the context."""
    check_text(question, "question")
    result = store.get_or_compute((key, question, text), lambda: answer(
        lm, [question], [text], top_k=3)[0])
    best = result.answers[:1]
    st.html(marked_text(text, [(a["start"], a["end"], "answer", a["score"]) for a in best]))
    st.caption(plain(f"The three best spans (the context ran in {result.windows} window(s): the windows and "
                     "the longest answer the model was scored with when it was fine-tuned here, else the "
                     "model's length; an answer found in several windows adds its scores)."))
    st.dataframe(pd.DataFrame(result.answers), hide_index=True, width="stretch")


def decision(lm, key, task, question, text: str, pair: str):
    """The model's decision on the text; the predicted class (what "Why this decision?" explains first) or None."""
    decided = None
    with page_errors(stop=False):
        check_text(text)
        store = result_store("predict")
        if task.kind == SEQUENCE:
            decided = class_decision(lm, key, task, text, pair, store)
        elif task.kind == TOKEN:
            tag_decision(lm, key, task, text, store)
        else:
            span_decision(lm, key, question, text, store)
    return decided


def why_section(lm, key, task, question, text: str, pair: str, decided) -> None:
    """Integrated gradients on the decision (a class, a tag at a position, a span), behind its button."""
    st.subheader("Why this decision?")
    st.caption("Integrated gradients (Sundararajan et al. 2017) on the decision's log-probability (a regression's value): "
               "each token's share of the change from the baseline, every word piece replaced by the padding token. "
               "The other methods of the Attention and Faithfulness pages read the same targets from the command line "
               "(`attribute … --target class:LABEL`, `tag:POSITION`, `span`).")
    with st.form("pred_why_form"):
        choices = {SEQUENCE: list(task.labels), TOKEN: None, SPANS: ["span", "start", "end"]}[task.kind]
        if task.kind == TOKEN:
            why_position = st.number_input("Token position (0 is the first special token)", 0, lm.max_length - 1, 1,
                                           key="pred_why_pos")
            why = None
        else:
            shown_for = (key, text, pair if task.kind == SEQUENCE else None)
            if st.session_state.get("pred_why_for") != shown_for:  # a new text: explain its own decision first
                st.session_state["pred_why_for"] = shown_for
                if decided in choices:
                    st.session_state["pred_why"] = decided
            why = held_choice("Explain", choices, "pred_why", decided)
        steps = st.select_slider("Steps", [16, 32, 64, 128], 32, key="pred_why_steps")
        why_asked = st.form_submit_button("Explain")
    if why_asked or st.session_state.get("pred_why_ran"):
        st.session_state["pred_why_ran"] = True
        with page_errors(stop=False):
            if task.kind == SEQUENCE:
                target, first, second = Target("class", label=why), text, pair or None
            elif task.kind == TOKEN:
                target, first, second = Target("tag", int(why_position)), text, None
            else:
                target, first, second = parse_target(why), question, text
            request = (key, first, second, target, steps)
            explained = result_store("predict_why").compute(request, lambda progress: attribute(
                lm, first, second, "ig", target, steps=steps, progress=progress),
                "Integrated gradients, steps", why_asked, costly="explanation")
            a = explained.attribution
            st.plotly_chart(token_strip(explained.tokens, explained.scores, f"Integrated gradients for "
                                        f"{a.target.describe()}"), config=PLOT_CONFIG, width="stretch", key="pred_why_ig")
            st.caption(plain(f"f = {a.f_input:.3f} on the input, {a.f_baseline:.3f} at the baseline; the scores sum to "
                             f"{a.scores.sum():.3f}: completeness error {a.completeness_error:.2%} at {a.steps} steps. "
                             "Red pushes the decision up, blue down."))


def labelled_file_section(lm, key) -> None:
    """A labelled CSV or JSONL scored: accuracy, macro-F1, the confusion matrix, the misclassified records."""
    st.subheader("A labelled file")
    st.caption(plain(f"A CSV with a header (text[,pair],label) or JSONL records with those keys, up to "
                     f"{Limits.corpus_lines:,} records: accuracy, macro-F1, the confusion matrix and every "
                     "misclassified record."))
    with st.form("pred_file_form"):
        uploaded = st.file_uploader("Records", type=["csv", "jsonl"], key="pred_file", max_upload_size=Limits.upload_mb)
        asked = st.form_submit_button("Score the file")
    if uploaded is not None:
        with page_errors(stop=False):
            content = uploaded.getvalue()
            records = read_records(uploaded_text(uploaded), uploaded.name)
            if len(records.texts) > Limits.corpus_lines:
                raise BertScopeError(f"The file has {len(records.texts):,} records; this app takes up to "
                                     f"{Limits.corpus_lines:,}.")
            if records.gold is None:
                st.warning("The file has no label column: its records are predicted, not scored.")
            digest = hashlib.sha256(content).hexdigest()
            out = result_store("predict_file").compute((key, digest), lambda progress: predict(
                lm, records.texts, records.pairs, gold=records.gold, progress=progress),
                "Records", asked, costly="labelled-file run")
            if "evaluation" in out:
                e = out["evaluation"]
                c1, c2, c3 = st.columns(3)
                c1.metric("Accuracy", f"{e['accuracy']:.1%}")
                c2.metric("Macro-F1", f"{e['macro_f1']:.3f}")
                c3.metric("Misclassified", f"{e['misclassified_count']:,} of {e['records']:,}")
                st.plotly_chart(confusion_heatmap(e), config=PLOT_CONFIG, width="stretch", key="pred_confusion")
                if e["misclassified"]:
                    st.caption("Misclassified records (gold, predicted and the predicted label's score):")
                    st.dataframe(pd.DataFrame(e["misclassified"]), hide_index=True, width="stretch")
            else:
                st.dataframe(pd.DataFrame([{"text": i["text"], "predicted": i["scores"][0]["label"],
                                            "score": i["scores"][0]["score"]} for i in out["items"]]),
                             hide_index=True, width="stretch")


def page() -> None:
    st.title("Predictions")
    lm = require_model(fallback=lambda lm: st.caption(
        "This page shows what a fine-tuned model decides. Beside the two above, any checkpoint saved with a task head "
        "opens here — a classifier (…ForSequenceClassification: sentiment, NLI, topics), a tagger "
        "(…ForTokenClassification: NER, parts of speech) or a question-answering model (…ForQuestionAnswering) — "
        "by its hub id or folder in the sidebar, or a run of the Fine-tuning page."))  # the record needs a task head
    key = model_key()

    task = lm.task
    st.caption(plain(f"{lm.name}: {task.describe()}."))
    if task.generic_labels:
        st.info("The checkpoint does not name its labels (LABEL_0, LABEL_1, …): they are shown as it has them.")
    question, text, pair = inputs(task)
    decided = decision(lm, key, task, question, text, pair)
    why_section(lm, key, task, question, text, pair, decided)
    if task.kind == SEQUENCE:
        labelled_file_section(lm, key)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
