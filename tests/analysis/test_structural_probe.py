"""The structural probe as Hewitt & Manning's code trains and scores it: gold distances and depths
from heads, the reporter's spanning tree with punctuation left out, the L1 loss's normalisation,
probes that recover a structure written into the vectors, and the command on EWT."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertscope.analysis.structural_probe import (
    ProbeSentence,
    PSDProbe,
    chain_report,
    depth_report,
    distance_report,
    l1_loss,
    spanning_edges,
    train_structural_probe,
    tree_depths,
    tree_distances,
)
from bertscope.cli import main
from bertscope.errors import BertScopeError

# "the dog sat on the mat ." : the(2) dog(3) sat(0) on(6) the(6) mat(3) .(3)
HEADS = [2, 3, 0, 6, 6, 3, 3]
XPOS = ["DT", "NN", "VBD", "IN", "DT", "NN", "."]


def test_gold_distances_and_depths_follow_the_heads():
    d = tree_distances(HEADS)
    assert d[0, 1] == 1 and d[0, 2] == 2 and d[0, 5] == 3 and d[3, 4] == 2 and (d == d.T).all()
    assert tree_depths(HEADS).tolist() == [2, 1, 0, 2, 2, 1, 1]
    with pytest.raises(BertScopeError, match="cycle"):
        tree_depths([2, 1])


def test_the_spanning_tree_of_gold_distances_is_the_tree_and_leaves_out_punctuation():
    gold = tree_distances(HEADS)
    keep = [x != "." for x in XPOS]
    edges = spanning_edges(gold, keep)
    tree = {(min(i, h - 1), max(i, h - 1)) for i, h in enumerate(HEADS) if h}
    assert edges == {e for e in tree if 6 not in e}  # the tree's edges among the words kept
    # punctuation as an inner node: its two neighbours are joined at distance 2, as reporter.py does
    heads = [2, 0, 2]  # a(→,) ,(root) b(→,)
    assert spanning_edges(tree_distances(heads), [True, False, True]) == {(0, 2)}


def test_perfect_predictions_score_one_and_the_chain_scores_a_chain():
    s = ProbeSentence("s", np.zeros((7, 4), np.float32), HEADS, XPOS)
    out = distance_report([tree_distances(HEADS)], [s])
    assert out["uuas"] == 1.0 and out["dspr"] == pytest.approx(1.0)
    chain = [2, 3, 4, 5, 6, 0]  # every word the next one's dependent, the last the root
    long = ProbeSentence("c", np.zeros((6, 4), np.float32), chain, ["NN"] * 6)
    report = chain_report([long])
    assert report["uuas"] == 1.0 and report["dspr"] == pytest.approx(1.0)
    depth = depth_report([tree_depths(HEADS)], [s])
    assert depth["root_accuracy"] == 1.0 and depth["nspr"] == pytest.approx(1.0)


def test_loss_is_normalised_per_sentence_as_theirs():
    predicted = torch.zeros(2, 3, 3)
    gold = torch.full((2, 3, 3), -1.0)
    gold[0] = 1.0  # a 3-word sentence: Σ|0 − 1| over 9 pairs / 9 = 1
    gold[1, :2, :2] = 2.0  # a 2-word sentence padded: Σ 2 over 4 pairs / 4 = 2
    assert float(l1_loss(predicted, gold, torch.tensor([3.0, 2.0]), "distance")) == pytest.approx(1.5)
    depth_gold = torch.tensor([[1.0, 1.0, 1.0], [3.0, -1.0, -1.0]])
    assert float(l1_loss(torch.zeros(2, 3), depth_gold, torch.tensor([3.0, 1.0]), "depth")) == pytest.approx(2.0)


def test_gram_form_distances_equal_the_squared_differences():
    probe = PSDProbe(8, 5)
    h = torch.randn(2, 6, 8)
    t = h @ probe.proj
    direct = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    torch.testing.assert_close(probe.distances(h), direct, atol=1e-5, rtol=1e-5)


def _chains(n_sentences: int, seed: int) -> list[ProbeSentence]:
    """Right-branching chains whose vectors hold each word's position (and noise): a distance probe
    can read the tree, a depth probe the depth."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_sentences):
        n = int(rng.integers(5, 12))
        heads = list(range(2, n + 1)) + [0]  # word i → i+1; the last word is the root
        depth = tree_depths(heads)
        vectors = np.concatenate([np.arange(n)[:, None] * 1.0, np.sqrt(depth)[:, None], rng.normal(0, 0.05, (n, 6))],
                                 axis=1).astype(np.float32)
        out.append(ProbeSentence(f"s{k}", vectors, heads, ["NN"] * n))
    return out


def test_trained_probes_recover_a_structure_written_into_the_vectors():
    train, dev, test = _chains(200, 0), _chains(40, 1), _chains(40, 2)
    distance = train_structural_probe(train, dev, "distance", rank=4, seed=0, max_epochs=30)
    report = distance_report([distance.predict(s) for s in test], test)
    assert report["uuas"] > 0.95 and report["dspr"] > 0.95
    depth = train_structural_probe(train, dev, "depth", rank=4, seed=0, max_epochs=30)
    out = depth_report([depth.predict(s) for s in test], test)
    assert out["root_accuracy"] > 0.95 and out["nspr"] > 0.95
    assert 1 <= depth.best_epoch <= depth.epochs <= 30
    with pytest.raises(BertScopeError, match="distance or depth"):
        train_structural_probe(train, dev, "width")


@pytest.mark.slow
def test_the_command_on_ewt_and_its_bad_input(tiny_bert_dir, capsys):
    assert main(["structural-probe", str(tiny_bert_dir), "--layers", "embeddings,1", "--max-train", "150",
                 "--max-test", "40", "--rank", "16", "--layer", "1", "--sentence", "The dog sat on the mat .",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trees_layer"] == 1 and out["typed_tree"]["layer"] == 1  # the layer asked for
    assert out["best_layer"] == max(out["layers"], key=lambda r: r["uuas"])["layer"]  # still reported beside it
    assert out["typed_tree"]["words"] == ["The", "dog", "sat", "on", "the", "mat", "."]
    assert len(out["typed_tree"]["predicted_edges"]) == 5  # six words; the full stop left out
    assert [r["layer"] for r in out["layers"]] == ["embeddings", 1]
    assert {"uuas", "dspr", "root_accuracy", "nspr"} <= set(out["layers"][0])
    assert 0.3 < out["baselines"]["chain"]["uuas"] < 0.6  # EWT's right-branching chain
    assert 30 <= len(out["trees"]) == out["test_sentences"] <= 40 and out["trees"][0]["sentence_id"].startswith("ewt-test-")
    tree = out["trees"][0]
    assert len(tree["gold_heads"]) == len(tree["words"]) and all(1 <= a < b <= len(tree["words"])
                                                                  for a, b in tree["predicted_edges"])
    for bad, message in ((["--layers", "7"], "Layer 7 does not exist"), (["--layers", "mid"], "layer numbers from 0"),
                         (["--corpus", "ptb"], "reads ewt"), (["--max-train", "0"], "at least 1"),
                         (["--layers", "embeddings,1", "--layer", "0"], "not among --layers"),
                         (["--what", "depth", "--sentence", "a b"], "distance probe"),
                         (["--layer", ""], "give one layer"), (["--layer", "0,1"], "give one layer"),
                         (["--sentence", "Hello ."], "at least two words")):  # refused before any training
        assert main(["structural-probe", str(tiny_bert_dir), *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and message in err, err
