"""Plain sentences, one per line: a user's corpus, or the shipped sample of 218 varied English
sentences (``bertscope/data/attention_corpus.txt``) that head statistics and the anisotropy
baseline default to."""

from __future__ import annotations

from pathlib import Path

from bertscope.corpora import DATA_DIR
from bertscope.errors import BertScopeError


def read_corpus(text: str) -> list[str]:
    """One sentence per non-empty line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_lines_file(path: str | Path, missing: str) -> list[str]:
    """A UTF-8 text file's non-empty lines, stripped; ``missing`` is the one line said when there is no such file."""
    path = Path(path)
    if not path.is_file():
        raise BertScopeError(missing)
    try:
        return read_corpus(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise BertScopeError(f"{path.name} is not UTF-8 text: save it as UTF-8.") from None


def shipped_corpus() -> list[str]:
    """The project's sample of varied English sentences (bertscope/data/attention_corpus.txt)."""
    return read_corpus((DATA_DIR / "attention_corpus.txt").read_text("utf-8"))
