"""The Compare page's tab "Latents": what fine-tuning added, latent by latent. A crosscoder over model A (the
base) and model B (fine-tuned from it), read on held-out text (``features.diff_reading``, through the cost budget
with a bar and a Stop): the relative-norm histogram, the fine-tuned-only latents with their strongest contexts,
gold labels and the labels they push through a tagger's head, any latent looked up, and the causal check."""

import json

import pandas as pd
import streamlit as st

from bertscope import BertScopeError
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, demo
from bertscope.app.kit.results import result_store
from bertscope.features.diff_reading import DiffReading, crosscoder_for, crosscoder_layers, read_diff
from bertscope.features.model_diff import CLASSES
from bertscope.features.shipped import SHIPPED_CROSSCODERS
from bertscope.figures.model_diff import relative_norm_figure

EXAMPLES = [100, 250, 500]
NUMBER = st.column_config.NumberColumn(format="%.3f")
EDIT_WORDS = {"intact": "intact", "spliced": "the crosscoder's reconstruction spliced in",
              "removed": "the fine-tuned-only latents off", "control": "as many controls off (matched removal)",
              "base read": "the base's layer output in its place"}


def render(lm_a, key_a, lm_b, key_b) -> None:
    st.caption("A crosscoder (Lindsey et al. 2024) is one sparse dictionary read from and written to both models' "
               "outputs at a layer. A latent whose decoder is long only in B is one fine-tuning added; Latent Scaling "
               "(Minder, Dumas et al. 2025) tells real ones from artifacts of the sparsity. The causal check switches "
               "them off inside B and reads its task accuracy, beside as many control latents whose removal takes out as "
               "much. Model A is the base, model B the fine-tuned model. Headless: `bertscope diff-features A B`.")
    shipped = ", ".join(f"{base} (A) with {tuned} (B)" for base, tuned in SHIPPED_CROSSCODERS)
    typed = "" if demo() else st.text_input("Crosscoder folder (a `train-crosscoder --out` folder); empty: the one "
                                            "shipped for A and B", key="diff_cc", max_chars=Limits.name_chars)
    try:
        source, layers = crosscoder_layers(lm_a, lm_b, typed.strip() or None)
    except BertScopeError as err:  # a typed folder that is none is a bad input; a pair with none shipped is not
        (st.error if typed.strip() else st.info)(plain(f"{err} Crosscoders ship for {shipped}."))
        return
    with st.form("diff_form"):
        c1, c2 = st.columns([1, 2])
        layer = held_choice("Layer", layers, "diff_layer", layers[-1], container=c1,
                            help="The crosscoder reads both models' output of this layer (blocks.L.hook_resid_post).")
        examples = c2.select_slider("Held-out task examples for the causal check", EXAMPLES, 250, key="diff_examples",
                                    help="The tweets' held-out tenth for a classifier, EWT's dev side for a tagger.")
        asked = st.form_submit_button("Read the crosscoder", type="primary")
    request = (key_a, key_b, str(source), int(layer), int(examples))
    store = result_store("model diff")
    with page_errors(stop=False):
        reading = store.compute(request, lambda progress: _read(lm_a, lm_b, typed, int(layer), int(examples),
                                                                progress),
                                "Reading the crosscoder", asked, costly="crosscoder reading",
                                wait="Press *Read the crosscoder*: both models read held-out text of every installed "
                                     "corpus, then B's task examples run with the latents switched off.")
        if reading is not None:
            show(reading)


def _read(lm_a, lm_b, typed: str, layer: int, examples: int, progress) -> DiffReading:
    cc, path, layer = crosscoder_for(lm_a, lm_b, typed.strip() or None, layer)
    return read_diff(lm_a, lm_b, cc, path, layer, held_out=100 if demo() else 200, examples=examples,
                     progress=progress)


def show(r: DiffReading) -> None:
    d = r.diff
    counts = d.counts()
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Variance explained, A", f"{d.fve[0]:.3f}")
    c2.metric("Variance explained, B", f"{d.fve[1]:.3f}")
    c3.metric("Latents a token", f"{d.l0:.1f}")
    c4.metric("Fine-tuned-only (real)", f"{counts['fine-tuned-only']:,} ({counts['fine-tuned-only, real']:,})")
    st.caption(plain(f"{r.path}: {r.d_sae:,} latents, k = {r.k}, read on {d.tokens:,} held-out word pieces of "
                     f"{', '.join(f'{n} {s}' for s, n in r.sources.items())} texts."))
    fig = relative_norm_figure(d, r.models)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="diff_hist")
    figure_downloads(fig, "relative-norms")
    _causal(r)
    _latents(r)
    _look_up(r)
    download("Download (JSON)", json.dumps(r.to_json()), "model-diff.json", "application/json",
             key="diff_json")


def _causal(r: DiffReading) -> None:
    st.markdown("**The causal check**")
    e = r.effect
    if e is None:
        st.info(plain(f"Not run: {r.note}."))
        return
    rows = [{"B's held-out accuracy": EDIT_WORDS[name], "accuracy": e.accuracy[name],
             "change from intact": e.accuracy[name] - e.accuracy["intact"],
             "agreement with the base read": e.agreement_with_base.get(name)} for name in e.accuracy]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="diff_causal",
                 column_config={"accuracy": NUMBER, "change from intact": NUMBER,
                                "agreement with the base read": NUMBER})
    scored = f"{e.scored:,} {'words' if e.task == 'tag' else 'texts'}"
    st.caption(plain(f"{e.data}: {e.examples:,} examples ({scored}). {len(e.latents)} fine-tuned-only latents off: "
                     f"{e.accuracy['intact'] - e.accuracy['removed']:+.3f} accuracy lost; as many controls: "
                     f"{e.accuracy['intact'] - e.accuracy['control']:+.3f}. "
                     + ("Only [CLS] is edited: this crosscoder reads it alone, as the classifier's head does."
                        if r.positions == "cls" else
                        "[CLS] and [SEP] are never edited: the crosscoder reads word pieces only.")))


def _latents(r: DiffReading) -> None:
    d = r.diff
    ft = [int(j) for j in (d.classes == CLASSES.index("fine-tuned-only")).nonzero()[0]]
    st.markdown(f"**The {len(ft):,} fine-tuned-only latents** (relative norm ≥ 0.9), most frequent first")
    if not ft:
        return
    e = r.effect
    rows = []
    for j in sorted(ft, key=lambda j: -int(d.fires[j]))[:200]:
        top = e.contexts.get(j) if e is not None else None
        gold = e.gold_counts.get(j, {}) if e is not None else {}
        rows.append({"latent": j, "relative norm": float(d.delta[j]), "fires": int(d.fires[j]),
                     "ν error": float(d.nu_error[j]), "ν reconstruction": float(d.nu_reconstruction[j]),
                     "real": bool(d.real_fine_tuned_only[j]),
                     "switched off": e is not None and j in e.latents,
                     "pushes": ", ".join(label for label, _ in r.pushes(j, 2)),
                     "gold where it fires": ", ".join(f"{k} {v}" for k, v in list(gold.items())[:3]),
                     "strongest piece": f"{top[0].token} · {top[0].text[:60]}" if top else ""})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="diff_latents",
                 column_config={"relative norm": NUMBER, "ν error": NUMBER, "ν reconstruction": NUMBER})
    st.caption("Real: |ν error| < 0.2 and |ν reconstruction| < 0.5 (the paper's thresholds): the base needs the "
               "latent little (no shrinkage) and no other latent rebuilds it there (no decoupling). Pushes: the labels "
               "whose logit the latent's direction in B raises most, read by a tagger's head at its last layer.")


def _look_up(r: DiffReading) -> None:
    d = r.diff
    j = int(st.number_input("Look up a latent", 0, r.d_sae - 1, int(r.effect.latents[0]) if r.effect else 0,
                            key="diff_latent"))
    cls = CLASSES[d.classes[j]]
    st.markdown(plain(f"Latent {j}: {cls}; decoder norm {d.norms[0, j]:.3f} in A, {d.norms[1, j]:.3f} in B "
                      f"(relative {d.delta[j]:.3f}, cosine {d.cosine[j]:.3f}); fires on {int(d.fires[j]):,} held-out "
                      "word pieces."))
    pushes = r.pushes(j, 5)
    if pushes:
        st.caption(plain("Pushes in B's head: " + ", ".join(f"{label} {w:+.2f}" for label, w in pushes)))
    e = r.effect
    if e is not None and j in e.contexts:
        st.dataframe(pd.DataFrame([c.to_json() for c in e.contexts[j]]), hide_index=True, width="stretch",
                     key="diff_contexts", column_config={"activation": NUMBER})
    elif e is not None:
        st.caption("Its strongest task contexts are kept for the latents the causal check switched off.")
