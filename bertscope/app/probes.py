"""Linear probes per layer on cached hidden states, with control tasks."""

import json
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states, task_size
from bertscope.analysis.probing import ProbeResult, check_external_labels, example_texts, probe_layers
from bertscope.app.kit.chrome import PLOT_CONFIG, download, page_errors, plain
from bertscope.app.kit.estimates import expected
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, demo
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.uploads import uploaded_text
from bertscope.app.kit.url import from_url, tab_from_url, to_url
from bertscope.app.sections import erasure_tab, syntax_tab, tcav_tab
from bertscope.core.layers import hidden_name
from bertscope.corpora.brown import tag_name
from bertscope.corpora.brown_tasks import DEFAULT_SENTENCES
from bertscope.corpora.probe_tasks import ProbeTask, read_task
from bertscope.corpora.suites import BROWN_TASKS, shipped_task
from bertscope.figures.probe import confusion_figure, layer_figure, run_name
from bertscope.figures.text import in_context, table_text

UPLOAD = "Your own file…"
TASKS = {  # real text first: template suites make control tasks look easy to beat
    "brown-pos": "Brown corpus: universal POS (token, 12 tags, real text)",
    "brown-tags": "Brown corpus: Brown tags (token, ~115 tags in the sample)",
    "brown-genre": "Brown corpus: genre (sentence, 15 genres)",
    "pos": "Part of speech (token, 15 UPOS tags, template sentences)", "sense": "Word sense (token, the shift page's words)",
    "tense": "Tense (sentence)", "subject_number": "Subject number (sentence)", "negation": "Negation (sentence)",
    "question": "Question vs statement (sentence)", "bigram_shift": "Bigram shift (sentence)", UPLOAD: UPLOAD,
}
RUNS = "probe_runs"


def brown_size() -> int:
    """The Brown suites' quick sample, within the demo's corpus cap; split by document."""
    return min(DEFAULT_SENTENCES, Limits.corpus_lines)


TAB_NAMES = ["Labels", "Syntax", "Does the model use it?", "Concepts (TCAV)"]


@dataclass(frozen=True)
class ProbeForm:
    """What the probe form asked for."""

    suite: str
    pooling: str
    kind: str
    uploaded: object
    test_upload: object
    submitted: bool


def read_upload(upload) -> ProbeTask:
    return read_task(uploaded_text(upload), upload.name)


def probe_form(lm) -> ProbeForm:
    """The task (shipped or uploaded), the vector, the probe, an optional test file; the URL kept in step."""
    from_url("task", "probe_task", str, lambda v: v in TASKS and v != UPLOAD)
    from_url("vec", "probe_pooling", str, lambda v: v in ("mean", "first"))
    from_url("probe", "probe_kind", str, lambda v: v in ("logreg", "mlp"))
    with st.form("probe_form"):
        c1, c2, c3 = st.columns([2, 1, 1])
        suite = held_choice("Task", list(TASKS), format_func=TASKS.get, key="probe_task", container=c1)
        pooling = c2.radio("Vector", ["mean", "first"], key="probe_pooling",
                           format_func={"mean": "mean of pieces / tokens", "first": "first piece / [CLS]"}.get)
        kind = c3.radio("Probe", ["logreg", "mlp"], key="probe_kind",
                        format_func={"logreg": "logistic regression", "mlp": "MLP (128 units)"}.get)
        uploaded = st.file_uploader("Own task: CoNLL-U (UPOS), CSV (sentence,label or tokens,tags) or JSONL",
                                    type=["conllu", "csv", "jsonl"], key="probe_upload", max_upload_size=Limits.upload_mb)
        test_upload = st.file_uploader("Test there (optional): score the trained probe on your file too, with the "
                                       "task's labels", type=["conllu", "csv", "jsonl"], key="probe_test_upload",
                                       max_upload_size=Limits.upload_mb)
        submitted = st.form_submit_button("Extract and probe every layer", type="primary")
    if suite in BROWN_TASKS:  # what a run costs, before the press (a measured rate; none before the first run)
        st.caption(plain(f"{suite} on {lm.name}: {expected('probes', lm.name, brown_size(), 'sentences')}."))

    to_url(task=suite if suite != UPLOAD else None, vec=pooling if pooling != "mean" else None,
           probe=kind if kind != "logreg" else None)
    return ProbeForm(suite, pooling, kind, uploaded, test_upload, submitted)


def run_probes(lm, key, form: ProbeForm) -> None:
    """The task read and checked, its hidden states extracted and every layer probed as a charged job; the run
    joins the session's runs (and the plot)."""
    suite, pooling, kind, uploaded, test_upload = form.suite, form.pooling, form.kind, form.uploaded, form.test_upload
    with page_errors(stop=False):
        if suite == UPLOAD:
            if uploaded is None:
                raise BertScopeError("Choose a file to upload, or a shipped task.")
            task = read_upload(uploaded)
        else:
            # Brown suites: the quick sample, within the demo's corpus cap; split by document
            task = shipped_task(suite, size=brown_size() if suite in BROWN_TASKS else None)
        if len(task.words) > Limits.corpus_lines:
            raise BertScopeError(f"{len(task.words):,} sentences; this app takes up to {Limits.corpus_lines:,}.")
        chosen = pooling if task.level == "token" or pooling == "mean" else "cls"
        other = read_upload(test_upload) if test_upload is not None else None  # train here, test there
        if other is not None:
            if other.level != task.level:
                raise BertScopeError(f"The test file is a {other.level}-level task; {task.name} is {task.level}-level.")
            if len(other.words) > Limits.corpus_lines:
                raise BertScopeError(f"The test file has {len(other.words):,} sentences; this app takes up to "
                                     f"{Limits.corpus_lines:,}.")
            check_external_labels(task.classes, other.classes)
        store = result_store("probes")
        run_key = (key, task.digest(), chosen, kind, other.digest() if other is not None else None)
        # checked before the job starts: once it starts it is charged (a hosted demo's budget)
        size = task_size(lm, task)
        size.check_labels()
        other_size = task_size(lm, other) if other is not None else None
        check_pieces(size.pieces + (other_size.pieces if other_size else 0), "this probe run")

        def run(progress):
            states = hidden_states(lm, task, chosen, HiddenStateCache(), progress=progress, size=size)
            external = None
            if other is not None:
                external = hidden_states(lm, other, chosen, HiddenStateCache(), progress=lambda d, t: progress(
                    d, t, "Hidden states of the test file, word pieces"), size=other_size)
            result = probe_layers(states, task.name, chosen, kind, external=external,
                                  progress=lambda d, t: progress(d, t, "Probes (task, then control, per layer), fits"))
            return (result, states.hit, states.size_bytes, str(states.folder),
                    example_texts(states, task, result.test_examples))

        # asked: the button was pressed
        found = store.compute(run_key, run, "Hidden states, word pieces", asked=True, costly="probe run",
                              measure=(lm.name, len(task.words)) if suite in BROWN_TASKS else None)
        result = found[0]
        runs = st.session_state.setdefault(RUNS, {})
        runs[run_name(result)] = found
        st.session_state["probe_latest"] = run_name(result)
        shown = [n for n in st.session_state.get("probe_compare", []) if n != run_name(result)]
        st.session_state["probe_compare"] = [*shown, run_name(result)][-3:]  # the new run joins the plot



def run_summary(runs: dict):
    """The latest run's cache, best layer, control and baseline; returns (result, its examples' texts)."""
    latest = st.session_state.get("probe_latest") or next(reversed(runs))
    result, hit, size, folder, described = runs[latest]
    where = "" if demo() else f" in {folder}"
    st.caption(plain(f"Cache: {'hit' if hit else 'built now'}, {size / 2**20:.1f} MiB{where}. "
                     f"{result.n_train:,} training and {result.n_test:,} test examples."))
    best = result.best
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Best layer", best.name, help="Layers are encoder blocks from 0; the embeddings come before layer 0.")
    m2.metric("Its accuracy", f"{best.accuracy:.1%}", help=f"95% interval {best.ci[0]:.1%}–{best.ci[1]:.1%}")
    m3.metric("Control accuracy", f"{best.control_accuracy:.1%}", f"selectivity {best.selectivity:+.1%}",
              delta_color="off", delta_arrow="off")
    m4.metric("Majority baseline", f"{result.majority_baseline:.1%}")
    if best.external_accuracy is not None:  # train here, test there
        scores = [r.external_accuracy for r in result.layers]
        st.caption(f"Your test file: {best.external_accuracy:.1%} at the best layer ({best.name}); "
                   f"{min(scores):.1%}–{max(scores):.1%} over the layers (column external_accuracy below).")

    return result, described


def layer_plot(runs: dict, result) -> None:
    """Accuracy by layer for the runs chosen, their table and downloads."""
    names = list(runs)
    compare = st.multiselect("Runs on the plot (two models or two poolings side by side)", names, key="probe_compare")
    selected: list[ProbeResult] = [runs[n][0] for n in compare] or [result]
    st.plotly_chart(layer_figure(selected), config=PLOT_CONFIG, width="stretch")
    frame = pd.DataFrame([{**r.to_json(), "run": run_name(run)} for run in selected for r in run.layers])
    frame["layer"] = frame["layer"].astype(str)  # "embeddings", "0", …: one type, or Arrow refuses the column
    frame["ci"] = frame["ci"].map(lambda c: f"{c[0]:.3f}–{c[1]:.3f}")
    columns = ["run", "layer", "accuracy", "control_accuracy", "selectivity", "ci"]
    if "external_accuracy" in frame:  # a run scored on a test file too
        columns.append("external_accuracy")
    st.dataframe(frame[columns], hide_index=True, width="stretch")
    d1, d2 = st.columns(2)
    download("Download results (JSON)", json.dumps([r.to_json() for r in selected], indent=1),
             "probes.json", "application/json", key="probe_dl_json", where=d1)
    download("Download results (CSV)", frame.to_csv(index=False), "probes.csv", "text/csv", key="probe_dl_csv", where=d2)


def example_table(result, described) -> None:
    """Single test examples at a layer, right and wrong, and the confusion matrix (as LIT shows them)."""
    best = result.best
    st.subheader("Single test examples and the confusion matrix")
    st.caption("What a score hides: look at the examples themselves, right and wrong, as LIT does.")
    e1, e2 = st.columns([1, 1])
    layer_choices = [r.layer for r in result.layers]
    at_layer = held_choice("Layer", layer_choices, "probe_ex_layer", best.layer, container=e1,
                           format_func=hidden_name)
    errors_only = e2.toggle("Errors only", key="probe_ex_errors")
    with page_errors(stop=False):
        shown = result.examples(at_layer, errors_only)
        index = {row: k for k, row in enumerate(result.test_examples.tolist())}  # row -> test position
        records = []
        for r in shown:
            n = index[r["example"]]
            sentence, _, start, end = described[n]
            where = {"sentence": sentence} if result.level == "sentence" else dict(zip(
                ("before", "word", "after"), (table_text(part) for part in in_context(sentence, start, end))))
            records.append({"n": n, **where, "gold": tag_name(r["gold"]), "predicted": tag_name(r["predicted"]),
                            "probability": r["probability"]})
        columns = ["n", "sentence"] if result.level == "sentence" else ["n", "before", "word", "after"]
        table = pd.DataFrame(records, columns=[*columns, "gold", "predicted", "probability"])
        st.caption(f"{len(shown):,} of {result.n_test:,} test examples at layer {hidden_name(at_layer)}"
                   f"{' (the errors)' if errors_only else ''}; probability = the probe's p(predicted).")
        if errors_only and not shown:
            st.info(f"No errors at layer {hidden_name(at_layer)}: every test example is right here. Compare the control "
                    "task's accuracy before reading much into it, or look at an earlier layer.")
        else:
            st.dataframe(table, hide_index=True, width="stretch",  # each word in the middle, its context around it
                         column_config={"probability": st.column_config.NumberColumn(format="%.3f"),
                                        "before": st.column_config.TextColumn(alignment="right"),
                                        "word": st.column_config.TextColumn(alignment="center")})
        if len(result.classes) <= 60:
            st.plotly_chart(confusion_figure(result.confusion(at_layer), [tag_name(c) for c in result.classes],
                                             hidden_name(at_layer)),
                            config=PLOT_CONFIG, width="stretch", key="probe_confusion")
        else:
            st.caption(f"{len(result.classes)} classes: too many for a readable confusion matrix; "
                       "filter the table to errors instead.")



def labels_tab(lm, key) -> None:
    """A linear probe per layer on a task's labels (a shipped suite or an upload), beside its control task."""
    form = probe_form(lm)
    if form.submitted:
        run_probes(lm, key, form)
    runs: dict = st.session_state.get(RUNS, {})
    if not runs:
        st.info("Choose a task and press the button: the hidden states are extracted once per model, task and "
                "pooling, cached on disk, and every layer is probed.")
        st.stop()
    result, described = run_summary(runs)
    layer_plot(runs, result)
    example_table(result, described)
    st.caption("Headless: `bertscope probe NAME --task pos --out results/` writes the same figures, and "
               "`bertscope probe-sweep --models A,B --tasks pos,negation` compares several models or tasks.")


def page() -> None:
    st.title("Probes")
    st.caption("A linear probe per layer: can a logistic regression read the property off the hidden "
               "states? Each run also trains the probe on a control task (Hewitt & Liang 2019: a random "
               "but fixed label per word type); selectivity = accuracy − control accuracy. Sentences are "
               "never split between training and test (Brown suites: documents are never split).")
    lm = require_model()
    key = model_key()

    tab_from_url("probe_tab", TAB_NAMES)
    tab_labels, tab_syntax, tab_erase, tab_tcav = st.tabs(TAB_NAMES, key="probe_tab", on_change="rerun")
    with tab_syntax:
        syntax_tab.render(lm, key)
    with tab_erase:
        erasure_tab.render(lm, key)
    with tab_tcav:
        tcav_tab.render(lm, key)
    with tab_labels:
        labels_tab(lm, key)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
