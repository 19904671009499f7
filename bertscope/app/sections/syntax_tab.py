"""The Probes page's Syntax tab: Hewitt & Manning's structural probes on UD English-EWT at every
hidden state (through the cost budget), the scores by layer beside the chain, one test sentence's
gold and predicted trees and distance matrices, a typed sentence's predicted tree, and the label
probes (UPOS, dependency labels) on the same treebank."""

import json

import pandas as pd
import streamlit as st

from bertscope.analysis.structural_probe import tree_distances
from bertscope.analysis.structural_runs import structural_probes
from bertscope.app.kit.chrome import PLOT_CONFIG, download, figure_downloads, page_errors, plain
from bertscope.app.kit.estimates import expected
from bertscope.app.kit.held import held_choice
from bertscope.app.kit.limits import demo
from bertscope.app.kit.results import result_store
from bertscope.app.sections import treebank_labels_view, typed_tree_view
from bertscope.core.layers import layer_title
from bertscope.figures.syntax import distance_matrices, scores_by_layer, tree_arcs

TRAIN_SIZES = [300, 1000, 3000, 0]  # 0: every EWT training sentence
TEST_SIZES = [100, 300, 1000, 0]
RANKS = [32, 128, 0]  # 0: the model's width, as Hewitt & Manning


def render(lm, key) -> None:
    structural(lm, key)
    st.divider()
    treebank_labels_view.render(lm, key)


def structural(lm, key) -> None:
    st.caption("Hewitt & Manning (2019): one linear map B under which squared distances between word vectors "
               "approximate distances in the dependency tree (UUAS: the minimum spanning tree of those distances "
               "against the gold tree, punctuation left out; DSpr.: Spearman of each word's distances, averaged "
               "over sentence lengths 5-50), and squared norms approximate depth (root accuracy; NSpr.). Trained "
               "as their code does on UD English-EWT (train, early stopping on dev, scored on test), each word the "
               "mean of its pieces. The dotted lines are the right-branching chain. Headless: "
               "`python -m bertscope structural-probe MODEL`.")
    sizes = [n for n in TRAIN_SIZES if not demo() or 0 < n <= 1000]
    with st.form("syntax_form"):
        c1, c2, c3 = st.columns(3)
        train = c1.select_slider("Training sentences", sizes, 300, key="syntax_train",
                                 format_func=lambda n: "all 12,543" if n == 0 else f"{n:,}")
        test = c2.select_slider("Test sentences", [n for n in TEST_SIZES if not demo() or 0 < n <= 300], 300,
                                key="syntax_test", format_func=lambda n: "all 2,077" if n == 0 else f"{n:,}")
        rank = held_choice("Rank of B", RANKS, "syntax_rank", RANKS[1], container=c3,
                           format_func=lambda r: f"{lm.hidden_size} (the width)" if r == 0 else str(r))
        asked = st.form_submit_button("Train the probes at every layer", type="primary")
    request = (key, int(train), int(test), int(rank))
    store = result_store("structural")
    size = (int(train) or 12_543) + (int(test) or 2_077)  # what the run grows with: the sentences it reads and fits
    if store.get(request) is None and not asked:
        st.info(f"Press *Train the probes*: {expected('structural', lm.name, size, 'sentences')}. The first run reads "
                "EWT's hidden states once (cached on disk), then trains a distance and a depth probe per hidden state "
                "(the bar says how long each phase has left).")
        return
    with page_errors(stop=False):
        result = store.compute(request, lambda progress: structural_probes(
            lm, rank=int(rank) or None, max_train=int(train) or None, max_test=int(test) or None,
            progress=lambda done, total, what: progress(done, total, what)),
            "Structural probes, hidden states", asked, costly="structural probe run", measure=(lm.name, size))
        fig = scores_by_layer(result.layers, result.baselines, result.model)
        st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch", key="syntax_layers")
        figure_downloads(fig, "structural-probes")
        chain = result.baselines["chain"]
        best = result.layers[result.best_index]
        c = result.counts
        st.caption(plain(
            f"Best at {layer_title(result.best_state)}: UUAS {best['uuas']:.3f} against the chain's {chain['uuas']:.3f} and the "
            f"embeddings' {result.layers[0]['uuas']:.3f}. {c['train_sentences']:,} training, {c['dev_sentences']:,} "
            f"dev and {c['test_sentences']:,} test sentences; rank {c['rank']}"
            + (f"; {c['left_out_sentences']:,} sentences longer than the model reads left out"
               if c["left_out_sentences"] else "") + "."))
        table = pd.DataFrame([{"hidden state": str(r["layer"]), **{k: r.get(k) for k in
                                                                 ("uuas", "dspr", "root_accuracy", "nspr")}}
                              for r in result.layers])
        st.dataframe(table, hide_index=True, width="stretch",
                     column_config={k: st.column_config.NumberColumn(format="%.3f")
                                    for k in ("uuas", "dspr", "root_accuracy", "nspr")})
        download("Download (JSON, every test tree)", json.dumps(result.to_json()), "structural-probes.json",
                 "application/json", key="syntax_json")
        if result.trees:
            st.subheader(plain(f"A test sentence at {layer_title(result.tree_state)}"))
            readable = next((i for i, t in enumerate(result.trees) if 8 <= len(t["words"]) <= 16), 0)
            pick = held_choice("Sentence", range(len(result.trees)), "syntax_sentence", readable,
                               format_func=lambda i: " ".join(result.trees[i]["words"])[:100])
            tree = result.trees[pick]
            words = tree["words"]
            gold = {tuple(sorted((i + 1, h))) for i, h in enumerate(tree["gold_heads"]) if h}
            right = sum(tuple(e) in gold for e in tree["predicted_edges"])
            st.plotly_chart(tree_arcs(words, tree["gold_heads"], tree["predicted_edges"],
                                      f"{tree['sentence_id']}: {right} of {len(tree['predicted_edges'])} predicted "
                                      "edges in the gold tree (punctuation left out)"),
                            config=PLOT_CONFIG, width="stretch", key="syntax_tree")
            download("Download this sentence's trees (JSON)", json.dumps(tree), f"{tree['sentence_id']}.json",
                     "application/json", key="syntax_tree_json")
            if result.probe is not None and pick < len(result.test):
                sentence = result.test[pick]
                st.plotly_chart(distance_matrices(words, tree_distances(sentence.heads),
                                                  result.probe.predict(sentence)),
                                config=PLOT_CONFIG, width="stretch", key="syntax_matrices")
        if result.probe is not None and result.model == lm.name:  # (a refused run shows an earlier model's result)
            typed_tree_view.render(lm, result)
