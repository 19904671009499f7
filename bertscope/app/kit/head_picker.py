"""The heads a user picks on the Interventions page: a clickable layer x head grid and a list,
one selection (session state ``int_heads``, "layer:head" names numbered from 0)."""

import numpy as np
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG
from bertscope.figures.interventions import head_grid

HEADS_KEY = "int_heads"


def head_name(layer: int, head: int) -> str:
    return f"{layer}:{head}"


def selected_heads() -> list[tuple[int, int]]:
    return [tuple(map(int, h.split(":"))) for h in st.session_state.get(HEADS_KEY, [])]


def toggle_from_grid(chart_key: str) -> None:
    """A click on a grid adds or removes that head; a box adds every head in it. The grid is
    drawn afresh after each (a new key), so clicking the same cell again removes it."""
    event = st.session_state.get(chart_key)
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    chosen = list(st.session_state.get(HEADS_KEY, []))
    names = [head_name(int(p["y"]), int(p["x"])) for p in points if "x" in p and "y" in p]
    if len(names) == 1:
        name = names[0]
        chosen = [h for h in chosen if h != name] if name in chosen else chosen + [name]
    else:
        chosen += [n for n in names if n not in chosen]
    st.session_state[HEADS_KEY] = sorted(chosen, key=lambda h: tuple(map(int, h.split(":"))))
    st.session_state["int_grid_n"] = st.session_state.get("int_grid_n", 0) + 1


def clickable_grid(lm, title: str, values: np.ndarray | None, name: str) -> None:
    chart_key = f"{name}_{st.session_state.get('int_grid_n', 0)}"
    fig = head_grid(lm.num_layers, lm.num_heads, selected_heads(), title, values)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key=chart_key, on_select=lambda: toggle_from_grid(chart_key),
                    selection_mode=("points", "box"))


def heads_to_remove(lm, importance: np.ndarray | None, what: str = "importance"):
    """The ablation's picker: the grid (coloured by ``importance`` when there is one) on the left,
    the list of heads and the removal mode on the right. Returns (the right column, the mode)."""
    from bertscope.interventions.ablation import MODES

    every_head = [head_name(layer, head) for layer in range(lm.num_layers) for head in range(lm.num_heads)]
    left, right = st.columns([3, 2])
    with left:
        clickable_grid(lm, "Heads to remove: click a cell (again to undo), or drag a box"
                       + (f" · colour: {what}" if importance is not None else ""), importance, "int_grid")
    with right:
        st.multiselect("Heads (layer:head)", every_head, key=HEADS_KEY)
        mode = st.radio("Removal", MODES, horizontal=True, key="int_mode",
                        format_func=lambda m: {"zero": "zero", "mean": "mean over Brown"}[m])
    return right, mode


def reference_means(lm, key, mode: str):
    """Mean ablation's reference (each head's mean context over Brown), computed once per model
    through the cost budget; None for zero ablation."""
    if mode != "mean":
        return None
    from bertscope.app.kit.results import result_store
    from bertscope.interventions.ablation import mean_head_contexts

    return result_store("mean_contexts").compute(
        key, lambda progress: mean_head_contexts(lm, progress=progress),
        "Mean contexts, sentences", costly="mean-ablation reference")
