"""Attention views: bertviz gets the model's own attention; hostile tokens are never HTML."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from bertscope import BertScopeError, inspect
from bertscope.figures.attention import (
    bertviz_html,
    bertviz_inputs,
    head_heatmap,
    label,
    layer_grid,
    select,
    token_across_layers,
)

HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)>&amp;'


def test_bertviz_gets_the_models_attention(tiny_bert, tiny_bert_dir):
    from transformers import BertForPreTraining

    r = inspect(tiny_bert, "the bank of the river", "a dog")
    attention, tokens, b_start = bertviz_inputs(r)
    model = BertForPreTraining.from_pretrained(tiny_bert_dir, attn_implementation="eager").eval()
    enc = tiny_bert.tokenizer("the bank of the river", "a dog", return_tensors="pt")
    with torch.no_grad():
        ref = model(**enc, output_attentions=True).attentions
    assert len(attention) == len(ref)
    for ours, theirs in zip(attention, ref):  # rounded to 3 decimals: bertviz's page is text
        assert_close(ours, theirs.double(), atol=5e-4, rtol=0)
    assert tokens == r.tokens and tokens[b_start] == "a"


def params_of(page: str) -> dict:
    match = re.search(r"const params = (\{.*?\});", page, re.S)
    assert match, "bertviz's params were not found"
    return json.loads(match.group(1))


def test_bertviz_html_carries_exact_tokens_and_attention(tiny_bert):
    r = inspect(tiny_bert, "the bank of the river")
    params = params_of(bertviz_html(r, "head"))
    (entry,) = [a for a in params["attention"] if a["name"] == "All"] or params["attention"][:1]
    assert entry["left_text"] == r.tokens
    np.testing.assert_allclose(np.array(entry["attn"]), r.attentions, atol=5e-4)


def fake_inspection_with_tokens(tiny_bert, tokens):
    r = inspect(tiny_bert, " ".join(["the"] * (len(tokens) - 2)))
    object.__setattr__(r, "tokens", tokens)
    return r


@pytest.mark.parametrize("view", ["head", "model"])
def test_hostile_tokens_never_become_html(tiny_bert, view):
    r = fake_inspection_with_tokens(tiny_bert, ["[CLS]", HOSTILE, "<b>bold</b>", "[SEP]"])
    page = bertviz_html(r, view)
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>bold" not in page
    assert params_of(page)["attention"][0]["left_text"][1] == HOSTILE  # shown exactly, as text
    for fig in (head_heatmap(r, 0, 0), layer_grid(r, 0), token_across_layers(r, 1)):
        text = fig.to_json()
        assert "<script>" not in text and "<img" not in text and "<b>bold" not in text
    assert label(HOSTILE).startswith("&lt;/script&gt;")


def test_bertviz_cap_and_offline_notice(tiny_bert):
    r = inspect(tiny_bert, "the bank of the river is muddy and steep")
    page = bertviz_html(r, "head")
    assert 'onerror="bertscopeCdnFailed()"' in page and "could not load require.js" in page
    with pytest.raises(BertScopeError, match="over the 0.0 MB cap"):
        bertviz_html(r, "head", max_bytes=5_000)


@pytest.mark.parametrize("view", ["head", "model"])
def test_bertviz_loads_the_apps_own_scripts_first(tiny_bert, view):
    r = inspect(tiny_bert, "the bank of the river")
    page = bertviz_html(r, view, assets="app/static/bertviz")
    assert '<script src="app/static/bertviz/require.js"></script>' in page
    assert "d3: ['app/static/bertviz/d3.min', 'https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min']" in page
    assert "jquery: ['app/static/bertviz/jquery.min', 'https://cdnjs" in page  # cdnjs: the fallback only
    assert page.count("cdnjs.cloudflare.com/ajax/libs/require.js") == 1  # written in only if the local copy failed


def test_hide_special_and_renormalise(tiny_bert):
    r = inspect(tiny_bert, "the bank of the river")
    a = select(r, r.attentions[0, 0], hide_special=True, renormalise=True)
    assert a.shape == (5, 5)
    np.testing.assert_allclose(a.sum(-1), 1, rtol=1e-6)
    raw = select(r, r.attentions[0, 0], hide_special=True, renormalise=False)
    assert (raw.sum(-1) < 1 + 1e-6).all()
    fig = head_heatmap(r, 0, 0, hide_special=True)
    assert list(fig.layout.xaxis.ticktext) == ["the", "bank", "of", "the", "river"]  # repeats kept


def test_bad_view_requests(tiny_bert):
    r = inspect(tiny_bert, "the bank")
    with pytest.raises(BertScopeError, match="does not exist"):
        head_heatmap(r, 5, 0)
    with pytest.raises(BertScopeError, match="Token 9 does not exist"):
        token_across_layers(r, 9)
    with pytest.raises(BertScopeError, match="special token"):
        token_across_layers(r, 0, hide_special=True)
