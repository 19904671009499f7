"""The Similarity page's Terms & matches tab: two readings whose explanations are exact by construction. The sparse
view (SPLADE) splits a score over the vocabulary terms both texts activate through the masked-LM head; the late
interaction view (ColBERT's MaxSim) gives each query token its best passage token."""

import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import cached_model, model_key
from bertscope.app.kit.results import result_store
from bertscope.core.hooked_pass import check_text as check_words
from bertscope.figures.similarity import pair_map
from bertscope.retrieval.late_interaction import colbert_settings, explain_maxsim
from bertscope.retrieval.sparse import explain_sparse
from bertscope.sources.presets import BUNDLED_MLM

QUERY, PASSAGE = "Who wrote the Iliad?", "The Iliad is an ancient Greek epic poem attributed to Homer."
VIEWS = {"sparse": "Shared terms (SPLADE: the vocabulary through the masked-LM head)",
         "maxsim": "Token matches (late interaction: ColBERT's MaxSim)"}


def terms_form() -> tuple[str, str, str, bool]:
    with st.form("terms_form"):
        c1, c2 = st.columns(2)
        query = c1.text_input("Query (text a)", QUERY, key="terms_a", max_chars=Limits.input_chars)
        passage = c2.text_area("Passage (text b)", PASSAGE, key="terms_b", max_chars=Limits.input_chars, height=90)
        view = st.radio("Reading", list(VIEWS), format_func=VIEWS.get, key="terms_view", horizontal=True)
        asked = st.form_submit_button("Explain the match", type="primary")
    return query, passage, view, asked


def sparse_model(lm):
    """The page's model when it has a masked-LM head (a SPLADE checkpoint or a masked LM), else bundled-mlm."""
    if "mlm" in lm.outputs:
        return lm
    st.caption(plain(f"{lm.name} has no masked-LM head: the sparse view reads {BUNDLED_MLM} (the bundled encoder with "
                     "the masked-LM head BertScope trained for it)."))
    return cached_model(BUNDLED_MLM, "auto", "auto")


def cut_note(names: tuple[str, str], truncated: tuple[bool, bool]) -> None:
    for name, cut in zip(names, truncated):
        if cut:
            st.warning(f"The {name} was cut at the model's length: the reading covers its start only.")


def show_sparse(x) -> None:
    cut_note(("query", "passage"), x.truncated)
    c1, c2, c3 = st.columns(3)
    c1.metric("score (dot product of term weights)", f"{x.score:.4f}")
    c2.metric("shared terms", f"{len(x.terms):,}")
    c3.metric("active terms (a / b)", f"{x.a_active:,} / {x.b_active:,}")
    st.caption(plain(x.settings.note + " The shares below sum to the score exactly; * marks a term the text does "
                                       "not contain (the head's expansion)."))
    rows = [{"term": t.term, "share": t.share, "a weight": t.a_weight, "b weight": t.b_weight,
             "from a": x.a_tokens[t.a_token] + ("" if t.in_a else " *"),
             "from b": x.b_tokens[t.b_token] + ("" if t.in_b else " *")} for t in x.terms[:40]]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="terms_table",
                 column_config={k: st.column_config.NumberColumn(format="%.4f")
                                for k in ("share", "a weight", "b weight")})
    fig = pair_map(x.a_tokens, x.b_tokens, x.pairs, "Each token pair's share: the terms it produced on both sides")
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="terms_map")
    figure_downloads(fig, "sparse-pairs")
    c1, c2 = st.columns(2)
    for where, name, top in ((c1, "a", x.a_top), (c2, "b", x.b_top)):
        where.markdown(f"**{name}'s strongest terms**")
        where.dataframe(pd.DataFrame([{"term": t + ("" if held else " *"), "weight": w} for t, w, held in top]),
                        hide_index=True, width="stretch", key=f"terms_top_{name}",
                        column_config={"weight": st.column_config.NumberColumn(format="%.3f")})
    download("Download (JSON)", json.dumps(x.to_json()), "sparse.json", "application/json", key="terms_json")


def show_maxsim(m) -> None:
    cut_note(("query", "passage"), m.truncated)
    c1, c2 = st.columns(2)
    c1.metric("MaxSim (sum of each query token's best match)", f"{m.score:.4f}")
    c2.metric("query tokens (expansion [MASK]s)", f"{len(m.query_tokens)} ({sum(m.expansion)})")
    st.caption(plain(m.note))
    fig = pair_map(m.query_tokens, m.passage_tokens, m.similarities,
                   "Cosine of every query token with every passage token; each row's maximum is its share")
    fig.update_layout(xaxis_title="passage", yaxis_title="query")
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="maxsim_map")
    figure_downloads(fig, "maxsim")
    st.dataframe(pd.DataFrame(m.matches(len(m.query_tokens)), columns=["query token", "best passage token", "share"]),
                 hide_index=True, width="stretch", key="maxsim_table",
                 column_config={"share": st.column_config.NumberColumn(format="%.4f")})
    c1, c2 = st.columns(2)
    download("Download (JSON)", json.dumps(m.to_json()), "maxsim.json", "application/json", key="maxsim_json", where=c1)
    frame = pd.DataFrame(m.similarities, index=m.query_tokens, columns=m.passage_tokens)
    download("Download the map (CSV)", frame.to_csv(), "maxsim.csv", "text/csv", key="maxsim_csv", where=c2)


def terms_tab(lm) -> None:
    """A query and a passage read by shared terms or by token matches."""
    st.caption("Two readings whose explanations are exact by construction. Headless: `bertscope sparse MODEL --a … "
               "--b …` and `bertscope maxsim MODEL --query … --passage …`.")
    query, passage, view, asked = terms_form()
    with page_errors(stop=False):
        st.caption(plain(colbert_settings(lm).note))
        for text, what in ((query, "query"), (passage, "passage")):
            check_text(text, what)
            check_words(text, what)
        if view == "sparse":
            model = sparse_model(lm)
            x = result_store("sparse").compute(
                (model_key() if model is lm else model.name, query, passage),
                lambda progress: explain_sparse(model, query, passage),
                "Reading the terms", asked, costly="sparse explanation",
                wait="Press *Explain the match*: one pass of each text through the masked-LM head.")
            if x is not None:
                show_sparse(x)
        else:
            m = result_store("maxsim").compute(
                (model_key(), query, passage), lambda progress: explain_maxsim(lm, query, passage),
                "Matching the tokens", asked, costly="maxsim explanation",
                wait="Press *Explain the match*: one pass of each text.")
            if m is not None:
                show_maxsim(m)
