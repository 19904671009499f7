"""Which attribution to trust? Every method's ranking of the input tokens put to a deletion test
on the model's own masked-token predictions (or a fine-tuned classifier's predicted classes):
remove what a method ranks highest and watch p(y)."""

import json
from dataclasses import dataclass
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import Limits, check_text, demo
from bertscope.app.kit.model_picker import model_key, require_model
from bertscope.app.kit.results import result_store
from bertscope.app.kit.url import arrival, from_url, link_asks, to_url
from bertscope.attribution.class_items import brown_class_items, class_items
from bertscope.attribution.deletion import REMOVALS
from bertscope.attribution.faithfulness import FRACTIONS, RANDOM, check_methods, faithfulness
from bertscope.attribution.items import MAX_ITEM_TOKENS, brown_items, text_items
from bertscope.attribution.registry import METHODS, faithfulness_defaults
from bertscope.core.task_head import SEQUENCE
from bertscope.errors import BertScopeError
from bertscope.figures.faithfulness import method_label, perturbation_curves, removal_words, scoreboard_bars
from bertscope.figures.text import label

SIZES = [10, 25, 50, 100, 200]
STEPS = [8, 16, 32, 50]
EXAMPLE = ("The river was wide and the [MASK] was muddy.\nShe deposited the money in the bank.\n"
           "The keys to the cabinet [MASK] on the table.")
CLASS_EXAMPLE = ("What a wonderful day, the concert was brilliant!\nThe train was late again and nobody told us why.\n"
                 "The meeting is moved to Tuesday at ten.")


def max_items() -> int:
    return 50 if demo() else max(SIZES)


@dataclass(frozen=True)
class Form:
    """What the form asks for: the sentences, the methods and how tokens are removed."""

    source: str  # "brown" or "text"
    n: int  # Brown sentences
    text: str  # the user's lines
    methods: list[str]
    removal: str
    seed: int
    steps: int
    asked: bool  # the form's button, just now
    linked: bool  # the page opened by a shared link (its settings in the address)


def test_form(lm, classifier: bool) -> Form:
    """The form (and the link that restores it)."""
    CHOICES = [m for m in METHODS if METHODS[m].applies_to(lm)]  # the registry's, its floor included
    from_url("source", "faith_source", valid=lambda v: v in ("brown", "text"))
    from_url("n", "faith_n", int, lambda v: v in SIZES and v <= max_items())
    from_url("methods", "faith_methods", lambda v: [m for m in v.split(",") if m],
             lambda v: bool(v) and all(m in CHOICES for m in v))
    from_url("removal", "faith_removal", valid=lambda v: v in REMOVALS)
    from_url("seed", "faith_seed", int, lambda v: 0 <= v < 2**31)
    from_url("steps", "faith_steps", int, lambda v: v in STEPS)

    with st.form("faith_form"):
        c1, c2 = st.columns([1, 2])
        source = c1.radio("Sentences", ["brown", "text"], key="faith_source", horizontal=True,
                          format_func=lambda s: {"brown": "Brown corpus", "text": "my own"}[s])
        sizes = [s for s in SIZES if s <= max_items()]
        n = c1.select_slider("Brown sentences", sizes, 25, key="faith_n",
                             help="Spread over the 15 genres; " + ("each one classified by the model" if classifier else
                                                                   "a content word-piece (noun, verb, adjective, adverb) "
                                                                   "masked in each, chosen with the seed")
                                  + f"; at most {MAX_ITEM_TOKENS} tokens each.")
        if classifier:
            text = c2.text_area(f"My own texts (one a line, up to {max_items()}): y is the class the model predicts",
                                CLASS_EXAMPLE, key="faith_class_text", height=110, max_chars=Limits.corpus_chars)
        else:
            text = c2.text_area(f"My own sentences (one a line, up to {max_items()}): a line's [MASK] is used, else a "
                                "content word is masked", EXAMPLE, key="faith_text", height=110,
                                max_chars=Limits.corpus_chars)
        # every chosen method's name in sight: the list gets the whole width, the settings a row below
        methods = st.multiselect("Methods", CHOICES, list(faithfulness_defaults(lm)), key="faith_methods",
                                 format_func=method_label)
        c2, c3, c4 = st.columns([2, 1, 1])
        removal = c2.radio("Removing a token", REMOVALS, key="faith_removal", horizontal=True,
                           format_func=lambda r: {"attention": "attention mask", "mask": "[MASK]"}[r],
                           help="attention mask: no token attends to it, in any layer, and the others keep their "
                                "positions (ERASER's deletion); [MASK]: it is replaced by the mask token.")
        seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key="faith_seed")
        steps = c4.select_slider("IG steps", STEPS, 32, key="faith_steps")
        asked = st.form_submit_button("Run the test", type="primary")
    linked = "methods" in arrival()  # a shared link runs its own test on arrival, once

    to_url(source=source, n=n if source == "brown" else None, removal=removal, seed=int(seed) or None, steps=steps)
    # the methods join the address with a scoreboard on screen (run_test): the link's flag, so a reload of an empty
    # page runs nothing
    return Form(source, int(n), text, list(methods), removal, int(seed), int(steps), asked, linked)


def run_test(lm, key, classifier: bool, f: Form):
    """The scoreboard of the form's request: stored, computed now when asked (through the budget), or None while
    waiting for the button."""
    board = None
    try:
        with page_errors(stop=False):
            board = _scoreboard(lm, key, classifier, f)
    finally:  # a refusal, a failure or a Stop leaves no scoreboard on screen, nor the flag in the address
        to_url(methods=",".join(f.methods) if board is not None else None)
    return board


def _scoreboard(lm, key, classifier: bool, f: Form):
    """The form's request checked, then ``run_test``'s stored or computed scoreboard (None while waiting)."""
    source, n, text, removal, seed, steps = f.source, f.n, f.text, f.removal, f.seed, f.steps
    chosen = check_methods(f.methods)
    if source == "text":
        check_text(text, "sentences")
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > max_items():
            raise BertScopeError(f"{len(lines):,} sentences: this page takes up to {max_items()} (python -m "
                                 "bertscope faithfulness takes more).")
    request = (key, source, n if source == "brown" else text, chosen, removal, int(seed), steps)

    def work(progress):
        model = lm
        if source == "brown":
            progress(0, n, "Choosing Brown sentences")
            choose = brown_class_items if classifier else brown_items
            items, skipped, where = choose(model, n, int(seed)), 0, f"{n} Brown sentences"
        elif classifier:
            items, skipped = class_items(model, lines)
            where = "your texts"
        else:
            items, skipped = text_items(model, lines, int(seed))
            where = "your sentences"
        return faithfulness(model, items, chosen, removal, steps, int(seed), where, skipped,
                            progress=lambda done, total: progress(done, total, "Items scored and erased"))

    return result_store("faithfulness").compute(
        request, work, "Faithfulness test, items", f.asked or link_asks("faithfulness", f.linked, request),
        costly="faithfulness test",
        wait="Press *Run the test*. Every method scores every item, then each item's removals run as one batch "
             "(integrated gradients and Value Zeroing cost most). The bar times the first items on this machine "
             "and says how long the rest will take.")


def show(board) -> None:
    """The scoreboard: the table with intervals, the bars, the perturbation curves."""
    if board.skipped:
        st.info(plain(f"{board.skipped} line(s) left out: longer than {MAX_ITEM_TOKENS} tokens, or "
                      + ("with fewer than 3 tokens to remove." if board.decision == "class" else
                         "without a content word (Brown's tags) or a word beside the mask.")))
    summary = board.summary()

    def cell(stat: dict) -> str:
        return "–" if stat["mean"] is None else f"{stat['mean']:+.3f}  [{stat['low']:+.3f}, {stat['high']:+.3f}]"

    table = pd.DataFrame([{"method": method_label(m), "comprehensiveness ↑": cell(e["comprehensiveness"]),
                           "sufficiency ↓": cell(e["sufficiency"]), "ρ with leave-one-out ↑": cell(e["loo_spearman"]),
                           "seconds per item": e["seconds_per_item"]} for m, e in summary.items()])
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={"seconds per item": st.column_config.NumberColumn(format="%.2f")})
    ranked = [m for m in summary if m != RANDOM and summary[m]["comprehensiveness"]["mean"] is not None]
    if ranked and RANDOM in summary:
        best = max(ranked, key=lambda m: summary[m]["comprehensiveness"]["mean"])
        floor = summary[RANDOM]["comprehensiveness"]
        above = [m for m in ranked if summary[m]["comprehensiveness"]["low"] > floor["high"]]
        st.caption(plain(
            f"{len(board.results)} items ({board.source}); {removal_words(board.removal)}. Each figure is the mean "
            f"over items of p(y) lost, averaged over removing k = {', '.join(f'{f:.0%}' for f in FRACTIONS)} of the "
            f"candidate tokens (AOPC), with a 95% bootstrap interval. Most comprehensive here: {method_label(best)}. "
            + (f"Clearly above the random floor (intervals apart): {', '.join(method_label(m) for m in above)}."
               if above else "No method's interval clears the random floor's: on this sample none is shown to be "
                             "more faithful than chance.")))
    fig = scoreboard_bars(board)
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="faith_bars")
    figure_downloads(fig, "faithfulness-scoreboard")
    curves = perturbation_curves(board)
    st.plotly_chart(curves, config=PLOT_CONFIG, width="stretch", key="faith_curves")
    figure_downloads(curves, "faithfulness-curves")


def disagreements(lm, board) -> None:
    """The items where the methods disagree most, linked to the page that explains each, and one item's scores."""
    st.subheader("Where the methods disagree most")
    disagreement = np.array(board.disagreement())
    order = [i for i in np.argsort(-np.nan_to_num(disagreement, nan=-1)) if np.isfinite(disagreement[i])][:5]
    if not order:
        st.info("Too few tokens per item, or one method only: nothing to compare.")
    else:
        rows, links = [], []
        for n_, i in enumerate(order, 1):
            r = board.results[i]
            it = r.item
            if it.decision == "class":
                link = "./predictions?" + urlencode({"model": lm.name, "text": it.text})
            else:
                link = "./masked?" + urlencode({"model": lm.name, "text": it.masked_text,
                                                "mlm_tab": "Why this prediction?"})
            candidates = it.candidates()
            top = {method_label(m): label(it.inspection.tokens[candidates[int(np.argmax(s[candidates]))]])
                   for m, s in r.scores.items()}
            rows.append({"#": n_, "sentence": it.masked_text, "y": label(it.target), "p(y)": r.p_full,
                         "disagreement": disagreement[i],
                         **{f"top: {m}": t for m, t in top.items()},  # a column a method: nothing cut off
                         "source": it.source})
            links.append(f"[{n_}]({link})")
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
            "p(y)": st.column_config.NumberColumn(format="%.3f"),
            "disagreement": st.column_config.NumberColumn(format="%.2f",
                                                          help="1 − the mean Spearman between methods' rankings")})
        where = ("the Predictions page (its *Why this decision?*)" if board.decision == "class" else
                 "the Masked page's *Why this prediction?* (every method on that one prediction)")
        st.markdown(f"Open in {where}: " + " · ".join(links))
        pick = held_choice("Scores of one item", order, key="faith_item",
                           format_func=lambda i: board.results[i].item.masked_text[:90])
        r = board.results[pick]
        candidates = r.item.candidates()
        tokens = [f"{c}: {label(r.item.inspection.tokens[c])}" for c in candidates]
        names = list(r.scores)
        z = np.stack([r.scores[m][candidates] / max(1e-12, float(np.abs(r.scores[m][candidates]).max()))
                      for m in names])  # [method, candidate] each row over its largest magnitude
        drop = r.loo_drop / max(1e-12, float(np.abs(r.loo_drop).max()))
        rows_y = [method_label(m) for m in names] + ["leave-one-out drop"]
        # one trace, one row per method and the erasure's own row last: every row sits on its label
        heat = go.Figure(go.Heatmap(z=np.vstack([z, drop[None, :]]), x=tokens, y=rows_y, colorscale="RdBu",
                                    zmid=0, zmin=-1, zmax=1, colorbar=dict(title="score / max"),
                                    hovertemplate="%{y} · %{x}: %{z:.2f}<extra></extra>"))
        heat.add_hline(y=len(names) - 0.5, line=dict(color="black", width=2))  # methods above, the erasure below
        heat.update_layout(height=120 + 28 * (len(names) + 1), margin=dict(t=50, b=40),
                           title=(f"“{label(r.item.target)}” "
                                  + ("(class)" if r.item.decision == "class" else f"at token {r.item.mask_position}")
                                  + f", p(y) {r.p_full:.3f}: "
                                       "each method's scores over its largest magnitude"),
                           yaxis=dict(autorange="reversed"))
        st.plotly_chart(heat, config=PLOT_CONFIG, width="stretch", key="faith_item_scores")


def page() -> None:
    st.title("Faithfulness")  # the sidebar's name (kit.pages)
    st.subheader("Which attribution to trust?")
    lm = require_model()
    key = model_key()
    classifier = lm.task is not None and lm.task.kind == SEQUENCE and lm.task.scoring != "none"
    st.caption("Each attribution method ranks the input tokens behind a prediction; this page tests the rankings "
               "on the model itself (DeYoung et al. 2020, ERASER). "
               + ("This model is a fine-tuned classifier: y is the class it predicts for each text, p(y) its head's "
                  "probability, and the matrix methods read [CLS]'s row (the token its head reads). " if classifier else
                  "In each sentence one word-piece of a content word is masked and y is the model's own top prediction "
                  "there. ")
               + "Removing the tokens a method ranks highest "
               "should cost p(y) much (comprehensiveness); keeping only them should cost little (sufficiency); and a "
               "method's ranking should agree with removing one token at a time (leave-one-out). Random ranking is "
               "the floor.")
    f = test_form(lm, classifier)
    board = run_test(lm, key, classifier, f)
    if board is not None:
        show(board)
        disagreements(lm, board)
        download("Download the scoreboard (JSON, every item)", json.dumps(board.to_json()),
                 "faithfulness.json", "application/json", key="faith_json")


if __name__ == "__main__":  # Streamlit runs a page as __main__; importing it (docs, doctests) runs nothing
    page()
