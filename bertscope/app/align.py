"""Cross-lingual alignment: translations in one space, retrieval per layer, mean-centring."""

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.align import (
    PROPOSED_MODEL,
    cached_vectors,
    centre,
    embed_parallel,
    retrieval,
    token_alignment,
    token_link_accuracy,
    tokenizer_coverage,
)
from bertscope.analysis.hidden_cache import count_pieces
from bertscope.analysis.projection import project, umap_is_warm
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_pieces, check_texts, demo
from bertscope.app.kit.model_picker import cached_model, model_key, obtainable, require_model
from bertscope.app.kit.results import result_store, warm_umap_in_background
from bertscope.app.kit.uploads import uploaded_text
from bertscope.app.kit.url import arrival, from_url, from_url_layer, layer_in_url, link_asks, to_url
from bertscope.app.sections.udhr_view import udhr_view
from bertscope.core.layers import hidden_name, layer_title
from bertscope.corpora.parallel import CARRIERS, language_name, read_parallel_tsv, shipped_parallel
from bertscope.figures.align import alignment_heatmap, projection_map, retrieval_by_layer, retrieval_heatmap
from bertscope.sources.presets import BUNDLED, BUNDLED_MLM
from bertscope.sources.presets import BUNDLED_MULTILINGUAL as MULTILINGUAL

KINDS = {"sentences": "Sentences (105 meanings)", "words": "Words (209 concepts)",
         "udhr": "The UDHR (hundreds of languages)"}


@dataclass(frozen=True)
class Aligned:
    """What the page computed for the data chosen: the items and languages picked, how each text became a vector,
    the vectors at every hidden state, the retrieval scores, and the key they are stored under."""

    kind: str
    data: object  # the parallel data (shipped or uploaded)
    picked: object  # the languages chosen of it
    pooling: str
    context: str
    av: object  # the vectors: [language, item, state, dim]
    scores: object  # P@1 per layer, raw and centred
    computed_key: tuple


def encoder():
    """(the encoder this page runs, its cache key, the model): the sidebar's, or a multilingual one that can be had."""
    require_model()  # the sidebar's model: loaded, or its error shown
    sidebar_key = model_key()

    # The encoder for this page: the sidebar's, or a multilingual one that can be had right now.
    choices = list(dict.fromkeys([sidebar_key[0], *(m for m in (PROPOSED_MODEL, MULTILINGUAL) if obtainable(m))]))
    from_url("enc", "align_model", str, lambda v: v in choices)
    if st.session_state.get("align_model") not in choices:
        st.session_state["align_model"] = MULTILINGUAL if sidebar_key[0] in (BUNDLED, BUNDLED_MLM) and MULTILINGUAL in choices \
            else sidebar_key[0]
    page_model = st.radio("Encoder for this page", choices, horizontal=True, key="align_model",
                          format_func=lambda m: f"{m} (sidebar)" if m == sidebar_key[0] else m,
                          help=f"{PROPOSED_MODEL} (mBERT) is the reference; {MULTILINGUAL} is multilingual-e5-small, "
                               "shipped offline as 4-bit weights.")
    key = (page_model, *sidebar_key[1:])
    to_url(enc=page_model if page_model != sidebar_key[0] else None)
    if page_model != PROPOSED_MODEL:
        if PROPOSED_MODEL in choices:
            st.info(plain(f"Made for {PROPOSED_MODEL} (mBERT, 104 languages): pick it above to compare."))
        else:
            honest = ("multilingual-e5-small, shipped offline as a 4-bit round trip" if page_model == MULTILINGUAL
                      else "on an English-only model, weak alignment is the honest result and is shown as such")
            st.info(plain(f"Made for {PROPOSED_MODEL} (mBERT), which cannot be had here (no hub, no local copy): "
                          f"running on {page_model} ({honest})."))
    with page_errors():
        with st.spinner(f"Loading {page_model} (bundled-multilingual is converted once, on first use)…"):
            lm = cached_model(*key)
    return page_model, key, lm


def data_choice(lm, key):
    """(the kind of data, the data or None when the UDHR view drew itself instead)."""
    from_url("data", "align_kind", str, lambda v: v in KINDS)
    k1, k2 = st.columns([1, 2])
    kind = k1.radio("Data", list(KINDS), format_func=KINDS.get, key="align_kind")
    if kind == "udhr":  # its own view: every version against English
        to_url(data=kind)
        udhr_view(lm, key)
        return kind, None
    uploaded = k2.file_uploader("Or upload a TSV (header: language codes, one column each)", type=["tsv", "txt"],
                                key=f"align_upload_{kind}", max_upload_size=Limits.upload_mb)
    with page_errors():
        if uploaded is not None:
            data = read_parallel_tsv(uploaded_text(uploaded), kind)
        else:
            data = shipped_parallel(kind)
        if data.n_items > Limits.corpus_lines:
            raise BertScopeError(f"{data.n_items:,} rows; this app takes up to {Limits.corpus_lines:,}.")
    if data.incomplete:
        shown = ", ".join(f"line {n} (no {', '.join(m)})" for n, m in data.incomplete[:8])
        more = f" and {len(data.incomplete) - 8} more" if len(data.incomplete) > 8 else ""
        st.warning(plain(f"Rows with a missing language were left out: {shown}{more}."))
    return kind, data


def embedded(lm, key, page_model, kind, data) -> Aligned | None:
    """The languages form, and the texts embedded at every hidden state (None while waiting for the button)."""
    # one languages box per data (an upload gets its own, all its languages chosen), its default the same on every run:
    # a default that changes between runs makes a new widget, which the browser draws empty
    LANGS = f"align_langs_{kind}_{data.digest()[:12]}"
    from_url("langs", LANGS, lambda v: [g for g in v.split(",") if g],
             lambda v: len(v) >= 2 and set(v) <= set(data.languages))
    from_url("vec", "align_pooling", str, lambda v: v in ("mean", "cls"))
    from_url("ctx", "align_context", str, lambda v: v in ("alone", "carrier"))
    with st.form("align_form"):
        languages = st.multiselect("Languages", list(data.languages),
                                   list(data.languages),
                                   format_func=lambda g: f"{language_name(g)} ({g})", key=LANGS)
        if kind == "sentences":
            pooling = st.radio("Sentence vector", ["mean", "cls"], horizontal=True, key="align_pooling",
                               format_func={"mean": "mean of its tokens", "cls": "first token ([CLS] / <s>)"}.get)
            context = "alone"
        else:
            pooling = "mean"
            context = st.radio("Word vector (mean of its pieces)", ["alone", "carrier"], horizontal=True,
                               key="align_context",
                               format_func={"alone": "the word alone",
                                            "carrier": "inside a carrier sentence (“The word is “…”.”)"}.get,
                               help="Carrier sentences exist for: " + ", ".join(CARRIERS))
        asked = st.form_submit_button("Compute", type="primary")
    # a shared link (its settings in the address on arrival) computes on arrival, as the person who sent it saw
    linked = any(k in arrival() for k in ("data", "langs", "layer", "vec", "ctx"))

    with page_errors():
        picked = data.select(languages)
        check_texts(picked.n_items, len(picked.languages))  # what the job embeds and holds: rows x languages
        texts = picked.n_items * len(picked.languages)
        if demo():  # a hosted demo caps the word pieces too (a cell may be long)
            check_pieces(count_pieces(lm, [c for row in picked.cells for c in row if c]), "this selection")
        store = result_store("align")
        computed_key = (key, picked.digest(), pooling, context)
        on_disk = store.get(computed_key) is None and cached_vectors(lm, picked, pooling, context) is not None
        av = store.compute(computed_key, lambda progress: embed_parallel(  # kept on disk too
            lm, picked, pooling, context, cache=True, progress=progress), "Embedding the texts, word pieces",
            asked=link_asks("align", linked, computed_key) or asked or on_disk, costly="cross-lingual embedding",
            wait=f"Press *Compute*: {plain(page_model)} reads the {texts:,} texts ({picked.n_items} items × "
                 f"{len(picked.languages)} languages) once and keeps one vector per text at each of its "
                 f"{lm.num_layers + 1} hidden states, on disk too (a later visit reads them back).")
        if av is None:
            return None
        scores = result_store("align_retrieval").get_or_compute(computed_key, lambda: retrieval(av))
    return Aligned(kind, data, picked, pooling, context, av, scores, computed_key)


def summary(lm, key, a: Aligned) -> None:
    """The best layers, chance, and the tokenizer's coverage per language."""
    picked, av, scores, computed_key = a.picked, a.av, a.scores, a.computed_key
    mean_raw, mean_centred = scores.mean(), scores.mean(True)
    best_raw, best_centred = int(np.argmax(mean_raw)), int(np.argmax(mean_centred))
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Items × languages", f"{picked.n_items} × {len(picked.languages)}")
    m2.metric("Best layer (raw)", hidden_name(best_raw), f"mean P@1 {mean_raw[best_raw]:.1%}", delta_color="off",
              delta_arrow="off")
    m3.metric("Best layer (centred)", hidden_name(best_centred), f"mean P@1 {mean_centred[best_centred]:.1%}",
              delta_color="off", delta_arrow="off")
    m4.metric("Chance", f"{scores.chance:.1%}", help="1 / items: a random guess among the target language's items")
    if mean_centred.max() < 0.3:
        st.warning(plain(f"Weak alignment: even the best layer retrieves the right translation only "
                         f"{mean_centred.max():.1%} of the time on average (chance {scores.chance:.1%}). "
                         f"{key[0]} does not map these languages into one space."))
    if av.truncated:
        st.caption(f"{av.truncated} inputs were cut at the model's maximum length.")

    with st.expander("Tokenizer coverage per language"):
        coverage = result_store("align_coverage").get(computed_key)
        if coverage is None:
            coverage = tokenizer_coverage(lm, picked)
            result_store("align_coverage").put(computed_key, coverage)
        st.dataframe(pd.DataFrame({
            "language": [f"{language_name(c.language)} ({c.language})" for c in coverage],
            "unknown pieces": [f"{c.unknown_share:.1%}" for c in coverage],
            "pieces per item": [round(c.pieces_per_item, 1) for c in coverage],
        }), hide_index=True, width="stretch")
        st.caption("An English vocabulary turns other scripts into unknown tokens or single characters: "
                   "the model cannot align what it cannot read.")


def layer_picker(a: Aligned) -> int:
    """The hidden state the map and the heatmaps show (opening on the best one for these data)."""
    picked, data, kind, pooling, context = a.picked, a.data, a.kind, a.pooling, a.context
    n_layers, computed_key = a.av.n_layers, a.computed_key
    best_centred = int(np.argmax(a.scores.mean(True)))
    from_url_layer("align_layer", n_layers - 1)
    if st.session_state.get("align_layer_data") != computed_key:  # new data or model: open on its best layer
        if st.session_state.get("align_layer_data") is not None or "align_layer" not in st.session_state:
            st.session_state["align_layer"] = best_centred
        st.session_state["align_layer_data"] = computed_key
    layer = st.select_slider("Layer", list(range(n_layers)), best_centred, format_func=hidden_name, key="align_layer",
                             help="The embeddings (before any attention), then the output of each encoder block "
                                  "(from 0); it opens on the best layer for retrieval (centred).")
    to_url(data=kind, **layer_in_url(layer), langs=",".join(picked.languages) if picked.languages != data.languages else None,
           vec=pooling if kind == "sentences" and pooling != "mean" else None,
           ctx=context if kind == "words" and context != "alone" else None)
    return layer


def map_tab(a: Aligned, layer: int) -> None:
    """PCA or UMAP of the vectors at the layer, raw and mean-centred."""
    av, computed_key = a.av, a.computed_key
    c1, c2 = st.columns([1, 3])
    method = c1.radio("Projection", ["PCA", "UMAP"], horizontal=True, key="align_method")
    join = c2.checkbox("Join each item's translations to its first-language point", key="align_join")
    with page_errors(stop=False):
        def draw_maps(progress) -> dict:
            maps = {}
            for done, (name, vectors) in enumerate((("raw", av.vectors[:, :, layer]),
                                                    ("mean-centred", centre(av.vectors)[:, :, layer]))):
                progress(done, 2)
                flat = vectors.reshape(-1, vectors.shape[-1])  # [language * item, dim]
                maps[name] = project(flat, method.lower(), seed=0)
            return maps

        # one charge for the UMAP of these vectors, whatever layers it is then drawn at; PCA costs a view
        maps = result_store("align_maps").compute(
            (computed_key, layer, method), draw_maps,
            "UMAP (compiling with numba first: once per process), maps" if method == "UMAP" and not umap_is_warm()
            else f"{method}, maps", costly="UMAP map" if method == "UMAP" else None,
            charge_key=(computed_key, method))
        left, right = st.columns(2)
        for column, name in zip((left, right), maps):
            fig = projection_map(av, maps[name], f"{method} at {layer_title(layer)}, {name}", join=join,
                                 axis="PC" if method == "PCA" else "UMAP")
            column.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key=f"align_map_{name}")
        st.caption("Mean-centring subtracts each language's mean vector: what remains is what the "
                   "languages do not share as a block, so translations can meet.")


def retrieval_tab(key, a: Aligned, layer: int) -> None:
    """P@1 by layer against one language, the heatmaps at the layer, and the downloads."""
    picked, scores, kind, pooling, context = a.picked, a.scores, a.kind, a.pooling, a.context
    c1, c2 = st.columns(2)
    from_url("pivot", "align_pivot", str, lambda v: v in picked.languages)
    pivot = held_choice("Against", list(picked.languages), key="align_pivot",
                        format_func=lambda g: f"{language_name(g)} ({g})", container=c1)
    direction = c2.radio("Direction", ["to", "from"], horizontal=True, key="align_direction",
                         format_func=lambda d: f"language → {pivot}" if d == "to" else f"{pivot} → language")
    to_url(pivot=pivot)
    st.plotly_chart(retrieval_by_layer(scores, pivot, direction), config=PLOT_CONFIG, width="stretch")
    left, right = st.columns(2)
    left.plotly_chart(retrieval_heatmap(scores.raw[layer], picked.languages, f"P@1 at {layer_title(layer)}, raw"),
                      config=PLOT_CONFIG, width="stretch", key="align_heat_raw")
    right.plotly_chart(retrieval_heatmap(scores.centred[layer], picked.languages,
                                         f"P@1 at {layer_title(layer)}, mean-centred"),
                       config=PLOT_CONFIG, width="stretch", key="align_heat_centred")
    st.caption("A cell is the share of the row language's items whose nearest neighbour (cosine) among "
               "the column language's items is their own translation.")
    report = {"model": key[0], "kind": kind, "pooling": pooling, "context": context, **scores.to_json()}
    rows = [{"layer": entry["layer"], "pair": pair, "p_at_1": value,
             "p_at_1_centered": entry["p_at_1_centered"][pair]}
            for entry in report["layers"] for pair, value in entry["p_at_1"].items()]
    d1, d2 = st.columns(2)
    download("Download P@1 (JSON)", json.dumps(report, ensure_ascii=False, indent=1),
             "alignment.json", "application/json", key="align_dl_json", where=d1)
    download("Download P@1 (CSV)", pd.DataFrame(rows).to_csv(index=False), "alignment.csv",
             "text/csv", key="align_dl_csv", where=d2)


def tokens_tab(lm, key, a: Aligned) -> None:
    """SimAlign's token links between one item's translations, at the layer where links are most often right."""
    picked, kind, n_layers = a.picked, a.kind, a.av.n_layers
    c1, c2, c3 = st.columns([2, 1, 1])
    first = picked.texts(picked.languages[0])
    item = held_choice("Item", range(picked.n_items), key=f"align_item_{kind}",  # per kind: no stale label
                       format_func=lambda i: f"{i + 1}. {first[i][:60]}", container=c1)
    source = held_choice("Source", picked.languages, f"align_source_{kind}", container=c2)
    languages = list(picked.languages)
    target = held_choice("Target", languages, f"align_target_{kind}", languages[1] if len(languages) > 1 else None,
                         container=c3)
    with page_errors(stop=False):
        if source == target:
            raise BertScopeError("Choose two different languages.")
        with st.spinner("Measuring where this model's word links are right (once per model)…"):
            measured = result_store("align_token_layer").get_or_compute(key, lambda: token_link_accuracy(
                lm, shipped_parallel("words")))
        if st.session_state.get("align_token_layer_for") != key:  # a new model: open on its best layer for links
            st.session_state["align_token_layer"] = measured.best
            st.session_state["align_token_layer_for"] = key
        token_layer = st.select_slider("Layer for token links", list(range(n_layers)), measured.best,
                                       format_func=hidden_name, key="align_token_layer")
        st.caption(plain(f"Opens on {layer_title(measured.best)}, where a word's pieces most often link inside its "
                         f"translation: {measured.accuracy[measured.best]:.0%} of them on the shipped words in carrier "
                         f"sentences (en against {len(measured.languages)} languages; chance "
                         f"{measured.chance[measured.best]:.0%}); at the last layer "
                         f"{measured.accuracy[-1]:.0%}. Retrieval (the slider above) peaks elsewhere: sentence "
                         "vectors and token links are different questions."))
        texts = (picked.texts(source)[item], picked.texts(target)[item])
        al = result_store("align_tokens").get_or_compute((key, texts, token_layer), lambda: token_alignment(
            lm, *texts, token_layer))
        st.caption(plain(f"{source}: {texts[0]}   ·   {target}: {texts[1]}"))
        fig = alignment_heatmap(al, f"{language_name(source)} ({source})", f"{language_name(target)} ({target})")
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch")
        figure_downloads(fig, f"token-alignment-{source}-{target}-{item + 1}-{hidden_name(token_layer)}")
        if al.mutual:
            st.caption("Mutual links: " + plain(", ".join(f"{al.source_tokens[i]} ↔ {al.target_tokens[j]}"
                                                          for i, j in al.mutual)))


def page() -> None:
    st.title("Cross-lingual")  # the sidebar's name (kit.pages)
    st.caption("Do translations land near each other, and at which layer? Retrieval by cosine nearest "
               "neighbour and per-language mean-centring after Libovický et al. (2020); token links after "
               "SimAlign's argmax (Jalili Sabet et al. 2020).")
    page_model, key, lm = encoder()
    kind, data = data_choice(lm, key)
    if data is None:
        return
    a = embedded(lm, key, page_model, kind, data)
    if a is None:
        return
    summary(lm, key, a)
    layer = layer_picker(a)
    tab_map, tab_retrieval, tab_tokens = st.tabs(["Map", "Retrieval", "Token alignment"])
    with tab_map:
        map_tab(a, layer)
    with tab_retrieval:
        retrieval_tab(key, a, layer)
    with tab_tokens:
        tokens_tab(lm, key, a)
    # UMAP's kernels compile (14 s of a core, holding the GIL much of it) once the page is drawn, not beside its work:
    # started on opening, the compile slowed the default run from 10 s to 19 s (issue 54: 90 s with another job running)
    warm_umap_in_background()


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
