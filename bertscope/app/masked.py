"""Masked tokens: fill-mask, BERT's 80/10/10 recipe, layer-wise predictions, next sentence."""

import json

import pandas as pd
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.pages import page as page_record
from bertscope.app.kit.results import result_store
from bertscope.app.kit.training import training_allowed
from bertscope.app.kit.url import from_url, tab_from_url, to_url
from bertscope.attribution.explain import explain_prediction
from bertscope.core.layers import hidden_name
from bertscope.figures.attribution import token_strip
from bertscope.figures.masked import lens_kl_figure, prediction_bars, rank_by_layer
from bertscope.figures.text import label, table_text
from bertscope.lenses.readings import lens_readings
from bertscope.lenses.shipped import SHIPPED as SHIPPED_LENSES
from bertscope.lenses.shipped import find_lens, has_lens
from bertscope.mlm.fill_mask import MAX_MASKS, fill_mask, fill_mask_words, iterative_fill, mask_spellings, words_of
from bertscope.mlm.logit_lens import layerwise_predictions
from bertscope.mlm.nsp import both_orders, sentence_order
from bertscope.mlm.recipe import mlm_recipe, recipe_corruption


def cached_fill(lm, key, text: str, top_k: int):
    return result_store("fill").get_or_compute((key, text, top_k), lambda: fill_mask(lm, text, top_k))


def cached_fill_words(lm, key, text: str, words: tuple[int, ...], top_k: int):
    return result_store("fill_words").get_or_compute(
        (key, text, words, top_k), lambda: fill_mask_words(lm, text, list(words), top_k))


def cached_iterative(lm, key, text: str, words: tuple[int, ...] | None):
    def run():
        start = fill_mask(lm, text, 1) if words is None else fill_mask_words(lm, text, list(words), 1)
        return iterative_fill(lm, start)

    return result_store("iterative").get_or_compute((key, text, words), run)


def recipe_form(submit: str) -> tuple[str, int, float, float, float]:
    """BERT's recipe's inputs (text, seed, rates), kept in the URL."""
    from_url("rtext", "mlm_recipe_text")
    from_url("seed", "mlm_seed", int, lambda v: 0 <= v <= 10_000)
    from_url("select", "mlm_select", float, lambda v: 0.05 <= v <= 0.5)
    with st.form("mlm_recipe_form"):
        text = st.text_area("Text", "The man went to the store to buy a gallon of milk, "
                            "but the shop had closed early that evening.", key="mlm_recipe_text",
                            max_chars=Limits.input_chars)
        c1, c2, c3, c4 = st.columns(4)
        seed = c1.number_input("Seed", 0, 10_000, 0, key="mlm_seed")
        select_rate = c2.slider("Chosen for the loss", 0.05, 0.5, 0.15, 0.01, key="mlm_select")
        mask_rate = c3.slider("…of which [MASK]", 0.0, 1.0, 0.8, 0.05, key="mlm_mask_rate")
        random_rate = c4.slider("…random token", 0.0, 1.0, 0.1, 0.05, key="mlm_random_rate")
        st.form_submit_button(submit, type="primary")
    to_url(rtext=text, seed=int(seed) or None, select=select_rate if abs(select_rate - 0.15) > 1e-9 else None)
    return text, int(seed), select_rate, mask_rate, random_rate


def recipe_without_head(lm) -> None:
    """What the page can still show for a model without a masked-LM head: BERT's corruption of a text."""
    st.caption("Nothing on this page is simulated: without the checkpoint's trained head there is "
               f"nothing honest to show. {lm.name} ships without one.")
    st.subheader("BERT's recipe on this tokenizer")
    st.caption("What BERT's data generator would feed the model (Devlin et al. 2019, §3.1: 15% of the "
               "tokens chosen; of those 80% [MASK], 10% a random token, 10% unchanged). Predicting the "
               "originals, the loss and the accuracy need a masked-LM head.")
    text, seed, select_rate, mask_rate, random_rate = recipe_form("Corrupt")
    with page_errors(stop=False):
        view = recipe_corruption(lm, text, seed, select_rate, mask_rate, random_rate)
        st.dataframe(pd.DataFrame(view.rows()).map(lambda v: table_text(v) if isinstance(v, str) else v),
                     hide_index=True, width="stretch")
        chosen = set(view.corruption.actions)
        st.caption(plain("Corrupted input (▸ = in the loss): " + " ".join(
            f"▸{t}" if i in chosen else t for i, t in enumerate(view.corrupted_tokens))))

TABS = ["Fill mask", "Why this prediction?", "Pretraining recipe (80/10/10)", "Layer by layer", "Next sentence"]


def tuned_lens_section(lm, result, which: int, layer_names: list[str]) -> None:
    """The tuned lens beside the logit lens at the chosen mask, when the model has one (shipped or trained)."""
    st.markdown("**The tuned lens** (Belrose et al. 2023): an affine translator a layer, trained so the head reads "
                "each layer's state as it reads the last one's. It shows what each layer already carries toward the "
                "final answer, where the logit lens shows only what the head can read off it unchanged.")
    if not has_lens(lm):
        st.caption(plain(f"No tuned lens for {lm.name} here (shipped for {', '.join(SHIPPED_LENSES)}). Train one "
                         f"headless: bertscope train-tuned-lens {lm.name} (a few minutes on a CPU)."))
        return
    lens = find_lens(lm)
    read = lens_readings(lm, lens, result.inspection.text, which, top_k=5)
    st.dataframe(pd.DataFrame([{"layer": str(r.layer), "tuned lens": ", ".join(f"{table_text(t.strip())} ({p:.2f})"
                                                                               for t, p in r.tuned[:3]),
                                "KL tuned": r.kl_tuned, "logit lens": ", ".join(
                                    f"{table_text(t.strip())} ({p:.2f})" for t, p in r.logit[:3]),
                                "KL logit": r.kl_logit, "rank of final answer (tuned)": r.final_rank_tuned}
                               for r in read.layers]), hide_index=True, width="stretch", key="mlm_tuned_table",
                 column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ("KL tuned", "KL logit")})
    st.plotly_chart(lens_kl_figure(read.layers, layer_names, "prediction"), config=PLOT_CONFIG, width="stretch",
                    key="mlm_tuned_chart")
    st.caption(plain(f"The lens was trained {lens.meta.steps} steps on {lens.meta.trained_on or 'its texts'}; "
                     "headless: bertscope tuned-lens MODEL TEXT."))


def fill_tab(lm, key):
    """Fill-mask (masks typed, or words picked); returns (the result or None, the text, the words picked) that the
    other tabs read."""
    result = None
    text = ""
    from_url("text", "mlm_text")
    from_url("k", "mlm_top_k", int, lambda v: 1 <= v <= 20)
    from_url("wtext", "mlm_words_text")
    if "wtext" in st.query_params and "mlm_mode" not in st.session_state:
        st.session_state["mlm_mode"] = "Pick words to mask"
    mode = st.radio("Masks", ["Type [MASK] in the text", "Pick words to mask"], horizontal=True, key="mlm_mode")
    top_k = st.slider("Top k", 1, 20, 5, key="mlm_top_k")
    words: tuple[int, ...] | None = None
    with page_errors(stop=False):
        if mode.startswith("Type"):
            with st.form("mlm_fill_form"):  # run on the button, as every page does
                text = st.text_area(f"Text (up to {MAX_MASKS} masks, written {mask_spellings(lm.mask_token)})",
                                    "He deposited the money in the [MASK].", key="mlm_text",
                                    max_chars=Limits.input_chars)
                st.form_submit_button("Run", type="primary")
            to_url(text=text, k=top_k)
            check_text(text)
            result = cached_fill(lm, key, text, top_k)
        else:
            with st.form("mlm_words_form"):
                text = st.text_area("Text", "The quick brown fox jumps over the lazy dog.", key="mlm_words_text",
                                    max_chars=Limits.input_chars)
                st.form_submit_button("Run", type="primary")
            check_text(text)
            _, names = words_of(lm, text)
            from_url("words", "mlm_words", lambda v: [int(i) for i in v.split(",") if i],
                     lambda v: bool(v) and all(0 <= i < len(names) for i in v))
            picked = st.multiselect("Words to mask (all their pieces are masked)", range(len(names)),
                                    format_func=lambda i: f"{i}: {names[i]}", key="mlm_words")
            to_url(wtext=text, words=",".join(map(str, sorted(picked))) or None, k=top_k)
            if picked:
                words = tuple(sorted(picked))
                result = cached_fill_words(lm, key, text, words, top_k)
            else:
                st.info("Pick one or more words to mask.")
    if result is not None:
        for warning in result.warnings:
            st.warning(warning)
        st.caption(plain("Model input: " + " ".join(result.inspection.tokens)))
        columns = st.columns(min(3, len(result.predictions)))
        for n, preds in enumerate(result.predictions):
            position = result.mask_positions[n]
            title = f"Mask {n + 1} (token {position})"
            if result.original_ids is not None:
                title += f": was “{lm.tokenizer.decode([result.original_ids[position]]).strip()}”"
            with columns[n % len(columns)]:
                st.plotly_chart(prediction_bars(preds, title), config=PLOT_CONFIG, width="stretch",
                                key=f"mlm_bar_{n}")
        st.caption("Each mask's distribution is independent (one forward pass, as the Hugging Face "
                   "fill-mask pipeline).")
        if len(result.predictions) > 1 and st.toggle("Fill iteratively, most confident first", key="mlm_iter"):
            it = cached_iterative(lm, key, text, words)
            st.dataframe(pd.DataFrame([{"step": s.step + 1, "token position": s.position,
                                        "filled with": s.prediction.token.strip(),
                                        "probability": s.prediction.score} for s in it.steps]),
                         hide_index=True)
            st.metric("Joint probability of the fill", f"{it.joint_probability:.3g}")
            st.caption(plain(f"Filled: {it.text}"))
    return result, text, words


def why_tab(lm, key, result, open_: bool) -> None:
    """Integrated gradients and gradient × input for one prediction, and their agreement with attention's views."""
    st.caption("Which input tokens the prediction at a mask rests on. Gradient × input and integrated "
               "gradients (Sundararajan et al. 2017) explain log p(token) through the input embeddings; "
               "the agreement table below sets them beside the mask's row after the last layer in raw attention, "
               "rollout (Abnar & Zuidema 2020), norm-based attention (Kobayashi et al. 2020) and ALTI (Ferrando "
               "et al. 2022); the Attention page draws those in full.")
    if result is None:
        st.info("Run a fill-mask first (first tab).")
    elif open_:  # integrated gradients run only when this tab is looked at
        w1, w2, w3 = st.columns([1, 2, 1])
        mask_n = held_choice("Mask", range(len(result.mask_positions)), format_func=lambda n: f"mask {n + 1}",
                             key="why_mask", container=w1)
        candidates = [p.token for p in result.predictions[mask_n]]
        token = held_choice("Explain the prediction", candidates, key="why_token", container=w2,
                            format_func=lambda t: f"{t.strip()} ({result.predictions[mask_n][candidates.index(t)].score:.1%})")
        steps = w3.select_slider("IG steps", [8, 16, 32, 50, 100, 200], 50, key="why_steps")
        position = result.mask_positions[mask_n]
        with page_errors(stop=False):
            store = result_store("explain")
            request = (key, tuple(int(i) for i in result.inspection.input_ids), position, token, steps)
            explanation = store.compute(request, lambda progress: explain_prediction(
                lm, result.inspection, position, token, steps, progress=progress),
                "Integrated gradients, steps", costly="explanation")
            ig = explanation.ig
            for warning in ig.warnings:
                st.warning(plain(warning))
            shown = label(token.strip())
            st.plotly_chart(token_strip(explanation.tokens, ig.scores,
                                        f"Integrated gradients for “{shown}” at token {position}"),
                            config=PLOT_CONFIG, width="stretch", key="why_ig")
            st.plotly_chart(token_strip(explanation.tokens, explanation.grad.scores,
                                        f"Gradient × input for “{shown}” at token {position}"),
                            config=PLOT_CONFIG, width="stretch", key="why_grad")
            big_ig = 0.05 * max(float(abs(ig.scores).max()), 1e-12)  # each method on its own scale
            big_grad = 0.05 * max(float(abs(explanation.grad.scores).max()), 1e-12)
            opposite = [label(t) for t, x, y in zip(explanation.tokens, ig.scores, explanation.grad.scores)
                        if x * y < 0 and abs(x) > big_ig and abs(y) > big_grad]
            if opposite:
                st.caption(plain(f"The two give opposite signs to {', '.join(opposite[:8])}"
                                 f"{' …' if len(opposite) > 8 else ''}: gradient × input reads the slope at the "
                                 "input alone (one point), integrated gradients add the slope up along the whole "
                                 "path from the baseline. Where the model is far from linear on that path "
                                 "(a saturated softmax, LayerNorm), a token can help near the input and hurt "
                                 "on the way, or the reverse; only IG's scores add up to the change from the "
                                 "baseline (completeness), so read IG's sign when they disagree."))
            a = ig.attribution
            st.caption(plain(f"log p(“{token.strip()}”) = {a.f_input:.3f}; at the baseline (every word piece "
                             f"replaced by the padding token) {a.f_baseline:.3f}. The IG scores sum to "
                             f"{a.scores.sum():.3f}: completeness error {a.completeness_error:.2%} at {a.steps} "
                             "steps. Red pushes the prediction up, blue down."))
            st.markdown("**Agreement between methods** (Spearman over the word pieces; gradient methods by magnitude)")
            st.dataframe(pd.DataFrame(explanation.spearman, index=explanation.names, columns=explanation.names)
                         .style.format("{:+.2f}").background_gradient(cmap="RdBu", vmin=-1, vmax=1),
                         width="stretch")
            table = pd.DataFrame({"token": explanation.tokens, **explanation.rows})
            download("Download scores (CSV)", table.to_csv(index=False), "why-this-prediction.csv",
                     "text/csv", key="why_csv")
            download("Download IG (JSON)", json.dumps(ig.to_json()), "integrated-gradients.json",
                     "application/json", key="why_json")


def recipe_tab(lm) -> None:
    """BERT's 80/10/10 corruption of a text and the head's predictions at the chosen positions."""
    st.caption("Devlin et al. (2019), §3.1: choose 15% of the tokens; of those, 80% become [MASK], "
               "10% a random token, 10% stay. The loss counts only the chosen positions "
               "(labels are -100 elsewhere).")
    recipe_text, seed, select_rate, mask_rate, random_rate = recipe_form("Corrupt and predict")
    with page_errors(stop=False):
        check_text(recipe_text)
        recipe = mlm_recipe(lm, recipe_text, int(seed), select_rate, mask_rate, random_rate)
        m1, m2, m3 = st.columns(3)
        m1.metric("Mean MLM loss (nats)", f"{recipe.mean_loss:.3f}")
        m2.metric("Recovered", f"{recipe.accuracy:.0%}")
        m3.metric("Positions in the loss", len(recipe.positions))
        st.dataframe(pd.DataFrame([
            {"position": p.position, "original": table_text(p.original), "model saw": table_text(p.shown),
             "action": p.action,
             "top prediction": p.top[0].token.strip(), "p(top)": p.top[0].score,
             "cross-entropy": p.loss, "recovered": p.recovered} for p in recipe.positions]),
            hide_index=True, width="stretch")
        chosen = {p.position for p in recipe.positions}
        st.caption(plain("Corrupted input (▸ = in the loss): " + " ".join(
            f"▸{t}" if i in chosen else t for i, t in enumerate(recipe.corrupted.tokens))))


def layers_tab(lm, result) -> None:
    """The logit lens at every layer, and the tuned lens beside it."""
    st.caption("The MLM head read at every layer (a logit lens). Only the last layer was trained to "
               "feed this head: earlier rows show when the answer becomes readable, not what those "
               "layers were trained to predict.")
    if result is None:
        st.info("Run a fill-mask first (first tab).")
    else:
        which = held_choice("Mask", range(len(result.mask_positions)),
                            format_func=lambda n: f"mask {n + 1}", key="mlm_lens_mask")
        with page_errors(stop=False):
            readings = layerwise_predictions(lm, result, which, top_k=5)
            st.dataframe(pd.DataFrame([
                {"layer": hidden_name(r.layer), "rank of final answer": r.final_rank,
                 **{f"#{i + 1}": f"{p.token.strip()} ({p.score:.2f})" for i, p in enumerate(r.top)}}
                for r in readings]), hide_index=True, width="stretch")
            layer_names = [hidden_name(r.layer) for r in readings]
            st.plotly_chart(rank_by_layer(readings, layer_names), config=PLOT_CONFIG, width="stretch")
            tuned_lens_section(lm, result, which, layer_names)


def next_sentence_tab(lm) -> None:
    """BERT's next-sentence head (or ALBERT's sentence order) on two texts, both ways round."""
    pair_head = "sop" if "sop" in lm.outputs else "nsp" if "nsp" in lm.outputs else None
    if pair_head is None:
        st.info(plain(f"{lm.name} has no next-sentence-prediction head: BERT's own pretraining checkpoints carry "
                      "one (bert-base-uncased, bert-large-uncased, bert-base-multilingual-cased), ALBERT's a "
                      "sentence-order head; none of the offline models does. Offline, train one here: the "
                      "Pretraining page's objective “+ next-sentence prediction” adds BERT's NSP head to the "
                      "sidebar's model and trains it on Brown sentence pairs (headless: python -m bertscope "
                      "pretrain bundled-mlm --corpus brown --pair nsp --out runs/nsp); then open the run's "
                      "folder in the sidebar and come back to this tab."))
        if training_allowed():
            st.button("Go to the Pretraining page with that objective", icon=":material/arrow_forward:",
                      key="nsp_go_pretrain", on_click=lambda: st.session_state.__setitem__("pretrain_pair", "nsp"))
            if st.session_state.get("pretrain_pair") == "nsp" and st.session_state.get("nsp_go_pretrain"):
                st.switch_page(page_record("pretrain.py").path)
    else:
        part = "Segment" if pair_head == "sop" else "Sentence"
        from_url("a", "nsp_a")
        from_url("b", "nsp_b")
        a = st.text_area(f"{part} A", "The man went to the store.", key="nsp_a", max_chars=Limits.input_chars)
        b = st.text_area(f"{part} B", "He bought a gallon of milk.", key="nsp_b", max_chars=Limits.input_chars)
        to_url(a=a, b=b)
        with page_errors(stop=False):
            check_text(a, f"{part.lower()} A")
            check_text(b, f"{part.lower()} B")
            c1, c2 = st.columns(2)
            if pair_head == "sop":  # ALBERT: sentence order, from its own head
                kept, swapped = sentence_order(lm, a, b), sentence_order(lm, b, a)
                c1.metric("A then B: in order", f"{kept.in_order:.1%}")
                c2.metric("B then A: in order", f"{swapped.in_order:.1%}")
                st.caption("ALBERT's sentence-order prediction (Lan et al. 2020, §4.1): two consecutive "
                           "segments, in order or swapped, so topic alone cannot give the answer away.")
            else:
                forward, backward = both_orders(lm, a, b)
                c1.metric("A then B: IsNext", f"{forward.is_next:.1%}")
                c2.metric("B then A: IsNext", f"{backward.is_next:.1%}")
                st.caption("The swapped order is the idea of ALBERT's sentence-order prediction "
                           "(Lan et al. 2020): BERT's NSP mostly detects topic change, not order.")


def page() -> None:
    st.title("Masked tokens")
    lm = require_model(fallback=recipe_without_head)  # the page's record needs a masked-LM head
    key = model_key()
    tab_from_url("mlm_tab", TABS)
    tab_fill, tab_why, tab_recipe, tab_layers, tab_nsp = st.tabs(TABS, key="mlm_tab", on_change="rerun")
    with tab_fill:
        result, _, _ = fill_tab(lm, key)
    with tab_why:
        why_tab(lm, key, result, tab_why.open)
    with tab_recipe:
        recipe_tab(lm)
    with tab_layers:
        layers_tab(lm, result)
    with tab_nsp:
        next_sentence_tab(lm)


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
