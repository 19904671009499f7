"""Circuits: which edges between heads, feed-forwards and the decision carry it. EAP or EAP-IG scores every
edge on half the pairs; circuits of every size are scored for faithfulness on the other half, beside random
circuits; the circuit is drawn layer by layer, its strongest edges listed, a head opened on Attention."""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_upload, demo
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.pages import page as page_record
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import from_url, tab_from_url, to_url
from bertscope.circuits.edges import ABLATIONS, METHODS
from bertscope.circuits.find import find_circuit
from bertscope.circuits.pairs import SPAN, read_pairs, reads
from bertscope.circuits.runs import supports
from bertscope.circuits.tasks import TASKS, task_pairs, tasks_for
from bertscope.figures.circuits import DRAWN, MAX_DRAWN, circuit_figure, faithfulness_figure, node_xy

TABS = ["Edge circuits", "Attribution graph"]
UPLOAD = "Your own pairs…"
SIZES = [8, 16, 32, 64]
DEMO_SIZE = 32  # pairs a hosted run takes at most: every pair is a few passes of the model
NUMBER = st.column_config.NumberColumn(format="%.4f")


@dataclass(frozen=True)
class CircuitForm:
    """What the form asks for: the pairs (a task or an upload), the method and its settings."""

    task: str
    method: str
    size: int
    steps: int
    ablation: str
    upload: Any  # the uploaded file, or None
    asked: bool


def pick_head() -> None:
    """A click on a node of the drawn circuit follows it (its paths to the decision drawn strong, the rest faded);
    a head clicked is also chosen below, to open on the Attention page (heads sit at x = head, y = layer + 1;
    feed-forwards, the embeddings and the decision are not heads)."""
    points = ((st.session_state.get("circ_graph") or {}).get("selection") or {}).get("points") or []
    for p in points:
        x, y = p.get("x"), p.get("y")
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            continue
        shown = st.session_state.get("circ_nodes") or {}
        node = shown.get((float(x), float(y)))
        if node is not None:
            st.session_state["circ_focus"] = node
        if float(x).is_integer() and float(y).is_integer() and y >= 1:
            st.session_state["circ_head_clicked"] = (int(y) - 1, int(x))


def circuit_form(lm, fits: list[str]) -> CircuitForm:
    """The form (and the link that restores it)."""
    choices = [*fits, UPLOAD]
    from_url("task", "circ_task", str, lambda v: v in choices)
    from_url("method", "circ_method", str, lambda v: v in METHODS)
    sizes = [n for n in SIZES if not demo() or n <= DEMO_SIZE]
    with st.form("circ_form"):
        c1, c2 = st.columns([2, 1])
        task = held_choice("Pairs", choices, "circ_task", "gender", container=c1,
                           format_func=lambda t: t if t == UPLOAD else f"{t}: {TASKS[t].title}")
        method = held_choice("Method", METHODS, "circ_method", list(METHODS)[1], container=c2, format_func=METHODS.get)
        c3, c4, c5 = st.columns(3)
        size = c3.select_slider("Pairs to use (half score the edges, half test the circuits)", sizes,
                                min(32, sizes[-1]), key="circ_size")
        steps = c4.slider("Integrated-gradient steps (EAP-IG only)", 2, 20, 5, key="circ_steps")
        ablation = c5.radio("Edges outside the circuit carry", list(ABLATIONS), key="circ_ablation",
                            format_func=ABLATIONS.get)
        upload = st.file_uploader("Own pairs: CSV or JSON Lines with clean, corrupted, answer, foil (and word, for a "
                                  "tagger; context, for question answering: two questions of it, two of its spans); "
                                  "both texts of a pair the same number of tokens", type=["csv", "jsonl"],
                                  key="circ_upload", max_upload_size=Limits.upload_mb)
        asked = st.form_submit_button("Find the circuit", type="primary")
    to_url(task=task if task != UPLOAD else None, method=method)
    return CircuitForm(task, method, int(size), int(steps), ablation, upload, asked)


def uploaded(f: CircuitForm) -> list:
    """The upload's pairs, within the run's size; one line for a bad file."""
    check_upload(f.upload)
    found = read_pairs(f.upload.getvalue(), f.upload.name)
    if len(found) > f.size:
        raise BertScopeError(f"{f.upload.name} has {len(found):,} pairs; this run takes at most {f.size} (the "
                             "slider above).")
    return found


def show_circuit(lm, result) -> None:
    """The circuit's faithfulness, the graph (a click follows a node's paths), the curve and the strongest edges."""
    f = result.faithfulness
    share = f.share_reaching(0.8)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("span score (start + end logits): answer − foil, clean" if reads(lm) == SPAN else
              "logit(answer) − logit(foil), clean", f"{f.clean_metric:+.3f}")
    c2.metric("corrupted", f"{f.empty_metric:+.3f}")
    c3.metric("CPR (random)", f"{f.cpr:.3f}", f"{f.cpr - f.random_cpr:+.3f} over random")
    c4.metric("80 % faithful at (share of edges)", "none swept" if share is None else f"{share:.1%}")
    st.caption(plain(f"{result.pairs_said()}; {result.graph.n_edges:,} edges in all. CMD {f.cmd:.3f} (random "
                     f"{f.random_cmd:.3f}): the area between the curve and 1, lower is better."))
    places = node_xy(result)
    st.session_state["circ_nodes"] = {(float(x), float(y)): n for n, (x, y) in places.items()}  # what a click names
    names = [*result.graph.sender_names, "logits"]
    focus = st.session_state.get("circ_focus")
    focus = focus if isinstance(focus, int) and focus in places else None
    d1, d2 = st.columns([3, 2], vertical_alignment="bottom")
    drawn = d1.select_slider("Edges drawn (the strongest first; the table and the downloads hold every edge)",
                             [10, 20, 40, 80, 160, MAX_DRAWN], DRAWN, key="circ_drawn")
    if focus is not None:
        d2.button(f"Following {names[focus]}: show every path", key="circ_unfocus", icon=":material/close:",
                  on_click=lambda: st.session_state.pop("circ_focus", None))
    else:
        d2.caption("Click a node to follow its paths to the decision.")
    fig = circuit_figure(result, int(drawn), focus)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="circ_graph", on_select=pick_head,
                    selection_mode="points")
    figure_downloads(fig, "circuit")
    st.caption(plain(f"The circuit shown: the {result.asked} edges of largest |score|"
                     + (" (the smallest swept size that is 80% faithful)" if share is not None else "")
                     + f", {int(result.circuit.sum())} left once edges off every path from the embeddings to the "
                       "decision are pruned. Red: corrupting the edge raises logit(answer) − logit(foil); blue: it "
                       "lowers it (the edges that carry the decision). Scores are summed over positions."))
    curve = faithfulness_figure(f, result.scores.method)
    st.plotly_chart(curve, config=PLOT_CONFIG, width="stretch", key="circ_curve")
    edges = pd.DataFrame(result.graph.edge_list(result.circuit, result.scores.scores))
    st.markdown("**The strongest edges of the circuit**")
    st.dataframe(edges.head(200), hide_index=True, width="stretch", key="circ_edges",
                 column_config={"score": NUMBER})


def heads_section(result) -> None:
    """The circuit's heads, each one a link to the Attention page (a head clicked on the graph is chosen)."""
    heads = sorted({(n["layer"], n["head"]) for n in map(result.graph.node_of, set(
        int(s) for s in result.circuit.nonzero()[0])) if n["kind"] == "head"})
    clicked = st.session_state.pop("circ_head_clicked", None)
    if clicked in heads:
        st.session_state["circ_head"] = clicked
    elif st.session_state.get("circ_head") not in heads:  # a head of an earlier circuit
        st.session_state.pop("circ_head", None)
    if heads:
        layer, head = held_choice("Open a head of the circuit on the Attention page (or click it above)", heads,
                                  key="circ_head",
                                  format_func=lambda h: f"layer {h[0]}, head {h[1]}")
        example = result.evaluation_pairs[0].clean
        st.page_link(page_record("attention.py").path, label=f"Layer {layer}, head {head} on the Attention page",
                     icon=":material/open_in_new:", query_params={"text": example, "layer": layer, "head": head})


def downloads(result) -> None:
    c1, c2 = st.columns(2)  # the files are written when asked for, not held by every session at every rerun

    def every_edge() -> str:
        return pd.DataFrame(result.graph.edge_list(result.graph.real, result.scores.scores)).to_csv(index=False)

    download("Download (JSON)", lambda: json.dumps(result.to_json()), "circuit.json", "application/json",
             key="circ_json", where=c1)
    download("Every edge's score (CSV)", every_edge, "edge-scores.csv", "text/csv", key="circ_csv", where=c2)


def eap_tab(lm) -> None:
    """Edge circuits: EAP / EAP-IG over heads and feed-forwards, scored as MIB scores them."""
    key = model_key()
    st.caption("Which paths through the model carry a decision? The graph is EAP-IG's (Hanna, Pezzelle & Belinkov "
               "2024): the embeddings, every head (with separate query, key and value inputs) and every feed-forward, "
               "and the decision, with an edge from every node to every node downstream of it. EAP scores all edges from "
               "one gradient; EAP-IG integrates the gradient along a path from the corrupted input to the clean one and "
               "finds more faithful circuits. A circuit keeps its edges and replaces every other one's contribution by "
               "the corrupted run's (or a mean); its faithfulness, scored on pairs held out from the scoring, runs from 0 "
               "(the corrupted run) to 1 (the model), as MIB (Mueller et al. 2025) scores it. Headless: "
               "`bertscope circuit MODEL --task gender --method eap-ig-inputs`.")
    with page_errors():
        supports(lm)
    fits = tasks_for(lm)
    f = circuit_form(lm, fits)
    store = result_store("circuits")
    if not fits:
        st.info(plain(f"No built-in task reads {lm.name}'s kind of decision: upload your own pairs."))
    if f.task == UPLOAD and f.upload is None:
        st.warning("Upload a .csv or .jsonl file of pairs first.")
        return
    upload_key = None if f.task != UPLOAD else (f.upload.name, hashlib.sha256(f.upload.getvalue()).hexdigest())
    request = (key, f.task, upload_key, f.method, f.steps if f.method != "eap" else 0, f.ablation, f.size)

    def search(progress):
        """The task's pairs (each candidate run once to keep those the model gets right) or the file's, then
        the circuit: all inside the job, under its bar, its Stop and the budget."""
        found = uploaded(f) if f.task == UPLOAD else task_pairs(lm, f.task, f.size).pairs
        return find_circuit(lm, found, f.method, f.steps, ablation=f.ablation, progress=progress)

    with page_errors(stop=False):
        if f.asked and f.task == UPLOAD and store.get(request) is None:
            uploaded(f)  # a bad file: one line, nothing run
        result = store.compute(request, search,
            "Finding the circuit", f.asked, costly="circuit search",
            wait="Press *Find the circuit*: each pair's two runs are recorded, its edges scored by gradients (one pass "
                 "back per step), then circuits of 0.1% to 100% of the edges run on the held-out pairs, several to a pass.")
        if result is None:
            return
        show_circuit(lm, result)
        heads_section(result)
        downloads(result)


def page() -> None:
    st.title("Circuits")
    lm = require_model()
    tab_from_url("circuit_tab", TABS)
    edges, graph = st.tabs(TABS, key="circuit_tab", on_change="rerun")
    with edges:
        if edges.open:
            eap_tab(lm)
    with graph:
        if graph.open:
            from bertscope.app.sections.graph_tab import graph_tab

            graph_tab(lm)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
