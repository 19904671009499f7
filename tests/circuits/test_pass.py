"""The circuit pass (``circuits.decomposed``): a post-LayerNorm stream split into one contribution per
sender adds up to the model's own stream; the full circuit is the clean run and the empty circuit the
corrupted run, to float precision, on every post-LayerNorm family; other families are refused."""

from __future__ import annotations

import pytest
import torch

from bertscope import load_model
from bertscope.circuits.contributions import Contributions
from bertscope.circuits.decomposed import run_pass
from bertscope.circuits.edges import record_pairs
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.pairs import Pair, decision
from bertscope.circuits.runs import layer_weights
from bertscope.errors import BertScopeError
from tests.conftest import labels, task_checkpoint

PAIRS = [Pair("the man [MASK] here .", "the dog [MASK] here .", "is", "was"),
         Pair("the dog sat by the [MASK] .", "the man sat by the [MASK] .", "river", "bank")]
FAMILIES = ["tiny_mlm_dir", "tiny_roberta_dir", "tiny_albert_dir", "tiny_distilbert_dir", "tiny_electra_dir"]


def _double(folder) -> object:
    lm = load_model(str(folder))
    lm.model.double()
    return lm


def _plain_metric(lm, feed, prepared, where) -> float:
    with torch.inference_mode():
        return float(decision(lm, lm.run(feed, encoder_only=where == "mask"), prepared, where)[0])


@pytest.mark.parametrize("fixture", FAMILIES)
def test_contributions_add_up_and_both_ends_are_exact(fixture, request):
    lm = _double(request.getfixturevalue(fixture))
    weights = layer_weights(lm)
    pairs = [Pair(p.clean.replace("[MASK]", lm.tokenizer.mask_token), p.corrupted.replace("[MASK]", lm.tokenizer.mask_token),
                  p.answer, p.foil) for p in PAIRS]
    where, recorded = record_pairs(lm, pairs, "patch", weights)
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    for pair in recorded:
        for record in (pair.clean, pair.ablated):
            parts = Contributions(record, weights)
            for layer in range(lm.num_layers):
                parts.after_attention(layer)
                assert parts.comps.shape[0] == graph.senders_before_mlp(layer)
                torch.testing.assert_close(parts.comps.sum(0), record.resid_mid[layer], atol=1e-10, rtol=0)
                parts.after_mlp(layer)
                torch.testing.assert_close(parts.comps.sum(0), record.resid_post[layer], atol=1e-10, rtol=0)
            assert parts.comps.shape[0] == graph.n_senders
        ones = torch.ones(graph.n_senders, graph.n_receivers, dtype=torch.float64)
        with torch.inference_mode():
            full, empty = run_pass(lm, graph, weights, pair, where, keep=torch.stack([ones, 0 * ones])).tolist()
        p = pair.prepared
        assert full == pytest.approx(_plain_metric(lm, p.clean_feed, p, where), abs=1e-9)
        assert empty == pytest.approx(_plain_metric(lm, p.corrupted_feed, p, where), abs=1e-9)


def test_a_classifier_and_a_tagger_read_their_heads(tiny_bert_dir, tmp_path):
    cls = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 2,
                                         num_labels=2, **labels(["negative", "positive"]))))
    tagger = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "tag", "AutoModelForTokenClassification", 3,
                                            num_labels=2, **labels(["NOUN", "VERB"]))))
    for lm, pair in ((cls, Pair("the food was very good .", "the food was very bad .", "positive", "negative")),
                     (tagger, Pair("they fish in the river .", "the fish in the river .", "VERB", "NOUN", "fish"))):
        lm.model.double()
        weights = layer_weights(lm)
        where, (recorded,) = record_pairs(lm, [pair], "patch", weights)
        graph = CircuitGraph(lm.num_layers, lm.num_heads)
        ones = torch.ones(graph.n_senders, graph.n_receivers, dtype=torch.float64)
        with torch.inference_mode():
            full, empty = run_pass(lm, graph, weights, recorded, where, keep=torch.stack([ones, 0 * ones])).tolist()
        p = recorded.prepared
        assert where == ("class" if lm is cls else "tag")
        assert p.position == (0 if lm is cls else 2)  # [CLS]; "fish" after [CLS] they
        assert full == pytest.approx(_plain_metric(lm, p.clean_feed, p, where), abs=1e-9)
        assert empty == pytest.approx(_plain_metric(lm, p.corrupted_feed, p, where), abs=1e-9)


def test_a_question_answering_head_reads_the_span_score(tiny_bert_dir, tmp_path):
    """Two questions of one context; the metric is the answer span's start + end logits less the foil's."""
    qa = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 4,
                                        num_labels=2)))
    qa.model.double()
    pair = Pair("who sat by the river ?", "what was by the river ?", "the man", "the dog",
                context="the man sat by the river and the dog was by the bank .")
    weights = layer_weights(qa)
    where, (recorded,) = record_pairs(qa, [pair], "patch", weights)
    p = recorded.prepared
    assert where == "span" and p.tokens[p.ids[0]:p.ends[0] + 1] == ["the", "man"]
    assert p.tokens[p.ids[1]:p.ends[1] + 1] == ["the", "dog"] and p.ids[1] > p.tokens.index("[SEP]")
    with torch.inference_mode():
        out = qa.run(p.clean_feed)
    start, end = out.start_logits[0], out.end_logits[0]
    by_hand = float(start[p.ids[0]] + end[p.ends[0]] - start[p.ids[1]] - end[p.ends[1]])
    assert _plain_metric(qa, p.clean_feed, p, where) == pytest.approx(by_hand, abs=1e-12)
    graph = CircuitGraph(qa.num_layers, qa.num_heads)
    ones = torch.ones(graph.n_senders, graph.n_receivers, dtype=torch.float64)
    with torch.inference_mode():
        full, empty = run_pass(qa, graph, weights, recorded, where, keep=torch.stack([ones, 0 * ones])).tolist()
    assert full == pytest.approx(by_hand, abs=1e-9)
    assert empty == pytest.approx(_plain_metric(qa, p.corrupted_feed, p, where), abs=1e-9)


@pytest.mark.parametrize("fixture, why", [("tiny_modernbert_dir", "LayerNorm before each sub-block"),
                                          ("tiny_deberta_dir", "relative positions")])
def test_other_families_are_refused_in_one_line(fixture, why, request):
    lm = load_model(str(request.getfixturevalue(fixture)))
    with pytest.raises(BertScopeError, match=why):
        layer_weights(lm)
