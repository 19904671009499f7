"""Translations, one row per meaning and one column per language: the shipped sentences (105) and
words (209) in 9 languages, or a user's TSV with language codes in its header; and the carrier
sentence of each language ("The word is “…”.") that words can be read inside."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bertscope.corpora import DATA_DIR
from bertscope.errors import BertScopeError

MAX_ROWS = 2000
MAX_CELL_CHARS = 2000
Kind = Literal["sentences", "words"]
LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "ru": "Russian",
    "zh": "Chinese", "ar": "Arabic", "hi": "Hindi", "ja": "Japanese", "ko": "Korean",
    "it": "Italian", "pt": "Portuguese", "nl": "Dutch", "pl": "Polish", "tr": "Turkish",
    "el": "Greek", "he": "Hebrew", "fa": "Persian", "uk": "Ukrainian", "vi": "Vietnamese",
}


# Metalinguistic carriers: one frame fits nouns, verbs and adjectives alike.
CARRIERS = {
    "en": "The word is “{}”.", "de": "Das Wort ist „{}“.", "fr": "Le mot est « {} ».",
    "es": "La palabra es «{}».", "ru": "Слово — «{}».", "zh": "这个词是“{}”。",
    "ar": "الكلمة هي «{}».", "hi": "शब्द है “{}”।", "ja": "単語は「{}」です。",
}


_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,15}$")


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


@dataclass(frozen=True)
class ParallelData:
    """Translations, one row per meaning, one column per language."""

    kind: Kind
    languages: tuple[str, ...]
    cells: tuple[tuple[str | None, ...], ...]  # [row][language]; None = missing
    lines: tuple[int, ...]  # file line of each row (1 = header)

    @property
    def complete(self) -> list[int]:
        """Rows with every language present (the ones retrieval uses)."""
        return [i for i, row in enumerate(self.cells) if all(c is not None for c in row)]

    @property
    def incomplete(self) -> list[tuple[int, list[str]]]:
        """(file line, missing languages) of every row left out."""
        return [(self.lines[i], [g for g, c in zip(self.languages, row) if c is None])
                for i, row in enumerate(self.cells) if any(c is None for c in row)]

    @property
    def n_items(self) -> int:
        return len(self.complete)

    def texts(self, language: str) -> list[str]:
        j = self.languages.index(language)
        return [self.cells[i][j] for i in self.complete]

    def select(self, languages: Sequence[str]) -> ParallelData:
        """The same rows, only these languages (in this order)."""
        languages = list(dict.fromkeys(languages))
        unknown = [g for g in languages if g not in self.languages]
        if unknown:
            raise BertScopeError(f"No column for {', '.join(unknown)}; the data has {', '.join(self.languages)}.")
        if len(languages) < 2:
            raise BertScopeError("Choose at least two languages.")
        idx = [self.languages.index(g) for g in languages]
        picked = ParallelData(self.kind, tuple(languages),
                              tuple(tuple(row[j] for j in idx) for row in self.cells), self.lines)
        picked.require_items()
        return picked

    def require_items(self) -> None:
        if self.n_items < 2:
            raise BertScopeError("Fewer than 2 rows have every language: there is nothing to retrieve.")

    def digest(self) -> str:
        return hashlib.sha256(repr((self.kind, self.languages, self.cells)).encode()).hexdigest()[:16]


def read_parallel_tsv(text: str, kind: Kind = "sentences") -> ParallelData:
    """A TSV with language codes in the header; rows with a missing cell are kept but flagged."""
    if kind not in ("sentences", "words"):
        raise BertScopeError("The kind must be 'sentences' or 'words'.")
    lines = text.lstrip("\ufeff").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise BertScopeError("The file is empty: it needs a header of language codes, then rows.")
    head_line, header = numbered[0]
    languages = [c.strip() for c in header.split("\t")]
    if len(languages) < 2:
        hint = " (it looks comma-separated: use tabs)" if "," in header else ""
        raise BertScopeError(f"Line {head_line}: the header needs at least two tab-separated language codes{hint}.")
    bad = [c for c in languages if not _CODE.match(c)]
    if bad:
        raise BertScopeError(f"Line {head_line}: {bad[0]!r} is not a language code (e.g. en, de, zh).")
    if len(set(languages)) != len(languages):
        raise BertScopeError(f"Line {head_line}: a language appears twice in the header.")
    cells, kept_lines = [], []
    for n, line in numbered[1:]:
        fields = line.split("\t")
        if len(fields) > len(languages):
            raise BertScopeError(f"Line {n} has {len(fields)} fields; the header has {len(languages)}.")
        row = tuple((f.strip() or None) for f in fields) + (None,) * (len(languages) - len(fields))
        too_long = [c for c in row if c and len(c) > MAX_CELL_CHARS]
        if too_long:
            raise BertScopeError(f"Line {n} has a cell of {len(too_long[0]):,} characters; "
                                 f"the limit is {MAX_CELL_CHARS:,}.")
        if all(c is None for c in row):
            continue
        cells.append(row)
        kept_lines.append(n)
        if len(cells) > MAX_ROWS:
            raise BertScopeError(f"More than {MAX_ROWS:,} rows; split the file.")
    data = ParallelData(kind, tuple(languages), tuple(cells), tuple(kept_lines))
    data.require_items()
    return data


def shipped_parallel(kind: Kind = "sentences") -> ParallelData:
    """The project's parallel sentences (105) or words (209) in 9 languages."""
    if kind not in ("sentences", "words"):
        raise BertScopeError("The kind must be 'sentences' or 'words'.")
    return read_parallel_tsv((DATA_DIR / f"parallel_{kind}.tsv").read_text(encoding="utf-8"), kind)
