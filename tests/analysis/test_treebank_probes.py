"""Label probes on UD English-EWT (``analysis.treebank_probes``): the examples each task reads (a word;
a dependent beside its head, arcs to the root left out, sentences the model cut left out), EWT's own
split, the control task kept across the split, the command and its bad input, an arc probe refused
where one word is explained; and a typed sentence's
predicted tree (``analysis.typed_tree``) against word vectors computed here from the model's own
hidden states."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.analysis.probe_store import load_probe
from bertscope.analysis.structural_probe import PSDProbe, TrainedProbe, spanning_edges
from bertscope.analysis.treebank_probes import Examples, split_control, split_examples
from bertscope.analysis.typed_tree import typed_tree
from bertscope.cli import main
from bertscope.corpora.ewt import TreebankSentence, read_ewt
from bertscope.errors import BertScopeError


class FakeStates:
    """The two things ``split_examples`` reads: each row's sentence, and a layer's matrix."""

    def __init__(self, sentences, dim=2):
        self.sentences = np.array(sentences)
        self.matrix = np.arange(len(sentences) * dim, dtype=np.float32).reshape(len(sentences), dim)

    def layer(self, layer):
        return self.matrix


def sentence(words, heads, deprels, upos=None):
    n = len(words)
    return TreebankSentence("s", words, words, upos or ["X"] * n, ["NN"] * n, heads, deprels)


def test_each_task_reads_its_examples_and_leaves_out_roots_and_cut_sentences():
    # "Dogs bark ." (bark the root) / "Cats sleep" cut by the model after one word / "I ran"
    treebank = [sentence(["Dogs", "bark", "."], [2, 0, 2], ["nsubj", "root", "punct"], ["NOUN", "VERB", "PUNCT"]),
                sentence(["Cats", "sleep"], [2, 0], ["nsubj", "root"]),
                sentence(["I", "ran"], [2, 0], ["nsubj", "root"], ["PRON", "VERB"])]
    states = FakeStates([0, 0, 0, 1, 2, 2])  # rows: Dogs bark . | Cats | I ran
    upos, lost = split_examples("ewt-upos", states, treebank, [0, 1, 2])
    assert lost == 1 and upos.rows.tolist() == [0, 1, 2, 4, 5] and upos.heads is None
    assert upos.labels.tolist() == ["NOUN", "VERB", "PUNCT", "PRON", "VERB"]
    assert upos.types == ["dogs", "bark", ".", "i", "ran"]
    arcs, _ = split_examples("ewt-deprel", states, treebank, [0, 2])
    assert arcs.rows.tolist() == [0, 2, 4] and arcs.heads.tolist() == [1, 1, 5]  # Dogs→bark, .→bark, I→ran
    assert arcs.labels.tolist() == ["nsubj", "punct", "nsubj"] and arcs.types == ["dogs", ".", "i"]
    x = arcs.features(states, 0)  # [arc, dependent ‖ head]
    np.testing.assert_array_equal(x, np.concatenate([states.matrix[[0, 2, 4]], states.matrix[[1, 1, 5]]], axis=1))
    np.testing.assert_array_equal(upos.features(states, 0), states.matrix[[0, 1, 2, 4, 5]])


def test_the_control_task_gives_a_type_one_label_on_both_sides_of_the_split():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    side = lambda n: Examples(np.arange(n), None, rng.choice(["NOUN", "VERB", "DET"], n),  # noqa: E731
                              list(rng.choice(words, n)))
    train, test = side(500), side(200)
    control = split_control(train, test, seed=3)
    chosen: dict[str, str] = {}
    for word, label in zip(train.types + test.types, control):
        assert chosen.setdefault(word, label) == label  # one label per type, train and test alike
    assert set(control) <= {"NOUN", "VERB", "DET"} and len(set(chosen.values())) > 1


@pytest.mark.slow
def test_the_probe_command_on_ewt_deprel_and_upos(tiny_bert_dir, capsys, tmp_path):
    assert main(["probe", str(tiny_bert_dir), "--task", "ewt-deprel", "--size", "150", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lm = load_model(str(tiny_bert_dir))  # it reads 40 positions: longer sentences are left out, and counted
    whole = lambda s: read_whole(lm, s.tokens)  # noqa: E731
    test = [s for s in read_ewt("test") if whole(s)]
    arcs = [d for s in test for d, h in zip(s.deprels, s.heads) if h]
    assert out["task"] == "ewt-deprel" and out["level"] == "arc"
    assert out["n_test"] == len(arcs)  # all of EWT test that the model reads whole
    assert [r["layer"] for r in out["layers"]] == ["embeddings", 0, 1]
    assert all(0 <= r["accuracy"] <= 1 and 0 <= r["control_accuracy"] <= 1 for r in out["layers"])
    # the majority baseline: the most frequent training label's share of the test arcs
    train = read_ewt("train")
    chosen = [i for i in sorted(np.random.default_rng(0).choice(len(train), 150, replace=False).tolist())
              if whole(train[i])]
    assert out["left_out_sentences"] == 150 - len(chosen) + len(read_ewt("test")) - len(test) > 0
    train_arcs = Counter(d for i in chosen for d, h in zip(train[i].deprels, train[i].heads) if h)
    assert out["n_train"] == sum(train_arcs.values())
    assert out["majority_baseline"] == pytest.approx(arcs.count(train_arcs.most_common(1)[0][0]) / len(arcs))
    # UPOS: the words this tiny vocabulary knows (function words, punctuation; the rest are [UNK]) carry
    # their tags even in a random model's embeddings, and more than the control task (a random tag per type)
    # can learn on EWT test's words
    assert main(["probe", str(tiny_bert_dir), "--task", "ewt-upos", "--size", "300", "--out", str(tmp_path / "u")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("ewt-upos on ") and "(EWT's split)" in text and "cache hit" in text
    saved = json.loads((tmp_path / "u" / "results.json").read_text())
    embeddings = saved["layers"][0]
    assert embeddings["accuracy"] > saved["majority_baseline"] + 0.2
    assert embeddings["control_accuracy"] < embeddings["accuracy"]
    assert (tmp_path / "u" / "weights" / "layer_00.npz").is_file()
    assert main(["probe", str(tiny_bert_dir), "--task", "ewt-deprel", "--size", "150", "--out", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    with pytest.raises(BertScopeError, match="dependency arcs"):  # two words' vectors cannot explain one word
        load_probe(tmp_path / "d", 1)
    for bad, message in ((["--test-data", str(tmp_path / "x.conllu")], "EWT's own test split"),
                         (["--pooling", "first"], "by their mean"), (["--size", "-1"], "0 (every training")):
        assert main(["probe", str(tiny_bert_dir), "--task", "ewt-upos", *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and message in err, err


def read_whole(lm, words: list[str]) -> bool:
    """Whether every word keeps a piece within the model's limit (words joined by spaces, as the task)."""
    text = " ".join(words)
    enc = lm.tokenizer(text, truncation=True, max_length=lm.max_length, return_offsets_mapping=True)
    last_end = max(end for start, end in enc["offset_mapping"])
    return last_end > len(text) - len(words[-1])


def word_vectors(lm, text: str, words_at: list[tuple[int, int]], state: int) -> np.ndarray:
    """[word, dim] each word's mean piece vector at ``state``, from the model's own hidden states."""
    enc = lm.tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    with torch.no_grad():
        hidden = lm.model(**enc.to(lm.device), output_hidden_states=True).hidden_states[state][0]  # [token, dim]
    out = []
    for a, b in words_at:
        pieces = [t for t, (s, e) in enumerate(offsets) if e > s and a <= s < b]
        out.append(hidden[pieces].mean(0).cpu().numpy())
    return np.stack(out)


@pytest.mark.slow
def test_progress_counts_the_word_pieces_of_the_splits_a_pass_runs(tiny_bert_dir, tmp_path):
    """Hidden states' progress is one count of word pieces over both splits, up to the whole; with both
    splits on disk nothing runs and nothing is counted (no second tokenisation of EWT on a cache hit)."""
    from bertscope.analysis.hidden_cache import HiddenStateCache, count_pieces
    from bertscope.analysis.treebank_probes import SPLITS, ewt_task, treebank_probe

    lm, cache = load_model(str(tiny_bert_dir)), HiddenStateCache(tmp_path / "hidden")
    calls = []
    _, hit = treebank_probe(lm, "ewt-upos", layers=[1], size=100, cache=cache,
                            states_progress=lambda done, total: calls.append((done, total)))
    total = sum(count_pieces(lm, ewt_task(split).texts) for split in SPLITS)
    assert not hit and calls[-1] == (total, total) and {t for _, t in calls} == {total}
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    calls.clear()
    _, hit = treebank_probe(lm, "ewt-upos", layers=[1], size=100, cache=cache,
                            states_progress=lambda done, total: calls.append((done, total)))
    assert hit and calls == []


def test_a_typed_sentence_gets_the_spanning_tree_of_its_word_vectors(tiny_bert):
    torch.manual_seed(1)
    probe = TrainedProbe(PSDProbe(tiny_bert.hidden_size, 8), "distance", 1, 1, 0.0)
    text = "The dog, surprisingly, chased the cat."
    tree = typed_tree(tiny_bert, probe, 2, text)
    assert tree.words == ["The", "dog", ",", "surprisingly", ",", "chased", "the", "cat", "."]
    assert tree.punctuation == [False, False, True, False, True, False, False, False, True] and tree.layer == 1
    spans = [(0, 3), (4, 7), (7, 8), (9, 21), (21, 22), (23, 29), (30, 33), (34, 37), (37, 38)]
    h = torch.from_numpy(word_vectors(tiny_bert, text, spans, 2))
    expected = probe.probe.distances(h[None])[0].detach().numpy()  # [word, word]
    np.testing.assert_allclose(tree.distances, expected, rtol=1e-4, atol=1e-4)
    edges = spanning_edges(expected, [not p for p in tree.punctuation])
    assert tree.predicted_edges == [[a + 1, b + 1] for a, b in sorted(edges)] and len(edges) == 5  # 6 words
    assert json.loads(json.dumps(tree.to_json()))["predicted_edges"] == tree.predicted_edges


def test_a_typed_sentence_names_what_it_leaves_out_and_refuses_what_has_no_tree(tiny_bert):
    probe = TrainedProbe(PSDProbe(tiny_bert.hidden_size, 4), "distance", 1, 1, 0.0)
    tree = typed_tree(tiny_bert, probe, 0, "the cat \x00 sat down")  # BERT's normaliser drops NUL
    assert tree.left_out == ["\x00"] and tree.words == ["the", "cat", "sat", "down"] and len(tree.predicted_edges) == 3
    for text, message in (("Hello .", "at least two words"), ("", "at least two words"),
                          (" ".join(["w"] * 121), "at most 120")):
        with pytest.raises(BertScopeError, match=message):
            typed_tree(tiny_bert, probe, 0, text)
    with pytest.raises(BertScopeError, match="distance probe"):
        typed_tree(tiny_bert, TrainedProbe(probe.probe, "depth", 1, 1, 0.0), 0, "the cat sat")
