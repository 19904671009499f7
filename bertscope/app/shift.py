"""Embedding shift: one word in many contexts, layer by layer."""

import hashlib

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.analysis.corpus_search import MAX_K, build_index, index_on_disk, search, word_occurrences
from bertscope.analysis.projection import pca_2d, umap_2d
from bertscope.analysis.shift import anisotropy_baseline, collect, layer_metrics, nearest_vocabulary, word_pattern
from bertscope.app.kit.chrome import PLOT_CONFIG, download, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.uploads import uploaded_text
from bertscope.app.kit.url import (
    arrival,
    from_url,
    from_url_layer,
    layer_in_url,
    link_asks,
    link_flag,
    spend_links,
    tab_from_url,
    to_url,
)
from bertscope.core.layers import hidden_name, layer_title
from bertscope.corpora.brown import tag_name
from bertscope.corpora.brown_tasks import DEFAULT_SENTENCES
from bertscope.corpora.senses import read_labelled_csv, sense_presets
from bertscope.figures.shift import (
    genre_scatter,
    layer_lines,
    occurrence_names,
    projection_scatter,
    similarity_heatmap,
    tag_bars,
)
from bertscope.figures.text import in_context, table_text
from bertscope.mlm.fill_mask import words_of

OWN = "Your own word…"


TABS = ["Similarity at a layer", "Across layers", "2-D map", "Vocabulary neighbours", "In the Brown corpus"]


def sim_tab(result, layer) -> None:
    """The cosine similarity of every pair of occurrences at the layer."""
    st.plotly_chart(similarity_heatmap(result, layer), config=PLOT_CONFIG, width="stretch")


def layers_tab(word, result, metrics, layer) -> None:
    """Within- and between-sense similarity and the anisotropy baseline, layer by layer."""
    best = max(metrics, key=lambda m: (m.centroid_accuracy, m.gap))
    m1, m2, m3 = st.columns(3)
    m1.metric("Best layer for the senses", hidden_name(best.layer),
              help="highest leave-one-out centroid accuracy, then gap")
    m2.metric("Its centroid accuracy", f"{best.centroid_accuracy:.0%}")
    m3.metric("Its within − across gap", f"{best.gap:.3f}")
    st.plotly_chart(layer_lines(metrics, "senses"), config=PLOT_CONFIG, width="stretch")
    st.plotly_chart(layer_lines(metrics, "contextuality"), config=PLOT_CONFIG, width="stretch")
    st.caption("Self-similarity: mean cosine between the word's vectors in different sentences. "
               "Intra-sentence: mean cosine between each word of a sentence and the sentence's mean. "
               "Anisotropy baseline: mean cosine between random words of the shipped corpus; the "
               "adjusted values subtract it (Ethayarajh 2019, §3.3–3.4).")
    frame = pd.DataFrame([m.to_json() for m in metrics]).astype({"layer": str})
    st.dataframe(frame, hide_index=True, width="stretch",  # "embeddings" whole, not cut to "embed…"
                 column_config={"layer": st.column_config.TextColumn(width="medium", pinned=True)})
    download("Download metrics (CSV)", frame.to_csv(index=False), f"shift-{result.word}.csv",
             "text/csv", key="shift_dl")


def map_tab(key, result, layer, digest) -> None:
    """The occurrences projected to two dimensions at the layer."""
    from_url("map", "shift_method", str.upper, lambda v: v in ("PCA", "UMAP"))
    method = st.radio("Projection", ["PCA", "UMAP"], horizontal=True, key="shift_method")
    to_url(map=method.lower() if method != "PCA" else None)
    with page_errors(stop=False):
        maps = result_store("shift_maps")
        vectors = result.vectors[:, layer]
        # one charge for the UMAP of these sentences, whatever layers it is then drawn at; PCA costs a view
        coords = maps.compute((key, digest, layer, method), lambda progress: (
            pca_2d(vectors) if method == "PCA" else umap_2d(vectors, seed=0)),
            "UMAP (the first run in a process compiles with numba)" if method == "UMAP" else "PCA",
            costly="UMAP map" if method == "UMAP" else None, charge_key=(key, digest, method))
        st.plotly_chart(projection_scatter(result, coords, f"{method} of “{result.word}” at {layer_title(layer)}", method),
                        config=PLOT_CONFIG, width="stretch")


def vocab_tab(lm, result, layer, rows) -> None:
    """Each occurrence's nearest vocabulary items at the layer."""
    st.caption("Nearest rows of the model's input embedding matrix (cosine) to each occurrence's "
               "vector at this layer: a rough reading, since later layers are not in that space.")
    with page_errors(stop=False):
        neighbours = nearest_vocabulary(lm, result.vectors[:, layer])
        st.dataframe(pd.DataFrame({
            "occurrence": occurrence_names(result),
            "sentence": [o.sentence for o in result.occurrences],
            "nearest tokens": [", ".join(f"{t} ({s:.2f})" for t, s in n) for n in neighbours],
        }), hide_index=True, width="stretch")


def brown_tab(lm, key, word, layer, rows, open_: bool) -> None:
    """The word's occurrences in the Brown corpus, nearest to each of yours."""
    st.caption("Which words of real text sit nearest to this one at the layer above? exBERT-style corpus "
               "search (Hoover et al. 2020) over a Brown corpus sample (every genre; each word the mean of "
               "its pieces, the Probes page's hidden-state cache), with the tags of the matches, and the "
               "word's own occurrences in the corpus coloured by genre.")
    if open_:
        linked = arrival().get("shift_tab") == TABS[-1] and arrival().get("brown") == "1"
        from_link = link_asks("shift_brown", linked, key)  # a link: on arrival, once
        index_asked = st.button("Index the Brown sample", type="primary", key="shift_brown_run") or from_link
        with page_errors(stop=False):
            store = result_store("brown_index")
            on_disk = store.get(key) is None and index_on_disk(lm)
            index = None
            try:
                index = store.compute(key, lambda progress: build_index(lm, progress=progress),
                                      "Indexing the Brown sample (once per model; kept on disk), word pieces",
                                      index_asked or on_disk, costly="Brown index",
                                      wait=plain(f"Press Index the Brown sample: {lm.name} reads "
                                                 f"{DEFAULT_SENTENCES:,} Brown sentences once and keeps every word's "
                                                 "vector at every layer on disk (the Probes page's brown-pos cache: "
                                                 "shared with it, read back on later visits)."))
            finally:  # the link's flag only with the index on screen
                link_flag("brown", index is not None and store.showing(key), ("shift_tab", TABS[-1]))
            if index is None:
                st.stop()
            st.caption(f"{index.n_words:,} words of {len(index.texts):,} sentences from all 500 documents.")
            example = next((sentence for sentence, _ in rows if word.lower() in sentence.lower()), "")
            b1, b2, b3 = st.columns([3, 1, 1])
            query = b1.text_input("Sentence", example or f"The {word} was there.", key="shift_brown_text",
                                  max_chars=Limits.input_chars)
            check_text(query)
            _, names = words_of(lm, query)
            default = next((i for i, n in enumerate(names) if n.lower() == word.lower()), 0)
            picked = held_choice("Word", range(len(names)), "shift_brown_word", default, container=b2,
                                 format_func=lambda i: f"{i}: {names[i]}")
            k = b3.number_input("Matches", 5, MAX_K, 20, key="shift_brown_k")
            found = search(lm, index, query, int(picked), layer, int(k))
            st.plotly_chart(tag_bars(found), config=PLOT_CONFIG, width="stretch", key="shift_brown_tags")
            concordance = pd.DataFrame([  # each Brown sentence centred on its word (exBERT's view)
                {"similarity": m.similarity, "tag": tag_name(m.tag), "genre": m.genre,
                 **dict(zip(("before", "word", "after"), map(table_text, in_context(m.sentence, m.start, m.end))))}
                for m in found.matches])
            st.dataframe(concordance, hide_index=True, width="stretch",
                         column_config={"similarity": st.column_config.NumberColumn(format="%.3f"),
                                        "before": st.column_config.TextColumn(alignment="right"),
                                        "word": st.column_config.TextColumn(alignment="center")})
            try:
                seen = word_occurrences(index, found.query_word, layer)
                coords = pca_2d(seen.vectors)
                st.plotly_chart(genre_scatter(coords, seen.genres, seen.tags, seen.sentences,
                                              f"“{seen.word}” in the Brown sample at {layer_title(layer)}: "
                                              f"{len(seen.genres)} occurrences by genre"),
                                config=PLOT_CONFIG, width="stretch", key="shift_brown_map")
            except BertScopeError as err:
                st.info(plain(str(err)))
    else:
        _no_brown_link()
        st.caption("Open this tab to search (the first search indexes the sample once per model).")


def page() -> None:
    st.title("Embedding shift")
    st.caption("The same word in different sentences, through the layers: does the model pull the "
               "senses apart? Metrics after Ethayarajh (2019).")
    lm = require_model()
    key = model_key()
    presets = sense_presets()
    from_url("word", "shift_choice", str, lambda v: v in presets)
    c1, c2 = st.columns([1, 2])
    choice = held_choice("Word", [*presets, OWN], key="shift_choice", container=c1)
    word = c1.text_input("Target word", key="shift_word", max_chars=Limits.name_chars) if choice == OWN else choice
    if not word.strip():
        _stopped_early()
        st.info("Type the word to follow through the sentences.")
        return
    uploaded = c2.file_uploader("Or upload a CSV (columns: sentence,label)", type=["csv"], key="shift_upload",
                                max_upload_size=Limits.upload_mb)
    rows, pooling, occurrences, asked = _sentences_form(_source_table(presets, choice, uploaded), choice,
                                                        uploaded is not None)
    if not _ready(word, rows, asked):
        return
    digest = hashlib.sha256(repr((word, rows, pooling, occurrences)).encode()).hexdigest()
    result, metrics = _shifts(lm, key, word, rows, pooling, occurrences, digest, asked)
    layer = _layer_slider(result)
    to_url(word=choice if choice != OWN else None, **layer_in_url(layer), pool=pooling if pooling != "mean" else None,
           occ=occurrences if occurrences != "all" else None)
    tab_from_url("shift_tab", TABS)
    tab_sim, tab_layers, tab_map, tab_vocab, tab_brown = st.tabs(TABS, key="shift_tab", on_change="rerun")
    with tab_sim:
        sim_tab(result, layer)
    with tab_layers:
        layers_tab(word, result, metrics, layer)
    with tab_map:
        map_tab(key, result, layer, digest)
    with tab_vocab:
        vocab_tab(lm, result, layer, rows)
    with tab_brown:
        brown_tab(lm, key, word, layer, rows, tab_brown.open)


def _ready(word: str, rows: list, asked: bool) -> bool:
    """Whether there is something to compare: too many sentences refused in one line, and before Compare is pressed
    a table with no sentence holding the word says what to do. Short of that, the tabs are not drawn, so the Brown
    tab's link flag goes (a link copied then would open on the same settings and run nothing)."""
    pattern = None
    with page_errors(stop=False):
        if len(rows) > Limits.corpus_lines:
            raise BertScopeError(f"{len(rows):,} sentences; this app takes up to {Limits.corpus_lines:,}.")
        pattern = word_pattern(word)
    ready = pattern is not None and (asked or any(pattern.search(sentence) for sentence, _ in rows))
    if pattern is not None and not ready:
        st.info(plain(f"Add sentences that contain “{word.strip()}” to the table above (a sense label beside each, "
                      "if you like), or upload a CSV, then press Compare."))
    if not ready:  # before any stop: after st.stop() nothing more reaches the browser
        _stopped_early()
    return ready


def _no_brown_link() -> None:
    link_flag("brown", False, ("shift_tab", TABS[-1]))


def _stopped_early() -> None:
    """The page stops before its tabs: the Brown tab's flag goes, and a link's request with it (url.spend_links)."""
    spend_links()
    _no_brown_link()


def _source_table(presets: dict, choice: str, uploaded) -> pd.DataFrame:
    """The sentences the table starts from: an uploaded CSV's, or the preset word's."""
    with page_errors():
        if uploaded is not None:
            return pd.DataFrame(read_labelled_csv(uploaded_text(uploaded)), columns=["sentence", "label"])
    return pd.DataFrame(presets.get(choice, [("", "")]), columns=["sentence", "label"])


def _sentences_form(source: pd.DataFrame, choice: str, uploaded: bool
                    ) -> tuple[list[tuple[str, str | None]], str, str, bool]:
    """The editable table and the pooling choices: ((sentence, label or None) rows, pooling, occurrences, asked)."""
    from_url("pool", "shift_pooling", str, lambda v: v in ("mean", "first"))
    from_url("occ", "shift_occurrences", str, lambda v: v in ("all", "first"))
    with st.form("shift_form"):
        table = st.data_editor(source, num_rows="dynamic", width="stretch", key=f"shift_rows_{choice}_{uploaded}",
                               column_config={"sentence": st.column_config.TextColumn(width="large")})
        o1, o2 = st.columns(2)
        pooling = o1.radio("Word vector", ["mean", "first"], horizontal=True, key="shift_pooling",
                           format_func={"mean": "mean of its pieces", "first": "first piece"}.get)
        occurrences = o2.radio("In each sentence", ["all", "first"], horizontal=True, key="shift_occurrences",
                               format_func={"all": "every occurrence", "first": "first occurrence"}.get)
        asked = st.form_submit_button("Compare", type="primary")
    rows = [(str(s or ""), (str(lab).strip() or None) if lab is not None and str(lab) != "nan" else None)
            for s, lab in zip(table["sentence"], table["label"])]
    return rows, pooling, occurrences, asked


def _shifts(lm, key, word: str, rows, pooling: str, occurrences: str, digest: str, asked: bool):
    """(the word's vectors at every layer, their metrics), computed once per input, and what was left out. Stopped
    or failed (said in one line), the page ends before its tabs: as on its other early returns, the Brown tab's flag
    goes and a link's request is spent."""
    def run(progress):
        vectors = collect(lm, word, rows, pooling, occurrences, progress=progress)
        progress(0, 1, "Anisotropy baseline (random words of the shipped corpus, once per model)")
        return vectors, layer_metrics(vectors, anisotropy_baseline(lm, pooling))

    found = None
    with page_errors(stop=False):  # a failure in one line; a Stop, "Stopped" and Run it again (optional): None
        found = result_store("shift").compute((key, digest), run, "Sentences", asked=asked, costly=None,
                                              optional=True)  # a few passes
    if found is None:  # the flag goes before the stop: after st.stop() nothing more reaches the browser
        _stopped_early()
        st.stop()
    result, metrics = found
    if result.skipped:
        st.warning(plain(f"Rows without “{result.word}” were left out: {', '.join(map(str, result.skipped))}."))
    st.caption(plain(f"{len(result.occurrences)} occurrences of “{result.word}”, {len(set(result.labels))} "
                     f"sense label(s); the embeddings (before any context is mixed in), then layers 0–"
                     f"{result.n_layers - 2}, the output of each encoder block."))
    return result, metrics


def _layer_slider(result) -> int:
    from_url_layer("shift_layer", result.n_layers - 1)
    if st.session_state.get("shift_layer", 0) >= result.n_layers:  # a smaller model than the last one
        st.session_state["shift_layer"] = result.n_layers - 1
    return st.select_slider("Layer", list(range(result.n_layers)), result.n_layers - 1, format_func=hidden_name,
                            key="shift_layer", help="The embeddings, then the output of each encoder block (from 0).")


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
