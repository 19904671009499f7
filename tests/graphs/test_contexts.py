"""Where a transcoder feature fires most (``graphs.contexts``): the strongest places over a sample are the dense
codes' maxima, distinct sentences shown strongest first with the piece marked; the graph's hover carries them,
the input's text escaped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope.core.models import load_model
from bertscope.errors import BertScopeError
from bertscope.figures.graph import graph_figure
from bertscope.graphs.build import attribution_graph
from bertscope.graphs.contexts import KEPT, feature_examples
from tests.graphs.test_graph import _transcoders

TEXTS = ["the bank of the river was muddy .", "she put her money in the bank .", "a man is eating food .",
         "the cat sat on the mat .", "rain fell on the town all night ."] * 3


@pytest.fixture(scope="module")
def mlm(tiny_mlm_dir):
    return load_model(str(tiny_mlm_dir))


def test_the_strongest_places_are_the_codes_maxima(mlm):
    tcs = _transcoders(mlm, skip=True)
    found = feature_examples(mlm, tcs, TEXTS, batch_size=4)
    # the reference: every word piece of every text, one at a time
    codes, places = [], []
    for s, text in enumerate(TEXTS):
        feed = dict(mlm.tokenizer(text, return_tensors="pt"))
        _, cache = mlm.run_with_cache(feed, ["blocks.1.hook_resid_mid"], encoder_only=True)
        with torch.no_grad():
            codes.append(tcs[1].encode(cache["blocks.1.hook_resid_mid"][0, 1:-1]))  # [piece, d_sae], no specials
        places += [(s, p) for p in range(1, feed["input_ids"].shape[1] - 1)]
    dense = torch.cat(codes).numpy()  # [piece, d_sae]
    want = -np.sort(-dense, axis=0)[:KEPT].T  # [d_sae, KEPT]
    np.testing.assert_allclose(found.values[1], np.maximum(want, 0), atol=1e-5)
    feature = int(dense.max(0).argmax())
    s, p = found.where[1][feature, 0]
    assert dense[places.index((s, p)), feature] == pytest.approx(found.values[1][feature, 0], abs=1e-5)
    shown = found.of(1, feature)
    assert shown and shown[0].activation == pytest.approx(float(dense[:, feature].max()), abs=1e-5)
    assert f"«{found.tokens[s][p]}»" in shown[0].snippet
    assert len({e.snippet for e in shown}) == len(shown) <= 3  # distinct sentences
    assert [e.activation for e in shown] == sorted((e.activation for e in shown), reverse=True)
    with pytest.raises(BertScopeError, match="No feature"):
        found.of(1, 10**6)
    with pytest.raises(BertScopeError, match="No sentences"):
        feature_examples(mlm, tcs, [])


def test_the_graph_hover_says_where_a_feature_fires_and_escapes_text(mlm):
    tcs = _transcoders(mlm, skip=False)
    graph = attribution_graph(mlm, "the bank of the [MASK] was muddy .", tcs)
    found = feature_examples(mlm, tcs, TEXTS)
    shown = graph.to_json(0.8)
    shown["tokens"][2] = "<b>bank</b>"  # a visitor's text as a tokenizer with such pieces would give it
    fig = graph_figure(shown, mlm.num_layers, examples=found.of)
    hovers = [h for trace in fig.data if trace.text is not None for h in trace.text]
    assert any("fires most on:" in h and "«" in h for h in hovers)
    ticks = list(fig.layout.xaxis.ticktext)
    assert "&lt;b&gt;bank&lt;/b&gt;" in ticks and not any("<" in t for t in ticks)  # shown as text, not read as tags
    assert any("&lt;b&gt;bank" in h for h in hovers) and not any("<b>" in h for h in hovers)
