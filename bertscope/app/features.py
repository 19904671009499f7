"""Dictionary features: an SAE's features on a text, one feature's page (its own URL), and search
by gold tag or by the word a feature promotes."""

import html
import json
from pathlib import Path

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.kept import persist
from bertscope.app.kit.limits import Limits, check_text, demo
from bertscope.app.kit.model_picker import model_key, offer_models, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import from_url, tab_from_url, to_url
from bertscope.corpora.ewt import installed as ewt_installed
from bertscope.corpora.tagged import TAGSET_NAMES, describe_tag, tagged_corpus
from bertscope.features.active import active_features
from bertscope.features.contexts import feature_contexts
from bertscope.features.directions import features_promoting, logit_weights, nearest_features, promoted_id
from bertscope.features.sae import load_sae
from bertscope.features.shipped import sae_folder, sae_layers, shipped_saes
from bertscope.features.statistics import feature_statistics, statistics_on_disk
from bertscope.figures.features import (
    context_html,
    feature_name,
    histogram_figure,
    strongest_pieces,
    text_features_figure,
)
from bertscope.sources.presets import BUNDLED_MLM

SAMPLES = {"brown": [1000, 5000, 20000, 0], "ewt": [2000, 0]}  # 0: the whole corpus
DEMO_MAX = 5000
CORPUS_NAMES = {"brown": "Brown (POS, Brown tags)", "ewt": "EWT (UPOS, dependency relations)"}
TEXT = "You should have seen the bank of the river after the storm."


def sample_words(n: int) -> str:
    return "every sentence" if n == 0 else f"{n:,} sentences"


def open_feature(feature: int) -> None:
    st.session_state["feat_feature"] = int(feature)
    st.session_state["feat_tab"] = "Feature"


# -- the corpus statistics: shared by the Feature and Search tabs ------------------------------------
def corpus_controls(prefix: str, lm, key, folder, layer, sae):
    """The corpus picker, and its statistics when kept (or computed now when asked)."""
    corpora = ["brown"] + (["ewt"] if ewt_installed() else [])
    c1, c2, c3 = st.columns([1, 1, 1])
    name = c1.radio("Corpus", corpora, horizontal=True, key=f"{prefix}_corpus",
                    format_func=CORPUS_NAMES.get)
    sizes = [n for n in SAMPLES[name] if not demo() or 0 < n <= DEMO_MAX]
    n = held_choice("Sentences", sizes, f"{prefix}_n_{name}", sizes[1] if name == "brown" and len(sizes) > 1 else None,
                    container=c2, format_func=sample_words,
                    help="Brown's are spread over all its documents, EWT's are its training split's first; read "
                         "once, then kept on disk.")
    asked = c3.button("Index the corpus", type="primary", key=f"{prefix}_index",
                      help="One pass of the sentences through the model up to this layer and the SAE: top contexts, "
                           "histograms, tag labels for every feature.")
    corpus = result_store("tagged").get_or_compute((name, n), lambda: tagged_corpus(name, n))
    request = (key, str(folder.resolve()), layer, corpus.name)
    store = result_store("feature_stats")
    if store.get(request) is None:
        kept = statistics_on_disk(lm, {layer: sae}, corpus)  # another session or the command line made them
        if layer in kept:
            store.put(request, kept[layer])
    stats = store.compute(request, lambda progress: feature_statistics(lm, {layer: sae}, corpus,
                                                                       progress=progress)[layer],
                          f"{corpus.name} through layer {layer} and the SAE, sentences", asked,
                          costly="feature statistics",
                          wait=f"Press *Index the corpus*: {sample_words(n)} of {name} through the model up to "
                               f"layer {layer} and the SAE, once (kept on disk), for every feature's top contexts, "
                               "histogram and gold-tag labels.")
    return stats, corpus

TABS = ["On a text", "Feature", "Search"]


def text_tab(lm, key, layer, folder, sae, open_: bool) -> None:
    """Which features fire on a text, word piece by word piece."""
    if open_:
        from_url("text", "feat_text")
        with st.form("feat_text_form"):
            text = st.text_area("Text", TEXT, key="feat_text", max_chars=Limits.input_chars)
            st.form_submit_button("Find its features", type="primary")
        to_url(text=text if text != TEXT else None)
        with page_errors(stop=False):
            check_text(text)
            result = result_store("active_features").get_or_compute(
                (key, str(folder.resolve()), layer, text),
                lambda: active_features(lm, sae, text, layer, folder.resolve()))
            fig, chosen = text_features_figure(result)
            st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="feat_text_map")
            rows = [{"position": i, "token": t["token"], "features (activation)": ", ".join(
                f"{f['feature']} ({f['activation']:.2f})" for f in t["features"][:6])}
                for i, t in enumerate(result["tokens"])]
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(400, 36 * len(rows) + 40))
            if chosen:
                c1, c2 = st.columns([3, 1])
                words = strongest_pieces(result)
                pick = held_choice("Open a feature (the pieces it fires hardest on here)", chosen, key="feat_pick",
                                   container=c1, format_func=lambda f: feature_name(f, words))
                c2.button("Open this feature", key="feat_open", on_click=open_feature, args=(pick,), icon=":material/open_in_new:")
            download("Download (JSON)", json.dumps(result), "features.json", "application/json",
                     key="feat_text_json")


def feature_tab(lm, key, layer, folder, sae, typed: str, open_: bool) -> None:
    """One feature: its top contexts, histogram, gold-tag labels and its effect when switched off."""
    if open_:
        from_url("feature", "feat_feature", int, lambda v: 0 <= v < sae.d_sae)
        feature = st.number_input(f"Feature (0 to {sae.d_sae - 1})", 0, sae.d_sae - 1, 0, key="feat_feature")
        to_url(feature=feature)
        link = f"?layer={layer}&feature={feature}&feat_tab=Feature" + (f"&sae={typed.strip()}" if typed.strip() else "")
        st.caption(plain(f"This feature's own link: {link}"))
        with page_errors(stop=False):
            c1, c2 = st.columns(2)
            if "mlm" in lm.outputs:
                weights = result_store("logit_weights").get_or_compute(
                    (key, str(folder.resolve()), layer, feature),
                    lambda: logit_weights(lm, sae, feature))
                c1.markdown("**Tokens it promotes and suppresses** through the masked-LM head (its direction added "
                            "at the SAE's centre; the ranking is the reading)")
                c1.dataframe(pd.DataFrame({"promotes": [t for t, _ in weights.promoted],
                                           "logit +": [v for _, v in weights.promoted],
                                           "suppresses": [t for t, _ in weights.suppressed],
                                           "logit −": [v for _, v in weights.suppressed]}),
                             hide_index=True, width="stretch", column_config={
                                 "logit +": st.column_config.NumberColumn(format="%.2f"),
                                 "logit −": st.column_config.NumberColumn(format="%.2f")})
            else:
                c1.info(plain(f"{lm.name} has no masked-LM head: no logit weights."))
            near = nearest_features(sae, feature)
            c2.markdown("**Nearest features** by decoder cosine")
            c2.dataframe(pd.DataFrame(near, columns=["feature", "cosine"]), hide_index=True, width="stretch",
                         column_config={"cosine": st.column_config.NumberColumn(format="%.3f")})
        with page_errors(stop=False):
            stats, corpus = corpus_controls("feat", lm, key, folder, layer, sae)
            if stats is not None:
                summary = stats.summary(feature)
                label = summary["label"]
                m1, m2, m3 = st.columns(3)
                m1.metric("Fires on", f"{summary['firing_rate']:.2%}", help=f"of {stats.pieces:,} word pieces")
                m2.metric("Mean activation when firing", f"{summary['mean_activation']:.2f}")
                m3.metric("Best gold-tag label", describe_tag(label["tagset"], label["tag"]) if label else "none",
                          help="The tag whose words best go with the feature's firing (F1 of precision and recall).")
                if label:
                    st.markdown(
                        f"**Feature {feature}: " + plain(f"{TAGSET_NAMES[label['tagset']]}, "
                                                         f"{describe_tag(label['tagset'], label['tag'])}")
                        + f"**: precision {label['precision']:.2f} (of the words it fires on, the share with that "
                          f"tag), recall {label['recall']:.2f} (of the words with that tag, the share it fires on).")
                labels = [lab.to_json() | {"tagset": TAGSET_NAMES[ts], "tag": describe_tag(ts, lab.tag)}
                          for ts in stats.tags for lab in stats.labels(feature, ts)]
                if labels:
                    st.dataframe(pd.DataFrame(labels)[["tagset", "tag", "precision", "recall", "f1", "words"]],
                                 hide_index=True, width="stretch")
                st.plotly_chart(histogram_figure(stats.histogram[feature], feature, stats.pieces), config=PLOT_CONFIG,
                                width="stretch", key="feat_hist")
                contexts = result_store("feature_contexts").get_or_compute(
                    (key, str(folder.resolve()), layer, corpus.name, feature),
                    lambda: feature_contexts(lm, sae, stats, corpus, feature, layer))
                st.markdown("**Top contexts** " + plain(f"over {corpus.name} (the sentences where it fires hardest; "
                                                        "hover a word piece for its activation and gold tags)"))
                if not contexts:
                    st.info("It never fires on these sentences.")
                for c in contexts:
                    st.html(f"<small>{c.peak:.2f} · {html.escape(c.source)}</small>" + context_html(c.pieces))


def search_tab(lm, key, layer, folder, sae, open_: bool) -> None:
    """Features found by what they fire on (a word, a tag) across the indexed corpus."""
    if open_:
        with page_errors(stop=False):
            by = st.radio("Find features", ["by gold tag", "by the word they promote"], horizontal=True, key="feat_by")
            if by == "by the word they promote":
                with st.form("feat_token_form"):
                    word = st.text_input("Word (one the vocabulary holds whole)", "should", key="feat_token",
                                         max_chars=Limits.name_chars)
                    asked = st.form_submit_button("Search", type="primary")
                if asked:
                    promoted_id(lm, word)  # one line before the job: a word the vocabulary lacks is never charged
                found = result_store("features_promoting").compute(
                    (key, str(folder.resolve()), layer, word.strip()),
                    lambda progress: features_promoting(lm, sae, word),
                    "Every feature's direction through the masked-LM head", asked, costly="feature search",
                    wait="Press *Search*: every feature's decoder direction is read through the masked-LM head once.")
                table = None if found is None else pd.DataFrame(found, columns=["feature", "logit change"])
            else:
                stats, corpus = corpus_controls("feat_search", lm, key, folder, layer, sae)
                table = None
                if stats is not None:
                    c1, c2 = st.columns(2)
                    tagset = held_choice("Tagset", list(stats.tags), key="feat_tagset",
                                         format_func=lambda t: TAGSET_NAMES.get(t, t), container=c1)
                    tags = stats.tags[tagset]
                    tag = held_choice("Tag", tags, f"feat_tag_{tagset}", "VERB", container=c2,
                                      format_func=lambda t: describe_tag(tagset, t))
                    found = stats.features_for_tag(tagset, tag)
                    table = pd.DataFrame([{"feature": f} | lab.to_json() | {"fires on": stats.firing_rate(f)}
                                          for f, lab in found])
                    if len(table):
                        table = table[["feature", "precision", "recall", "f1", "fires on"]]
            if table is not None:
                if len(table):
                    st.dataframe(table, hide_index=True, width="stretch",
                                 column_config={"fires on": st.column_config.NumberColumn(format="percent")})
                    c1, c2 = st.columns([3, 1])
                    f1 = dict(zip(table["feature"], table["f1"])) if "f1" in table else {}
                    pick = held_choice("Open a feature", table["feature"].tolist(), key="feat_search_pick",
                                       container=c1, format_func=lambda f: f"feature {f} · F1 {f1[f]:.2f}"
                                       if f in f1 else f"feature {f}")
                    c2.button("Open this feature", key="feat_search_open", on_click=open_feature, args=(pick,),
                              icon=":material/open_in_new:")
                else:
                    st.info("No feature goes with it.")


def page() -> None:
    st.title("Features")  # the sidebar's name (kit.pages)
    # the widgets of tabs drawn only when open keep their values while another tab is shown
    persist("feat_feature", "feat_text", "feat_pick", "feat_by", "feat_token", "feat_tagset", "feat_search_pick",
            *(f"{tab}_{what}" for tab in ("feat", "feat_search") for what in ("corpus", "n_brown", "n_ewt")),
            *(f"feat_tag_{tagset}" for tagset in TAGSET_NAMES))
    st.caption("A sparse autoencoder (SAE) splits a layer's output into many features, few at a time (TopK, Gao et al. "
               "2024). Layer L is block L's output, as everywhere; the features are numbered from 0.")
    lm = require_model()
    key = model_key()
    typed, source, layers = sae_source(lm)
    if not layers:
        return
    layer, folder, sae = sae_choice(lm, key, source, layers)
    to_url(layer=layer, sae=typed.strip() or None)
    tab_from_url("feat_tab", TABS)
    tab_text, tab_feature, tab_search = st.tabs(TABS, key="feat_tab", on_change="rerun")
    with tab_text:
        text_tab(lm, key, layer, folder, sae, tab_text.open)
    with tab_feature:
        feature_tab(lm, key, layer, folder, sae, typed, tab_feature.open)
    with tab_search:
        search_tab(lm, key, layer, folder, sae, tab_search.open)


def sae_source(lm) -> tuple[str, Path | None, list[int]]:
    """The SAEs' folder (typed, or the model's shipped set) and its layers; with no SAE, what to do said and no
    layers."""
    shipped = shipped_saes(lm.name)
    if not demo():
        from_url("sae", "feat_sae")
    typed = "" if demo() else st.text_input("SAE folder (a `train-sae --out` folder, or one SAE in SAELens's format); "
                                            "empty: the model's shipped SAEs", key="feat_sae", max_chars=Limits.name_chars)
    source = Path(typed.strip()) if typed.strip() else shipped
    if source is None:
        st.info(plain(f"{lm.name} ships no SAEs. Train some with `python -m bertscope train-sae {lm.name} --out DIR` and "
                      "type DIR above; bundled-mlm ships one for each of its six layers."))
        offer_models((BUNDLED_MLM,), "feat_switch")
        return typed, None, []
    with page_errors():
        layers = sae_layers(source)
    if not layers:
        st.error(plain(f"{source} holds no SAE (SAELens's cfg.json + sae_weights.safetensors, or layer_LL folders)."))
    return typed, source, layers


def sae_choice(lm, key, source: Path, layers: list[int]):
    """The layer picked, its SAE's folder and the SAE (loaded once a model and folder), with what it is stated."""
    from_url("layer", "feat_layer", int, lambda v: v in layers)
    c1, c2 = st.columns([1, 3])
    layer = held_choice("Layer", layers, "feat_layer", layers[min(2, len(layers) - 1)], container=c1,
                        help="The SAE reads this layer's output (blocks.L.hook_resid_post).")
    with page_errors():
        folder = sae_folder(source, layer)
        sae = result_store("sae").get_or_compute((str(folder.resolve()), key[1]), lambda: load_sae(folder, lm.device))
        sae.check_for(lm, f"blocks.{layer}.hook_resid_post")
    shown = f"**{sae.d_sae:,} features** of {sae.d_in}-wide vectors, " + (
        f"k = {sae.k} active a word piece" if sae.architecture == "topk" else f"{sae.architecture} SAE")
    c2.markdown(shown + quality_line(folder))  # numbers, and the sources' names escaped: nothing a file could format
    return layer, folder, sae


def quality_line(folder: Path) -> str:
    """train-sae's figures from the folder's quality.json, as a clause; empty when there are none (or another shape)."""
    try:
        q = json.loads((folder / "quality.json").read_text())
        domains = {plain(str(s)): float(d["fve"]) for s, d in dict(q.get("domains") or {}).items()}
        where = f"held-out {', '.join(domains)}" if domains else "held-out Brown"
        lowest = f" (lowest {min(domains.values()):.0%}, {min(domains, key=domains.__getitem__)})" if len(domains) > 1 \
            else ""
        return (f"; on {where}: {float(q['fve']):.0%} of the variance explained{lowest}, {float(q['recovered']):.0%} "
                "of the masked-LM loss recovered with the SAE spliced in")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # a file of another shape: no figures shown
        return ""


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
