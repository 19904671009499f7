"""Text of every kind BertScope installs, in a stated mixture: what a dictionary (an SAE, a crosscoder) is trained
on when it must know more than 1961 prose, and what it is scored on, domain by domain.

Each source gives the same share of texts, its own train and held-out sides never sharing a text:

- ``brown``: Brown sentences, by the document split (``brown_tasks.brown_split_texts``);
- ``ewt``: UD English-EWT's web text (train / dev sentences, their words joined);
- ``tweets``: the sentiment corpus's tweets (its rows split 90 / 10 by a hash of the text as read
  before its repair, ``sentiment.split_keys``);
- ``bbc``: BBC News articles, their sentences (articles split 90 / 10 by a hash of the article);
- ``squad``: SQuAD v1.1's Wikipedia paragraphs, their sentences (train / dev contexts).

Sources not installed are left out and named (``Mixture.missing``); none installed is one line.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from bertscope.errors import BertScopeError

SOURCES = ("brown", "ewt", "tweets", "bbc", "squad")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


@dataclass(frozen=True)
class Mixture:
    texts: tuple[str, ...]
    sources: tuple[str, ...]  # each text's source
    missing: tuple[str, ...]  # sources not installed

    def counts(self) -> dict[str, int]:
        return {s: self.sources.count(s) for s in dict.fromkeys(self.sources)}


def _held(text: str, share: int = 10) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % share == 0


def _sentences(paragraphs: list[str], limit: int) -> list[str]:
    out: list[str] = []
    for paragraph in paragraphs:
        out.extend(s.strip() for s in _SENTENCE.split(paragraph) if len(s.split()) >= 3)
        if len(out) >= limit:
            break
    return out[:limit]


def _source(name: str, n: int, held_out: bool, seed: int) -> list[str]:
    import random

    if name == "brown":
        from bertscope.corpora.brown_tasks import brown_split_texts

        return brown_split_texts(n, held_out, seed)
    if name == "ewt":
        from bertscope.corpora.ewt import read_ewt

        return [" ".join(s.tokens) for s in read_ewt("dev" if held_out else "train")][:n]
    if name == "tweets":
        from bertscope.corpora.sentiment import read_sentiment, split_keys

        data = read_sentiment()
        texts = [t for t, key in zip(data.texts, split_keys(data)) if _held(key) == held_out]
        return random.Random(seed).sample(texts, min(n, len(texts)))
    if name == "bbc":
        from bertscope.corpora.topics import read_topics

        articles = [t for t in read_topics().texts if _held(t) == held_out]
        random.Random(seed).shuffle(articles)
        return _sentences(articles, n)
    from bertscope.corpora.squad import read_squad

    contexts = list(dict.fromkeys(read_squad("dev" if held_out else "train").contexts))
    random.Random(seed).shuffle(contexts)
    return _sentences(contexts, n)


def _installed(name: str) -> bool:
    from bertscope.corpora.installs import CORPORA

    return CORPORA[{"tweets": "sentiment", "bbc": "topics"}.get(name, name)].installed()


def installed_sources(sources: tuple[str, ...] = SOURCES) -> list[str]:
    """The sources whose corpus is installed, in ``sources``' order."""
    return [s for s in sources if _installed(s)]


def mixed_texts(per_source: int, held_out: bool = False, seed: int = 0, sources: tuple[str, ...] = SOURCES) -> Mixture:
    """``per_source`` texts from each installed source, interleaved (source by source, text by text)."""
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise BertScopeError(f"Unknown text source {unknown[0]!r}: the sources are {', '.join(SOURCES)}.")
    if per_source < 1:
        raise BertScopeError("Take at least one text from each source.")
    present = installed_sources(sources)
    if not present:
        raise BertScopeError("No corpus is installed: run `python -m bertscope corpus install all`.")
    lists = {s: _source(s, per_source, held_out, seed) for s in present}
    texts, names = [], []
    for i in range(max(len(v) for v in lists.values())):
        for s in present:
            if i < len(lists[s]):
                texts.append(lists[s][i])
                names.append(s)
    return Mixture(tuple(texts), tuple(names), tuple(s for s in sources if s not in present))
