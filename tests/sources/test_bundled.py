"""The bundled all-MiniLM-L6-v2 is the genuine model: its shape, parity, and real semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from bertscope import inspect, inspect_batch, load_model
from bertscope.sources.minilm import bundled_model_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundled():
    return load_model("bundled")


def test_shape_and_heads(bundled):
    assert (bundled.num_layers, bundled.num_heads, bundled.hidden_size) == (6, 12, 384)
    assert bundled.vocab_size == 30522 and bundled.outputs == frozenset()
    assert bundled.parameter_count() == 22_713_216  # all-MiniLM-L6-v2 with its pooler


def test_parity_with_hugging_face(bundled):
    from transformers import AutoModel

    ref_model = AutoModel.from_pretrained(bundled_model_dir(), attn_implementation="eager").eval()
    text = "The bank of the river was steep."
    enc = bundled.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        ref = ref_model(**enc, output_attentions=True, output_hidden_states=True)
    ours = inspect(bundled, text)
    assert_close(torch.from_numpy(ours.attentions), torch.stack(ref.attentions)[:, 0])
    assert_close(torch.from_numpy(ours.hidden_states), torch.stack(ref.hidden_states)[:, 0])


def sentence_embeddings(lm, sentences):
    """all-MiniLM-L6-v2's own recipe: mean over tokens of the last layer, L2-normalised."""
    out = np.zeros((len(sentences), lm.hidden_size), np.float32)
    for batch in inspect_batch(lm, sentences, batch_size=8):
        mask = batch.attention_mask[..., None]  # [batch, token, 1]
        last = batch.hidden_states[:, -1]  # [batch, token, dim]
        mean = (last * mask).sum(1) / mask.sum(1)
        out[batch.indices] = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    return out


def test_embeddings_carry_real_meaning(bundled):
    e = sentence_embeddings(
        bundled,
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.",
         "The girl is playing the violin."],
    )
    sim = e @ e.T
    assert sim[0, 1] > 0.6  # paraphrases
    assert sim[0, 1] > sim[0, 2] + 0.2 and sim[0, 1] > sim[0, 3] + 0.3
