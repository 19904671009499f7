"""Readable tokens: WordPiece, byte-level BPE and special tokens shown the same way."""

from bertscope import inspect, load_model


def test_wordpiece_keeps_its_continuation_marks(tiny_bert):
    r = inspect(tiny_bert, "Unbelievably playful, the riverside!")
    assert r.tokens == [
        "[CLS]", "un", "##bel", "##ie", "##va", "##bly", "play", "##ful", ",", "the", "river",
        "##side", "!", "[SEP]",
    ]


def test_byte_level_bpe_is_shown_without_g_marks(tiny_roberta_dir):
    lm = load_model(str(tiny_roberta_dir))
    r = inspect(lm, "The bank, unbelievably muddy café.")
    assert r.raw_tokens[0] == "<s>" and r.raw_tokens[-1] == "</s>"
    assert any(t.startswith("Ġ") for t in r.raw_tokens)
    assert not any("Ġ" in t for t in r.tokens)
    assert r.tokens[1:3] == ["The", "bank"]
    # each word's pieces after the first carry "##", and joining them gives the word back
    words: dict[int, str] = {}
    for token, word in zip(r.tokens, r.word_ids):
        if word is not None:
            words[word] = words.get(word, "") + token.removeprefix("##")
    assert list(words.values()) == ["The", "bank", ",", "unbelievably", "muddy", "café", "."]


def test_sentencepiece_is_shown_without_underline_marks(tiny_xlmr_dir):
    lm = load_model(str(tiny_xlmr_dir))
    r = inspect(lm, "The riverside was unbelievably calm.")
    assert any(t.startswith("▁") for t in r.raw_tokens)
    # a lone "▁" (a word boundary with no characters, as XLM-R emits before CJK) stays visible
    assert not any("▁" in t for t in r.tokens if t != "▁")
    words: dict[int, str] = {}
    for token, word in zip(r.tokens, r.word_ids):
        if word is not None and token != "▁":
            words[word] = words.get(word, "") + token.removeprefix("##")
    assert list(words.values()) == ["The", "riverside", "was", "unbelievably", "calm."]  # Metaspace splits on spaces only
    assert any(t.startswith("##") for t in r.tokens)  # some word was split into pieces
