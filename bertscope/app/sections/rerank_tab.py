"""The Similarity page's reranker tab: a cross-encoder orders passages for a query, and one passage's relevance is
explained by integrated gradients (each token's share) and by the query-passage word interactions (ArchDetect's
mixed differences: which query word's evidence rests on which passage word)."""

import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, check_text
from bertscope.app.kit.model_picker import cached_model
from bertscope.app.kit.results import result_store
from bertscope.errors import BertScopeError
from bertscope.figures.attribution import token_strip
from bertscope.figures.similarity import pair_map
from bertscope.retrieval.rerank import MAX_PASSAGES, explain_cost, explain_relevance, interactions, pair_lengths, rerank
from bertscope.sources.presets import BUNDLED_RERANKER

QUERY = "Where was Super Bowl 50 played?"
STEPS = 50  # integrated gradients' steps
PASSAGES = ("The Denver Broncos defeated the Carolina Panthers 24-10 to earn their third Super Bowl title.\n"
            "Super Bowl 50 was played at Levi's Stadium in Santa Clara, California.\n"
            "The Broncos' defense ranked first in the NFL that season.")


def rerank_form() -> tuple[str, list[str], bool]:
    with st.form("rerank_form"):
        query = st.text_input("Query", QUERY, key="rr_query", max_chars=Limits.input_chars)
        text = st.text_area("Passages, one a line", PASSAGES, key="rr_passages", height=130,
                            max_chars=Limits.input_chars)
        asked = st.form_submit_button("Rerank", type="primary")
    passages = [p.strip() for p in text.splitlines() if p.strip()]
    return query, passages, asked


def explain_section(reranker, query: str, passage: str) -> None:
    """Integrated gradients of the relevance, then the word interactions, each behind the same button."""
    asked = st.button("Explain this passage's relevance", key="rr_explain",
                      help="Integrated gradients (50 steps) over the pair's tokens, then one pass per (query word, "
                           "passage word) pair for the interactions.")
    if asked:
        check_pieces(explain_cost(reranker, query, passage, STEPS),
                     "this explanation (a pass a step, a word and a word pair)", "shorten the query or the passage",
                     Limits.explanation_pieces)
    why = result_store("rerank_explain").compute(
        (reranker.name, query, passage),
        lambda progress: (explain_relevance(reranker, query, passage, STEPS,
                                            lambda d, t: progress(d, t, "Integrated gradients, steps")),
                          interactions(reranker, query, passage,
                                       lambda d, t: progress(d, t, "Word interactions, passes"))),
        "Explaining the relevance, passes", asked, costly="reranker explanation",
        wait="Press *Explain this passage's relevance*: integrated gradients, then a pass per word pair (seconds on "
             "bundled-reranker for a sentence).")
    if why is None:
        return
    ig, pairs = why
    st.plotly_chart(token_strip(ig.tokens, ig.scores, f"Each token's share of the relevance (integrated gradients; "
                                                      f"completeness error {ig.completeness_error:.1e})"),
                    config=PLOT_CONFIG, width="stretch", key="rr_ig")
    fig = pair_map(list(pairs.query_words), list(pairs.passage_words), pairs.pairs,
                   "Query word x passage word: how much more the two count together than apart")
    fig.update_layout(xaxis_title="passage", yaxis_title="query")
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="rr_pairs")
    figure_downloads(fig, "rerank-interactions")
    st.dataframe(pd.DataFrame(pairs.strongest(10), columns=["query word", "passage word", "interaction"]),
                 hide_index=True, width="stretch",
                 column_config={"interaction": st.column_config.NumberColumn(format="%+.4f")})
    st.caption("δ = f(x) − f(x without the query word) − f(x without the passage word) + f(x without both), each "
               "word's pieces replaced by the padding token (Tsang et al. 2020's ArchDetect, the input as context): "
               f"{pairs.passes:,} passes. Positive: the pair counts for more together than apart.")
    d1, d2 = st.columns(2)
    download("Download (JSON)", json.dumps({"ig": ig.to_json(), "interactions": pairs.to_json()}),
             "rerank-why.json", "application/json", key="rr_json", where=d1)
    frame = pd.DataFrame(pairs.pairs, index=list(pairs.query_words), columns=list(pairs.passage_words))
    download("Download the interactions (CSV)", frame.to_csv(), "rerank-interactions.csv", "text/csv", key="rr_csv",
             where=d2)


def rerank_tab() -> None:
    """Passages ordered by the reranker; one of them explained."""
    st.caption(f"A reranker (cross-encoder) reads the query and a passage as one input and gives one relevance: "
               f"{BUNDLED_RERANKER} is all-MiniLM-L6-v2 fine-tuned by BertScope on SQuAD question-paragraph pairs. "
               "Headless: `bertscope rerank bundled-reranker --query … --passages … --explain`.")
    query, passages, asked = rerank_form()
    with page_errors(stop=False):
        check_text(query, "query")
        if not passages:
            raise BertScopeError("Give at least one passage (one a line): a reranker scores a query against each.")
        if len(passages) > MAX_PASSAGES:
            raise BertScopeError(f"{len(passages):,} passages: at most {MAX_PASSAGES:,}.")
        for n, p in enumerate(passages, 1):
            check_text(p, f"passage {n}")
        reranker = cached_model(BUNDLED_RERANKER, "auto", "auto")
        if asked:
            check_pieces(sum(pair_lengths(reranker, query, passages)), "this reranking (each query-passage pair)",
                         "use fewer or shorter passages")
        hits = result_store("rerank").compute(
            (reranker.name, query, tuple(passages)), lambda progress: rerank(reranker, query, passages,
                                                                             progress=progress),
            "Reranking, passages", asked, costly="rerank",
            wait="Press *Rerank*: one pass a passage.")
        if hits is None:
            return
        st.dataframe(pd.DataFrame([h.to_json() for h in hits]).rename(columns={"score": "relevance"}),
                     hide_index=True, width="stretch", key="rr_hits",
                     column_config={"relevance": st.column_config.NumberColumn(format="%+.4f")})
        st.caption(plain(f"Relevance: {reranker.name}'s log-probability of its label "
                         f"{'relevant' if reranker.task and 'relevant' in reranker.task.labels else 'its last label'}"
                         " (a one-label cross-encoder: its logit)."))
        pick = held_choice("Why does this passage rank here?", range(len(hits)), key="rr_pick",
                           format_func=lambda i: f"{hits[i].rank}. {hits[i].text[:90]}")
        explain_section(reranker, query, hits[pick].text)
