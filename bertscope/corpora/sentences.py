"""Plain sentences, one per line: a user's corpus, or the shipped sample of 218 varied English
sentences (``bertscope/data/attention_corpus.txt``) that head statistics and the anisotropy
baseline default to."""

from __future__ import annotations

from bertscope.corpora import DATA_DIR


def read_corpus(text: str) -> list[str]:
    """One sentence per non-empty line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def shipped_corpus() -> list[str]:
    """The project's sample of varied English sentences (bertscope/data/attention_corpus.txt)."""
    return read_corpus((DATA_DIR / "attention_corpus.txt").read_text("utf-8"))
