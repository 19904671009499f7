"""The amnesic chart: bars for one erased layer, lines for several; every measured behaviour, each beside
its random control, and nothing drawn for a behaviour that was not measured."""

from __future__ import annotations

from bertscope.figures.erasure import change_figure
from bertscope.interventions.amnesic import AmnesicResult, Arms, LaterLayer, LayerErasure


def result(layers) -> AmnesicResult:
    rows = tuple(LayerErasure(layer, 16, 0.2, Arms(0.9, 0.2, 0.9), (LaterLayer(5, Arms(0.9, 0.7, 0.88)),),
                              Arms(0.3, 0.25, 0.3)) for layer in layers)
    return AmnesicResult("m", "ewt-upos", "leace", "token", ("A", "B"), 10, 5, rows)


def test_one_layer_is_a_pair_of_bars_per_behaviour():
    fig = change_figure(result([2]))
    erased, control = fig.data
    assert erased.type == "bar" and list(erased.x) == ["probe at the erased layer", "probe at the last layer",
                                                       "masked LM top-1"]
    assert [round(v, 3) for v in erased.y] == [-0.7, -0.2, -0.05]
    assert [round(v, 3) for v in control.y] == [0.0, -0.02, 0.0]
    assert "erased at layer 2" in fig.layout.title.text


def test_several_layers_are_lines_with_dotted_controls():
    fig = change_figure(result(["embeddings", 0, 1]))
    assert len(fig.data) == 6 and all(t.type == "scatter" for t in fig.data)
    assert list(fig.data[0].x) == ["embeddings", "0", "1"]
    assert fig.data[1].line.dash == "dot" and fig.data[1].name.endswith("random, same rank")


def test_a_visitors_upload_name_and_tokens_reach_the_charts_as_text():
    """An upload's name is the concept's; a text's pieces are the features chart's axes: plotly renders a subset of
    HTML in both, so each is escaped (a byte-level tokenizer keeps "<b>" whole)."""
    from bertscope.figures.features import text_features_figure

    named = AmnesicResult("m", "<b>x</b>", "leace", "token", ("A", "B"), 10, 5, result([2]).layers)
    assert "<b>" not in change_figure(named).layout.title.text and "&lt;b&gt;x" in change_figure(named).layout.title.text
    fig, _ = text_features_figure({"sae": {"hook": "blocks.0.hook_resid_post"},
                                   "tokens": [{"token": "<b>", "features": [{"feature": 3, "activation": 1.5}]},
                                              {"token": "ok", "features": []}]})
    (heat,) = fig.data
    assert list(heat.x) == ["0: &lt;b&gt;", "1: ok"] and "<b>" not in heat.y[0]
