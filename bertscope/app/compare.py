"""Two models side by side: how similar their layers are (linear CKA over the words of a corpus),
their masked-token predictions on the same text, and (Latents) what fine-tuning added, latent by latent."""

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertscope.analysis.compare import (
    HEAD_SENTENCE_TOKENS,
    MIN_MINIBATCHES,
    MINIBATCH,
    POOLS,
    compare_heads,
    compare_layers,
    same_tokenizer,
)
from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
from bertscope.analysis.probing import probe_layers
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text, demo
from bertscope.app.kit.model_picker import (
    OTHER,
    cached_model,
    model_key,
    model_options,
    obtainable,
    offer_models,
    require_model,
)
from bertscope.app.kit.pages import NEEDS
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import arrival, from_url, link_asks, link_flag, spend_links, tab_from_url, to_url
from bertscope.app.sections import model_diff_tab
from bertscope.core.layers import hidden_names, layer_title
from bertscope.corpora.brown_tasks import DEFAULT_SENTENCES, brown_task, brown_texts
from bertscope.corpora.suites import BROWN_TASKS, SHIPPED, shipped_task
from bertscope.errors import BertScopeError
from bertscope.figures.probe import layer_figure
from bertscope.figures.text import label
from bertscope.mlm.fill_mask import fill_mask
from bertscope.sources.presets import BUNDLED, BUNDLED_MLM

SIZES = [100, 250, 500, 1000, 2000]
TABS = ["Layers (CKA)", "Heads", "Predictions", "Probes", "Latents"]
HEAD_TEXTS = 100  # Brown sentences drawn for the heads tab (those over HEAD_SENTENCE_TOKENS are left out)


def max_sentences() -> int:
    return 500 if demo() else max(SIZES)


def layers_tab(lm_a, key_a, lm_b, key_b, name_b, open_: bool) -> None:
    """Linear CKA between every hidden state of A and of B over Brown words."""
    st.caption("Linear CKA (Kornblith et al. 2019) between every hidden state of A and of B over the words of Brown "
               "sentences, with the unbiased minibatch estimator of Nguyen, Raghu & Kornblith (2021): 1 = the same "
               f"representation up to rotation and scale. Rows are words ({MINIBATCH} a minibatch), each model's "
               "pieces pooled per word, so models with different tokenizers compare.")
    linked = "n" in arrival() and arrival().get("cmp_tab", TABS[0]) == TABS[0]  # a shared link compares on
    # arrival (its own request, once)
    from_url("n", "cmp_n", int, lambda v: v in SIZES and v <= max_sentences())
    from_url("pool", "cmp_pool", valid=lambda v: v in POOLS)
    with st.form("cmp_form"):
        c1, c2 = st.columns([2, 1])
        n = c1.select_slider("Brown sentences", [s for s in SIZES if s <= max_sentences()], 500, key="cmp_n",
                             help=f"Spread over the 15 genres; at least {MIN_MINIBATCHES} minibatches of {MINIBATCH} "
                                  "words are needed for a stable estimate.")
        pool = c2.radio("A word's vector", POOLS, horizontal=True, key="cmp_pool",
                        format_func=lambda p: {"mean": "mean of its pieces", "first": "first piece"}[p])
        asked = st.form_submit_button("Compare", type="primary")
    with page_errors(stop=False):
        request, result = (key_a, key_b, n, pool), None
        try:
            result = result_store("compare").compute(request, lambda progress: compare_layers(
                cached_model(*key_a), cached_model(*key_b), brown_task("brown-pos", n), pool,
                source=f"{n} Brown sentences", progress=progress), "Both models over the sentences, sentences",
                asked or link_asks("compare", linked, request), costly="model comparison",
                wait="Press *Compare*: both models read the sentences once (the bar times the first batches and "
                     "says how long the rest will take).")
        finally:  # n joins the address with the result on screen (this tab open): the link's flag, so a reload of
            # an empty page runs nothing, and a link copied on another tab does not run the comparison
            to_url(pool=pool, n=n if result is not None and open_ else None)
        if result is not None:
            rows, columns = hidden_names(result.cka.shape[0] - 1), hidden_names(result.cka.shape[1] - 1)
            fig = go.Figure(go.Heatmap(z=result.cka, x=columns, y=rows, zmin=0, zmax=1, colorscale="Viridis",
                                       colorbar=dict(title="CKA"), texttemplate="%{z:.2f}" if result.cka.size <= 400
                                       else None, hovertemplate=f"{label(lm_a.name)} %{{y}} · {label(lm_b.name)} "
                                                                "%{x}: CKA %{z:.3f}<extra></extra>"))
            fig.update_layout(title=f"Linear CKA: {result.n_words:,} words of {result.n_sentences:,} sentences, "
                                    f"{result.minibatches} minibatches, " + {"mean": "the mean of each word's pieces",
                                                                         "first": "each word's first piece"}[result.pool],
                              xaxis_title=f"{label(lm_b.name)} (B): hidden state",
                              yaxis_title=f"{label(lm_a.name)} (A): hidden state",
                              yaxis=dict(autorange="reversed", type="category"), xaxis=dict(type="category"),
                              height=max(380, 40 * len(rows) + 160))
            st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="cmp_heatmap")
            figure_downloads(fig, "cka")
            if result.cka.shape[0] == result.cka.shape[1]:
                diagonal = np.diag(result.cka)
                lowest = int(np.argmin(diagonal))
                st.caption(plain(f"Same depth: CKA {diagonal.min():.3f} to {diagonal.max():.3f} along the diagonal; "
                                 f"the two differ most at {layer_title(lowest)} ({diagonal[lowest]:.3f})."))
            download("Download (JSON)", json.dumps(result.to_json()), "cka.json", "application/json",
                     key="cmp_json")


def heads_tab(lm_a, key_a, lm_b, key_b, name_b, open_: bool) -> None:
    """Head statistics of A and B side by side, and their differences."""
    st.caption(f"Every head of A against every head of B: the Jensen–Shannon divergence of their attention rows "
               f"(0 = the same distribution over keys, ln 2 ≈ 0.693 = disjoint), averaged over every query token of "
               f"the first {HEAD_TEXTS} Brown sentences (spread over the genres) that have at most "
               f"{HEAD_SENTENCE_TOKENS} tokens; longer ones are left out. Rows are compared token by token, so both "
               "models must share a tokenizer.")
    if open_:
        linked = arrival().get("cmp_tab") == TABS[1] and arrival().get("heads") == "1"
        from_link = link_asks("compare_heads", linked, (key_a, key_b))  # on arrival
        heads_asked = st.button("Compare heads", type="primary", key="cmp_heads_run") or from_link
        with page_errors(stop=False):
            heads = None
            try:
                texts = brown_texts(HEAD_TEXTS)
                if not same_tokenizer(lm_a, lm_b, texts):
                    st.info(plain(f"{lm_a.name} and {lm_b.name} cut text into different tokens: heads compare only "
                                  "within one tokenizer (the Layers tab compares any two models by words)."))
                else:
                    heads = result_store("compare_heads").compute(
                        (key_a, key_b), lambda progress: compare_heads(cached_model(*key_a), cached_model(*key_b),
                                                                       texts, progress=progress), "Heads, sentences",
                        heads_asked, costly="head comparison",
                        wait=f"Press *Compare heads*: both models read {HEAD_TEXTS} sentences with every attention "
                             "map.")
            finally:  # the link's flag only with a result on screen
                link_flag("heads", heads is not None and result_store("compare_heads").showing((key_a, key_b)),
                          ("cmp_tab", TABS[1]))
            if heads is not None:
                same = heads.same_head
                if same is not None:
                    fig = go.Figure(go.Heatmap(z=same, x=list(range(same.shape[1])), y=list(range(same.shape[0])),
                                               colorscale="Viridis", zmin=0, colorbar=dict(title="JS"),
                                               hovertemplate="layer %{y}, head %{x}: JS %{z:.4f}<extra></extra>"))
                    fig.update_layout(title=f"How far each head of {label(lm_a.name)} moved from the same head of "
                                            f"{label(lm_b.name)} (JS, {heads.n_sentences} sentences)",
                                      xaxis_title="head", yaxis_title="layer", height=max(320, 34 * same.shape[0] + 150),
                                      yaxis=dict(autorange="reversed", dtick=1), xaxis=dict(dtick=1))
                    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="cmp_heads_map")
                    figure_downloads(fig, "head-divergence")
                matches = pd.DataFrame(heads.best_match())
                moved = matches[(matches["layer"] != matches["b_layer"]) | (matches["head"] != matches["b_head"])]
                st.caption(plain(f"{len(matches) - len(moved)} of {len(matches)} heads of A are closest to the same "
                                 "head of B; the others, with the head of B they resemble most:"))
                names = {"layer": "A layer", "head": "A head", "b_layer": "closest B layer", "b_head": "closest B head",
                         "js": "JS"}
                st.dataframe((moved if len(moved) else matches).rename(columns=names), hide_index=True, width="stretch",
                             column_config={"JS": st.column_config.NumberColumn(format="%.4f")})
                download("Download (JSON)", json.dumps(heads.to_json()), "heads.json", "application/json",
                         key="cmp_heads_json")
    else:
        link_flag("heads", False, ("cmp_tab", TABS[1]))


def predictions_tab(lm_a, key_a, lm_b, key_b, name_b) -> None:
    """Both models' masked-token predictions on the same text."""
    st.caption("Fill-mask on both models, one text: each of A's top tokens with its rank in B.")
    if "mlm" not in lm_a.outputs:
        st.warning(plain(f"{lm_a.name} (A, the sidebar's) has no {NEEDS['masked-lm'].what}: predictions need one."))
        offer_models(NEEDS["masked-lm"].offer, "cmp_switch")
    else:
        b_head = "mlm" in lm_b.outputs
        if not b_head:
            st.info(plain(f"{lm_b.name} (B) has no masked-LM head, so below are A's predictions alone. To set two "
                          "side by side, pick as B a model with one: a Pretraining run's output folder (typed above), "
                          "or any BERT-family pretraining checkpoint you have."))
        from_url("text", "cmp_text")
        with st.form("cmp_fill_form"):
            text = st.text_area("Text with [MASK]", "He deposited the money in the [MASK].", key="cmp_text",
                                max_chars=Limits.input_chars)
            st.form_submit_button("Run", type="primary")
        to_url(text=text)
        with page_errors(stop=False):
            check_text(text)
            fills = [result_store("fill").get_or_compute((k, text, 50), lambda k=k: fill_mask(cached_model(*k), text, 50))
                     for k in ((key_a, key_b) if b_head else (key_a,))]
            for n_mask, preds_a in enumerate(fills[0].predictions):
                preds_b = fills[1].predictions[n_mask] if b_head else []
                rank_b = {p.token.strip(): (i + 1, p.score) for i, p in enumerate(preds_b)}
                rows = []
                for i, p in enumerate(preds_a[:10]):
                    other = rank_b.get(p.token.strip())
                    row = {"A rank": i + 1, "token": p.token.strip(), "p in A": p.score}
                    if b_head:
                        row.update({"rank in B": other[0] if other else None, "p in B": other[1] if other else None,
                                    "rank change": (other[0] - (i + 1)) if other else None})
                    rows.append(row)
                st.markdown(f"**Mask {n_mask + 1}** (token {fills[0].mask_positions[n_mask]})")
                st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
                    "p in A": st.column_config.NumberColumn(format="%.3f"),
                    "p in B": st.column_config.NumberColumn(format="%.3f"),
                    "rank in B": st.column_config.NumberColumn(help="empty: not in B's top 50")})
                if b_head:
                    top_b = ", ".join(f"{p.token.strip()} {p.score:.2f}" for p in preds_b[:5])
                    st.caption(plain(f"B's own top 5: {top_b}"))


def probes_tab(lm_a, key_a, lm_b, key_b, name_b, open_: bool) -> None:
    """The same probe task on both models, layer by layer."""
    st.caption("The same linear probe (and its control task, Hewitt & Liang 2019) trained at every layer of both "
               "models on the same suite and the same split by document: where each model holds the information. "
               "Hidden states come from the on-disk cache the Probes page uses.")
    if open_:  # reading a Brown suite takes a moment: only when looked at
        with st.form("cmp_probe_form"):
            suite = held_choice("Suite", [*SHIPPED, *BROWN_TASKS], "cmp_suite", BROWN_TASKS[0],
                                help="Brown suites use the Probes page's sample (split by document).")
            probe_asked = st.form_submit_button("Probe both", type="primary")
        with page_errors(stop=False):
            task = shipped_task(suite, size=min(DEFAULT_SENTENCES, Limits.corpus_lines) if suite in BROWN_TASKS else None)
            pooling = "mean"
            results = []
            for which, k in (("A", key_a), ("B", key_b)):
                request = (k, task.digest(), pooling)
                store = result_store(f"compare_probes_{which}")  # one Stop button a model
                found = store.get(request)
                if found is None and probe_asked:
                    found = store.compute(request, lambda progress, k=k: probe_layers(
                        hidden_states(cached_model(*k), task, pooling, HiddenStateCache(), progress=progress), task.name,
                        pooling, progress=lambda d, t: progress(d, t, "Probes (task, then control, per layer), fits")), f"Model {which}: hidden states, "
                        "word pieces", asked=True, costly="probe run")
                if found is not None:
                    results.append(found)
            if len(results) == 2:
                fig = layer_figure(results)
                st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="cmp_probe_chart")
                figure_downloads(fig, f"probes-{suite}")
                best = [max(r.layers, key=lambda x: x.accuracy) for r in results]
                st.caption(plain(f"Best layer: {label(lm_a.name)} {best[0].name} ({best[0].accuracy:.1%}, selectivity "
                                 f"{best[0].selectivity:+.2f}); {label(lm_b.name)} {best[1].name} ({best[1].accuracy:.1%}, "
                                 f"selectivity {best[1].selectivity:+.2f}); {results[0].n_test:,} test items."))
            else:
                st.info("Pick a suite and press *Probe both* (each model's hidden states are extracted once and cached "
                        "on disk; the bar says how long each phase has left).")


def latents_tab(lm_a, key_a, lm_b, key_b, name_b) -> None:
    """What fine-tuning added, latent by latent (the shipped crosscoder)."""
    model_diff_tab.render(lm_a, key_a, lm_b, key_b)


def _b_from_url(options: list[str]) -> None:
    """A link's ?b= (once per session, for both of B's widgets: a b the page wrote itself is never read back as a
    link's): a preset's name sets the preset picker, anything else the typed field, which the hosted demo has not:
    there a name that is no preset is ignored with the usual notice, and the link's requests with it (they named
    another B)."""
    restored = st.session_state.setdefault("_from_url", set())
    if {"cmp_b", "cmp_b_preset"} & restored:
        return
    raw = st.query_params.get("b")
    if demo() or raw in options:
        from_url("b", "cmp_b_preset", valid=lambda v: v in options)
        if raw is not None and raw not in options:
            spend_links()
    else:
        from_url("b", "cmp_b")
    restored.update({"cmp_b", "cmp_b_preset"})


def _model_b(key_b: tuple, typed: bool):
    """Model B loaded, or None with one line. B that cannot be had (a busy demo's refusal too) leaves no tab's flag in
    the address for a link to run, and spends the link's requests: they never run later on another B."""
    name_b, lm_b = key_b[0], None
    with page_errors(stop=False):
        if not typed and not obtainable(name_b):
            raise BertScopeError(f"{name_b} cannot be had here (not cached, hub unreachable): pick a bundled model.")
        with st.spinner(f"Loading {name_b}…"):
            lm_b = cached_model(*key_b)
    if lm_b is None:
        spend_links()
        link_flag("heads", False, ("cmp_tab", TABS[1]), n=None)  # with the CKA's flag, in one write
    return lm_b


def page() -> None:
    st.title("Compare")  # the sidebar's name (kit.pages)
    st.subheader("Two models side by side, layer by layer and head by head.")
    lm_a = require_model()
    key_a = model_key()
    st.caption("Model A is the sidebar's; pick model B here. Hidden states are named as everywhere: the embeddings, "
               "then layer 0, 1, … (each block's output).")

    options = [m for m in model_options() if m != OTHER]
    default_b = BUNDLED if lm_a.name != BUNDLED else BUNDLED_MLM
    _b_from_url(options)
    choice = held_choice("Model B (a preset, or type a hub id or folder below)", options, "cmp_b_preset", default_b)
    typed = "" if demo() else st.text_input("…or a hub id / local folder for B (e.g. a Pretraining run's output)",
                                            key="cmp_b", max_chars=Limits.name_chars)
    name_b = typed.strip() or choice
    key_b = (name_b, key_a[1], key_a[2])
    to_url(b=name_b if name_b != default_b else None)  # a preset too: a link compares the same pair
    lm_b = _model_b(key_b, typed=bool(typed.strip()))
    if lm_b is None:
        return
    tab_from_url("cmp_tab", TABS)
    tab_layers, tab_heads, tab_predictions, tab_probes, tab_latents = st.tabs(TABS, key="cmp_tab", on_change="rerun")
    with tab_layers:
        layers_tab(lm_a, key_a, lm_b, key_b, name_b, tab_layers.open)
    with tab_heads:
        heads_tab(lm_a, key_a, lm_b, key_b, name_b, tab_heads.open)
    with tab_predictions:
        predictions_tab(lm_a, key_a, lm_b, key_b, name_b)
    with tab_probes:
        probes_tab(lm_a, key_a, lm_b, key_b, name_b, tab_probes.open)
    with tab_latents:
        latents_tab(lm_a, key_a, lm_b, key_b, name_b)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
