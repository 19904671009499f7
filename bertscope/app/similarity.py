"""Similarity & search: why an embedding model finds two texts as similar as it does, token pair by token pair
(integrated Jacobians), with the model's own embedding settings stated; a corpus searched; a reranker's order
explained. A short script over named functions."""

import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.estimates import expected
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, check_text
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import from_url, tab_from_url, to_url
from bertscope.errors import BertScopeError
from bertscope.figures.similarity import deletion_figure, pair_map, totals
from bertscope.retrieval.embedding import settings_of
from bertscope.retrieval.faithful import METHODS as DELETION_METHODS
from bertscope.retrieval.faithful import deletion_curves
from bertscope.retrieval.search import CORPORA, build_index, documents, passage_kind, query_kind, search
from bertscope.retrieval.similarity import DEFAULT_STEPS, METHODS, explain_pair, pair_cost

A, B = "How do I open a bank account?", "Steps to create a new account at your bank"
STEPS = [10, 20, 50, 100]
FEWER = "choose fewer steps, the first-order method or shorter texts"


def check_cost(lm, a: str, b: str, method: str, steps: int, kinds) -> None:
    """One line, before the job, for an explanation over the hosted demo's cap (what it passes through the model)
    or of a text with nothing to explain."""
    check_pieces(pair_cost(lm, a, b, method, steps, kinds),
                 "this explanation (every token moved at every step, a pass of its text each)",
                 "use shorter texts" if method == "first-order" else FEWER, Limits.explanation_pieces)
TABS = ["Two texts", "Search a corpus", "Rerank", "Terms & matches"]


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
            kinds = (held_choice("a's prompt", names, "sim_a_kind", container=c1,
                                 format_func=lambda k: f"{k}: {settings.prompts[k]!r}"),
                     held_choice("b's prompt", names, "sim_b_kind", names[min(1, len(names) - 1)], container=c2,
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
        fig = pair_map(a_names, b_names, pairs, f"Every {unit} pair's share of the score ({METHODS[x.method]}"
                                                + (f", {x.steps} steps)" if x.steps > 1 else ")"))
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


def deletion_section(lm, a: str, b: str, kinds, steps: int) -> None:
    """The deletion test of every method on this pair, behind its own button (it explains the pair three ways)."""
    asked = st.button("Test the explanations: delete b's top tokens", key="sim_delete",
                      help="Each method's ranking of b's tokens, deleted most important first, beside a random order.")
    if asked:
        check_pieces(sum(pair_cost(lm, a, b, m, steps, kinds) for m in DELETION_METHODS if m != "random"),
                     "this test (each method's passes, every token moved at every step)", FEWER,
                     Limits.explanation_pieces)
    curves = result_store("similarity_deletion").compute(
        (model_key(), a, b, kinds, steps),
        lambda progress: deletion_curves(lm, a, b, steps=steps, kinds=kinds, progress=progress),
        "Deleting tokens, methods", asked, costly="similarity deletion test",
        wait="Press *Test the explanations* to see which method's ranking the score rests on (each method once, then "
             "a pass per deletion size).")
    if curves is not None:
        st.plotly_chart(deletion_figure(curves), config=PLOT_CONFIG, width="stretch", key="sim_deletion")
        st.caption("Mean fall of the score as b's top tokens go: higher is more faithful; random is the floor. "
                   "Headless, over many held-out pairs: `python benchmarks/retrieval.py --faithfulness 20`.")


def search_section(lm, settings) -> None:
    """A corpus searched with the model's own embedding, each hit explained against the query."""
    with st.form("search_form"):
        c1, c2, c3 = st.columns([2, 3, 1])
        corpus_name = held_choice("Corpus", list(CORPORA), format_func=lambda c: f"{c}: {CORPORA[c]}",
                                  key="search_corpus", container=c1)
        query = c2.text_input("Query", "Who won Super Bowl 50?", key="search_query", max_chars=Limits.input_chars)
        top_k = c3.number_input("Hits", 1, 50, 10, key="search_k")
        asked = st.form_submit_button("Search", type="primary")
    corpus = documents(corpus_name)
    index = result_store("search_index").compute(
        (model_key(), corpus.digest()), lambda progress: build_index(lm, corpus, progress),
        "Embedding the corpus, documents", asked, costly="search index", measure=(lm.name, len(corpus.texts)),
        wait=f"Press *Search*: {lm.name} embeds the {len(corpus.texts):,} documents once (kept on disk: "
             f"{expected('search_index', lm.name, len(corpus.texts), 'documents')}), then every query is a "
             "matrix product.")
    if index is None:
        return
    check_text(query, "query")
    hits = search(lm, index, query, int(top_k))
    st.dataframe(pd.DataFrame([h.to_json() for h in hits]), hide_index=True, width="stretch", key="search_hits",
                 column_config={"score": st.column_config.NumberColumn(format="%.4f")})
    download("Download the hits (JSON)", json.dumps({"corpus": corpus.name, "documents": len(corpus.texts),
                                                     "results": [h.to_json() for h in hits]}),
             "search.json", "application/json", key="search_json")
    pick = held_choice("Why did this hit rank here?", range(len(hits)), key="search_pick",
                       format_func=lambda i: f"{hits[i].rank}. {hits[i].text[:90]}")
    exact = st.toggle("Exact (integrated Jacobians, a pass a token and step: minutes for a long passage on a CPU)",
                      key="search_exact")
    method, steps = ("ij", 20) if exact else ("first-order", 1)
    kinds = (query_kind(lm), passage_kind(lm))
    explain = st.button("Explain this hit", key="search_explain", icon=":material/manage_search:")
    if explain:
        check_cost(lm, query, hits[pick].text, method, steps, kinds)
    why = result_store("similarity").compute(
        (model_key(), query, hits[pick].text, kinds, method, steps),
        lambda progress: explain_pair(lm, query, hits[pick].text, method, steps, 0, kinds, progress=progress),
        "Explaining the hit", explain, costly="similarity explanation",
        wait=f"Press *Explain this hit* to split its score into every (query word, hit word) pair's share "
             f"({METHODS[method]}{'' if steps == 1 else f', {steps} steps'}).")
    if why is not None:
        show(why, True)


def pair_tab(lm, settings) -> None:
    """Two texts explained, and the deletion test of the explanations."""
    a, b, kinds, method, steps, words, asked = pair_form(lm, settings)
    with page_errors(stop=False):
        check_text(a, "text a")
        check_text(b, "text b")
        if asked:
            check_cost(lm, a, b, method, steps, kinds)
        explained = result_store("similarity").compute(
            (model_key(), a, b, kinds, method, steps),
            lambda progress: explain_pair(lm, a, b, method, steps, 0, kinds, progress=progress),
            "Explaining the similarity", asked, costly="similarity explanation",
            wait=f"Press *Explain the similarity*: every token of each text is moved from its reference, {steps} steps, "
                 "one directional derivative a token and step (a few seconds on bundled).")
        if explained is not None:
            show(explained, words)
            deletion_section(lm, a, b, kinds, steps)


def model_settings(lm):
    """The model's embedding settings, stated; None (and the line saying why) for a sparse or ColBERT checkpoint,
    which has no one vector a text: its reading is the Terms & matches tab."""
    try:
        settings = settings_of(lm)
    except BertScopeError as err:
        st.warning(plain(str(err)))
        return None
    st.info(plain(settings.note))
    return settings


def page() -> None:
    st.title("Similarity & search")
    st.caption("Why two texts are as similar as an embedding model says: integrated Jacobians (Moeller, Nikolaev & "
               "Padó 2023, held to the authors' code) split the score into every token pair's share, which sum to the "
               "score less what the texts' references account for. Headless: `bertscope similarity MODEL --a … --b "
               "…` and `bertscope search MODEL --query …`.")
    lm = require_model()
    settings = model_settings(lm)
    tab_from_url("sim_tab", TABS)
    pairs, searching, reranking, terms = st.tabs(TABS, key="sim_tab", on_change="rerun")
    with pairs:
        if pairs.open and settings is not None:
            pair_tab(lm, settings)
    with searching:
        if searching.open and settings is not None:
            with page_errors(stop=False):
                search_section(lm, settings)
    with reranking:
        if reranking.open:
            from bertscope.app.sections.rerank_tab import rerank_tab

            rerank_tab()
    with terms:
        if terms.open:
            from bertscope.app.sections.terms_tab import terms_tab

            terms_tab(lm)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
