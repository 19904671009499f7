"""Corpus search over the Brown corpus: which words of real text does the model place nearest
to a word in your sentence, at a layer, and what are their part-of-speech tags? After exBERT's
corpus search (Hoover, Strobelt & Gehrmann 2020, "exBERT: A Visual Analysis Tool to Explore
Learned Representations in Transformer Models", ACL demos; §3.2).

    >>> from bertscope import load_model
    >>> lm = load_model("bundled")
    >>> index = build_index(lm, sentences=200)           # 4,263 words, every genre (2,000 by default)
    >>> found = search(lm, index, "The bank of the river was muddy.", word=1, layer=4)
    >>> [m.word for m in found.matches[:3]], found.tag_counts.most_common(2)
    (['deposit', 'river', 'barbs'], [('NOUN', 19), ('ADJ', 1)])

The index is the probes' hidden-state cache of ``brown-pos`` on the same sample (one vector
per word, the mean of its pieces, every layer; ``hidden_cache``): built once per model and
sample, on disk, shared with the Probes page. A layer is searched as unit-length float16
rows (half the bytes; cosines to about 3 decimals); the query is embedded the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.analysis.hidden_cache import CachedStates, HiddenStateCache, hidden_states, states_on_disk
from bertscope.analysis.probing import example_texts
from bertscope.core.forward import inspect
from bertscope.core.models import LoadedModel
from bertscope.corpora.brown import read_brown
from bertscope.corpora.brown_tasks import DEFAULT_SENTENCES, brown_task
from bertscope.errors import BertScopeError

MAX_K = 200


@dataclass(eq=False)
class CorpusIndex:
    """Brown words with their vectors at every layer (on disk), tags, genres and sentences."""

    model: str
    texts: tuple[str, ...]  # the sample's sentences, as the model read them
    states: CachedStates  # [example] one per tagged word; sentences / labels / types per example
    genres: list[str]  # [example]
    spans: np.ndarray  # [example, 2] the word's characters in its sentence
    _unit: dict = None  # layer -> [example, dim] float16 unit rows

    def __post_init__(self) -> None:
        self._unit = {}

    @property
    def n_words(self) -> int:
        return len(self.states.labels)

    def unit_rows(self, layer: int) -> np.ndarray:
        """[example, dim] float16, each row scaled to length 1 (memoised per layer)."""
        if layer not in self._unit:
            x = np.asarray(self.states.layer(layer), np.float32)  # [example, dim], memory-mapped
            self._unit[layer] = (x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)).astype(np.float16)
        return self._unit[layer]

    def occurrences(self, word: str) -> np.ndarray:
        """[n] example rows of ``word`` (lower-cased, as the corpus spells it)."""
        wanted = word.strip().lower()
        return np.array([i for i, t in enumerate(self.states.types) if t == wanted], np.int64)


def index_on_disk(lm: LoadedModel, sentences: int = DEFAULT_SENTENCES, cache: HiddenStateCache | None = None) -> bool:
    """Whether ``build_index`` would only read the disk (the sample's states were extracted before)."""
    return states_on_disk(lm, brown_task("brown-pos", sentences), "mean", cache)


def build_index(lm: LoadedModel, sentences: int = DEFAULT_SENTENCES, cache: HiddenStateCache | None = None,
                progress: Callable[[int, int], None] | None = None, engine=None) -> CorpusIndex:
    """The Brown sample's word vectors at every layer (extracted once, then read from disk;
    ``engine``: who runs the passes, as ``hidden_states`` takes).

    Args:
        lm: the model.
        sentences: Brown sentences sampled, every genre (``brown_task("brown-pos", sentences)``; 0: all of them).
        cache: where the hidden states are kept (default: the user cache, shared with the Probes page).
        progress: called with (done, total) sentences while the states are extracted.
        engine (Engine | None): who extracts the states (``runtime.engine``; None: this process).

    Returns:
        A ``CorpusIndex``: one vector per tagged word at every hidden state (the mean of its pieces), with its
            universal tag, genre, sentence and character span.
    """
    task = brown_task("brown-pos", sentences)
    states = hidden_states(lm, task, "mean", cache or HiddenStateCache(), progress=progress, engine=engine)
    documents = read_brown().documents
    genres = [documents[int(g)].genre for g in states.groups]  # a brown task's groups are documents
    spans = np.array([(start, end) for _, _, start, end in example_texts(states, task, range(len(states.labels)))],
                     np.int64).reshape(-1, 2)
    return CorpusIndex(lm.name, task.texts, states, genres, spans)


@dataclass(frozen=True)
class Match:
    word: str
    tag: str  # universal part of speech
    genre: str
    sentence: str
    similarity: float  # cosine at the searched layer
    start: int  # the word's characters in its sentence
    end: int


@dataclass(frozen=True)
class SearchResult:
    query_word: str
    layer: int
    matches: list[Match]  # best first
    tag_counts: Counter  # tags among the matches
    corpus_tag_share: dict[str, float]  # each tag's share of the whole index, for comparison


def query_vector(lm: LoadedModel, text: str, word: int, layer: int) -> tuple[np.ndarray, str]:
    """([dim] the mean of word ``word``'s pieces at hidden state ``layer`` (0 = the embeddings, l = the
    output of block l - 1), the word as written)."""
    r = inspect(lm, text, with_logits=False, with_attentions=False)
    if not 0 <= layer <= r.n_layers:
        raise BertScopeError(f"Hidden state {layer} does not exist: 0 is the embeddings, {r.n_layers} is layer "
                             f"{r.n_layers - 1} (the last block's output).")
    pieces = [i for i, (w, s) in enumerate(zip(r.word_ids, r.sequence_ids)) if w == word and s == 0]
    if not pieces:
        count = len({w for w, s in zip(r.word_ids, r.sequence_ids) if w is not None and s == 0})
        raise BertScopeError(f"Word {word} does not exist: the text has {count} words (0-{count - 1}).")
    start, end = r.offsets[pieces[0]][0], r.offsets[pieces[-1]][1]
    return r.hidden_states[layer, pieces].mean(axis=0), text[start:end]


def search(lm: LoadedModel, index: CorpusIndex, text: str, word: int, layer: int, k: int = 20) -> SearchResult:
    """The ``k`` Brown words nearest (cosine) to word ``word`` of ``text`` at ``layer``.

    Args:
        lm: the model the index was built with.
        index: the Brown words' vectors (``build_index``).
        text: the sentence holding the query word.
        word: the query word's index among the tokenizer's words of ``text``, from 0 (its pieces averaged).
        layer: the hidden state searched: 0 = the embeddings, l = layer l - 1's output (not a block number).
        k: matches returned, 1 to ``MAX_K`` (200).

    Returns:
        A ``SearchResult``: the word as written, ``layer``, the ``matches`` best first (word, universal tag, genre,
            sentence, cosine, character span), the tags among them (``tag_counts``) and each tag's share of the whole
            index (``corpus_tag_share``) to compare with.
    """
    if index.model != lm.name:
        raise BertScopeError(f"This index holds {index.model}'s vectors, not {lm.name}'s: build it for this model.")
    if not 1 <= k <= MAX_K:
        raise BertScopeError(f"Ask for 1 to {MAX_K} matches.")
    vector, written = query_vector(lm, text, word, layer)
    q = (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32)  # [dim]
    rows = torch.from_numpy(index.unit_rows(layer))  # [example, dim] float16
    scores = torch.mv(rows, torch.from_numpy(q.astype(np.float16))).float().numpy()  # [example]; torch's
    # float16 kernel: 9 ms for 46k x 384 on 2 cores, numpy's emulated float16 takes 80
    top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    top = top[np.argsort(-scores[top])]
    s = index.states
    matches = [Match(s.types[i], s.labels[i], index.genres[i], index.texts[int(s.sentences[i])], float(scores[i]),
                     int(index.spans[i, 0]), int(index.spans[i, 1])) for i in top]
    totals = Counter(s.labels)
    return SearchResult(written, layer, matches, Counter(m.tag for m in matches),
                        {t: n / index.n_words for t, n in totals.items()})


@dataclass(frozen=True)
class WordOccurrences:
    """Every occurrence of one word in the index at one layer (at most ``limit``, evenly spread)."""

    word: str
    layer: int
    vectors: np.ndarray  # [occurrence, dim] float32
    genres: list[str]
    tags: list[str]
    sentences: list[str]


def word_occurrences(index: CorpusIndex, word: str, layer: int, limit: int = 500) -> WordOccurrences:
    rows = index.occurrences(word)
    if len(rows) == 0:
        raise BertScopeError(f"“{word}” does not occur in the Brown sample ({index.n_words:,} words): try a commoner word.")
    if len(rows) > limit:
        rows = rows[np.linspace(0, len(rows) - 1, limit).round().astype(int)]
    s = index.states
    vectors = np.asarray(s.layer(layer), np.float32)[rows]  # [occurrence, dim]
    return WordOccurrences(word.strip().lower(), layer, vectors, [index.genres[i] for i in rows],
                           [s.labels[i] for i in rows], [index.texts[int(s.sentences[i])] for i in rows])
