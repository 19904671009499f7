"""Amnesic probing (``interventions.amnesic``) on real weights and real treebank text: the erasing hook
against a plain PyTorch hook on the block, LEACE's guarantee at the erased layer, every behaviour
beside the random control, a tagger's head losing what a linear map reads, the concepts' bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.analysis.erasure import fit_leace
from bertscope.analysis.hidden_cache import hidden_states
from bertscope.errors import BertScopeError
from bertscope.interventions.amnesic import amnesic_probe, erasing
from bertscope.interventions.concepts import concept_from_task, load_concept


@pytest.fixture(scope="module")
def mlm():
    return load_model("bundled-mlm")


@pytest.fixture(scope="module")
def upos_concept():
    return load_concept("ewt-upos", size=80, test_size=40)


def test_erasing_edits_the_block_output_as_a_plain_torch_hook_does(mlm, upos_concept):
    states = hidden_states(mlm, upos_concept.train, "mean")
    eraser = fit_leace(states.layer(2), states.labels)  # hidden state 2: block 1's output
    text = "The bank of the river was muddy after the rain ."
    with erasing(mlm, 2, eraser):
        ours = mlm.run(text, hidden_states=True).hidden_states

    def plain(module, args, out):  # the reference: Hugging Face's block, edited by hand
        first = out[0] if isinstance(out, tuple) else out
        edited = torch.from_numpy(eraser.apply(first.detach().numpy()))
        return (edited, *out[1:]) if isinstance(out, tuple) else edited

    handle = mlm.model.bert.encoder.layer[1].register_forward_hook(plain)
    try:
        with torch.no_grad():
            reference = mlm.model(**mlm.tokenizer(text, return_tensors="pt"), output_hidden_states=True).hidden_states
    finally:
        handle.remove()
    for later in range(3, mlm.num_layers + 1):  # every state after the erased one
        assert torch.allclose(ours[later], reference[later], atol=1e-4)
    assert not torch.allclose(ours[3], mlm.run(text, hidden_states=True).hidden_states[3], atol=1e-2)


def test_leace_at_a_layer_leaves_its_probe_at_the_majority_and_the_control_does_not(mlm, upos_concept):
    result = amnesic_probe(mlm, upos_concept, [1], "leace")  # layer 1: hidden state 2, as above
    (row,) = result.layers
    assert row.layer == 1 and 1 <= row.rank <= len(result.classes) - 1
    assert row.probe.before > 0.8 and row.probe.random_after > 0.8  # random directions leave UPOS readable
    assert row.probe.after <= row.majority + 0.02  # LEACE's guarantee, on held-out words
    assert [x.layer for x in row.later] == list(range(2, mlm.num_layers))
    assert all(x.probe.after is not None and x.uuas is not None for x in row.later)
    assert row.mlm_top1 is not None and 0 < row.mlm_top1.before < 1
    positions = sum(n for _, n in row.mlm_by_tag.values())
    assert positions > 20 and set(row.mlm_by_tag) <= set(result.classes)
    assert row.mlm_top1.after < row.mlm_top1.before - 0.01  # bundled-mlm uses part of speech
    assert abs(row.mlm_top1.random_after - row.mlm_top1.before) < 0.03  # the same rank at random: about nothing
    weighted = sum(arms.before * n for arms, n in row.mlm_by_tag.values()) / positions
    assert weighted == pytest.approx(row.mlm_top1.before)  # every masked piece of EWT text is in a word
    assert row.guarded and row.fitted.class_mean_gap < 1e-3 and row.control.class_mean_gap > 1e-2
    assert 0 < row.control.edit < row.fitted.edit < 1  # LEACE moves the states more than 16 random directions
    assert row.changed and all(w.before != w.after for w in row.changed)  # only predictions that changed
    lost = [w.before == w.gold and w.after != w.gold for w in row.changed]
    assert lost == sorted(lost, reverse=True)  # those it got right and lost come first
    data = result.to_json()
    assert set(data) >= {"concept", "method", "layers"} and data["concept"] == "ewt-upos" and data["method"] == "leace"
    layer = data["layers"][0]
    assert set(layer) >= {"layer", "rank", "majority", "probe_before", "probe_after", "mlm_top1", "uuas",
                          "task_accuracy", "later_layers", "mlm_top1_by_tag", "changed_words"}
    assert set(layer["mlm_top1"]) == {"before", "after", "random_after"}
    assert any("task accuracy" in n for n in data["notes"])  # bundled-mlm has no task head: said, not hidden


def test_every_arm_reads_the_same_masked_positions(mlm, upos_concept):
    """An eraser that removes nothing (rank 0) gives the clean predictions exactly: the arms differ by the
    erasure alone."""
    from bertscope.analysis.erasure import Eraser
    from bertscope.interventions.amnesic import masked_predictions, masked_test

    nothing = Eraser("random", np.zeros((mlm.hidden_size, 0), np.float32), np.zeros((0, mlm.hidden_size), np.float32),
                     np.zeros(mlm.hidden_size, np.float32), 0)
    masked = masked_test(mlm, upos_concept.test, 0, 16)
    beats: list[tuple[int, int]] = []
    clean = masked_predictions(mlm, masked, lambda d, t: beats.append((d, t)))
    assert beats == [(i, len(masked)) for i in range(1, len(masked) + 1)] and len(masked) > 1  # a batch each
    with erasing(mlm, 3, nothing):
        same = masked_predictions(mlm, masked)
    assert np.array_equal(clean[0], same[0]) and np.allclose(clean[1], same[1], atol=1e-5)
    again = masked_test(mlm, upos_concept.test, 0, 16)
    assert all(torch.equal(a.chosen.cpu(), b.chosen.cpu()) for a, b in zip(masked, again))  # seeded positions


def test_inlp_is_the_baseline(mlm, upos_concept):
    reports: list[tuple[int, int, str]] = []
    result = amnesic_probe(mlm, upos_concept, [mlm.num_layers - 1], "inlp", behaviours=("probe",), batch_size=8,
                           progress=lambda d, t, what: reports.append((d, t, what)))
    stages = [d for d, _, _ in reports]
    assert stages == sorted(stages) and reports[-1][0] == reports[-1][1]
    assert len(reports) > len(set(stages))  # a report within the stages too (a batch of a pass): where a Stop acts
    (row,) = result.layers
    assert row.rank > 0 and row.later == () and row.mlm_top1 is None
    assert row.probe.after < row.probe.before - 0.3


def test_a_taggers_head_loses_what_leace_erases_from_its_last_layer():
    tagger = load_model("bundled-upos")
    concept = load_concept("ewt-upos", size=150, test_size=40)
    reports: list[tuple[int, int, str]] = []
    result = amnesic_probe(tagger, concept, [tagger.num_layers - 1], behaviours=("task",), batch_size=8,
                           progress=lambda d, t, what: reports.append((d, t, what)))
    # the task model's passes report within their stage, so that a Stop acts between its batches
    assert sum("past layer" in what and "task model" not in what for _, _, what in reports) >= 2 * 4, reports
    (row,) = result.layers
    task = row.task_accuracy
    assert task is not None and task.before > 0.85  # bundled-upos on EWT test
    assert task.random_after > 0.8  # sixteen random directions cost it little
    assert task.after < 0.5  # its head is linear in the last layer: LEACE leaves it nothing to read
    assert row.mlm_top1 is None and row.later == ()  # asked for the task alone; nothing after the last layer


def test_a_sentence_concept_and_a_classifier():
    classifier = load_model("bundled-sentiment")
    concept = load_concept("sentiment", size=300, test_size=100)
    assert concept.level == "sentence" and concept.classes == ("negative", "neutral", "positive")
    result = amnesic_probe(classifier, concept, [classifier.num_layers - 1], behaviours=("probe", "task", "syntax"))
    (row,) = result.layers
    assert row.probe.after <= row.majority + 0.03 < row.probe.before  # the tweets' mean vectors lose it
    task = row.task_accuracy
    assert task is not None and task.before > 0.6 and abs(task.random_after - task.before) < 0.05
    assert task.after < task.before  # the classifier reads [CLS], which the eraser edits too
    assert any("no trees" in n for n in result.notes)


def test_the_concepts_and_their_bad_input(tmp_path):
    deprel = load_concept("ewt-deprel", size=20, test_size=10)
    assert "nsubj" in deprel.classes and not any(":" in c for c in deprel.classes)  # universal relations
    assert deprel.trees is not None and len(deprel.trees) == 10
    one = tmp_path / "one.csv"
    one.write_text('tokens,tags\n"a b","X X"\n"c d","X X"\n"e f","X X"\n"g h","X X"\n')
    with pytest.raises(BertScopeError, match="one label"):
        load_concept(str(one))
    ragged = tmp_path / "ragged.jsonl"
    ragged.write_text('{"tokens": ["a", "b"], "tags": ["X"]}\n')
    with pytest.raises(BertScopeError, match="tokens but 1 tags|2 tokens"):
        load_concept(str(ragged))
    latin = tmp_path / "latin.csv"
    latin.write_bytes('sentence,label\n"caf\xe9 ok",a\n'.encode("latin-1"))
    with pytest.raises(BertScopeError, match="not UTF-8"):
        load_concept(str(latin))
    with pytest.raises(BertScopeError, match="choose ewt-upos"):
        load_concept("no-such-concept")
    with pytest.raises(BertScopeError, match="at least 1"):
        load_concept("ewt-upos", size=0)
    from bertscope.corpora.probe_tasks import finish_task

    tiny = finish_task("tiny", "sentence", [["a"], ["b"], ["c"]], [["x"], ["y"], ["x"]])
    with pytest.raises(BertScopeError, match="at least 4"):
        concept_from_task(tiny)


def test_layers_the_model_lacks_are_refused(mlm, upos_concept):
    with pytest.raises(BertScopeError, match="Layer 6 does not exist"):
        amnesic_probe(mlm, upos_concept, [mlm.num_layers])
    with pytest.raises(BertScopeError, match="No erasure method"):
        amnesic_probe(mlm, upos_concept, [1], "pca")
