"""Probe suites on the Brown corpus: real text, human tags, split by document.

    >>> from bertscope.corpora.brown_tasks import brown_task
    >>> task = brown_task("brown-pos", sentences=2000)     # universal tags, 4 sentences a document
    >>> task.classes[:4], len(task.words)
    (['.', 'ADJ', 'ADP', 'ADV'], 2000)

- ``brown-pos``: each word's universal tag (Petrov, Das & McDonald 2012; see ``brown``);
- ``brown-tags``: each word's Brown tag, decorations stripped (~190 classes; e.g. ``nn``,
  ``vbd``, ``do*``, ``ppss+md``);
- ``brown-genre``: each sentence's genre (15 classes: news, editorial, ..., humor).

The sample spreads over every document: ``sentences`` / 500 sentences of each, evenly spaced
through it (so every genre appears in proportion to its documents), seeded; ``sentences=0``
takes the whole corpus (57,340 sentences, 1.16 M words). Every sentence's split group is its
document, so a probe is never tested on a document it was trained on. The model reads the
detokenised text (``brown.detokenize``), and each corpus token is found by its characters.
"""

from __future__ import annotations

import math

import numpy as np

from bertscope.corpora.brown import BrownSentence, read_brown, split_documents
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.errors import BertScopeError

DEFAULT_SENTENCES = 2000
TAGGINGS = {"brown-pos": "universal", "brown-tags": "fine", "brown-genre": "genre"}


def sample_sentences(documents, sentences: int, seed: int = 0) -> list[tuple[int, BrownSentence]]:
    """(document number, sentence) pairs: ``sentences`` spread evenly over every document."""
    if sentences < 0:
        raise BertScopeError("The number of sentences must be 0 (all) or more.")
    if sentences == 0:
        return [(d, s) for d, doc in enumerate(documents) for s in doc.sentences]
    per_doc = math.ceil(sentences / len(documents))
    chosen = []
    for d, doc in enumerate(documents):
        n = len(doc.sentences)
        picks = np.unique(np.linspace(0, n - 1, num=min(per_doc, n)).round().astype(int))
        chosen += [(d, doc.sentences[i]) for i in picks]
    if len(chosen) > sentences:
        keep = np.sort(np.random.default_rng(seed).choice(len(chosen), sentences, replace=False))
        chosen = [chosen[i] for i in keep]
    return chosen


def brown_task(name: str, sentences: int = DEFAULT_SENTENCES, seed: int = 0, folder=None) -> ProbeTask:
    """One of ``brown-pos``, ``brown-tags``, ``brown-genre`` on a sample of ``sentences``."""
    if name not in TAGGINGS:
        raise BertScopeError(f"No Brown task {name!r}: choose one of {', '.join(TAGGINGS)}.")
    corpus = read_brown(folder)
    picked = sample_sentences(corpus.documents, sentences, seed)
    texts, spans, words, labels, groups = [], [], [], [], []
    for d, s in picked:
        text, offsets = s.text, s.offsets
        groups.append(d)
        texts.append(text)
        if TAGGINGS[name] == "genre":
            words.append((text,))
            labels.append((corpus.documents[d].genre,))
            spans.append(((0, len(text)),))
        else:
            words.append(s.tokens)
            labels.append(s.universal if TAGGINGS[name] == "universal" else s.fine)
            spans.append(tuple(offsets))
    level = "sentence" if TAGGINGS[name] == "genre" else "token"
    size = "all" if sentences == 0 else str(sentences)
    return ProbeTask(f"{name}-{size}", level, tuple(words), tuple(labels), tuple(texts), tuple(spans), tuple(groups))


def brown_texts(sentences: int = 500, seed: int = 0, folder=None) -> list[str]:
    """Sentences of real text for corpus statistics (head statistics): ``sentences`` spread over
    all 500 documents, so every genre appears in proportion to its documents."""
    corpus = read_brown(folder)
    return [s.text for _, s in sample_sentences(corpus.documents, sentences, seed)]



def brown_split_texts(sentences: int, held_out: bool, seed: int = 0, folder=None) -> list[str]:
    """``sentences`` Brown sentences from the training side (``held_out=False``) or the held-out side
    of the document split (``brown.split_documents``: 10% of each genre's documents), spread over
    the side's documents: what a measurement fits on, and what it is scored on, never share a
    document."""
    corpus = read_brown(folder)
    train_ids, held_ids = split_documents([d.id for d in corpus.documents], seed=seed)
    wanted = set(held_ids if held_out else train_ids)
    documents = [d for d in corpus.documents if d.id in wanted]
    return [s.text for _, s in sample_sentences(documents, sentences, seed)]
