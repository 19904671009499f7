"""The Circuits page's tab *Attribution graph*: one decision of a BERT masked LM (a token at [MASK]) or classifier
(a class) as a graph of transcoder features, error nodes and input embeddings, pruned by influence; a feature
switched off in the real model beside the graph's prediction; features grouped into named supernodes; JSON."""

import hashlib
import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import model_key, offer_models
from bertscope.app.kit.results import cache_budget_bytes, result_store
from bertscope.errors import BertScopeError
from bertscope.features.shipped import SHIPPED_TRANSCODERS, transcoder_set
from bertscope.figures.graph import graph_figure
from bertscope.graphs.build import MAX_GRAPH_BYTES, attribution_graph, check_decision
from bertscope.graphs.contexts import feature_examples
from bertscope.graphs.frozen import HEADS
from bertscope.graphs.interventions import predicted_change, switch_off, total_effects
from bertscope.interventions.importance import held_out_texts

EXAMPLE = "The bank of the [MASK] was muddy after the storm."
MAX_GRAPH_TOKENS = 64  # a graph's rows grow with the tokens times the active features: the page's cap
EXAMPLE_SENTENCES = 500  # where the features fire most, read once a model
MAX_SUPERNODES = 32  # named groups a graph holds


def graph_form(lm) -> tuple[str, str | None, str | None, float, str, bool]:
    with st.form("graph_form"):
        text = st.text_input("Text (with [MASK] for a masked LM)" if lm.task is None else "Text", EXAMPLE
                             if lm.task is None else "The service was wonderful.", key="graph_text",
                             max_chars=Limits.input_chars)
        c1, c2, c3, c4 = st.columns(4)
        target = c1.text_input("Target (default: the model's choice)", key="graph_target",
                               max_chars=Limits.input_chars) or None
        contrast = c2.text_input("Contrast (default: the mean logit)", key="graph_contrast",
                                 max_chars=Limits.input_chars) or None
        keep = c3.select_slider("Influence kept", [0.5, 0.6, 0.7, 0.8, 0.9, 0.95], 0.8, key="graph_keep")
        head = held_choice("The head read", list(HEADS), key="graph_head", container=c4, format_func=HEADS.__getitem__,
                           help="Held: the head's GELU and LayerNorm scale at the real run's, so every sum is "
                                "exact. To first order: the scale's response counted, so edge sizes match the "
                                "model's (the head's LayerNorm undoes much of a write along the target's row).")
        asked = st.form_submit_button("Trace the graph", type="primary")
    return text, target, contrast, float(keep), head, asked


STEERING = {"off (× 0)": 0.0, "halved (× 0.5)": 0.5, "doubled (× 2)": 2.0, "× 4": 4.0}  # the activation times


def switch_section(lm, graph, pruned: dict, transcoders, folder: str) -> None:
    """A kept feature switched off (or steered) in the real model, its error kept, beside the graph's prediction."""
    features = [n for n in pruned["nodes"] if n["kind"] == "feature"]
    if not features:
        return
    features.sort(key=lambda n: -n["influence"])
    c1, c2 = st.columns([3, 1])
    pick = held_choice("Switch a feature off (or steer it) in the real model", range(len(features)),
                       key="graph_off", container=c1,
                       format_func=lambda i: f"{features[i]['id']} (layer {features[i]['layer']}, "
                                             f"{graph.tokens[features[i]['position']]!r}, "
                                             f"influence {features[i]['influence']:.3f})")
    how = held_choice("Its activation", list(STEERING), key="graph_steer", container=c2)
    scale, node = STEERING[how], features[pick]
    index = next(i for i, n in enumerate(graph.nodes) if n.id == node["id"])
    effects = result_store("graph_effects").get_or_compute((model_key(), folder, graph.text, str(graph.target), graph.head),
                                                           lambda: total_effects(graph))
    off = [(node["layer"], node["position"], node["feature"])]
    measured = result_store("graph_switch").compute(
        (model_key(), folder, graph.text, str(graph.target), node["id"], scale),
        lambda progress: tuple(switch_off(lm, graph, transcoders, off, scale=scale, norms=norms)
                               - switch_off(lm, graph, transcoders, [], norms=norms) for norms in ("live", "frozen")),
        "Switching the feature off", True, costly=None)  # four passes of one sentence
    c1, c2, c3 = st.columns(3)
    c1.metric("The graph predicts", f"{predicted_change(effects, index, scale):+.4f}", help="The feature's total effect on "
              "the target through every path of the graph (first order), times the activation's change.")
    c2.metric("The model gives", f"{measured[0]:+.4f}", help="The real model with this feature's write changed in "
              "its layer's feed-forward output at its position (what the transcoder misses stays in), attention "
              "patterns held at the real run's: circuit-tracer's feature_intervention.")
    c3.metric("With its LayerNorm scales held", f"{measured[1]:+.4f}", help="The same, every LayerNorm's scale (and "
              "the head's GELU) held at the real run's as the graph holds them. Where this agrees with the graph and "
              "the model does not, the scales' response is what the graph leaves out: on bundled-mlm mostly the "
              "masked-LM head's own LayerNorm, which undoes much of a write that lengthens its output along the "
              "target's row.")


def examples_of(lm, transcoders, folder: str):
    """Where each transcoder feature fires most over held-out sentences, read once a model through the budget when
    a visitor asks (a button; a graph never waits for them unasked): (``FeatureExamples.of`` or None when not yet
    read, stopped or refused: the graph is drawn without them, what was read)."""
    texts, where = held_out_texts(EXAMPLE_SENTENCES)
    store = result_store("graph_examples")
    key = (model_key(), folder, hashlib.sha256(json.dumps(texts).encode()).hexdigest())
    place = st.empty()  # the button, gone once they are read
    asked = store.get(key) is None and place.button(f"Add where each feature fires to its hover ({where})",
                                                     key="graph_examples_go", icon=":material/search:")
    found = store.compute(key, lambda progress: feature_examples(lm, transcoders, texts, progress=progress),
                          "Where the features fire, sentences", asked, costly="feature examples", optional=True,
                          wait="The graph is drawn without its features' top contexts: press the button above to "
                               "read them (once a model, for every visitor after).")
    if found is not None:
        place.empty()
    return (None if found is None else found.of), where


def supernodes(pruned: dict, key) -> list[dict]:
    """Kept features grouped under names the user gives, for this graph alone: each group's summed influence (the
    rows the JSON download carries)."""
    features = [n["id"] for n in pruned["nodes"] if n["kind"] == "feature"]
    influence = {n["id"]: n["influence"] for n in pruned["nodes"]}
    with st.expander("Group features into supernodes"):
        held = st.session_state.get("graph_groups")
        if held is None or held[0] != key:  # this graph's groups only: another graph's nodes are not these
            held = st.session_state["graph_groups"] = (key, {})
        groups = held[1]
        c1, c2 = st.columns([1, 3])
        name = c1.text_input("Name", key="graph_group_name", max_chars=Limits.input_chars)
        members = c2.multiselect("Features", features, key="graph_group_members")
        if st.button("Add the group", key="graph_group_add") and name.strip() and members:
            if len(groups) >= MAX_SUPERNODES and name.strip() not in groups:
                st.warning(f"A graph holds up to {MAX_SUPERNODES} supernodes: give an existing name to replace one.")
            else:
                groups[name.strip()] = members
        rows = [{"supernode": g, "features": m, "influence": sum(influence.get(i, 0.0) for i in m)}
                for g, m in groups.items()]
        if rows:
            st.dataframe(pd.DataFrame([r | {"features": len(r["features"])} for r in rows]), hide_index=True,
                         width="stretch")
    return rows


def graph_bytes() -> int:
    """The adjacency's budget on this page: a third of the shared store (``BERTSCOPE_CACHE_MB``), so a traced graph
    stays there for the clicks that follow (a bigger one was dropped, and each click asked for a new trace); the
    trace's working tensors are held to half of it (``graphs.build.rows_at_once``)."""
    return min(MAX_GRAPH_BYTES, cache_budget_bytes() // 3)


def shipped_set(lm) -> tuple[dict, str]:
    """(the transcoders shipped for ``lm``, their folder): read once a model and process through the byte budget and
    shared by every session, so a rerun reads no file; the folder names the set in every result's key."""
    folder = str(SHIPPED_TRANSCODERS[lm.name].resolve())
    return result_store("transcoders").get_or_compute((model_key(), folder), lambda: transcoder_set(lm)), folder


def graph_tab(lm) -> None:
    st.caption("Each feed-forward replaced by its transcoder; with attention patterns and LayerNorm scales frozen "
               "from the real run, every node's direct effect on every later node is linear, so the decision splits "
               "into a graph of features, error nodes (what the transcoders miss) and the input embeddings "
               "(Ameisen et al. 2025, circuit-tracer's pruning and scores). Headless: `bertscope attribution-graph "
               "MODEL TEXT --json`.")
    if lm.name not in SHIPPED_TRANSCODERS:
        st.warning(plain(f"No transcoders are shipped for {lm.name}: they are for "
                         f"{', '.join(SHIPPED_TRANSCODERS)}; train a set with `bertscope train-transcoders "
                         f"{lm.name} --out FOLDER` and use the command."))
        offer_models(list(SHIPPED_TRANSCODERS), "graph_need")
        return
    text, target, contrast, keep, head, asked = graph_form(lm)
    with page_errors(stop=False):
        check_text(text, "text")
        if len(lm.tokenizer(text)["input_ids"]) > MAX_GRAPH_TOKENS:
            raise BertScopeError(f"At most {MAX_GRAPH_TOKENS} tokens here: a graph's rows grow with the tokens times the "
                             "active features (the command takes more).")
        check_decision(lm, text, target, contrast)  # before the trace is charged
        transcoders, folder = shipped_set(lm)
        key = (model_key(), folder, text, target, contrast, head)
        graph = result_store("graph").compute(
            key,
            lambda progress: attribution_graph(lm, text, transcoders, target, contrast, progress=progress, head=head,
                                               max_bytes=graph_bytes()),
            "Tracing the graph, rows", asked, costly="attribution graph",
            wait="Press *Trace the graph*: a pass carried back from every active feature and the target (seconds "
                 "for a sentence on bundled-mlm).")
        if graph is None:
            return
        pruned = result_store("graph_pruned").get_or_compute((*key, keep), lambda: graph.to_json(keep))
        graph_view(lm, graph, pruned, keep, transcoders, folder)
        pruned = pruned | {"supernodes": supernodes(pruned, key)}
        download("Download the graph (JSON)", json.dumps(pruned), "attribution-graph.json", "application/json",
                 key="graph_json")


def graph_view(lm, graph, pruned: dict, keep: float, transcoders, folder: str) -> None:
    """The traced graph: its target and scores, the figure (hover: where each feature fires), its notes, and a
    feature switched off in the real model."""
    t = pruned["target"]
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Target", f"{t.get('token') or t.get('label')}", help=plain(f"Against {t['contrast'] or 'the mean logit'}"))
    c2.metric("Its value", f"{pruned['logit']:+.3f}")
    c3.metric("Replacement score", f"{pruned['replacement_score']:.3f}",
              help="How much of the influence reaching the target starts at the embeddings rather than at error "
                   "nodes (circuit-tracer's compute_graph_scores).")
    c4.metric("Completeness score", f"{pruned['completeness_score']:.3f}",
              help="How much of each node's input comes from features and embeddings rather than errors, "
                   "weighted by influence.")
    examples, where = examples_of(lm, transcoders, folder)
    fig = graph_figure(pruned, lm.num_layers, examples=examples)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="graph_plot")
    figure_downloads(fig, "attribution-graph")
    st.caption(plain(f"{pruned['unpruned']['features']:,} active features; kept {len(pruned['nodes']):,} nodes "
                     f"and {len(pruned['edges']):,} edges carrying {keep:.0%} of the influence, traced in "
                     f"{pruned['seconds']:.1f} s."
                     + (f" Hover a feature: where it fires most over {where}." if examples is not None else "")))
    for note in pruned["notes"]:
        st.caption(plain(note))
    switch_section(lm, graph, pruned, transcoders, folder)
