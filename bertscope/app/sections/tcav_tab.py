"""The Probes page's tab "Concepts (TCAV)": whether a concept given by examples is used for a decision
(a classifier's class, or a masked LM's word), layer by layer, with the t-test against random CAVs
(through the cost budget, with a bar and a Stop), the chart, the table and JSON."""

import json

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, demo
from bertscope.app.kit.model_picker import offer_models
from bertscope.app.kit.results import result_store
from bertscope.attribution.gradients import token_id
from bertscope.causal.cavs import (
    EXAMPLES,
    MIN_CONCEPT,
    MIN_RUNS,
    RANDOM_SOURCES,
    check_examples,
    check_masks,
    tcav,
    tcav_pieces,
)
from bertscope.figures.tcav import tcav_figure

RUNS = [MIN_RUNS, 30, 50]
INPUTS = [20, 50, 100]
NUMBER = st.column_config.NumberColumn(format="%.3f")


def _kind(lm) -> str | None:
    """What the model decides that TCAV can explain: "class", "tag", "token", or None."""
    task = lm.task
    if task is not None and task.kind == "sequence-classification" and task.scoring != "none":
        return "class"
    if task is not None and task.kind == "token-classification":
        return "tag"
    return "token" if "mlm" in lm.outputs else None


def render(lm, key) -> None:
    st.caption("A probe reads a property off a layer; a concept activation vector (Kim et al. 2018, TCAV) asks whether "
               "the model's decision *moves with* a concept given by examples. At each layer a linear classifier tells "
               "the concept's examples from a random set of sentences; its normal is the concept's direction (the CAV). "
               "The TCAV score is the share of inputs whose decision rises when their states move along it. Against "
               "random sets, a score means nothing alone: the test trains one CAV per random set, and as many between "
               "random sets, and asks (t-test, Bonferroni over the layers) whether the concept's scores differ from "
               "chance. Headless: `bertscope tcav MODEL --concept FILE --target LABEL`.")
    kind = _kind(lm)
    if kind is None:
        st.warning(plain(f"{lm.name} has neither a sequence-classification head, a tagger's head nor a masked-LM "
                         "head: TCAV explains one of their decisions."))
        offer_models(("bundled-sentiment", "bundled-mlm", "bundled-upos"), "tcav_need")
        return
    example = {"class": "praise", "tag": "action", "token": "water"}[kind]
    runs_offered = [r for r in RUNS if not demo() or r <= MIN_RUNS]
    inputs_offered = [n for n in INPUTS if not demo() or n <= 50]
    with st.form("tcav_form"):
        concept_text = st.text_area(f"The concept's examples, one a line (at least {MIN_CONCEPT})",
                                    "\n".join(EXAMPLES[example][1]), height=180, key="tcav_concept",
                                    max_chars=Limits.corpus_chars)
        c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
        if kind == "class":
            labels = list(lm.task.labels)
            target = held_choice("The class explained", labels, "tcav_class", labels[-1], container=c1)
        elif kind == "tag":
            labels = list(lm.task.labels)
            target = held_choice("The tag explained (at the first word of each input tagged so)", labels, "tcav_tag",
                                 "VERB", container=c1)
        else:
            target = c1.text_input("The word the masked LM predicts (one vocabulary item)", "river", key="tcav_word",
                                   max_chars=Limits.name_chars)
        source = held_choice("Random sets from", list(RANDOM_SOURCES), key="tcav_random", container=c2)
        runs = c3.select_slider("Random sets", runs_offered, runs_offered[0], key="tcav_runs")
        n = c4.select_slider("Inputs", inputs_offered, inputs_offered[0], key="tcav_inputs")
        inputs_text = st.text_area("The inputs whose decision is tested, one a line (optional; a masked LM: each with "
                                   "one [MASK]). Empty: Brown sentences" + (" where the word stands, masked there."
                                                                            if kind == "token" else "."),
                                   "", height=90, key="tcav_inputs_text", max_chars=Limits.corpus_chars)
        asked = st.form_submit_button("Test the concept", type="primary")
    store = result_store("tcav")
    concept = [line for line in concept_text.splitlines() if line.strip()]
    inputs = [line for line in inputs_text.splitlines() if line.strip()][: int(n)] or None
    request = (key, tuple(concept), target, source, int(runs), int(n), tuple(inputs or ()))
    if asked and store.get(request) is None:  # checked before the job starts: once it starts it is charged
        try:
            concept = check_examples(concept)
            if kind == "token":
                token_id(lm, target)
                if inputs:
                    check_masks(lm, inputs)
            check_pieces(tcav_pieces(lm, concept, source, int(runs), inputs, int(n)),
                         "this test (the concept's and the random sets' sentences, each input's gradients)",
                         "use fewer random sets, inputs or examples")
        except BertScopeError as err:
            return store.refuse(plain(str(err)), show)
    with page_errors(stop=False):
        result = store.compute(request, lambda progress: tcav(
            lm, concept, target, name="your concept", random_from=source, runs=int(runs), inputs=inputs, n_inputs=int(n),
            progress=lambda d, t: progress(d, t, "Testing the concept: the inputs' gradients, the sentences read, the "
                                                 "CAVs fitted, steps")),
            "Testing the concept", asked, costly="TCAV test",
            wait="Press *Test the concept*: each input's decision is differentiated once at every layer, the concept's "
                 "and the random sets' sentences are read once, and a CAV is fitted per layer and random set.")
        if result is None:
            return
        show(result)


def show(result) -> None:
    out = result.to_json()
    significant = [str(v.layer) for v in result.layers if v.significant]
    st.caption(plain(f"{result.inputs} inputs, {result.runs} random sets; a layer is significant at p < "
                     f"{out['corrected_alpha']:.4f} (α {result.alpha} over {len(result.layers)} layers). Significant at: "
                     + (", ".join(significant) if significant else "no layer") + "."))
    fig = tcav_figure(result)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="tcav_chart")
    figure_downloads(fig, "tcav")
    st.dataframe(pd.DataFrame([{"layer": str(v["layer"]), "TCAV": v["tcav"], "± (runs)": v["tcav_std"],
                                "random CAVs": v["random_tcav"], "CAV accuracy (held out)": v["cav_accuracy"],
                                "p": v["p_value"], "p (CAV against chance)": v["cav_p_value"],
                                "significant": v["significant"]} for v in out["layers"]]),
                 hide_index=True, width="stretch", key="tcav_table",
                 column_config={c: NUMBER for c in ("TCAV", "± (runs)", "random CAVs", "CAV accuracy (held out)")}
                 | {c: st.column_config.NumberColumn(format="%.2e") for c in ("p", "p (CAV against chance)")})
    st.caption("A layer is significant when the concept's scores differ from the random CAVs' and its CAVs tell the "
               "concept from random text on held-out examples (both tests at the corrected level): where a CAV "
               "cannot (accuracy near 0.5), its direction is noise and its score says nothing.")
    download("Download (JSON)", json.dumps(out), "tcav.json", "application/json", key="tcav_json")
