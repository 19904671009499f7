"""The Interventions page's Features tab: switch an SAE feature off or steer with it and watch the
masked-token predictions; the causal check of a feature's tag label."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import download, page_errors, plain, plain_but_code
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text, demo
from bertscope.app.kit.mask_changes import show_mask_changes
from bertscope.app.kit.pages import page
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import from_url, to_url
from bertscope.corpora.tagged import TAGSET_NAMES, brown_tagged
from bertscope.errors import BertScopeError
from bertscope.features.causal import tag_effect
from bertscope.features.edits import MAX_EDITS, FeatureEdit, edit_features
from bertscope.features.patching import patch_features
from bertscope.features.sae import load_sae
from bertscope.features.shipped import sae_folder, sae_layers, shipped_saes
from bertscope.features.statistics import FeatureStatistics, statistics_on_disk

MODES = {"remove": "switch it off", "steer": "steer with it"}
AT = {"masks": "at the [MASK] tokens", "all": "at every token"}
UNIVERSAL = ["ADJ", "ADP", "ADV", "CONJ", "DET", "NOUN", "NUM", "PRON", "PRT", "PUNCT", "VERB", "X"]
TEXT = "You [MASK] see the river from the bank."
STRONG = (0.8, 0.1)  # a strong label: precision, recall


def _kept_statistics(lm, sae, layer: int) -> FeatureStatistics | None:
    """Brown statistics of this SAE already kept (the Features page's two smaller samples), or None."""
    for n in (5000, 1000):
        try:
            corpus = result_store("tagged").get_or_compute(("brown", n), lambda n=n: brown_tagged(n))
        except BertScopeError:  # Brown is not installed: no label, the check below says so when run
            return None
        kept = statistics_on_disk(lm, {layer: sae}, corpus)
        if layer in kept:
            return kept[layer]
    return None


def strong_features(stats: FeatureStatistics, tag: str) -> list[int]:
    """The features whose universal-tag label is ``tag`` with precision >= 0.8 and recall >= 0.1."""
    return [f for f in range(stats.d_sae) if (lab := stats.label(f, "universal")) is not None and lab.tag == tag
            and lab.precision >= STRONG[0] and lab.recall >= STRONG[1]]


def features_tab(lm, key) -> None:
    st.caption("Take one SAE feature's own contribution out of a layer's output (*switch it off*: the rest of the "
               "reconstruction and its error stay), or add its direction (*steer*), through the hook point the SAE "
               "reads; then compare the masked-token predictions. The Features page shows what a feature fires on.")
    typed = "" if demo() else st.text_input("SAE folder (empty: the model's shipped SAEs)", key="int_feat_sae",
                                            max_chars=Limits.name_chars)
    source = sae_source(lm)
    if source is None:
        st.info(plain(f"{lm.name} ships no SAEs: train some with `python -m bertscope train-sae {lm.name} --out DIR` "
                      "and type DIR above (bundled-mlm ships one for each layer)."))
        return
    try:
        layers = sae_layers(source)
    except BertScopeError as err:
        st.error(plain_but_code(str(err)))
        return
    if not layers:
        st.error(plain(f"{source} holds no SAE (SAELens's cfg.json + sae_weights.safetensors, or layer_LL folders)."))
        return
    from_url("flayer", "int_feat_layer", int, lambda v: v in layers)
    from_url("feature", "int_feat_feature", int, lambda v: v >= 0)
    from_url("ftext", "int_feat_text")
    with st.form("int_feat_form"):
        c1, c2, c3, c4 = st.columns([1, 1, 1, 1])
        layer = held_choice("Layer", layers, "int_feat_layer", layers[min(1, len(layers) - 1)], container=c1)
        feature = c2.number_input("Feature", 0, None, 334, key="int_feat_feature")
        mode = c3.radio("Edit", list(MODES), format_func=MODES.get, key="int_feat_mode")
        strength = c4.number_input("Steering strength", -100.0, 100.0, 4.0, 0.5, key="int_feat_strength",
                                   help="Steer: added along the feature's unit direction (bundled-mlm's hidden states "
                                        "have norms about 10).")
        at = st.radio("Steer", list(AT), format_func=AT.get, horizontal=True, key="int_feat_at")
        text = st.text_area("Text with [MASK]", TEXT, key="int_feat_text", max_chars=Limits.input_chars)
        st.form_submit_button("Run", type="primary")
    to_url(flayer=layer, feature=feature, ftext=text if text != TEXT else None)
    with page_errors(stop=False):
        check_text(text)
        folder = sae_folder(source, layer)
        sae = result_store("sae").get_or_compute((str(folder.resolve()), key[1]), lambda: load_sae(folder, lm.device))
        sae.check_feature(feature)
        _edit_section(lm, sae, layer, int(feature), mode, float(strength), at, text, typed)
        _causal_section(lm, key, sae, folder, layer, int(feature))


def _edit_section(lm, sae, layer: int, feature: int, mode: str, strength: float, at: str, text: str,
                  typed: str) -> None:
    """The feature switched off or steered: the masked-token predictions before and after, a link to it."""
    edit = FeatureEdit(layer, feature, mode, strength if mode == "steer" else 0.0, at)
    result = edit_features(lm, text, {layer: sae}, [edit], top_k=10)
    did = "feature switched off" if mode == "remove" else f"feature steered by {strength:g}"
    show_mask_changes(result.masks, did)
    download("Download (JSON)", json.dumps(result.to_json()), "feature-edit.json", "application/json",
             key="int_feat_json")
    st.page_link(page("features.py").path, label=f"Feature {feature} on the Features page",
                 icon=":material/open_in_new:",
                 query_params={"layer": layer, "feature": feature, "feat_tab": "Feature"}
                 | ({"sae": typed.strip()} if typed.strip() else {}))


def _causal_section(lm, key, sae, folder: Path, layer: int, feature: int) -> None:
    """Does it carry its tag: the feature (with the others of its tag, if asked) off against a control, on a
    probe and on masked words."""
    st.markdown("**Does it carry its tag?** Switch it off and measure, on held-out Brown documents, a probe for "
                "the tag and masked-token accuracy on the tag's words, beside a control feature of the same "
                "firing count.")
    tag, group = _tag_and_group(lm, sae, layer, feature)
    asked = st.button("Run the causal check", key="int_feat_causal")
    effect = result_store("feature_causal").compute(
        (key, str(folder.resolve()), layer, tuple(group), tag),
        lambda progress: tag_effect(lm, sae, layer, group, tag, progress=progress),
        "Probe and masked words, steps", asked, costly="feature causal check",
        wait="Press *Run the causal check*: 1,000 training and 300 held-out Brown sentences through the "
             "model to the layer, a probe, then up to 300 masked words of the tag read three times (intact, "
             "features off, controls off) and as many other words twice (about 40 s on 2 CPU cores).")
    if effect is None:
        return
    rows = effect.rows()
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
        c: st.column_config.NumberColumn(format="%.3f") for c in rows[0] if c != "measure"})
    names = ", ".join(map(str, effect.features))
    st.caption(plain(f"Feature(s) {names} fire on {effect.fires_on_tag:.0%} of the held-out {tag} words; the "
                     f"controls ({', '.join(map(str, effect.controls))}) fire on as many words each but on the "
                     f"tag least. A masked word's own features are gone with it (its input is [MASK]): the "
                     "masked-LM rows measure what the features do at the other words. Features that carry "
                     "the tag move the rows more than their controls do."))
    download("Download the check (JSON)", json.dumps(effect.to_json()), "feature-tag-effect.json",
             "application/json", key="int_feat_causal_json")


def _tag_and_group(lm, sae, layer: int, feature: int) -> tuple[str, list[int]]:
    """The tag checked (the feature's own label by default) and the features switched off: it, and the others
    labelled with the tag when the user asks (at most ``MAX_EDITS`` together)."""
    stats = _kept_statistics(lm, sae, layer)
    label = stats.label(feature, "universal") if stats is not None else None
    c1, c2 = st.columns([1, 2])
    default = label.tag if label is not None else "VERB"
    tag = held_choice("Tag (Brown POS)", UNIVERSAL, f"int_feat_tag_{layer}_{feature}", default, container=c1)
    group = [feature]
    if label is not None:
        c2.caption(plain(f"Its label from the Features page's statistics: {TAGSET_NAMES[label.tagset]} "
                         f"{label.tag}, precision {label.precision:.2f}, recall {label.recall:.2f}."))
    if stats is not None:
        strong = [f for f in strong_features(stats, tag) if f != feature]
        if strong and c2.checkbox(f"With it, the {len(strong)} other feature(s) labelled {tag} (precision ≥ "
                                  f"{STRONG[0]}, recall ≥ {STRONG[1]}): {', '.join(map(str, strong[:12]))}",
                                  key=f"int_feat_group_{layer}_{feature}_{tag}"):
            group += strong[:MAX_EDITS - 1]  # the check switches off at most MAX_EDITS at once
    else:
        c2.caption("Index Brown on the Features page (this layer) to see the feature's label and switch off every "
                   "feature of a tag together.")
    return tag, group


def sae_source(lm) -> Path | None:
    """The SAEs the Features tab names (a typed folder), else the model's shipped ones."""
    typed = "" if demo() else str(st.session_state.get("int_feat_sae", "")).strip()
    return Path(typed) if typed else shipped_saes(lm.name)


def feature_patch_section(lm, key, clean: str, corrupt: str, a: str, b: str) -> None:
    """Below the Patching tab's grids: each SAE feature of a layer patched alone."""
    source = sae_source(lm)
    try:
        layers = sae_layers(source) if source is not None else []
    except BertScopeError:
        layers = []
    if not layers:
        st.caption(plain(f"With SAEs for {lm.name} (the Features tab), each feature of a layer could be patched alone "
                         "here too."))
        return
    st.markdown("**Which SAE features carry it?** Each feature whose activation differs between the two runs, at the "
                "positions where the texts differ and at the mask, put back alone from the clean run (its part of the "
                "reconstruction); beside it, the position's whole hidden state.")
    c1, c2 = st.columns([1, 3])
    layer = held_choice("SAE layer", layers, "int_patch_flayer", layers[min(2, len(layers) - 1)], container=c1)
    asked = c2.button("Patch the features", key="int_patch_features")
    with page_errors(stop=False):
        folder = sae_folder(source, layer)
        sae = result_store("sae").get_or_compute((str(folder.resolve()), key[1]), lambda: load_sae(folder, lm.device))
        result = result_store("patch_features").compute(
            (key, str(folder.resolve()), layer, clean, corrupt, a.strip(), b.strip()),
            lambda progress: patch_features(lm, sae, layer, clean, corrupt, (a, b), progress=progress),
            "Patching features, cells", asked, costly="patching run",
            wait="Press *Patch the features*: one pass of the corrupted text for every feature that differs (a few "
                 "hundred short passes).")
        if result is not None:
            st.caption(plain("The whole hidden state of layer " + str(layer) + " patched: " + ", ".join(
                f"{result.setup.tokens[p]} (position {p}) {v:.2f}" for p, v in sorted(result.whole.items()))
                + f"; {len(result.cells)} features patched one at a time, the 20 that move the metric most:"))
            st.dataframe(pd.DataFrame([c.to_json() for c in result.top(20)]), hide_index=True, width="stretch",
                         column_config={"recovered": st.column_config.NumberColumn(format="%.3f")})
            download("Download the feature patching (JSON)", json.dumps(result.to_json(top=200)),
                     "feature-patching.json", "application/json", key="int_patch_features_json")
