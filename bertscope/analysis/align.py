"""Cross-lingual alignment: do translations land near each other, layer by layer?

References:
- Libovický, Rosa & Fraser (2020), "On the Language Neutrality of Pre-trained Multilingual
  Representations", Findings of EMNLP: sentence retrieval by cosine nearest neighbour (their
  Table 2 and Figure 2, mBERT best in the middle layers) and per-language mean-centring
  (subtract each language's mean vector, §3.1), which raises retrieval a lot.
- Pires, Schlinger & Garrette (2019), "How multilingual is Multilingual BERT?", ACL:
  nearest-neighbour translation retrieval per layer (Figure 3).
- Jalili Sabet et al. (2020), "SimAlign", Findings of EMNLP: word alignment by the argmax of
  token cosine similarity in both directions ("ArgMax": keep the mutual choices).

Representations: a sentence is the mean of its non-special tokens' hidden states (or the
first token, [CLS] / <s>); a word is the mean of its pieces, alone or inside a per-language
carrier sentence (then only the pieces inside the word's characters count).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from bertscope.analysis.hidden_cache import count_pieces, tokenizer_fingerprint, weights_fingerprint
from bertscope.core.forward import inspect_batch
from bertscope.core.layers import hidden_label
from bertscope.core.models import LoadedModel
from bertscope.core.pooling import PoolingPlan, pooled_hidden_states
from bertscope.core.tokens import tokens_in_span
from bertscope.corpora.parallel import CARRIERS, ParallelData
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_file
from bertscope.runtime.disk_quota import make_room, touch
from bertscope.runtime.user_cache import user_cache_dir

Pooling = Literal["mean", "cls"]
Context = Literal["alone", "carrier"]
PROPOSED_MODEL = "bert-base-multilingual-cased"


# --------------------------------------------------------------------------- data


# --------------------------------------------------------------------------- vectors


@dataclass(frozen=True, eq=False)
class AlignmentVectors:
    """One vector per (language, item, layer)."""

    model_name: str
    data: ParallelData
    pooling: Pooling
    context: Context
    vectors: np.ndarray  # [language, item, layer + 1, dim] float32; [.., 0, ..] = the embeddings (core.layers)
    truncated: int  # inputs cut at the model's maximum length
    empty: int  # inputs with no token to pool (vector left at zero)

    @property
    def languages(self) -> tuple[str, ...]:
        return self.data.languages

    @property
    def n_layers(self) -> int:  # including layer 0
        return int(self.vectors.shape[2])


def _inputs(data: ParallelData, context: Context) -> tuple[list[str], list[tuple[int, int] | None]]:
    """Texts in [language][item] order and, for words in carriers, each word's character span."""
    texts, spans = [], []
    for language in data.languages:
        for cell in data.texts(language):
            if data.kind == "words" and context == "carrier":
                if language not in CARRIERS:
                    raise BertScopeError(f"No carrier sentence for {language!r} (have: {', '.join(CARRIERS)}); "
                                         "use the words alone.")
                before, after = CARRIERS[language].split("{}")
                texts.append(before + cell + after)
                spans.append((len(before), len(before) + len(cell)))
            else:
                texts.append(cell)
                spans.append(None)
    return texts, spans


VECTOR_CACHE_VERSION = 1


def _vector_cache_file(lm: LoadedModel, data: ParallelData, pooling: str, context: str, root: Path | None) -> Path:
    """Where these vectors are kept: keyed by weights, tokenizer, data, pooling and context."""
    key = repr((VECTOR_CACHE_VERSION, weights_fingerprint(lm), tokenizer_fingerprint(lm), data.digest(),
                pooling, context, lm.max_length))
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return (root or user_cache_dir() / "align") / f"{digest}.npz"


def cached_vectors(lm: LoadedModel, data: ParallelData, pooling: Pooling = "mean", context: Context = "alone",
                   root: Path | None = None) -> AlignmentVectors | None:
    """The vectors ``embed_parallel(..., cache=True)`` kept on disk for these settings, or None (never
    computed, or a damaged file, which the next ``embed_parallel`` computes again and rewrites)."""
    file = _vector_cache_file(lm, data, pooling, context, root)
    if not file.is_file():
        return None
    try:
        with np.load(file, allow_pickle=False) as saved:
            vectors, counts = saved["vectors"], saved["counts"]
    except (OSError, ValueError, KeyError):
        return None
    touch(file)  # the most recently used, for a disk quota
    return AlignmentVectors(lm.name, data, pooling, context, vectors, int(counts[0]), int(counts[1]))


def embed_parallel(
    lm: LoadedModel,
    data: ParallelData,
    pooling: Pooling = "mean",
    context: Context = "alone",
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
    cache: bool | Path = False,
) -> AlignmentVectors:
    """Run every cell once (length-sorted batches) and pool one vector per layer on the model's
    device. With ``cache`` (True: ``~/.cache/bertscope/align``, or a folder) the vectors are
    kept on disk as ``.npz`` (no pickle), written atomically, and read back by a later call
    with the same weights, tokenizer, data, pooling and context. ``progress(done, total)`` counts word
    pieces (special tokens included): the cells run shortest first, so a count of cells promised too
    little time left (issue 54: about 30 s said at 192 of 780, 77 s taken).

    Args:
        lm: the model.
        data: the translations (``corpora.parallel``): only rows with every language present are read.
        pooling: "mean" of a sentence's non-special tokens, or "cls": its first token ([CLS] / <s>). A word is
            always the mean of its pieces.
        context: words only: "alone" (the word is the whole text) or "carrier" (inside its language's carrier
            sentence, ``CARRIERS``; only the word's own pieces pooled).
        batch_size: texts a batch, at most.
        progress: called with (done, total) word pieces.
        cache: False: nothing kept; True: the user cache's ``align`` folder; a folder: kept there.

    Returns:
        ``AlignmentVectors``: ``vectors`` [language, item, state, dim] float32 (state 0 the embeddings, state l + 1
            layer l's output), and how many inputs were truncated or had no token to pool (left at zero).
    """
    if pooling not in ("mean", "cls"):
        raise BertScopeError("Pooling must be 'mean' or 'cls'.")
    if context not in ("alone", "carrier"):
        raise BertScopeError("The word context must be 'alone' or 'carrier'.")
    data.require_items()
    file = _vector_cache_file(lm, data, pooling, context, None if cache is True else cache) if cache else None
    if file is not None:
        kept = cached_vectors(lm, data, pooling, context, None if cache is True else cache)
        if kept is not None:
            return kept
    texts, spans = _inputs(data, context)
    n_items = data.n_items
    vectors = np.zeros((len(texts), lm.num_layers + 1, lm.hidden_size), np.float32)
    truncated = empty = done = 0
    pieces = count_pieces(lm, texts) if progress else 0

    def plan_of(batch) -> PoolingPlan:
        nonlocal empty
        groups = []
        for b, index in enumerate(batch.indices):
            span = spans[index]
            if span is not None:  # only the word's pieces inside its carrier sentence
                positions = tokens_in_span(batch.offsets[b], batch.sequence_ids[b], *span)
            elif pooling == "cls" and data.kind == "sentences":
                positions = [0]
            else:
                positions = np.flatnonzero(~batch.special_mask[b]).tolist()  # real, non-special
            empty += not len(positions)
            groups.append((b, list(positions), "mean"))
        return PoolingPlan.from_groups(groups)

    for batch, pooled in pooled_hidden_states(lm, texts, plan_of, batch_size=batch_size):
        vectors[batch.indices] = pooled  # [batch, layer + 1, dim], pooled on the device
        truncated += sum(batch.truncated)
        done += int(batch.attention_mask.sum())
        if progress:
            progress(done, pieces)
    vectors = vectors.reshape(len(data.languages), n_items, *vectors.shape[1:])
    if file is not None:
        try:
            make_room(vectors.nbytes, "keeping these vectors")
            write_file(file, lambda tmp: np.savez(tmp, vectors=vectors, counts=np.array([truncated, empty])))
        except (OSError, BertScopeError):
            pass  # a cache that cannot be written (read-only disk, full): the vectors are still returned
    return AlignmentVectors(
        model_name=lm.name, data=data, pooling=pooling, context=context,
        vectors=vectors, truncated=truncated, empty=empty,
    )


def centre(vectors: np.ndarray) -> np.ndarray:
    """[language, item, layer, dim] minus each language's mean over items, per layer
    (Libovický et al. 2020, §3.1)."""
    return vectors - vectors.mean(axis=1, keepdims=True)


# --------------------------------------------------------------------------- retrieval


def retrieval_accuracy(vectors: np.ndarray) -> np.ndarray:
    """P@1 of translation retrieval: [language, item, layer, dim] -> [layer, source, target].

    Source item i is correct when its nearest target-language item by cosine is item i.
    The diagonal (a language against itself) is NaN. One matrix product per layer and source.
    """
    n_lang, n_items, n_layers, _ = vectors.shape
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    unit = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
    by_layer = np.ascontiguousarray(unit.transpose(2, 0, 1, 3))  # [layer, language, item, dim]
    target = np.arange(n_items)
    out = np.full((n_layers, n_lang, n_lang), np.nan)
    for layer in range(n_layers):
        everything = by_layer[layer].reshape(n_lang * n_items, -1)  # [language * item, dim]
        for s in range(n_lang):
            sims = by_layer[layer, s] @ everything.T  # [item, language * item]
            best = sims.reshape(n_items, n_lang, n_items).argmax(-1)  # [item, language]
            out[layer, s] = (best == target[:, None]).mean(0)
    diagonal = np.arange(n_lang)
    out[:, diagonal, diagonal] = np.nan
    return out


def pair_names(languages: Sequence[str]) -> list[tuple[int, int, str]]:
    """Every ordered pair (source index, target index, "src-tgt")."""
    return [(s, t, f"{a}-{b}") for s, a in enumerate(languages) for t, b in enumerate(languages) if s != t]


@dataclass(frozen=True)
class RetrievalResult:
    languages: tuple[str, ...]
    n_items: int
    raw: np.ndarray  # [layer, source, target] P@1
    centred: np.ndarray  # [layer, source, target] P@1 after per-language mean-centring

    @property
    def chance(self) -> float:
        return 1.0 / self.n_items

    def mean(self, centred: bool = False) -> np.ndarray:
        """[layer] mean P@1 over every ordered pair."""
        table = self.centred if centred else self.raw
        return np.nanmean(table.reshape(table.shape[0], -1), axis=1)

    def to_json(self) -> dict:
        pairs = pair_names(self.languages)
        return {
            "languages": list(self.languages),
            "items": self.n_items,
            "chance": self.chance,
            "layers": [
                {
                    "layer": hidden_label(layer),
                    "p_at_1": {name: float(self.raw[layer, s, t]) for s, t, name in pairs},
                    "p_at_1_centered": {name: float(self.centred[layer, s, t]) for s, t, name in pairs},
                    "mean_p_at_1": float(self.mean()[layer]),
                    "mean_p_at_1_centered": float(self.mean(True)[layer]),
                }
                for layer in range(self.raw.shape[0])
            ],
        }


def retrieval(av: AlignmentVectors) -> RetrievalResult:
    """P@1 of translation retrieval at every hidden state, for every ordered pair of languages, raw and after
    per-language mean-centring (Libovický et al. 2020, §3.1).

    Args:
        av: the vectors (``embed_parallel``).

    Returns:
        ``RetrievalResult``: ``raw`` and ``centred`` [state, source, target] P@1 (state 0 the embeddings; NaN where
            source and target are one language), the languages and the number of items (chance: 1 / items).
    """
    return RetrievalResult(av.languages, av.data.n_items, retrieval_accuracy(av.vectors),
                           retrieval_accuracy(centre(av.vectors)))


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class TokenAlignment:
    """Token-to-token cosine of one translation pair at one layer, with argmax links."""

    layer: int
    source_tokens: list[str]
    target_tokens: list[str]
    similarity: np.ndarray  # [source token, target token] cosine
    forward: np.ndarray  # [source token] index of the most similar target token
    backward: np.ndarray  # [target token] index of the most similar source token

    @property
    def mutual(self) -> list[tuple[int, int]]:
        """SimAlign's ArgMax: links chosen from both sides."""
        return [(i, int(j)) for i, j in enumerate(self.forward) if self.backward[j] == i]


def token_alignment(lm: LoadedModel, source: str, target: str, layer: int) -> TokenAlignment:
    """Non-special tokens of both texts, cosine at hidden state ``layer`` (0 = the embeddings, l = the
    output of block l - 1; ``core.layers``).

    Args:
        lm: the model.
        source: a text.
        target: its translation.
        layer: the hidden state (0 = the embeddings).

    Returns:
        A ``TokenAlignment``: the tokens, their [source, target] cosines and the mutual argmax links.
    """
    runs = {}
    for batch in inspect_batch(lm, [source, target], batch_size=2, with_attentions=False):
        for b, index in enumerate(batch.indices):
            runs[index] = batch.item(b)
    a, b = runs[0], runs[1]
    if not 0 <= layer <= a.n_layers:
        raise BertScopeError(f"Hidden state {layer} does not exist: 0 is the embeddings, {a.n_layers} is layer "
                             f"{a.n_layers - 1} (the last block's output).")
    keep_a, keep_b = np.flatnonzero(~a.special_mask), np.flatnonzero(~b.special_mask)
    if not len(keep_a) or not len(keep_b):
        raise BertScopeError("One of the texts has no tokens besides special ones.")
    x = a.hidden_states[layer, keep_a]  # [source token, dim]
    y = b.hidden_states[layer, keep_b]  # [target token, dim]
    x = x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)
    y = y / np.clip(np.linalg.norm(y, axis=1, keepdims=True), 1e-12, None)
    sim = x @ y.T  # [source token, target token]
    return TokenAlignment(layer, [a.tokens[i] for i in keep_a], [b.tokens[i] for i in keep_b], sim,
                          sim.argmax(axis=1), sim.argmax(axis=0))


# --------------------------------------------------------------------------- tokenizer coverage


@dataclass(frozen=True)
class Coverage:
    language: str
    unknown_share: float  # share of pieces that are the unknown token
    pieces_per_item: float  # mean pieces per cell (special tokens excluded)


def tokenizer_coverage(lm: LoadedModel, data: ParallelData) -> list[Coverage]:
    """How well the vocabulary covers each language: an English-only model shows [UNK]s or
    shreds other scripts into many pieces, so weak alignment there is expected."""
    tok = lm.tokenizer
    unk = tok.unk_token_id
    out = []
    for language in data.languages:
        ids = tok(data.texts(language), add_special_tokens=False)["input_ids"]
        total = sum(len(x) for x in ids)
        unknown = sum(1 for x in ids for i in x if unk is not None and i == unk)
        out.append(Coverage(language, unknown / max(total, 1), total / max(len(ids), 1)))
    return out


# --------------------------------------------------------------------------- token links, measured


@dataclass(frozen=True)
class TokenLinkAccuracy:
    """How often a word's pieces link (by cosine argmax, SimAlign's ArgMax) inside its translation,
    per layer: the shipped words, each inside its language's carrier sentence ("The word is “…”."),
    so the right link is known. Both directions count: the pivot's pieces into the other
    language's word, and back."""

    pivot: str
    languages: tuple[str, ...]  # the others
    accuracy: np.ndarray  # [layer + 1] share of word pieces whose argmax falls inside the translation
    chance: np.ndarray  # [layer + 1] the same share for an argmax drawn uniformly over the other sentence
    pairs: int  # word pairs measured

    @property
    def best(self) -> int:
        """The hidden state (0 = the embeddings) where links are most often right."""
        return int(np.argmax(self.accuracy))


def token_link_accuracy(lm: LoadedModel, data: ParallelData, pivot: str = "en", items: int = 100,
                        batch_size: int = 32) -> TokenLinkAccuracy:
    """Per layer, the share of word pieces whose most similar token in the translated carrier
    sentence lies inside the translated word (at most ``items`` words per language)."""
    if data.kind != "words":
        raise BertScopeError("Token links are measured on words in carrier sentences: give the words data.")
    languages = [g for g in data.languages if g in CARRIERS]
    if pivot not in languages or len(languages) < 2:
        raise BertScopeError(f"Token links need {pivot!r} and another language with a carrier sentence "
                             f"({', '.join(CARRIERS)}).")
    others = [g for g in languages if g != pivot]
    picked = data.select([pivot, *others])
    n = min(items, picked.n_items)
    texts, spans = [], []
    for g in picked.languages:
        before, after = CARRIERS[g].split("{}")
        for cell in picked.texts(g)[:n]:
            texts.append(before + cell + after)
            spans.append((len(before), len(before) + len(cell)))
    vectors: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # text -> ([token, layer + 1, dim] unit, [token] in word)
    for batch in inspect_batch(lm, texts, batch_size=batch_size, with_attentions=False):
        for b, index in enumerate(batch.indices):
            r = batch.item(b)
            keep = np.flatnonzero(~r.special_mask)  # [token]
            inside = np.isin(keep, tokens_in_span(r.offsets, r.sequence_ids, *spans[index]))
            h = r.hidden_states[:, keep].transpose(1, 0, 2)  # [token, layer + 1, dim]
            vectors[index] = (h / np.clip(np.linalg.norm(h, axis=-1, keepdims=True), 1e-12, None), inside)
    right = np.zeros(lm.num_layers + 1)
    chance = np.zeros(lm.num_layers + 1)
    pieces = 0
    for k in range(1, len(picked.languages)):
        for i in range(n):
            for a, b in ((i, k * n + i), (k * n + i, i)):  # pivot -> other, and back
                (x, x_in), (y, y_in) = vectors[a], vectors[b]
                if not x_in.any() or not y_in.any():
                    continue
                sim = np.einsum("sld,tld->lst", x[x_in], y)  # [layer + 1, word piece, target token]
                right += y_in[sim.argmax(-1)].sum(-1)
                chance += x_in.sum() * y_in.mean()
                pieces += int(x_in.sum())
    if not pieces:
        raise BertScopeError("No word kept a token inside its carrier sentence.")
    return TokenLinkAccuracy(pivot, tuple(others), right / pieces, chance / pieces, n * len(others))


@dataclass(frozen=True)
class MapNeighbours:
    """What a 2-D map of translations shows, in two numbers: of each point's nearest neighbour on the
    map, how often it is the same language (languages as blocks) and how often it is the point's own
    translation (translations meeting). Chance for the second: (languages - 1) / (points - 1)."""

    same_language: float
    translation: float
    chance_translation: float


def map_neighbours(coords: np.ndarray, n_languages: int, n_items: int) -> MapNeighbours:
    """coords [language * item, 2] in [language][item] order (as ``projection_map`` draws them)."""
    from sklearn.neighbors import NearestNeighbors

    xy = np.asarray(coords, np.float64).reshape(n_languages * n_items, 2)  # [point, 2]
    _, found = NearestNeighbors(n_neighbors=2).fit(xy).kneighbors(xy)  # [point, 2]: itself (or a tie) and the next
    own = found[:, 0] == np.arange(len(xy))
    nearest = np.where(own, found[:, 1], found[:, 0])  # [point]
    point = np.arange(len(xy))
    language, item = point // n_items, point % n_items
    return MapNeighbours(float((language[nearest] == language).mean()), float((item[nearest] == item).mean()),
                         (n_languages - 1) / max(len(xy) - 1, 1))
