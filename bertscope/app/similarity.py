"""Similarity & search: why an embedding model finds two texts as similar as it does, token pair by token pair
(integrated Jacobians), with the model's own embedding settings stated. A short script over named functions."""

import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import from_url, to_url
from bertscope.figures.similarity import pair_map, totals
from bertscope.retrieval.embedding import settings_of
from bertscope.retrieval.similarity import DEFAULT_STEPS, METHODS, explain_pair

A, B = "How do I open a bank account?", "Steps to create a new account at your bank"
STEPS = [10, 20, 50, 100]


def pair_form(lm, settings) -> tuple[str, str, tuple, str, int, bool, bool]:
    """The two texts, their prompts (where the model declares some), the method and its steps."""
    from_url("a", "sim_a")
    from_url("b", "sim_b")
    with st.form("sim_form"):
        c1, c2 = st.columns(2)
        a = c1.text_area("Text a (a query, say)", A, key="sim_a", max_chars=Limits.input_chars, height=90)
        b = c2.text_area("Text b (a passage, say)", B, key="sim_b", max_chars=Limits.input_chars, height=90)
        kinds = (None, None)
        if settings.prompts:
            names = list(settings.prompts)
            kinds = (c1.selectbox("a's prompt", names, 0, key="sim_a_kind", format_func=lambda k: f"{k}: {settings.prompts[k]!r}"),
                     c2.selectbox("b's prompt", names, min(1, len(names) - 1), key="sim_b_kind",
                                  format_func=lambda k: f"{k}: {settings.prompts[k]!r}"))
        m1, m2, m3 = st.columns([2, 1, 1])
        method = m1.radio("Method", list(METHODS), format_func=METHODS.get, key="sim_method", horizontal=True)
        steps = m2.select_slider("Steps", STEPS, DEFAULT_STEPS, key="sim_steps")
        words = m3.toggle("Words, not word pieces", True, key="sim_words")
        asked = st.form_submit_button("Explain the similarity", type="primary")
    to_url(a=a if a != A else None, b=b if b != B else None)
    return a, b, kinds, method, int(steps), words, asked


def show(x, words: bool) -> None:
    """The score and its parts, the pair map, each text's totals, the strongest pairs, the downloads."""
    a_names, b_names, pairs, a_scores, b_scores = x.by_words() if words else (x.a.tokens, x.b.tokens, x.pairs,
                                                                             x.a_scores, x.b_scores)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(f"{x.similarity} similarity", f"{x.score:.4f}")
    c2.metric("the references' share", f"{x.baseline_score:+.4f}",
              help="e(a)·e(r_b) + e(r_a)·e(b) − e(r_a)·e(r_b): what the texts' references (their special tokens, "
                   "padding elsewhere) account for; the pairs account for the rest.")
    c3.metric("the pairs' sum", f"{(pairs.sum() if pairs is not None else a_scores.sum()):+.4f}")
    c4.metric("integration error", f"{x.error:.1e}", help="|sum of the attributions − (score − references' share)|, "
                                                          "shrinking as 1/steps")
    unit = "word" if words else "token"
    if pairs is not None:
        fig = pair_map(a_names, b_names, pairs, f"Every {unit} pair's share of the score ({METHODS[x.method]}, "
                                                f"{x.steps} steps)")
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="sim_map")
        figure_downloads(fig, "similarity-pairs")
        st.markdown(f"**The strongest {unit} pairs**")
        st.dataframe(pd.DataFrame(x.strongest(12, words), columns=["a", "b", "share"]), hide_index=True,
                     width="stretch", column_config={"share": st.column_config.NumberColumn(format="%+.4f")})
    st.plotly_chart(totals(a_names, b_names, a_scores, b_scores), config=PLOT_CONFIG, width="stretch",
                    key="sim_totals")
    for note in x.notes:
        st.caption(plain(note))
    d1, d2 = st.columns(2)
    download("Download (JSON)", json.dumps(x.to_json(words)), "similarity.json", "application/json", key="sim_json",
             where=d1)
    if pairs is not None:
        frame = pd.DataFrame(pairs, index=a_names, columns=b_names)
        download("Download the map (CSV)", frame.to_csv(), "similarity-pairs.csv", "text/csv", key="sim_csv", where=d2)


st.title("Similarity & search")
st.caption("Why two texts are as similar as an embedding model says: integrated Jacobians (Moeller, Nikolaev & Padó "
           "2023, held to the authors' code) split the score into every token pair's share, which sum to the score "
           "less what the texts' references account for. Headless: `bertscope similarity MODEL --a … --b …`.")
lm = require_model()
settings = settings_of(lm)
st.info(plain(settings.note))
a, b, kinds, method, steps, words, asked = pair_form(lm, settings)
with page_errors(stop=False):
    check_text(a, "text a")
    check_text(b, "text b")
    explained = result_store("similarity").compute(
        (model_key(), a, b, kinds, method, steps), lambda progress: explain_pair(lm, a, b, method, steps, 0, kinds),
        "Explaining the similarity", asked, costly="similarity explanation",
        wait=f"Press *Explain the similarity*: every token of each text is moved from its reference, {steps} steps, "
             "one directional derivative a token and step (a few seconds on bundled).")
    if explained is not None:
        show(explained, words)
