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


def test_right_to_left_pieces_keep_their_mark_facing_the_previous_token():
    """An Arabic continuation piece "##ر" would be laid out right to left ("ر##"): a left-to-right
    mark fixes the label's direction; left-to-right tokens are untouched."""
    from bertscope.figures.text import LRM, label, table_text

    assert label("##ر") == LRM + "##ر" and table_text("שלום") == LRM + "שלום"
    assert label("bank") == "bank" and table_text("##ing") == "##ing" and label("<s>") == "&lt;s&gt;"


def test_a_word_in_its_context_is_centred_and_cut_at_spaces():
    from bertscope.figures.text import in_context

    text = "In the summer of 1961 the committee met at the bank of the river, where nobody expected any vote at all."
    start = text.index("bank")
    before, word, after = in_context(text, start, start + 4, width=20)
    assert word == "bank" and before.startswith("…") and after.endswith("…")
    assert text[start - len(before.lstrip("…")):start] == before.lstrip("…")
    assert in_context("the bank", 4, 8) == ("the ", "bank", "")
