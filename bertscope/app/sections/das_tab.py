"""The Interventions page's tab "Causal variables (DAS)": distributed alignment search on a shipped causal model
or the visitor's own counterfactual pairs (a CSV), at one layer or every one, its IIA beside the controls, and
the layer × position map; through the cost budget, with a bar and a Stop; downloads."""

import hashlib
import json

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, check_upload, demo
from bertscope.app.kit.model_picker import offer_models
from bertscope.app.kit.results import result_store
from bertscope.causal.alignment import iia_map, pairs_for, search_prepared
from bertscope.causal.das import TrainSettings, check_pair_count
from bertscope.causal.variables import MODELS, names_for, read_counterfactuals
from bertscope.circuits.pairs import reads
from bertscope.figures.das import CONTROLS, das_figure, iia_map_figure
from bertscope.runtime.progress import staged

UPLOAD = "your pairs (CSV)"
EVERY = "every layer"
DIMS = {"1": 1, "2": 2, "4": 4, "16": 16, "learned (boundless DAS)": None}
PAIRS = [200, 400, 800]


def _where(lm) -> str | None:
    try:
        return reads(lm)
    except BertScopeError:
        return None


def render(lm, key) -> None:
    st.caption("Distributed alignment search (Geiger et al. 2024) asks whether the model computes a variable of a "
               "causal model you can write down (the subject's number, whether a sentence is negated), and where. "
               "For pairs of a base and a source input it learns a subspace of one layer's states at the variable's "
               "position such that swapping that subspace from the source into the base changes the output exactly as "
               "swapping the variable would. Its score is the interchange intervention accuracy (IIA) on held-out pairs, "
               "beside a random subspace of the same width, the same training on neurons, the whole state swapped, and "
               "no intervention. Headless: `bertscope das MODEL --task NAME --layer all`.")
    where = _where(lm)
    shipped = names_for(where) if where else []
    if where is None or where == "span":
        st.warning(plain(f"{lm.name} decides nothing DAS reads here: a masked token, a class or a tag."))
        offer_models(("bundled-mlm", "bundled-sentiment"), "das_need")
        return
    with st.form("das_form"):
        c1, c2, c3, c4 = st.columns([3, 1, 1, 1])
        task = held_choice("Causal model", [*shipped, UPLOAD], key="das_task",
                           format_func=lambda n: f"{n}: {MODELS[n].title}" if n in MODELS else n, container=c1)
        layers = [EVERY, "embeddings", *map(str, range(lm.num_layers))]
        layer = held_choice("Layer", layers, "das_layer", layers[2] if demo() else layers[0], container=c2)
        dim_name = held_choice("Subspace width", list(DIMS), key="das_dim", container=c3)
        pairs_offered = [p for p in PAIRS if not demo() or p <= 400]
        n_pairs = c4.select_slider("Pairs drawn", pairs_offered, pairs_offered[-1], key="das_pairs")
        upload = st.file_uploader("Own pairs: a CSV with base, source, answer (what the interchange should give), "
                                  "foil (what it should not), and word for a tagger", type=["csv"], key="das_upload",
                                  max_upload_size=Limits.upload_mb)
        positions_text = st.text_input("Aligned token positions for your pairs (from 0, [CLS] is 0; comma-separated)",
                                        "1", key="das_positions", max_chars=Limits.name_chars)
        asked = st.form_submit_button("Search", type="primary")
    if task == UPLOAD and upload is None:
        st.info("Upload a CSV of counterfactual pairs, or choose a shipped causal model.")
        return
    upload_key = None if task != UPLOAD else hashlib.sha256(upload.getvalue()).hexdigest()
    dim = DIMS[dim_name]
    request = (key, task, upload_key, positions_text if task == UPLOAD else "", layer, dim, int(n_pairs))
    store = result_store("das")
    settings = TrainSettings()

    def prepared(progress=None):
        if task != UPLOAD:
            return pairs_for(lm, task=task, n=int(n_pairs), progress=progress)
        check_upload(upload)
        data = read_counterfactuals(upload.getvalue(), upload.name)
        try:
            positions = [int(x) for x in positions_text.split(",") if x.strip()]
        except ValueError:
            raise BertScopeError(f"Positions are token indices from 0, comma-separated: {positions_text!r}.") from None
        return pairs_for(lm, data=data, positions=positions)

    if asked and store.get(request) is None:  # checked before the job starts: once it starts it is charged
        try:
            lengths = [r.length for r in prepared()[1].rows] if task == UPLOAD else [16] * int(n_pairs)
            check_pair_count(len(lengths))  # too few pairs: one line before the charge
            states = lm.num_layers + 1 if layer == EVERY else 1
            check_pieces(sum(lengths) * 2 * states, "this search")  # each base and source read at each state
        except BertScopeError as err:
            return store.refuse(plain(str(err)), show)
    with page_errors(stop=False):
        def work(progress):
            name, ready = prepared(staged(progress, "Reading the drawn pairs on the model, batches"))
            return search_prepared(lm, name, ready, "all" if layer == EVERY else layer, dim, settings,
                                   staged(progress, "Training subspaces and scoring them, passes"))

        result = store.compute(request, work, "Searching", asked, costly="DAS search",
                               wait="Press *Search*: the pairs are drawn and checked on the model, then a subspace is "
                                    "trained at " + ("every layer, and the best again with its controls."
                                                     if layer == EVERY else "the layer, with its controls."))
        if result is None:
            return
        show(result)
        map_section(lm, key, request, prepared, dim)


def show(result) -> None:
    out = result.to_json()
    where = "each pair's variable word" if not out["positions"] else \
        f"position {', '.join(map(str, out['positions']))}"
    st.caption(plain(f"Layer {out['layer']}, {where}: {out['pairs_train']} training pairs, {out['pairs_held_out']} "
                     f"held out, a {out['dim']}-dimensional subspace, {out['seconds']:.1f} s."))
    fig = das_figure(result)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="das_chart")
    figure_downloads(fig, "das")
    st.dataframe(pd.DataFrame([{"measure": label, "IIA": out[k], "JSON key": k} for k, label in CONTROLS]),
                 hide_index=True, key="das_table", column_config={"IIA": st.column_config.NumberColumn(format="%.3f")})
    st.caption("IIA is the share of held-out pairs where the intervened model prefers the causal model's answer. A "
               "subspace means something where it beats the random rotation and the neurons; the whole state is the "
               "most any part of it can reach at that position.")
    download("Download (JSON)", json.dumps(out | {"basis": result.basis.round(6).tolist()}), "das.json",
             "application/json", key="das_json")


def map_section(lm, key, request, prepared, dim) -> None:
    st.subheader("Where the variable lives")
    if demo():
        st.caption("The map trains a subspace for every layer and token position: more than this demo runs in one "
                   "job. Locally: this tab, or `bertscope das MODEL --task NAME --map`.")
        return
    store = result_store("das_map")
    asked = st.button("Map every layer × position", key="das_map_go")
    width = dim or 1
    with page_errors(stop=False):
        found = store.compute((request, "map"), lambda progress: _map(lm, prepared, width, progress),
                              "Mapping", asked, costly="DAS map",
                              wait="Press *Map every layer × position*: one subspace is trained for every layer and "
                                   "token position (without controls), and scored on the held-out pairs.")
        if found is None:
            return
    fig = iia_map_figure(found)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="das_map_chart")
    figure_downloads(fig, "das_map")
    download("Download the map (JSON)", json.dumps(found.to_json()), "das_map.json", "application/json",
             key="das_map_json")


def _map(lm, prepared, dim, progress):
    name, ready = prepared(staged(progress, "Reading the drawn pairs on the model, batches"))
    return iia_map(lm, ready, task=name, dim=dim, progress=staged(progress, "Training a subspace a cell, passes"))
