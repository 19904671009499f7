"""The Syntax tab's "Your sentence": the tree the best layer's trained distance probe predicts for a
sentence the user types (no gold to compare with), drawn and downloadable."""

import json

import streamlit as st

from bertscope.analysis.typed_tree import typed_tree
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.limits import Limits, check_text
from bertscope.core.layers import layer_title
from bertscope.figures.syntax import tree_arcs

EXAMPLE = "The keys to the old cabinet were on the table by the door."


def render(lm, result) -> None:
    """``result``: a ``StructuralResult`` whose distance probe is kept."""
    st.subheader(plain(f"Your sentence, through the probe at {layer_title(result.tree_state)}"))
    text = st.text_input("A sentence (words and punctuation marks are split as the probe suites split them)",
                         EXAMPLE, max_chars=Limits.input_chars, key="syntax_typed")
    if not text.strip():
        st.info("Type a sentence to see the tree the probe predicts for it.")
        return
    with page_errors(stop=False):
        check_text(text, "sentence")
        tree = typed_tree(lm, result.probe, result.tree_state, text)
        fig = tree_arcs(tree.words, None, tree.predicted_edges,
                        f"The probe's tree at {layer_title(result.tree_state)} (no gold: a typed sentence; punctuation "
                        "left out)")
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="syntax_typed_tree")
        if tree.left_out:
            st.warning(plain(f"{len(tree.left_out)} word(s) got no piece from the tokenizer (or fell past the "
                             f"model's limit) and are left out: {', '.join(tree.left_out[:10])}."))
        c1, c2 = st.columns(2)
        with c1:
            download("Download this tree (JSON)", json.dumps(tree.to_json()), "typed-tree.json",
                     "application/json", key="syntax_typed_json")
        with c2:
            figure_downloads(fig, "typed-tree")
