"""Full-size inputs: compact figures, bertviz within bytes, a cache bounded by bytes, batches
bounded by bytes, MLM logits only where asked."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import replace

import numpy as np
import pytest
import torch

from bertscope import BertScopeError, inspect, inspect_batch, load_model
from bertscope.core.batch_plan import output_bytes, plan_batches
from bertscope.figures.attention import (
    attention_row,
    bertviz_bytes,
    bertviz_fit,
    bertviz_html,
    head_heatmap,
    layer_grid,
    token_across_layers,
)
from bertscope.figures.compact import block_mean, block_size, thousandths
from bertscope.runtime.result_cache import ResultCache, size_of

MiB = 2**20
DTYPES = {"u1": np.uint8, "u2": np.uint16, "i1": np.int8, "i2": np.int16, "i4": np.int32, "f4": np.float32,
          "f8": np.float64}


def decode(value):
    """A plotly typed-array spec {"dtype", "bdata", "shape"} (or a plain list) as numpy."""
    if isinstance(value, dict) and "bdata" in value:
        array = np.frombuffer(base64.b64decode(value["bdata"]), DTYPES[value["dtype"]])
        shape = tuple(int(n) for n in value["shape"].split(",")) if "shape" in value else array.shape
        return array.reshape(shape)
    return np.asarray(value)


def long_inspection(tiny_bert, tokens: int, layers: int = 12, heads: int = 12, seed: int = 0):
    """A real Inspection whose attentions are replaced by softmax rows of a BERT-base shape."""
    template = inspect(tiny_bert, "the bank")
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 3, (layers, heads, tokens, tokens)).astype(np.float32)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    special = np.zeros(tokens, bool)
    special[[0, -1]] = True
    return replace(template, tokens=["[CLS]", *(f"w{i}" for i in range(tokens - 2)), "[SEP]"],
                   attentions=weights.astype(np.float16), special_mask=special,
                   sequence_ids=[None, *[0] * (tokens - 2), None], hidden_states=None)


def test_figures_at_512_tokens_are_compact_and_hover_exact(tiny_bert):
    r = long_inspection(tiny_bert, 512)
    head = json.loads(head_heatmap(r, 3, 2).to_json())
    assert len(json.dumps(head)) <= 1 * MiB
    z = decode(head["data"][0]["z"])  # [q, k] uint16 thousandths: what the hover prints as 0.%{z:03d}
    assert z.shape == (512, 512) and z.dtype == np.uint16
    np.testing.assert_allclose(z / 1000, r.attentions[3, 2].astype(np.float32), atol=1e-3)
    assert "0.%{z:03d}" in head["data"][0]["hovertemplate"]
    ticks = head["layout"]["xaxis"]["ticktext"]  # token labels kept: every 8th of 512, readable
    assert ticks[:2] == ["[CLS]", "w7"] and len(ticks) == 64
    assert decode(head["data"][0]["z"]).max() == head["data"][0]["zmax"]  # colour: 0 to the largest weight

    grid = layer_grid(r, 0).to_json()
    assert len(grid) <= 3 * MiB
    token = json.loads(token_across_layers(r, 5).to_json())
    np.testing.assert_allclose(decode(token["data"][0]["z"]) / 1000,
                               r.attentions[:, :, 5].astype(np.float32).mean(1), atol=1e-3)
    for bert_large in (layer_grid(long_inspection(tiny_bert, 512, 24, 16), 23).to_json(),):
        assert len(bert_large) <= 3 * MiB


def test_readout_is_exact_and_small_inputs_name_tokens(tiny_bert):
    r = inspect(tiny_bert, "the bank of the river")
    rows = attention_row(r, 1, 2, query=2, top=3)
    assert [x["weight"] for x in rows] == sorted(r.attentions[1, 2, 2].tolist(), reverse=True)[:3]
    assert rows[0]["token"] == r.tokens[rows[0]["key"]]
    fig = json.loads(head_heatmap(r, 0, 0).to_json())
    assert fig["data"][0]["customdata"][1][2] == ["the", "bank"]  # hover names query and key
    with pytest.raises(BertScopeError, match="not shown"):
        attention_row(r, 0, 0, query=0, hide_special=True)


def test_compact_helpers():
    assert thousandths(np.array([0.0, 0.0004, 0.0005, 0.1234, 0.9994, 0.9996, 1.0])).tolist() == \
        [0, 0, 0, 123, 999, 999, 999]  # capped at 999: the hover's 0.%{z:03d} stays a number
    w = np.arange(25, dtype=np.float32).reshape(5, 5)
    means = block_mean(w, 2)
    assert means.shape == (3, 3) and means[0, 0] == np.mean([0, 1, 5, 6]) and means[2, 2] == 24
    assert block_size(512, 12, 2_500_000) == 3 and block_size(40, 12, 2_500_000) == 1  # float32 cells


def test_bertviz_size_is_known_before_building(tiny_bert):
    r = inspect(tiny_bert, "the bank of the river is muddy and steep", "a dog sat")
    for view in ("head", "model"):
        page = bertviz_html(r, view)
        assert abs(len(page) - bertviz_bytes(r, view)) < 0.15 * len(page)
        assert page.count('"attn"') == 5  # "All" and the four A/B quadrants, once each (not twice)
    small = bertviz_html(r, "model", layers=[1], heads=[0, 2])
    assert len(small) < len(bertviz_html(r, "model"))
    params = json.loads(small[small.index("const params = ") + 15: small.index(";", small.index("const params = "))])
    subset = np.array(params["attention"][0]["attn"])  # [layer, head, q, k]: layer 1, heads 0 and 2
    assert subset.shape == (1, 2, r.n_tokens, r.n_tokens)
    np.testing.assert_allclose(subset, r.attentions[[1]][:, [0, 2]], atol=5e-4)


def test_bertviz_refuses_past_the_cap_and_says_what_fits(tiny_bert):
    r = long_inspection(tiny_bert, 512)
    layers, heads = bertviz_fit(r, "model", 8 * MiB)
    assert layers == [0] and 0 < len(heads) < 12
    assert bertviz_bytes(r, "model", layers, heads) <= 8 * MiB
    with pytest.raises(BertScopeError, match=r"about .* MB .* over the 8.0 MB cap: pick one layer and at most"):
        bertviz_html(r, "model", 8 * MiB)
    with pytest.raises(BertScopeError, match="even one layer is too much"):
        bertviz_html(r, "head", 8 * MiB, layers=[0])
    with pytest.raises(BertScopeError, match="Layer 40 does not exist"):
        bertviz_html(r, "head", layers=[40])


def test_cache_evicts_by_bytes_least_recent_first():
    cache = ResultCache(max_bytes=10 * MiB)
    block = lambda: np.zeros(3 * MiB, np.uint8)  # noqa: E731
    for key in "abc":
        assert cache.put(key, {"array": block()})
    cache.get("a")  # a is now the most recent
    cache.put("d", block())
    assert "b" not in cache and {"a", "c", "d"} <= {k for k in "abcd" if k in cache}
    assert cache.bytes <= 10 * MiB
    assert not cache.put("huge", np.zeros(11 * MiB, np.uint8)) and "huge" not in cache
    for i in range(50):  # any number of entries: bytes stay bounded
        cache.put(("n", i), np.zeros(MiB, np.float32))
    assert cache.bytes <= 10 * MiB and len(cache) <= 10


def test_cache_computes_once_under_concurrency_and_forgets_errors():
    cache = ResultCache(max_bytes=MiB)
    calls = []
    barrier = threading.Barrier(4)

    def compute():
        calls.append(1)
        return np.ones(10)

    def worker():
        barrier.wait()
        cache.get_or_compute("k", compute)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    with pytest.raises(ValueError):
        cache.get_or_compute("bad", lambda: (_ for _ in ()).throw(ValueError("no")))
    assert "bad" not in cache and cache.get_or_compute("bad", lambda: 3) == 3


def test_size_of_counts_an_inspection(tiny_bert):
    r = inspect(tiny_bert, "the bank of the river")
    arrays = r.attentions.nbytes + r.hidden_states.nbytes + r.mlm_logits.nbytes
    assert arrays <= size_of(r) < arrays + 64_000


def test_batches_are_bounded_by_bytes(tiny_bert):
    lengths = [5, 40, 8, 40, 7, 39]
    plans = plan_batches(lengths, lambda n: n * n, batch_size=32, max_batch_bytes=3_300)
    assert sorted(i for b in plans for i in b) == list(range(6))
    assert all(len(b) * max(lengths[i] for i in b) ** 2 <= 3_300 or len(b) == 1 for b in plans)
    texts = ["the bank", "the bank of the river is muddy and steep", "a dog", "the man sat", "a"]
    budget = output_bytes(tiny_bert, 8, True, True, False) * 2  # two short rows at most
    batches = list(inspect_batch(tiny_bert, texts, max_batch_bytes=budget))
    assert len(batches) >= 3 and sorted(i for b in batches for i in b.indices) == list(range(5))
    for b in batches:
        for row, i in enumerate(b.indices):
            np.testing.assert_allclose(b.item(row).attentions, inspect(tiny_bert, texts[i]).attentions, atol=1e-5)


def test_logits_only_where_asked(tiny_bert):
    full = inspect(tiny_bert, "the [MASK] of the [MASK] .")
    sparse = inspect(tiny_bert, "the [MASK] of the [MASK] .", with_attentions=False, logit_positions="masks")
    masks = tuple(int(i) for i in np.flatnonzero(full.input_ids == tiny_bert.tokenizer.mask_token_id))
    assert sparse.logit_positions == masks and sparse.mlm_logits.shape == (2, tiny_bert.vocab_size)
    assert sparse.attentions is None
    for p in masks:
        np.testing.assert_allclose(sparse.logits_at(p), full.mlm_logits[p], atol=1e-5)
    with pytest.raises(BertScopeError, match="only at positions"):
        sparse.logits_at(1)
    half = inspect(tiny_bert, "the bank", precision="float16")
    assert half.attentions.dtype == np.float16
    np.testing.assert_allclose(half.attentions, inspect(tiny_bert, "the bank").attentions, atol=1e-3)
    with pytest.raises(BertScopeError, match="Unknown precision"):
        inspect(tiny_bert, "the bank", precision="int8")


@pytest.mark.slow
@pytest.mark.parametrize("config", ["bert-base-uncased", "bert-large-uncased"])
def test_random_full_size_model_at_512_tokens(config, tmp_path_factory, artifacts):
    """A real forward at BERT's operating point: the lean result the app keeps, its figures."""
    from bertscope.core.random_models import save_random_model

    folder = save_random_model(config, tmp_path_factory.mktemp(config), heads="pretraining")
    lm = load_model(folder)
    text = " ".join(["the bank of the river was muddy after the storm ."] * 60)
    r = inspect(lm, text, with_logits=False, with_hidden_states=False, precision="float16")
    assert r.n_tokens == 512 and r.truncated
    assert size_of(r) < 1.05 * lm.num_layers * lm.num_heads * 512 * 512 * 2  # float16 attentions only
    np.testing.assert_allclose(r.attentions[-1].astype(np.float32).sum(-1), 1, atol=2e-3)
    assert len(head_heatmap(r, 0, 0).to_json()) <= MiB
    assert len(layer_grid(r, lm.num_layers - 1).to_json()) <= 3 * MiB
    with torch.inference_mode():
        bare = lm.model(input_ids=torch.tensor([r.input_ids.tolist()], device=lm.device), output_attentions=True).attentions
    np.testing.assert_allclose(r.attentions[5], bare[5][0].float().cpu().numpy(), atol=1e-3)
    # head statistics and the shift page's extraction at 512 tokens, within their byte-bounded batches
    from bertscope.analysis.attention_stats import head_stats
    from bertscope.analysis.shift import collect

    stats = head_stats(lm, [text, text.replace("bank", "shore")])
    assert stats.tokens == 1024 and np.isfinite(stats.stats["entropy"]).all()
    assert stats.stats["entropy"].shape == (lm.num_layers, lm.num_heads)
    found = collect(lm, "bank", [(text, "river")], occurrences="first")
    assert found.vectors.shape == (1, lm.num_layers + 1, lm.hidden_size)
