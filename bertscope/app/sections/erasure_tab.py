"""The Probes page's tab "Does the model use it?": amnesic probing (Elazar et al. 2021) with LEACE or
INLP at the chosen layers, every behaviour against a random erasure of the same rank (through the
cost budget, with a bar and a Stop), the words whose masked prediction changed most, and JSON."""

import hashlib
import json

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.erasure import METHODS
from bertscope.analysis.hidden_cache import task_size
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, demo
from bertscope.app.kit.results import result_store
from bertscope.app.kit.uploads import uploaded_text
from bertscope.core.layers import hidden_names
from bertscope.corpora.probe_tasks import read_task
from bertscope.figures.erasure import behaviours, change_figure
from bertscope.interventions.amnesic import amnesic_probe
from bertscope.interventions.concepts import CONCEPTS, concept_from_task, load_concept

UPLOAD = "Your own file…"
TRAIN_SIZES = [200, 600, 1000, 3000]
TEST_SIZES = [100, 300, 1000]
DEMO_LAYERS = 3  # each layer is two runs of the model over both sides
NUMBER = st.column_config.NumberColumn(format="%.3f")


def _concept(choice: str, upload, size: int, test: int):
    if choice != UPLOAD:
        return load_concept(choice, size, test)
    return concept_from_task(read_task(uploaded_text(upload), upload.name), size, test)


def render(lm, key) -> None:
    st.caption("A probe shows what can be *read* from a layer; amnesic probing (Elazar, Ravfogel, Jacovi & Goldberg "
               "2021) asks whether the model *uses* it: remove the concept from the layer's output at every position "
               "during the forward pass and watch what the model does next. LEACE (Belrose et al. 2023, through "
               "EleutherAI's concept-erasure) removes it in closed form, so that no linear classifier can recover it "
               "at that layer, changing the states as little as possible; INLP (Ravfogel et al. 2020) is the older "
               "baseline. Each change is read against erasing random directions of the same rank (the control): "
               "removing any directions costs something. Headless: `bertscope erase MODEL --concept ewt-upos`.")
    names = hidden_names(lm.num_layers)
    sizes = [n for n in TRAIN_SIZES if not demo() or n <= 1000]
    tests = [n for n in TEST_SIZES if not demo() or n <= 300]
    with st.form("erase_form"):
        c1, c2 = st.columns([2, 1])
        choice = held_choice("Concept", [*CONCEPTS, UPLOAD], key="erase_concept",
                             format_func=lambda c: c if c == UPLOAD else f"{c}: {CONCEPTS[c]}", container=c1)
        method = c2.radio("Method", list(METHODS), key="erase_method", format_func=str.upper, horizontal=True)
        layers = st.multiselect("Layers to erase (each on its own; every layer adds two runs of the model)", names,
                                [names[len(names) // 2]], key="erase_layers")
        c3, c4 = st.columns(2)
        size = c3.select_slider("Training sentences", sizes, 600 if 600 in sizes else sizes[0], key="erase_size")
        test = c4.select_slider("Test sentences", tests, 300 if 300 in tests else tests[0], key="erase_test")
        upload = st.file_uploader("Own concept: CoNLL-U (UPOS), CSV (sentence,label or tokens,tags) or JSONL",
                                  type=["conllu", "csv", "jsonl"], key="erase_upload", max_upload_size=Limits.upload_mb)
        asked = st.form_submit_button("Erase and measure", type="primary")
    store = result_store("erasure")
    if not layers:
        return store.refuse("Choose at least one layer to erase.", show)
    if demo() and len(layers) > DEMO_LAYERS:
        return store.refuse(f"This demo erases at most {DEMO_LAYERS} layers a run: choose fewer (locally, every layer).", show)
    if choice == UPLOAD and upload is None:
        return store.refuse("Upload a .conllu, .csv or .jsonl file of labelled words or sentences first.", show)
    chosen = tuple(sorted(layers, key=names.index))  # "embeddings" or block numbers, as the library takes them
    upload_key = None if choice != UPLOAD else (upload.name, hashlib.sha256(upload.getvalue()).hexdigest())
    request = (key, choice, upload_key, method, chosen, int(size), int(test))
    concept = None
    if asked and store.get(request) is None:  # a bad file or a missing corpus: one line, the last result kept
        try:  # checked before the job starts: once it starts it is charged (a hosted demo's budget)
            concept = _concept(choice, upload, int(size), int(test))
            train = task_size(lm, concept.train)
            train.check_labels()
            held = task_size(lm, concept.test)
            if not held.examples:  # every test word dropped by the tokenizer (zero-width spaces, say)
                raise BertScopeError("No labelled word of the test side keeps a token for this model: the erasure "
                                     "would have nothing to measure on. Give words the tokenizer reads.")
            check_pieces(train.pieces + held.pieces, "this erasure")
        except BertScopeError as err:
            return store.refuse(plain(str(err)), show)
    with page_errors(stop=False):
        result = store.compute(request, lambda progress: amnesic_probe(
            lm, concept or _concept(choice, upload, int(size), int(test)), chosen, method,
            progress=lambda d, t, what: progress(d, t, what)),
            "Erasing the concept", asked, costly="concept erasure run",
            wait="Press *Erase and measure*: the concept's states are read once (cached on disk), then for each layer "
                 "the eraser is fitted and the model runs with the concept erased and with random directions erased.")
        if result is None:
            return
        show(result)


def show(result) -> None:
    st.caption(plain(f"{result.concept} ({len(result.classes)} labels) erased by {result.method.upper()} in "
                     f"{result.model}: fitted on {result.train_sentences:,} training sentences, measured on "
                     f"{result.test_sentences:,} test sentences. Read each change against the control: the same "
                     "behaviour when random directions of the same rank are erased (grey bars; dotted lines across "
                     "layers)."))
    fig = change_figure(result)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="erase_chart")
    figure_downloads(fig, f"{result.concept}-erased")
    rows = [{"layer erased": str(r.layer), "rank": r.rank, "behaviour": name, "before": arms.before,
             "concept erased": arms.after, "random, same rank": arms.random_after,
             "erased − random": None if arms.after is None or arms.random_after is None
             else arms.after - arms.random_after}
            for r in result.layers for name, arms in behaviours(r).items() if arms is not None and arms.before is not None]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="erase_table",
                 column_config={c: NUMBER for c in ("before", "concept erased", "random, same rank", "erased − random")})
    st.caption(plain(f"The test side's majority label scores {result.layers[0].majority:.3f}"
                     + (": a probe at the erased layer falls to it under LEACE." if result.method == "leace" else ".")
                     + " UUAS: the distance probe trained on the clean states, read on each run's states."))
    edits = "; ".join(f"{r.layer}: {r.fitted.edit:.3f} (random {r.control.edit:.3f})" for r in result.layers
                      if r.fitted is not None and r.control is not None)
    st.caption(plain(f"How much each erasure changed the states it was fitted on (mean squared change over their total "
                     f"variance), by layer erased: {edits}."))
    for note in result.notes:
        st.caption(plain(f"Not measured: {note}."))
    download("Download (JSON)", json.dumps(result.to_json()), f"{result.concept}-erased.json",
             "application/json", key="erase_json")
    pick = held_choice("Layer", range(len(result.layers)), key=f"erase_detail_{len(result.layers)}",
                       format_func=lambda i: f"erased at {result.layers[i].layer}")
    chosen = result.layers[pick]
    if chosen.later:
        st.markdown("**Can the later layers read it again?** The probe retrained on each later layer of the erased run.")
        st.dataframe(pd.DataFrame([{"layer": str(x.layer), "before": x.probe.before, "erased": x.probe.after,
                                    "random": x.probe.random_after,
                                    **({} if x.uuas is None else {"UUAS before": x.uuas.before, "UUAS erased": x.uuas.after,
                                                                  "UUAS random": x.uuas.random_after})}
                                   for x in chosen.later]),
                     hide_index=True, width="stretch", key="erase_later",
                     column_config={c: NUMBER for c in ("before", "erased", "random", "UUAS before", "UUAS erased",
                                                        "UUAS random")})
    if chosen.mlm_by_tag:
        st.markdown("**Masked-LM top-1 by gold label** of the word each masked position is in.")
        st.dataframe(pd.DataFrame([{"label": tag, "positions": n, "before": a.before, "erased": a.after,
                                    "random": a.random_after, "erased − random": a.after - a.random_after}
                                   for tag, (a, n) in sorted(chosen.mlm_by_tag.items(), key=lambda kv: -kv[1][1])]),
                     hide_index=True, width="stretch", key="erase_by_tag",
                     column_config={c: NUMBER for c in ("before", "erased", "random", "erased − random")})
    if chosen.changed:
        st.markdown("**The words whose masked prediction changed most** (first those it predicted right before and wrong after, each by the fall of the right piece's log-probability).")
        st.dataframe(pd.DataFrame([{"word": w.word, "label": w.tag, "right piece": w.gold, "before": w.before,
                                    "erased": w.after, "log p before": w.logp_before, "log p erased": w.logp_after,
                                    "sentence": w.sentence} for w in chosen.changed]),
                     hide_index=True, width="stretch", key="erase_changed",
                     column_config={c: st.column_config.NumberColumn(format="%.2f")
                                    for c in ("log p before", "log p erased")})
