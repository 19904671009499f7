"""The Interventions page's three tabs for a fine-tuned sequence classifier: heads removed with
every label's score before and after; head importance on the task's loss over a labelled file
(one seeded half) with the pruning curve scored on the other half; patching watched through two
labels' logit difference (a regression head: its value)."""

import hashlib
import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.head_picker import clickable_grid, head_name, heads_to_remove, reference_means, selected_heads
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.results import result_store
from bertscope.app.kit.uploads import shown_name, uploaded_text
from bertscope.errors import BertScopeError
from bertscope.figures.interventions import pruning_figure, recovered_heatmap
from bertscope.figures.tasks import label_bars
from bertscope.interventions.patching import patch, prepare
from bertscope.interventions.task_importance import (
    classes_with_heads_removed,
    split_records,
    task_head_importance,
    task_pruning_curve,
)
from bertscope.tasks.predict import read_records

EXAMPLE = "What a wonderful day, the concert was brilliant!"
CLEAN, CORRUPT = "The film was wonderful and the music was great.", "The film was terrible and the music was awful."


def ablate_tab(lm, key) -> None:
    st.caption("Remove heads and compare the classifier's decision before and after (Michel et al. 2019). A head "
               "is removed on its slice of the attention context, before the output projection: *zero* sets it to "
               "0; *mean* puts its average over 200 Brown sentences in its place.")
    imp = result_store("task_importance").get(st.session_state.get("int_task_request"))
    right, mode = heads_to_remove(lm, imp.importance if imp is not None else None, "task importance")
    with right:
        with st.form("int_class_form"):
            text = st.text_area("Text", EXAMPLE, key="int_class_text", max_chars=Limits.input_chars)
            pair = st.text_area("Second segment (optional: a pair, as NLI models read them)", "",
                                key="int_class_pair", max_chars=Limits.input_chars)
            st.form_submit_button("Run", type="primary")
    heads = selected_heads()
    if not heads:
        st.info("Pick heads to remove: click them on the grid or choose them in the list.")
        return
    with page_errors(stop=False):
        check_text(text)
        means = reference_means(lm, key, mode)
        before, after = classes_with_heads_removed(lm, text, pair.strip() or None, heads, mode, means)
        axis = "value" if lm.task.scoring == "none" else "probability"
        st.caption(plain(f"{len(heads)} head(s) removed ({mode}): " + ", ".join(head_name(*h) for h in heads)
                         + f". Predicted: “{before.predicted}” intact, “{after.predicted}” with the heads removed."))
        c1, c2 = st.columns(2)
        c1.plotly_chart(label_bars(before.ranked, "Intact", axis), config=PLOT_CONFIG, width="stretch",
                        key="int_class_before")
        c2.plotly_chart(label_bars([(label, float(after.scores[before.labels.index(label)]))
                                    for label, _ in before.ranked], "Heads removed", axis),
                        config=PLOT_CONFIG, width="stretch", key="int_class_after")
        rows = [{"label": label, "intact": float(before.scores[i]), "heads removed": float(after.scores[i]),
                 "change": float(after.scores[i] - before.scores[i])} for i, label in enumerate(before.labels)]
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        download("Download (JSON)", json.dumps({"mode": mode, "heads": [list(h) for h in heads], "labels": rows}),
                 "ablation.json", "application/json", key="int_class_json")


def _records(uploaded, pasted: str):
    """(records, a digest of their bytes) from the upload, else from the pasted CSV."""
    if uploaded is not None:
        text, name = uploaded_text(uploaded), shown_name(uploaded)
    else:
        if len(pasted) > Limits.corpus_chars:
            raise BertScopeError(f"The pasted records have {len(pasted):,} characters; this app takes up to "
                                 f"{Limits.corpus_chars:,}.")
        text, name = pasted, "the pasted records.csv"
    records = read_records(text, name)
    if records.gold is None:
        raise BertScopeError(f"{name} has no label column: head importance on the task needs gold labels.")
    if len(records.texts) > Limits.corpus_lines:
        raise BertScopeError(f"{len(records.texts):,} records: this app takes up to {Limits.corpus_lines:,}.")
    return records, hashlib.sha256(text.encode("utf-8")).hexdigest()


def importance_tab(lm, key) -> None:
    st.caption("Michel, Levy & Neubig (2019), in their own setting (BERT fine-tuned on MNLI): a gate ξ = 1 "
               "multiplies each head's context; a head's importance is the mean |∂L/∂ξ| of the classifier's "
               "cross-entropy against the gold labels, each layer's scores divided by their ℓ2 norm. The file is "
               "split in two seeded halves: importance on one, the pruning curve's accuracy on the other.")
    labels = ", ".join(lm.task.labels[:12])
    with st.form("int_task_form"):
        uploaded = st.file_uploader("Labelled records (CSV with a header text[,pair],label, or JSONL)",
                                    type=["csv", "jsonl"], key="int_task_file",
                                    max_upload_size=Limits.upload_mb)
        pasted = st.text_area(f"…or paste them (CSV with a header, up to {Limits.corpus_lines:,} records; the model's "
                              f"labels: {labels})", "",
                              key="int_task_paste", height=120, max_chars=Limits.corpus_chars)
        c1, c2 = st.columns(2)
        seed = c1.number_input("Split seed", 0, 10_000, 0, key="int_task_seed")
        prune = c2.toggle("Pruning curve too", key="int_task_prune")
        asked = st.form_submit_button("Compute head importance", type="primary")
    if uploaded is None and not pasted.strip():
        st.info("Give labelled records (a file or pasted CSV), then press *Compute head importance*.")
        return
    with page_errors(stop=False):
        records, digest = _records(uploaded, pasted)
        fit, held = split_records(records.texts, records.gold, records.pairs, int(seed))
        request = (key, digest, int(seed))
        st.session_state["int_task_request"] = request
        imp = result_store("task_importance").compute(request, lambda progress: task_head_importance(
            lm, fit[0], fit[1], fit[2], progress=progress), "Gate gradients, records", asked,
            costly="head-importance run")
        st.caption(plain(f"{len(fit[0]):,} records: mean loss {imp.loss:.3f} nats."))
        clickable_grid(lm, "Head importance on the task loss (each layer's row has unit ℓ2 norm) · click to pick "
                       "for ablation", imp.importance, "int_imp_grid")
        table = pd.DataFrame([{"layer": layer, "head": head, "importance": float(imp.importance[layer, head]),
                               "mean |dL/dξ| per token": float(imp.raw[layer, head])}
                              for layer in range(lm.num_layers) for head in range(lm.num_heads)])
        download("Download importance (CSV)", table.to_csv(index=False), "head-importance.csv",
                 "text/csv", key="int_imp_csv")
        if prune:
            curve = result_store("task_pruning").compute(request, lambda progress: task_pruning_curve(
                lm, imp, held[0], held[1], held[2], seed=int(seed), progress=progress),
                "Pruning curve, steps", asked, costly="pruning curve")
            fig = pruning_figure(curve, "accuracy", "records")
            st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="int_pruning")
            figure_downloads(fig, "pruning-curve")
            st.caption(plain(f"Held-out accuracy with every head: {curve.intact:.3f} over {len(held[0]):,} records."))


def patch_tab(lm, key) -> None:
    value = lm.task.scoring == "none"
    st.caption("Causal tracing (Vig et al. 2020; Meng et al. 2022) on the classifier: the metric is "
               + ("its regression value" if value else "its logit(A) − logit(B) for two of its labels")
               + ". Each cell runs the corrupted text with one piece of the clean run put back and reports the "
                 "recovered fraction (m_patched − m_corrupt) / (m_clean − m_corrupt). The two texts need the same "
                 "number of tokens; no mask.")
    with st.form("int_class_patch_form"):
        clean = st.text_input("Clean text", CLEAN, key="int_class_clean", max_chars=Limits.input_chars)
        corrupt = st.text_input("Corrupted text (as many tokens)", CORRUPT, key="int_class_corrupt",
                                max_chars=Limits.input_chars)
        labels = list(lm.task.labels)
        if value:
            a = b = ""
        else:
            c1, c2 = st.columns(2)
            a = held_choice("Label A", labels, key="int_class_a", container=c1)
            b = held_choice("Label B", labels, "int_class_b", labels[min(1, len(labels) - 1)], container=c2)
        asked = st.form_submit_button("Patch", type="primary")
    request = (key, clean, corrupt, a, b)
    if not (asked or st.session_state.get("int_class_patched") == request):
        st.info("Press *Patch*: every cell is one pass of the corrupted text (a layer's cells run together).")
        return
    st.session_state["int_class_patched"] = request
    candidates = () if value else (a, b)
    with page_errors(stop=False):
        check_text(clean, "clean text")
        check_text(corrupt, "corrupted text")
        prepare(lm, clean, corrupt, candidates)  # bad input answers here, in one line
        hidden = result_store("patch_hidden").compute(request, lambda progress: patch(
            lm, clean, corrupt, candidates, "hidden", progress=progress),
            "Patching hidden states, cells", asked, costly="patching run", charge_key=("patch", request))
        what = "value" if value else f"logit {a} − logit {b}"
        c1, c2, c3 = st.columns(3)
        c1.metric(f"Clean: {what}", f"{hidden.m_clean:+.3f}")
        c2.metric("Corrupted", f"{hidden.m_corrupt:+.3f}")
        c3.metric("Difference to recover", f"{hidden.m_clean - hidden.m_corrupt:+.3f}")
        if hidden.caveat:
            st.warning(plain(hidden.caveat))
        st.plotly_chart(recovered_heatmap(hidden), config=PLOT_CONFIG, width="stretch", key="int_patch_hidden")
        heads = result_store("patch_heads").compute(request, lambda progress: patch(
            lm, clean, corrupt, candidates, "heads", progress=progress),
            "Patching heads, cells", asked, costly="patching run", charge_key=("patch", request))
        st.plotly_chart(recovered_heatmap(heads), config=PLOT_CONFIG, width="stretch", key="int_patch_heads")
        download("Download both grids (JSON)",
                 json.dumps({"hidden": hidden.to_json(), "heads": heads.to_json()}),
                 "patching.json", "application/json", key="int_patch_json")
