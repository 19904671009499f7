"""Word pieces placed in words the same way for every tokenizer family (``core.word_pieces``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
from bertscope.core.forward import inspect
from bertscope.core.word_pieces import piece_words, word_pieces
from bertscope.corpora.probe_tasks import ProbeTask

TEXT = "George W. Bush went to Paris."
SPANS = [(0, 6), (7, 8), (8, 9), (10, 14), (15, 19), (20, 22), (23, 28), (28, 29)]  # as a treebank splits it


def test_sentencepiece_folds_the_space_into_the_first_piece():
    # bundled-multilingual's (XLM-R's) offsets: '<s>', '▁George', '▁W', '.', '▁Bush', ..., '▁Par', 'is', '.', '</s>'
    offsets = [(0, 0), (0, 6), (6, 8), (8, 9), (9, 14), (14, 19), (19, 22), (22, 26), (26, 28), (28, 29), (0, 0)]
    assert piece_words(SPANS, offsets).tolist() == [-1, 0, 1, 2, 3, 4, 5, 6, 6, 7, -1]
    assert word_pieces(SPANS, offsets) == [[1], [2], [3], [4], [5], [6], [7, 8], [9]]


def test_wordpiece_and_a_piece_straddling_two_words():
    # BERT: "don't" as don / ' / t against EWT's "do" + "n't"; the straddling piece stays with the first
    assert piece_words([(0, 2), (2, 5)], [(0, 0), (0, 3), (3, 4), (4, 5), (0, 0)]).tolist() == [-1, 0, 1, 1, -1]
    # pieces that stay in the gap, specials by mask, and a sentence without words
    assert piece_words([(2, 4)], [(0, 1), (2, 3), (3, 4), (4, 5)], [True, True, False, True]).tolist() == [-1, 0, -1, -1]
    assert piece_words([], [(0, 3)]).tolist() == [-1]


@pytest.fixture(scope="module")
def folding_model(tmp_path_factory):
    """A random BertModel behind a Unigram + Metaspace tokenizer built as bundled-multilingual's is
    (``sources.multilingual_e5.build_tokenizer``): its first pieces' offsets include the space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁George", "▁W", ".", "▁Bush", "▁went", "▁to", "▁Par", "is", "▁"]
    tokenizer = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=3, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                                   sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                   model_input_names=["input_ids", "attention_mask"])
    torch.manual_seed(3)
    config = BertConfig(vocab_size=len(pieces), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=40, pad_token_id=1)
    folder = tmp_path_factory.mktemp("folding")
    BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return load_model(str(folder))


def test_every_word_keeps_its_first_piece_when_the_tokenizer_folds_in_spaces(folding_model, tmp_path):
    r = inspect(folding_model, TEXT)
    assert r.offsets[4] == (9, 14) and r.offsets[7:9] == [(22, 26), (26, 28)]  # '▁Bush'; '▁Par' 'is'
    words = tuple(TEXT[a:b] for a, b in SPANS)
    task = ProbeTask("folded", "token", (words,), (("a", "b") * 4,), sentences=(TEXT,), spans=(tuple(SPANS),))
    pieces = word_pieces(SPANS, r.offsets)  # [[1], [2], [3], [4], ...]
    for pooling in ("mean", "first"):
        states = hidden_states(folding_model, task, pooling, HiddenStateCache(tmp_path))
        assert len(states.labels) == len(words), "every word kept a vector"
        for layer in (0, 2):
            expected = np.stack([r.hidden_states[layer, p].mean(0) if pooling == "mean" else r.hidden_states[layer, p[0]]
                                 for p in pieces])  # [word, dim]
            assert np.allclose(states.layer(layer), expected, atol=1e-5)
