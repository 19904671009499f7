"""Attention: one input through bertviz and our plotly views; head statistics over a corpus."""

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.attention_stats import STATISTICS, head_stats
from bertscope.analysis.query_key import query_key
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, offer_install, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import cached_inspection, result_store
from bertscope.app.kit.uploads import uploaded_text
from bertscope.app.kit.url import from_url, tab_from_url, to_bool, to_url
from bertscope.attribution.explain import agreement, rows_at
from bertscope.attribution.methods import token_matrices
from bertscope.attribution.registry import METHODS, matrix_methods
from bertscope.corpora.brown_tasks import brown_texts
from bertscope.corpora.sentences import read_corpus, shipped_corpus
from bertscope.figures.attention import (
    attention_row,
    bertviz_bytes,
    bertviz_fit,
    bertviz_html,
    head_heatmap,
    layer_grid,
    query_key_figure,
    stats_heatmap,
    token_across_layers,
)
from bertscope.figures.attribution import matrices_side_by_side
from bertscope.figures.bertviz_assets import URL_PATH as BERTVIZ_URL
from bertscope.figures.bertviz_assets import installed as bertviz_assets_installed
from bertscope.runtime.families import sliding_window
from bertscope.sources.hub import hub_reachable

BROWN_HEAD_STATS_SENTENCES = 500
BROWN_SAMPLE = "Brown corpus (all 15 genres)"
DEFAULT_TEXT = "The animal didn't cross the street because it was too tired."


def apply_clicked_head() -> None:
    """A click on the statistics heatmap picks that layer and head (once per click)."""
    event = st.session_state.get("att_stats_chart")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    if not points:
        return
    point = points[0]
    clicked = (int(point["y"]), int(point["x"]))
    if clicked != st.session_state.get("att_applied_click"):
        st.session_state["att_applied_click"] = clicked
        st.session_state["att_layer"], st.session_state["att_head"] = clicked
QK_MAX_KEYS = 64  # keys drawn at once: a 512-token input lists its top ones, any other on request
TABS = ["Head", "All heads of the layer", "Token across layers", "Beyond raw attention",
        "bertviz head view", "bertviz model view", "Head statistics", "Query and key"]


@dataclass(frozen=True)
class View:
    """The head every tab shows, picked above the tabs."""

    layer: int
    head: int
    hide: bool  # special tokens dropped from rows and columns
    renorm: bool  # rows rescaled to sum to 1 after hiding


def inputs(lm, key):
    """(segment A, segment B, the inspection with every layer's attentions) from the form."""
    from_url("text", "att_text")
    from_url("pair", "att_pair")
    with st.form("att_input"):
        text = st.text_area("Sentence (segment A)", DEFAULT_TEXT, key="att_text", height=80, max_chars=Limits.input_chars)
        pair = st.text_input("Segment B (optional, for a sentence pair)", key="att_pair", max_chars=Limits.input_chars)
        st.form_submit_button("Run", type="primary")

    with page_errors():
        check_text(text)
        check_text(pair, "second text")
        with st.spinner("Running the model (attentions of every layer and head)…"):
            r = cached_inspection(lm, key, text, pair if pair.strip() else None)
    for warning in r.warnings:
        st.warning(warning)
    st.caption(plain(f"{r.n_tokens} tokens · {r.n_layers} layers × {r.n_heads} heads · {lm.name}"))
    return text, pair, r


def head_picker(lm, r, text, pair) -> View:
    """The layer, head and display switches every tab reads (and the link that restores them)."""
    from_url("layer", "att_layer", int, lambda v: 0 <= v < r.n_layers)
    from_url("head", "att_head", int, lambda v: 0 <= v < r.n_heads)
    from_url("hide", "att_hide", to_bool)
    from_url("renorm", "att_renorm", to_bool)
    c1, c2, c3, c4 = st.columns(4)
    layer = held_choice("Layer", range(r.n_layers), key="att_layer", container=c1)
    head = held_choice("Head", range(r.n_heads), key="att_head", container=c2)
    hide = c3.toggle("Hide [CLS]/[SEP]", key="att_hide", help="Drop special tokens from rows and columns.")
    renorm = c4.toggle("Renormalise rows", key="att_renorm", disabled=not hide,
                       help="After hiding, rescale each row to sum to 1.")
    renorm = renorm and hide
    to_url(text=text if text != DEFAULT_TEXT else None, pair=pair or None, layer=layer, head=head,
           hide=hide or None, renorm=renorm or None)
    window = sliding_window(lm.config, layer)
    if window is not None:  # ModernBERT's local layers: the zeros beyond the window are the design, not a finding
        local = [i for i in range(r.n_layers) if sliding_window(lm.config, i) is not None]
        st.info(f"Layer {layer} attends through a sliding window: each token sees at most {window} tokens on each side "
                f"(weights beyond are zero by construction). Local layers: {', '.join(map(str, local))}; the others "
                "attend globally.")
    return View(layer, head, hide, renorm)


def first_query(r, shown: list[int]) -> int:
    """The token a view opens on: "it" when the sentence has one (the home page's question: which heads
    resolve *it*?), else the first token after [CLS]."""
    words = [r.tokens[i].lstrip("Ġ▁").lower() for i in shown]
    return shown[words.index("it")] if "it" in words else shown[min(1, len(shown) - 1)]


def head_tab(r, v: View) -> None:
    """One head's weights as a heatmap, and one query's exact row."""
    layer, head, hide, renorm = v.layer, v.head, v.hide, v.renorm
    with st.spinner("Drawing the head…"):
        fig = head_heatmap(r, layer, head, hide, renorm)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch")
    figure_downloads(fig, f"attention-L{layer}-H{head}")
    shown = [i for i in range(r.n_tokens) if not (hide and r.special_mask[i])]
    q1, q2 = st.columns([3, 1])
    query = held_choice("Exact weights for the query token", shown, "att_query", first_query(r, shown), container=q1,
                        format_func=lambda i: f"{i}: {r.tokens[i]}")
    top = q2.number_input("Top keys", 1, len(shown), min(10, len(shown)), key="att_query_top")
    rows = attention_row(r, layer, head, query, int(top), hide, renorm)
    st.dataframe(pd.DataFrame(rows).style.format({"weight": "{:.4f}"}), hide_index=True, width="stretch")
    st.caption("The heatmap's hover reads weights to 3 decimals (sent as integers: a long "
               "input stays small); this table gives them as computed.")


def layer_tab(r, v: View) -> None:
    """Every head of the layer."""
    layer, hide, renorm = v.layer, v.hide, v.renorm
    with st.spinner(f"Drawing all {r.n_heads} heads…"):
        fig = layer_grid(r, layer, hide, renorm)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch")
    figure_downloads(fig, f"attention-L{layer}-all-heads")


def token_tab(r, v: View) -> None:
    """One token's attention across the layers."""
    hide, renorm = v.hide, v.renorm
    choices = [i for i in range(r.n_tokens) if not (hide and r.special_mask[i])]
    t1, t2 = st.columns(2)
    position = held_choice("Token", choices, "att_token", first_query(r, choices), container=t1,
                           format_func=lambda i: f"{i}: {r.tokens[i]}")
    which = held_choice("Head", ["mean over heads", *range(r.n_heads)], key="att_token_head", container=t2)
    with st.spinner("Drawing…"):
        fig = token_across_layers(r, position, None if isinstance(which, str) else which, hide, renorm)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch")
    figure_downloads(fig, f"attention-token-{position}")



def methods_tab(lm, key, text, pair, r, v: View) -> None:
    """Beyond raw attention: rollout, flow, norms, ALTI, Value Zeroing beside the weights, and their agreement."""
    layer = v.layer
    st.caption("Raw weights ignore what a head moves and the residual stream. Beside them: rollout and "
               "flow (Abnar & Zuidema 2020; heads averaged, residual as 0.5·A + 0.5·I), the size of what "
               "is moved, ‖Σ α f(x)‖ (Kobayashi et al. 2020, this layer alone), and ALTI (Ferrando et al. "
               "2022; attention, residual and LayerNorm, composed through the layers) and Value Zeroing "
               "(Mohebbi et al. 2023; each layer re-run with one token's values zeroed, composed), each as "
               f"the state after the layer picked above, layer {layer}. Which of them to trust on this model: "
               "the Faithfulness page.")
    offered = matrix_methods(lm)  # the registry's, those that apply to this model
    methods = st.multiselect("Methods", offered, [m for m in ("attention", "rollout", "alti") if m in offered],
                             key="att_methods", format_func=lambda m: METHODS[m].title)
    if len(offered) < len(matrix_methods()):
        st.caption(f"Not offered for {plain(lm.name)}: "
                   + ", ".join(METHODS[m].title for m in matrix_methods() if m not in offered)
                   + " (they read BERT's post-LayerNorm blocks, whose scores are q·k alone).")
    with page_errors(stop=False):
        store = result_store("attribution")
        matrices = {}
        for name in methods:
            record = METHODS[name]
            one_layer = [layer] if record.on_request else None  # costly: one layer, when asked

            def compute(progress=None, m=name, layers=one_layer):  # the library picks the pass
                return token_matrices(lm, text, pair or None, m, layers, progress, template=r)

            request = (key, text, pair or None, name, *(one_layer or ()))
            if record.on_request:
                found = store.get(request)
                if found is None and record.max_tokens is not None and r.n_tokens > record.max_tokens:
                    st.warning(f"{record.title.capitalize()} is capped at {record.max_tokens} tokens (this input "
                               f"has {r.n_tokens}): rollout approximates it.")
                elif found is None and st.button(f"Compute {name} after layer {layer} (seconds to a minute)",
                                                 key=f"att_{name}_go"):
                    store.compute(request, compute,
                                  f"{record.title.capitalize()}, " + ("rows" if record.from_attentions else "layers"),
                                  asked=True, costly=f"{record.title} computation")
                    st.rerun()  # redraw without the button
                if found is not None:
                    matrices[name] = found
            else:
                with st.spinner(f"Computing {record.title}…"):
                    matrices[name] = store.get_or_compute(request, compute)
        if matrices:
            fig = matrices_side_by_side(r.tokens, {m: v.at(layer) for m, v in matrices.items()}, layer)
            st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="att_methods_chart")
            figure_downloads(fig, f"attribution-L{layer}")
            one_layer = [METHODS[m].title for m in matrices if METHODS[m].on_request]
            if one_layer and len(matrices) > 1:
                st.caption(f"{', '.join(one_layer).capitalize()}: computed for one layer at a time, so the "
                           f"agreement table and export use layer {layer}.")
            if len(matrices) >= 2 and r.n_tokens >= 3:
                query = held_choice("Agreement for token", range(r.n_tokens), "att_agree_token",
                                    min(1, r.n_tokens - 1), format_func=lambda i: f"{i}: {r.tokens[i]}")
                names, rho = agreement(rows_at(matrices, layer, query))
                st.dataframe(pd.DataFrame(rho, index=names, columns=names).style.format("{:+.2f}")
                             .background_gradient(cmap="RdBu", vmin=-1, vmax=1), width="stretch")
                st.caption("Spearman rank correlation between the methods' rows for that token (over all "
                           "tokens it draws from).")
            export = {m: v.to_json(4) for m, v in matrices.items()}  # flow: its computed layer only
            download("Download matrices (JSON, every layer)", json.dumps(export),
                     "attribution-matrices.json", "application/json", key="att_dl_attr")
        else:
            st.info("Choose one or more methods.")



def bertviz_tab(r, view: str) -> None:
    """bertviz's head or model view, within the page's byte cap."""
    local = bertviz_assets_installed()
    st.caption("bertviz (Vig 2019) needs require.js, d3 and jQuery: "
               + ("this app serves them itself (no network needed). " if local else
                  "this install has no local copies (`make run` fetches them from npm), so they come from "
                  "cdnjs.cloudflare.com, and without network the frame says so. ")
               + "Its page holds every weight as text, so long inputs need a subset of layers"
               f"{' and heads' if view == 'model' else ''}.")
    cap = Limits.bertviz_bytes
    fit_layers, fit_heads = bertviz_fit(r, view, cap)
    b1, b2 = st.columns(2)
    layers = b1.multiselect("Layers", list(range(r.n_layers)), default=fit_layers or [0],
                            key=f"att_bv_layers_{view}")
    heads = None
    if view == "model":
        heads = b2.multiselect("Heads", list(range(r.n_heads)), default=fit_heads or [0],
                               key=f"att_bv_heads_{view}")
    size = bertviz_bytes(r, view, layers, heads)
    st.caption(f"About {size / 2**20:.1f} MB for {len(layers or range(r.n_layers))} layer(s) at "
               f"{r.n_tokens} tokens; the cap is {cap / 2**20:.0f} MB.")
    if not local and not hub_reachable():  # nothing could load: say so instead of a blank frame
        st.warning("bertviz's scripts are not installed here and the network is out of reach: run "
                   "`bertscope assets install` (it needs npm), or the button below; the other tabs work "
                   "without them.")
        offer_install("bertviz")
        return
    try:
        with st.spinner("Building bertviz's page…"):
            page = bertviz_html(r, view, cap, layers=layers or None, heads=heads or None,
                                assets=BERTVIZ_URL if local else None)
    except BertScopeError as err:
        st.warning(plain(str(err)))
        return
    st.iframe(page, height=900 if view == "model" else 640)
    download("Download HTML", page, f"bertviz-{view}-view.html", "text/html",
             key=f"att_dl_{view}")



def stats_tab(lm, key, v: View) -> None:
    """Clark et al.'s head statistics over a corpus; a click picks the head for the other tabs."""
    layer, head = v.layer, v.head
    st.caption("Clark et al. (2019), *What Does BERT Look At?*: averages over the query tokens of "
               "each sentence, then over sentences; word pieces count as tokens; padding never counts.")
    # outside the form, so the form shows only what the picked corpus needs
    source = st.radio("Corpus", ["Shipped sample (218 sentences)", BROWN_SAMPLE, "Paste", "Upload (.txt)"],
                      horizontal=True, key="att_corpus_source")
    brown_size, pasted, uploaded = BROWN_HEAD_STATS_SENTENCES, "", None
    with st.form("att_stats_form"):
        if source == BROWN_SAMPLE:
            brown_size = st.number_input("Brown sentences (spread over all 500 documents, so every genre in "
                                         "proportion)", 50, Limits.corpus_lines,
                                         min(BROWN_HEAD_STATS_SENTENCES, Limits.corpus_lines), 50,
                                         key="att_brown_size")
        elif source == "Paste":
            pasted = st.text_area(f"One sentence per line (up to {Limits.corpus_lines:,})", key="att_corpus_text",
                                  height=120,
                                  max_chars=Limits.corpus_chars)
        elif source == "Upload (.txt)":
            uploaded = st.file_uploader("A .txt file, one sentence per line", type=["txt"],
                                        key="att_corpus_file", max_upload_size=Limits.upload_mb)
        run = st.form_submit_button("Compute head statistics", type="primary")
    if run:
        with page_errors(stop=False):
            if source.startswith("Shipped"):
                sentences = shipped_corpus()
            elif source == BROWN_SAMPLE:
                sentences = brown_texts(int(brown_size))
            elif source == "Paste":
                sentences = read_corpus(pasted)
            else:
                if uploaded is None:
                    raise BertScopeError("Choose a .txt file to upload first.")
                sentences = read_corpus(uploaded_text(uploaded))
            if len(sentences) > Limits.corpus_lines:
                raise BertScopeError(f"The corpus has {len(sentences):,} lines; the page takes up to "
                                     f"{Limits.corpus_lines:,} (use `python -m bertscope head-stats` for more).")
            digest = hashlib.sha256("\n".join(sentences).encode()).hexdigest()
            st.session_state["att_stats_request"] = (key, digest, tuple(sentences))
    request = st.session_state.get("att_stats_request")
    if request and request[0] == key:
        with page_errors():
            store = result_store("head_stats")
            stats = store.compute(request[:2], lambda progress: head_stats(lm, request[2],
                                                                          progress=progress),
                                  "Running the corpus through the model, sentences", asked=run,
                                  costly="head-statistics run")
        st.caption(f"{stats.sentences} sentences, {stats.tokens:,} tokens.")
        name = held_choice("Statistic", list(STATISTICS), format_func=STATISTICS.get, key="att_stat")
        fig = stats_heatmap(stats, name, selected=(layer, head))
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="att_stats_chart",
                        on_select="rerun", selection_mode="points")
        st.caption("Click a cell to show that head in the other tabs.")
        table = pd.DataFrame(stats.rows())
        order = st.toggle("Lowest first", key="att_stat_ascending")
        st.dataframe(table.sort_values(name, ascending=order), hide_index=True, width="stretch")
        download("Download statistics (CSV)", table.to_csv(index=False), "head-statistics.csv",
                 "text/csv", key="att_dl_csv")
    else:
        st.info("Choose a corpus and press *Compute head statistics*.")



def query_key_tab(lm, key, text, pair, r, v: View) -> None:
    """bertviz's neuron view: q, each q ⊙ k, the scores and their softmax for one query."""
    layer, head = v.layer, v.head
    st.caption("bertviz's neuron view, for every family: for the layer and head picked above and one query "
               "token, the query vector q, each key's elementwise product q ⊙ k (one cell per dimension: which "
               "dimensions make the score; blue adds to it, red subtracts), the score q·k/√d and its softmax, which "
               "is the head's attention row. Read with hooks on the model's own query and key projections.")
    choices = list(range(r.n_tokens))
    k1, k2, k3 = st.columns([2, 1, 2])
    from_url("q", "att_qk_query", int, lambda v: 0 <= v < r.n_tokens)
    query = held_choice("Query token", choices, "att_qk_query", choices[min(1, r.n_tokens - 1)], container=k1,
                        format_func=lambda i: f"{i}: {r.tokens[i]}")
    top = k2.number_input("Top keys", 1, min(QK_MAX_KEYS, r.n_tokens), min(12, r.n_tokens), key="att_qk_top")
    extra = k3.multiselect("…and these keys", choices, key="att_qk_keys",
                           format_func=lambda i: f"{i}: {r.tokens[i]}")
    to_url(q=query)
    with page_errors(stop=False):
        qk = result_store("query_key").get_or_compute(
            (key, text, pair or None, layer, head, query),
            lambda: query_key(lm, text, layer, head, query, pair or None))
        order = [int(j) for j in np.argsort(-qk.weights)[: int(top)]]
        shown = order + [j for j in extra if j not in order]
        fig = query_key_figure(qk, shown)
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="att_qk_chart")
        figure_downloads(fig, f"query-key-L{layer}-H{head}-Q{query}")
        gap = float(np.abs(qk.weights - r.attentions[layer, head, query]).max())
        st.caption(plain(f"The softmax of these scores is the model's own attention row to {gap:.1e} (largest "
                         f"difference over the {r.n_tokens} keys; the page keeps weights in float16). Keys "
                         f"listed: the {len(order)} the query attends to most"
                         + (f", and {len(shown) - len(order)} picked" if len(shown) > len(order) else "") + "."))
        download("Download (JSON: q, every k, q ⊙ k, scores, weights)", json.dumps(qk.to_json()),
                 f"query-key-L{layer}-H{head}-Q{query}.json", "application/json", key="att_qk_json")


def page() -> None:
    st.title("Attention")
    lm = require_model()
    key = model_key()
    apply_clicked_head()
    text, pair, r = inputs(lm, key)
    v = head_picker(lm, r, text, pair)
    # Only the open tab runs (and its name is in the link): bertviz's documents are megabytes each.
    tab_from_url("att_tab", TABS)
    (head_view, layer_view, token_view, methods_view, bertviz_head, bertviz_model, stats_view,
     qk_view) = st.tabs(TABS, key="att_tab", bind="query-params")
    with page_errors(stop=False):
        for tab, draw in ((head_view, lambda: head_tab(r, v)), (layer_view, lambda: layer_tab(r, v)),
                          (token_view, lambda: token_tab(r, v))):
            with tab:
                if tab.open:
                    draw()
    for tab, draw in ((methods_view, lambda: methods_tab(lm, key, text, pair, r, v)),
                      (bertviz_head, lambda: bertviz_tab(r, "head")), (bertviz_model, lambda: bertviz_tab(r, "model")),
                      (stats_view, lambda: stats_tab(lm, key, v)),
                      (qk_view, lambda: query_key_tab(lm, key, text, pair, r, v))):
        with tab:
            if tab.open:
                draw()


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
