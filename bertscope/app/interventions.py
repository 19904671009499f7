"""Interventions: remove heads and watch a prediction change, rank heads by importance, patch
activations from a clean run into a corrupted one, switch SAE features off or steer with them, and find
where a causal variable lives (distributed alignment search)."""

import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.head_picker import (
    HEADS_KEY,
    clickable_grid,
    head_name,
    heads_to_remove,
    reference_means,
    selected_heads,
)
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.kept import persist
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.mask_changes import show_mask_changes
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import from_url, link_asks, tab_from_url, to_url
from bertscope.app.sections import classifier_interventions, das_tab
from bertscope.app.sections.feature_interventions import feature_patch_section, features_tab
from bertscope.attribution.gradients import Target
from bertscope.core.task_head import SEQUENCE
from bertscope.figures.interventions import pruning_figure, recovered_heatmap
from bertscope.interventions.ablation import ablate_heads, parse_heads
from bertscope.interventions.examples import PATCH_EXAMPLES
from bertscope.interventions.importance import (
    head_importance,
    held_out_accuracy,
    held_out_texts,
    pruning_curve,
    sample_texts,
)
from bertscope.interventions.patching import patch, prepare

POSITIONS = {"all": "every position", "changed": "where the texts differ, and the mask"}
IMPORTANCE_SIZES = [32, 64, 128, 256, 512]
PRESETS = PATCH_EXAMPLES  # (clean, corrupted, candidate A, candidate B), checked on the default model


def stored_importance(key):
    """The head importance computed on this page for the model, if any (any sample size)."""
    store = result_store("importance")
    for n in (st.session_state.get("int_imp_n", 256), *IMPORTANCE_SIZES):
        found = store.get((key, n, int(st.session_state.get("int_imp_seed", 0))))
        if found is not None:
            return found, n
    return None, None

PAIR_NAMES = {"nsp": "IsNext (NSP)", "sop": "In order (SOP)"}


def ablate_tab(lm, key, pair_head) -> None:
    """Heads removed (zero or mean), the prediction (or the pair head's decision) before and after, and the
    held-out accuracy with them removed."""
    st.caption("Remove heads and compare the prediction before and after (Michel et al. 2019). A head is removed "
               "on its slice of the attention context, before the output projection: *zero* sets it to 0; *mean* "
               "puts its average over 200 Brown sentences in its place, so only what it does for this input goes.")
    importance, _ = stored_importance(key)
    right, mode = heads_to_remove(lm, importance.importance if importance is not None else None)
    with right:
        watch = "mlm"
        if pair_head:  # the checkpoint carries a sentence-pair head too: its decision can be watched
            watch = st.radio("Watch", ["mlm", pair_head], horizontal=True, key="int_watch",
                             format_func=lambda w: "the prediction at [MASK]" if w == "mlm" else PAIR_NAMES[w])
        from_url("text", "int_text")
        with st.form("int_ablate_form"):
            if watch == "mlm":
                text = st.text_area("Text with [MASK]", "The men at the table [MASK] tired.", key="int_text",
                                    max_chars=Limits.input_chars)
                pair = None
            else:
                text = st.text_area("Segment A", "The man went to the store.", key="int_text_a",
                                    max_chars=Limits.input_chars)
                pair = st.text_area("Segment B", "He bought a gallon of milk.", key="int_pair",
                                    max_chars=Limits.input_chars)
            st.form_submit_button("Run", type="primary")
    heads = selected_heads()
    to_url(heads=",".join(head_name(*h) for h in heads) or None, text=text if watch == "mlm" else None)
    if not heads:
        st.info("Pick heads to remove: click them on the grid or choose them in the list.")
    else:
        with page_errors(stop=False):
            check_text(text)
            means = reference_means(lm, key, mode)
            target = None
            if watch != "mlm":
                check_text(pair, "segment B")
                target = Target(watch)
            result = ablate_heads(lm, text, heads, mode, pair, target, top_k=10, means=means)
            st.caption(plain(f"{len(heads)} head(s) removed ({mode}"
                             + (f", means over {result.reference})" if result.reference else ")")
                             + ": " + ", ".join(head_name(*h) for h in heads)))
            if result.decision is not None:
                d = result.decision
                c1, c2 = st.columns(2)
                c1.metric(f"{PAIR_NAMES[watch]}, intact", f"{d['before']:.1%}")
                c2.metric(f"{PAIR_NAMES[watch]}, heads removed", f"{d['after']:.1%}",
                          f"{100 * (d['after'] - d['before']):+.1f} points")
            show_mask_changes(result.masks, "heads removed")
            download("Download (JSON)", json.dumps(result.to_json()), "ablation.json", "application/json",
                     key="int_ablate_json")
            if st.toggle("Held-out masked-LM accuracy with these heads removed", key="int_heldout"):
                held, where = held_out_texts(200)
                accuracy = result_store("held_out").compute(
                    (key, tuple(heads), mode == "mean"),
                    lambda progress: held_out_accuracy(lm, held, heads), "Held-out accuracy",
                    costly="held-out accuracy")
                c1, c2, c3 = st.columns(3)
                c1.metric("Top-1, intact", f"{accuracy.intact:.1%}")
                c2.metric("Top-1, heads zeroed", f"{accuracy.removed:.1%}",
                          f"{100 * (accuracy.removed - accuracy.intact):+.1f} points")
                c3.metric("Masked positions", f"{accuracy.positions:,}")
                st.caption(plain(f"BERT's 15% masking (seeded) on {accuracy.sentences} held-out sentences: {where}. "
                                 "Heads are zeroed here whatever the removal above."))



def importance_tab(lm, key) -> None:
    """Michel et al.'s head importance, the grid that picks heads for ablation, and the pruning curve."""
    st.caption("Michel, Levy & Neubig (2019): a gate ξ = 1 multiplies each head's context; a head's importance is "
               "the mean |∂L/∂ξ| of the masked-LM loss at BERT's 15% positions, each layer's scores divided by their "
               "ℓ2 norm. Optionally, their pruning curve (the toggle below).")
    from_url("n", "int_imp_n", int, lambda v: v in IMPORTANCE_SIZES)
    from_url("prune", "int_prune", lambda v: v == "1")
    with st.form("int_importance_form"):
        c1, c2, c3 = st.columns(3)
        n = c1.select_slider("Sentences", IMPORTANCE_SIZES, 256, key="int_imp_n")
        seed = c2.number_input("Masking seed", 0, 10_000, 0, key="int_imp_seed")
        prune = c3.toggle("Pruning curve too", key="int_prune")
        asked = st.form_submit_button("Compute head importance", type="primary")
    to_url(n=n, prune="1" if prune else None)
    fit, held, where = sample_texts(fit=int(n), held=200)
    store = result_store("importance")
    request = (key, int(n), int(seed))
    if store.get(request) is None and not asked:
        st.info("Press *Compute head importance*.")
    else:
        with page_errors(stop=False):
            imp = store.compute(request, lambda progress: head_importance(
                lm, fit, seed=int(seed), progress=progress), "Gate gradients, sentences", asked,
                costly="head-importance run")
            st.caption(plain(f"Over {where}: {imp.positions:,} masked positions, mean loss {imp.loss:.3f} nats."))
            clickable_grid(lm, "Head importance (each layer's row has unit ℓ2 norm) · click to pick for ablation",
                           imp.importance, "int_imp_grid")
            table = pd.DataFrame([{"layer": layer, "head": head, "importance": float(imp.importance[layer, head]),
                                   "mean |dL/dξ| per token": float(imp.raw[layer, head])}
                                  for layer in range(lm.num_layers) for head in range(lm.num_heads)])
            download("Download importance (CSV)", table.to_csv(index=False), "head-importance.csv",
                     "text/csv", key="int_imp_csv")
            if prune:
                curve = result_store("pruning").compute(request, lambda progress: pruning_curve(
                    lm, imp, held, seed=int(seed), progress=progress),
                    "Pruning curve, steps", asked, costly="pruning curve")
                fig = pruning_figure(curve)
                st.caption("The pruning curve removes heads, least important first, 10% at a time, and scores "
                           "held-out masked-LM top-1 beside three random orders.")
                st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="int_pruning")
                figure_downloads(fig, "pruning-curve")
                kept = [f for f, a, r in zip(curve.fractions, curve.importance_order, curve.random_mean)
                        if a >= r - 1e-12]
                st.caption(plain(f"Intact top-1 {curve.intact:.3f}. The importance order stays at or above the "
                                 f"random mean at {len(kept)} of {len(curve.fractions)} steps: whether it keeps "
                                 "accuracy longer is a finding on this model, not a given."))



def patch_tab(lm, key) -> None:
    """Causal tracing: the recovered fraction of every hidden state × position and every head, and (a masked LM)
    the SAE features patched."""
    st.caption("Causal tracing (Vig et al. 2020; Meng et al. 2022): the metric is logit(A) − logit(B) at the "
               "corrupted text's mask. Each cell runs the corrupted text with one piece of the clean run put back and "
               "reports the recovered fraction (m_patched − m_corrupt) / (m_clean − m_corrupt): 1 where that piece "
               "carries the whole difference, 0 where it carries none.")
    from_url("preset", "int_preset", str, lambda v: v in PRESETS)
    preset = held_choice("Example", list(PRESETS), key="int_preset")
    if st.session_state.get("int_preset_shown") != preset:  # a new example fills the inputs
        st.session_state["int_preset_shown"] = preset
        for k, v in zip(("int_clean", "int_corrupt", "int_a", "int_b"), PRESETS[preset]):
            st.session_state[k] = v
    for param, k in (("clean", "int_clean"), ("corrupt", "int_corrupt"), ("a", "int_a"), ("b", "int_b")):
        from_url(param, k)
    from_url("pos", "int_positions", str, lambda v: v in POSITIONS)
    with st.form("int_patch_form"):
        clean = st.text_input("Clean text", key="int_clean", max_chars=Limits.input_chars)
        corrupt = st.text_input("Corrupted text (as many tokens, with the mask)", key="int_corrupt",
                                max_chars=Limits.input_chars)
        c1, c2, c3 = st.columns([1, 1, 2])
        a = c1.text_input("Candidate A", key="int_a", max_chars=Limits.name_chars)
        b = c2.text_input("Candidate B", key="int_b", max_chars=Limits.name_chars)
        where = c3.radio("Positions (hidden states)", list(POSITIONS), format_func=POSITIONS.get,
                         key="int_positions", help="A long input's grid costs one pass a cell: patch fewer.")
        asked = st.form_submit_button("Patch", type="primary")
    to_url(preset=preset, clean=clean, corrupt=corrupt, a=a, b=b, pos=None if where == "all" else where)
    request = (key, clean, corrupt, a.strip(), b.strip(), where)
    ran = st.session_state.get("int_patch_ran")
    if not (asked or ran == request or link_asks("patch", st.session_state["int_linked"], request)):
        st.info("Press *Patch*: every cell is one pass of the corrupted text (a layer's cells run together).")
        return
    st.session_state["int_patch_ran"] = request
    with page_errors(stop=False):
        check_text(clean, "clean text")
        check_text(corrupt, "corrupted text")
        setup = prepare(lm, clean, corrupt, (a, b))  # bad input answers here, in one line
        positions = None
        if where == "changed":
            positions = [i for i, (x, y) in enumerate(zip(setup.tokens, setup.clean_tokens)) if x != y]
            positions = sorted({*positions, setup.position})
        request = (key, clean, corrupt, a.strip(), b.strip(), tuple(positions or ()))
        hidden = result_store("patch_hidden").compute(request, lambda progress: patch(
            lm, clean, corrupt, (a, b), "hidden", positions, progress=progress),
            "Patching hidden states, cells", asked, costly="patching run", charge_key=("patch", request[:5]))
        c1, c2, c3 = st.columns(3)
        c1.metric("Clean: logit A − logit B", f"{hidden.m_clean:+.3f}")
        c2.metric("Corrupted", f"{hidden.m_corrupt:+.3f}")
        c3.metric("Difference to recover", f"{hidden.m_clean - hidden.m_corrupt:+.3f}")
        if hidden.caveat:
            st.warning(plain(hidden.caveat))
        fig = recovered_heatmap(hidden)
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="int_patch_hidden")
        heads = result_store("patch_heads").compute(request[:5], lambda progress: patch(
            lm, clean, corrupt, (a, b), "heads", progress=progress),
            "Patching heads, cells", asked, costly="patching run", charge_key=("patch", request[:5]))
        st.plotly_chart(recovered_heatmap(heads), config=PLOT_CONFIG, width="stretch", key="int_patch_heads")
        download("Download both grids (JSON)",
                 json.dumps({"hidden": hidden.to_json(), "heads": heads.to_json()}),
                 "patching.json", "application/json", key="int_patch_json")
    if lm.task is None:
        feature_patch_section(lm, key, clean, corrupt, a, b)



def classifier_page(lm, key) -> None:
    """A fine-tuned classifier: each tab watches its decision."""
    st.caption(plain(f"{lm.name} is a fine-tuned classifier ({lm.task.describe()}): each tab watches its decision."))
    tabs = ["Ablate heads", "Head importance", "Patching", "Causal variables (DAS)"]
    tab_from_url("int_tab", tabs)
    tab_ablate, tab_importance, tab_patch, tab_das = st.tabs(tabs, key="int_tab", on_change="rerun")
    with tab_ablate:
        classifier_interventions.ablate_tab(lm, key)
    with tab_importance:
        classifier_interventions.importance_tab(lm, key)
    with tab_patch:
        classifier_interventions.patch_tab(lm, key)
    with tab_das:
        if tab_das.open:
            das_tab.render(lm, key)


def page() -> None:
    persist("int_feat_sae", "int_feat_layer", "int_feat_feature", "int_feat_mode", "int_feat_strength", "int_feat_at",
            "int_feat_text")  # the Features tab is drawn only when open
    st.title("Interventions")
    st.session_state.setdefault("int_linked", "clean" in st.query_params)  # a shared link patches on arrival
    lm = require_model(fallback=lambda lm: st.caption(plain(
        "The predictions these tabs watch need one. A saved probe's class can still be the target, from the command "
        "line: python -m bertscope ablate MODEL TEXT --heads 3:7 --probe RUN --layer L --class C.")))
    key = model_key()
    st.caption("The other pages read the model; this one changes it and watches the output. Layers and heads are "
               "numbered from 0, as on the Attention page; hidden states are the embeddings, then each layer's output.")

    if lm.task is not None and lm.task.kind == SEQUENCE:
        return classifier_page(lm, key)
    pair_head = "sop" if "sop" in lm.outputs else "nsp" if "nsp" in lm.outputs else None
    tabs = ["Ablate heads", "Head importance", "Patching", "Features", "Causal variables (DAS)"]
    tab_from_url("int_tab", tabs)
    tab_ablate, tab_importance, tab_patch, tab_features, tab_das = st.tabs(tabs, key="int_tab", on_change="rerun")
    with tab_features:
        if tab_features.open:
            features_tab(lm, key)
    with tab_das:
        if tab_das.open:
            das_tab.render(lm, key)
    every_head = [head_name(layer, head) for layer in range(lm.num_layers) for head in range(lm.num_heads)]
    from_url("heads", HEADS_KEY, lambda v: sorted({head_name(*h) for h in parse_heads(v)}),
             lambda v: set(v) <= set(every_head))
    with tab_ablate:
        ablate_tab(lm, key, pair_head)
    with tab_importance:
        importance_tab(lm, key)
    with tab_patch:
        patch_tab(lm, key)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
