"""The Syntax tab's label probes on the same treebank: each word's UPOS and each arc's dependency label
(the dependent's and its head's vectors), each beside Hewitt & Liang's control task, trained on EWT
train and scored on EWT test, by hidden state (through the cost budget)."""

import json

import pandas as pd
import streamlit as st

from bertscope.analysis.treebank_probes import treebank_probe
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.limits import demo
from bertscope.app.kit.results import result_store
from bertscope.core.layers import layer_title
from bertscope.corpora.suites import TREEBANK_TASKS
from bertscope.figures.probe import layer_figure

SIZES = [1000, 2000, 0]  # training sentences; 0: all 12,543


def render(lm, key) -> None:
    st.subheader("Labels on the same treebank")
    st.caption("A logistic regression per hidden state reads each word's UPOS, or each arc's dependency label from "
               "the dependent's and its head's vectors side by side (Tenney et al. 2019's edge probing; arcs to the "
               "root are left out). The dashed line is Hewitt & Liang's control task: every word type gets one "
               "random label from the task's distribution, and the same probe is trained on it. Trained on EWT "
               "train, scored on EWT test (every sentence the model reads whole); the states are the structural probe's (cached once). Headless: "
               "`python -m bertscope probe MODEL --task ewt-deprel`.")
    with st.form("syntax_labels_form"):
        c1, c2 = st.columns(2)
        task = c1.radio("Task", list(TREEBANK_TASKS), key="syntax_label_task", format_func=TREEBANK_TASKS.get)
        size = c2.select_slider("Training sentences", [n for n in SIZES if not demo() or 0 < n <= 2000], 1000,
                                key="syntax_label_size", format_func=lambda n: "all 12,543" if n == 0 else f"{n:,}")
        asked = st.form_submit_button("Probe every layer")
    request = (key, task, int(size))
    store = result_store("treebank_labels")
    with page_errors(stop=False):
        found = store.compute(request, lambda progress: treebank_probe(
            lm, task, size=int(size),
            states_progress=lambda d, t: progress(d, t, "Hidden states of EWT, word pieces"),
            progress=lambda d, t: progress(d, t, "Probes (task, then control, per layer), fits")),
            "Hidden states of EWT, word pieces", asked, costly="treebank label probes",
            wait="Press *Probe every layer*: a probe and its control per hidden state (the states are read once "
                 "and cached, shared with the structural probe).")
        if found is None:
            return
        result, _ = found
        best = result.best
        what = "arcs" if result.level == "arc" else "words"
        st.caption(plain(f"{result.task}: best at {layer_title(best.layer)}, accuracy {best.accuracy:.3f} against the control's "
                         f"{best.control_accuracy:.3f} (selectivity {best.selectivity:+.3f}); majority baseline "
                         f"{result.majority_baseline:.3f}. {result.n_train:,} training and {result.n_test:,} test "
                         f"{what}, {len(result.classes)} labels"
                         + (f"; {result.left_out_sentences:,} sentences the model could not read whole (longer "
                            "than it takes, or a word without a piece) left out" if result.left_out_sentences else "")
                         + "."))
        fig = layer_figure([result])
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="syntax_labels_layers")
        figure_downloads(fig, f"{result.task}-probes")
        st.dataframe(pd.DataFrame([{"hidden state": r.name, "accuracy": r.accuracy, "control": r.control_accuracy,
                                    "selectivity": r.selectivity} for r in result.layers]),
                     hide_index=True, width="stretch", key="syntax_labels_table",
                     column_config={k: st.column_config.NumberColumn(format="%.3f")
                                    for k in ("accuracy", "control", "selectivity")})
        download("Download (JSON)", json.dumps(result.to_json()), f"{result.task}-probes.json",
                 "application/json", key="syntax_labels_json")
