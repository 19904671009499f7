"""Feature statistics over a tagged corpus: the streamed tables equal a dense computation sentence by
sentence; labels' precision and recall; kept on disk and read back without a pass; a feature's top
contexts; bad input in one line."""

import numpy as np
import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.corpora.brown import detokenize
from bertscope.corpora.tagged import TaggedSentences
from bertscope.features import statistics as stats_module
from bertscope.features.activations import resid_post
from bertscope.features.active import layer_output
from bertscope.features.contexts import feature_contexts
from bertscope.features.sae import SaeInfo, TopKSAE
from bertscope.features.statistics import BINS, TOP, FeatureStatistics, bin_edges, feature_statistics

SENTENCES = [
    (["the", "bank", "of", "the", "river", "was", "muddy", "."], ["DET", "NOUN", "ADP", "DET", "NOUN", "VERB", "ADJ", "."]),
    (["she", "deposited", "the", "money", "in", "the", "bank", "."],
     ["PRON", "VERB", "DET", "NOUN", "ADP", "DET", "NOUN", "."]),
    (["he", "walked", "along", "the", "river", "."], ["PRON", "VERB", "ADP", "DET", "NOUN", "."]),
    (["the", "man", "walked", "to", "the", "bank", "."], ["DET", "NOUN", "VERB", "ADP", "DET", "NOUN", "."]),
    (["money", "was", "in", "the", "river", "."], ["NOUN", "VERB", "ADP", "DET", "NOUN", "."]),
] * 3


def tagged() -> TaggedSentences:
    texts, spans = zip(*(detokenize(words) for words, _ in SENTENCES))
    tags = tuple(tuple(t) for _, t in SENTENCES)
    return TaggedSentences("toy", tuple(texts), tuple(tuple(s) for s in spans), {"universal": tags},
                           tuple(f"s{i}" for i in range(len(SENTENCES))))


@pytest.fixture(scope="module")
def lm(tiny_mlm_dir):
    return load_model(str(tiny_mlm_dir))


def random_sae(lm, layer: int, d_sae: int = 48, k: int = 6, seed: int = 0) -> TopKSAE:
    sae = TopKSAE(lm.hidden_size, d_sae, k, info=SaeInfo(lm.name, resid_post(layer)), seed=seed)
    with torch.no_grad():
        sae.b_enc.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    return sae


def dense_reference(lm, sae, corpus, layer):
    """Every table computed sentence by sentence from the full latent matrix."""
    fires = np.zeros(sae.d_sae, np.int64)
    hist = np.zeros((sae.d_sae, BINS), np.int64)
    best = np.zeros((len(corpus), sae.d_sae))
    tags = sorted({t for s in corpus.tags["universal"] for t in s})
    tag_fires = np.zeros((sae.d_sae, len(tags)), np.int64)
    fired_words = np.zeros(sae.d_sae, np.int64)
    edges = bin_edges()
    for s, text in enumerate(corpus.texts):
        enc = lm.tokenizer(text, return_tensors="pt", return_offsets_mapping=True, return_special_tokens_mask=True)
        offsets = enc.pop("offset_mapping")[0].numpy()
        special = enc.pop("special_tokens_mask")[0].numpy().astype(bool)
        z = sae.encode(layer_output(lm, dict(enc), layer)[0].float()).detach().numpy()[~special]  # [piece, d_sae]
        fires += (z > 0).sum(0)
        for f in range(sae.d_sae):
            values = z[:, f][z[:, f] > 0]
            hist[f] += np.histogram(np.clip(values, edges[0], edges[-1] * 0.999), edges)[0]
        best[s] = z.max(0)
        starts = offsets[~special][:, 0]
        for w, (start, end) in enumerate(corpus.spans[s]):
            mine = (starts >= start) & (starts < end)
            if mine.any():
                on = z[mine].max(0) > 0
                fired_words += on
                tag_fires[:, tags.index(corpus.tags["universal"][s][w])] += on
    return fires, hist, best, tag_fires, fired_words


def test_streamed_tables_equal_the_dense_computation(lm, tmp_path):
    corpus, layer = tagged(), 1
    sae = random_sae(lm, layer)
    got = feature_statistics(lm, {layer: sae}, corpus, root=tmp_path, batch_size=4)[layer]  # 4 batches to merge
    fires, hist, best, tag_fires, fired_words = dense_reference(lm, sae, corpus, layer)
    assert (fires > 0).sum() > 10 and len({s for f in range(sae.d_sae) for s, _ in got.contexts(f)}) > 4
    np.testing.assert_array_equal(got.fires, fires)
    np.testing.assert_array_equal(got.histogram, hist)
    np.testing.assert_array_equal(got.tag_fires["universal"], tag_fires)
    np.testing.assert_array_equal(got.fired_words, fired_words)
    for f in range(sae.d_sae):  # the top table: each feature's strongest sentences, strongest first
        want = np.pad(np.sort(best[:, f])[::-1], (0, TOP))[:TOP]  # 0 past the sentences there are
        np.testing.assert_allclose(got.top_values[f], want, rtol=1e-5, atol=1e-6)
        for s, v in got.contexts(f):
            assert best[s, f] == pytest.approx(v, rel=1e-5)
    assert got.pieces == sum(len(lm.tokenizer(t)["input_ids"]) - 2 for t in corpus.texts)  # [CLS], [SEP] left out
    assert got.words == sum(len(s) for s in corpus.spans)  # every word kept a piece
    nouns = got.tags["universal"].index("NOUN")
    assert got.tag_words["universal"][nouns] == sum(t.count("NOUN") for t in corpus.tags["universal"])


def test_kept_on_disk_and_read_back_without_a_pass(lm, tmp_path, monkeypatch):
    corpus = tagged()
    saes = {0: random_sae(lm, 0), 1: random_sae(lm, 1, seed=1)}
    first = feature_statistics(lm, saes, corpus, root=tmp_path)  # both layers in one pass
    assert sorted(first) == [0, 1] and len(list(tmp_path.glob("*.npz"))) == 2

    def no_pass(*args, **kwargs):
        raise AssertionError("a pass ran although the statistics were kept")

    monkeypatch.setattr(stats_module, "layer_outputs", no_pass)
    again = feature_statistics(lm, saes, corpus, root=tmp_path)
    for layer in (0, 1):
        np.testing.assert_array_equal(again[layer].top_sentences, first[layer].top_sentences)
        np.testing.assert_array_equal(again[layer].tag_fires["universal"], first[layer].tag_fires["universal"])
        assert again[layer].tags == first[layer].tags and again[layer].hook == resid_post(layer)
    with np.load(next(tmp_path.glob("*.npz")), allow_pickle=False) as data:  # plain arrays, no pickles
        assert all(data[k].dtype != object for k in data.files)


def stats_by_hand() -> FeatureStatistics:
    d, tags = 3, ["NOUN", "VERB", "X"]
    tag_words = np.array([100, 50, 5])
    # feature 0 fires on 40 words: 36 VERB, 4 NOUN; feature 1 on 100 NOUNs and 100 others; feature 2 on the 5 Xs
    tag_fires = np.array([[4, 36, 0], [100, 0, 0], [0, 0, 5]])
    fired = np.array([40, 200, 5])
    z = np.zeros((d, TOP), np.float32)
    return FeatureStatistics("m", "blocks.0.hook_resid_post", "toy", 10, 400, 155, z, np.full((d, TOP), -1, np.int32),
                             np.array([40, 200, 5]), np.array([40.0, 100.0, 5.0]), np.zeros((d, BINS), np.int64),
                             {"u": tags}, {"u": tag_words}, {"u": tag_fires}, fired)


def test_labels_are_precision_and_recall_of_gold_tags():
    s = stats_by_hand()
    best = s.label(0)
    assert (best.tag, best.precision, best.recall) == ("VERB", 36 / 40, 36 / 50)
    assert s.label(1).tag == "NOUN" and s.label(1).precision == 0.5 and s.label(1).recall == 1.0
    assert s.label(2) is None  # X has 5 words: too few to label anything
    assert [f for f, _ in s.features_for_tag("u", "NOUN")] == [1, 0]
    assert s.firing_rate(1) == 0.5 and s.mean_activation(1) == 0.5
    with pytest.raises(BertScopeError, match="Feature 3 does not exist"):
        s.summary(3)
    with pytest.raises(BertScopeError, match="No tag 'ADJ' in u"):
        s.features_for_tag("u", "ADJ")


def test_top_contexts_show_where_it_fires(lm, tmp_path):
    corpus, layer = tagged(), 1
    sae = random_sae(lm, layer)
    stats = feature_statistics(lm, {layer: sae}, corpus, root=tmp_path)[layer]
    feature = int(np.argmax(stats.fires))
    contexts = feature_contexts(lm, sae, stats, corpus, feature, layer, top=3)
    assert 1 <= len(contexts) <= 3
    for c, (s, peak) in zip(contexts, stats.contexts(feature)):
        assert c.sentence == s and c.text == corpus.texts[s] and c.peak == pytest.approx(peak, rel=1e-4)
        assert all(p["tags"]["universal"] in corpus.tags["universal"][s] for p in c.pieces if p["tags"])


def test_bad_input_is_one_line(lm, tmp_path):
    corpus = tagged()
    other = TopKSAE(lm.hidden_size, 16, 2, info=SaeInfo("another-model", resid_post(0)))
    with pytest.raises(BertScopeError, match="made for another-model"):
        feature_statistics(lm, {0: other}, corpus, root=tmp_path)
    wide = TopKSAE(lm.hidden_size + 1, 16, 2)
    with pytest.raises(BertScopeError, match="vectors of"):
        feature_statistics(lm, {0: wide}, corpus, root=tmp_path)
    with pytest.raises(BertScopeError, match="Layer 9 does not exist"):
        feature_statistics(lm, {9: random_sae(lm, 0)}, corpus, root=tmp_path)
    with pytest.raises(BertScopeError, match="reads blocks.0.hook_resid_post, not blocks.1"):
        feature_statistics(lm, {1: random_sae(lm, 0)}, corpus, root=tmp_path)


def test_the_causal_check_switches_features_off_beside_controls(lm, tmp_path):
    from bertscope.features.causal import tag_effect

    sae = random_sae(lm, 1)
    effect = tag_effect(lm, sae, 1, [3, 5], "NOUN", train_sentences=80, held_sentences=40)
    assert effect.features == (3, 5) and len(effect.controls) == 2 and not set(effect.controls) & {3, 5}
    assert effect.tag_words > 0 and effect.held_out_words > effect.tag_words
    assert all(0 <= v <= 1 for v in (effect.probe_intact, effect.probe_removed, effect.probe_control,
                                     effect.mlm_intact, effect.mlm_removed, effect.mlm_control, effect.fires_on_tag))
    assert 0 < effect.masked_words <= 300 and effect.other_words == effect.masked_words
    assert effect.to_json()["features"] == [3, 5]
    with torch.no_grad():
        sae.b_enc[7] = -1e4  # feature 7 never fires: switching it off changes nothing
    silent = tag_effect(lm, sae, 1, 7, "NOUN", train_sentences=80, held_sentences=40)
    assert silent.fires_on_tag == 0
    assert (silent.probe_removed, silent.mlm_removed, silent.other_removed) == (
        silent.probe_intact, silent.mlm_intact, silent.other_intact)
    with pytest.raises(BertScopeError, match="No word of the held-out sample has the tag 'NOPE'"):
        tag_effect(lm, sae, 1, 3, "NOPE", train_sentences=20, held_sentences=10)


def test_the_causal_check_reads_a_pretraining_checkpoints_masked_lm_head(tiny_bert_dir):
    from bertscope.features.causal import tag_effect

    bert = load_model(str(tiny_bert_dir))  # BertForPreTraining: prediction_logits, no .logits
    effect = tag_effect(bert, random_sae(bert, 0), 0, 2, "NOUN", train_sentences=60, held_sentences=30)
    assert 0 <= effect.mlm_intact <= 1 and effect.masked_words > 0
