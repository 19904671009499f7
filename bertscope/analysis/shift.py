"""The same word in different contexts, layer by layer ("bank" of a river vs a bank for money).

Metrics after Ethayarajh (2019), "How Contextual are Contextualized Word Representations?"
(EMNLP; Sections 3.3-3.4, Figures 1-3):

- self-similarity: mean cosine between the word's vectors in different contexts (all pairs);
- intra-sentence similarity: mean cosine between each word of a sentence and the sentence's
  mean word vector, averaged over sentences;
- anisotropy baseline: mean cosine between random words in random contexts of a shipped
  corpus; the "adjusted" values subtract it, since vectors of every word share a direction.

Layer 0 is the embedding layer's output (token + position + segment embeddings, before any
attention): it carries no context from other words. Sense separation: mean cosine within a
sense and across senses, their gap, and nearest-centroid classification with leave-one-out.
A word is found by matching it in the text (whole word, any case) and taking the tokens whose
character spans overlap the match, so it works for WordPiece, byte-level BPE and SentencePiece.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from bertscope.core.inspection import Inspection, TokenRow
from bertscope.core.layers import hidden_label
from bertscope.core.models import LoadedModel
from bertscope.core.pooling import PoolingPlan, pooled_hidden_states
from bertscope.core.tokens import tokens_in_span
from bertscope.corpora.sentences import shipped_corpus
from bertscope.errors import BertScopeError

MAX_ROWS = 2000
Pooling = Literal["mean", "first"]


@dataclass(frozen=True)
class Occurrence:
    row: int  # 1-based row of the input
    sentence: str
    label: str | None
    positions: tuple[int, ...]  # token positions of this occurrence's pieces


@dataclass
class ShiftResult:
    word: str
    occurrences: list[Occurrence]
    vectors: np.ndarray  # [occurrence, layer + 1, dim] float32
    skipped: list[int]  # rows without the word (1-based)
    sentence_word_vectors: list[np.ndarray] = field(repr=False, default_factory=list)  # [words, L+1, dim]

    @property
    def labels(self) -> list[str | None]:
        return [o.label for o in self.occurrences]

    @property
    def n_layers(self) -> int:  # layers including 0
        return int(self.vectors.shape[1])


# --------------------------------------------------------------------------- data


# --------------------------------------------------------------------------- locating


def word_pattern(word: str) -> re.Pattern:
    word = (word or "").strip()
    if not word or any(c.isspace() for c in word):
        raise BertScopeError("Give one target word (no spaces).")
    return re.compile(r"(?<!\w)" + re.escape(word) + r"(?!\w)", re.IGNORECASE)


def locate(r: Inspection | TokenRow, pattern: re.Pattern,
           occurrences: Literal["all", "first"] = "all") -> list[tuple[int, ...]]:
    """Token positions of each whole-word match of ``pattern`` in ``r``'s first text."""
    found = []
    for match in pattern.finditer(r.text):
        positions = tuple(tokens_in_span(r.offsets, r.sequence_ids, *match.span()))
        if positions:  # a match past the truncation point has no tokens
            found.append(positions)
        if occurrences == "first" and found:
            break
    return found


def _word_groups(r: Inspection | TokenRow) -> list[list[int]]:
    """Token positions of every word of the first text, in word order."""
    groups: dict[int, list[int]] = {}
    for i, (w, seq) in enumerate(zip(r.word_ids, r.sequence_ids)):
        if w is not None and seq == 0:
            groups.setdefault(w, []).append(i)
    return [groups[w] for w in sorted(groups)]


def collect(
    lm: LoadedModel,
    word: str,
    rows: Sequence[tuple[str, str | None]],
    pooling: Pooling = "mean",
    occurrences: Literal["all", "first"] = "all",
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
) -> ShiftResult:
    """Run every sentence once and keep the word's vector at every layer.

    Args:
        lm: the model.
        word: one word (no spaces), matched whole and in any case.
        rows: (sentence, sense label or None) pairs, at most ``MAX_ROWS`` (2,000).
        pooling: "mean" of the word's pieces, or the "first" piece (every word of the sentence is pooled alike).
        occurrences: "all" matches of the word in a sentence, or only the "first".
        batch_size: sentences a batch, at most.
        progress: called with (done, total) sentences that contain the word.

    Returns:
        A ``ShiftResult``: one ``Occurrence`` per match (its row from 1, sentence, label, token positions),
            ``vectors`` [occurrence, state, dim] float32 (state 0 the embeddings, state l + 1 layer l's output),
            the rows without the word (from 1; a match cut off by truncation counts as none), and the vectors of
            every word of each sentence kept (for the intra-sentence similarity).
    """
    pattern = word_pattern(word)
    if pooling not in ("mean", "first"):
        raise BertScopeError("Pooling must be 'mean' or 'first'.")
    rows = [(s.strip() if isinstance(s, str) else "", lab) for s, lab in rows]
    if not rows:
        raise BertScopeError("No sentences given.")
    if len(rows) > MAX_ROWS:
        raise BertScopeError(f"{len(rows):,} sentences; the limit is {MAX_ROWS:,}.")
    usable = [i for i, (s, _) in enumerate(rows) if s and pattern.search(s)]
    skipped = sorted(set(range(len(rows))) - set(usable))
    found: dict[int, list[tuple[Occurrence, np.ndarray]]] = {}
    sentence_vectors: dict[int, np.ndarray] = {}
    done = 0
    plans: dict[int, list] = {}  # batch -> [(row, hits, number of words)] for what plan_of chose

    def plan_of(batch) -> PoolingPlan:
        groups, meta = [], []
        for b, index in enumerate(batch.indices):
            r = batch.row(b)  # offsets and ids of the padded row: the vectors are pooled on the device
            hits = locate(r, pattern, occurrences)
            words = _word_groups(r) if hits else []  # the word cut off by truncation: skipped
            groups += [(b, pos, pooling) for pos in hits] + [(b, w, pooling) for w in words]
            meta.append((usable[index], hits, len(words)))
        plans[id(batch)] = meta
        return PoolingPlan.from_groups(groups)

    if usable:
        for batch, vectors in pooled_hidden_states(lm, [rows[i][0] for i in usable], plan_of, batch_size):
            at = 0  # vectors: [hits and words of every row, layer+1, dim], in plan order
            for row, hits, n_words in plans.pop(id(batch)):
                if not hits:
                    skipped.append(row)
                    continue
                found[row] = [(Occurrence(row + 1, rows[row][0], rows[row][1], pos), vectors[at + k])
                              for k, pos in enumerate(hits)]
                sentence_vectors[row] = vectors[at + len(hits): at + len(hits) + n_words]
                at += len(hits) + n_words
            done += len(batch)
            if progress:
                progress(done, len(usable))
    ordered = [item for row in sorted(found) for item in found[row]]
    if not ordered:
        raise BertScopeError(f"No sentence contains the word {word!r}.")
    return ShiftResult(
        word=word.strip(),
        occurrences=[o for o, _ in ordered],
        vectors=np.stack([v for _, v in ordered]).astype(np.float32),
        skipped=sorted(r + 1 for r in set(skipped)),
        sentence_word_vectors=[sentence_vectors[r] for r in sorted(sentence_vectors)],
    )


# --------------------------------------------------------------------------- metrics


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    """x [n, dim] -> [n, n] cosine similarities."""
    unit = x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)
    return unit @ unit.T


def _pair_means(sim: np.ndarray, labels: Sequence[str | None]) -> tuple[float, float, float]:
    """(all pairs, same label, different label) mean cosine, diagonal excluded."""
    n = len(labels)
    off = ~np.eye(n, dtype=bool)
    lab = np.array([str(x) for x in labels])
    same = (lab[:, None] == lab[None, :]) & off
    diff = lab[:, None] != lab[None, :]
    mean = lambda m: float(sim[m].mean()) if m.any() else float("nan")  # noqa: E731
    return mean(off), mean(same), mean(diff)


def centroid_accuracy(x: np.ndarray, labels: Sequence[str | None]) -> float:
    """Nearest-centroid (cosine) sense classification, leave-one-out."""
    lab = np.array([str(v) for v in labels])
    senses = sorted(set(lab))
    if len(senses) < 2:
        return float("nan")
    unit = x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)
    sums = {s: unit[lab == s].sum(0) for s in senses}
    counts = {s: int((lab == s).sum()) for s in senses}
    correct = 0
    for i in range(len(lab)):
        scores = {}
        for s in senses:
            total, count = sums[s], counts[s]
            if s == lab[i]:
                total, count = total - unit[i], count - 1
            if count == 0:
                continue
            centroid = total / count
            scores[s] = float(unit[i] @ centroid / max(np.linalg.norm(centroid), 1e-12))
        correct += max(scores, key=scores.get) == lab[i]
    return correct / len(lab)


def intra_sentence_similarity(word_vectors: list[np.ndarray], layer: int) -> float:
    """Mean over sentences of mean cos(word, sentence mean) (Ethayarajh 2019, eq. 2)."""
    values = []
    for words in word_vectors:
        w = words[:, layer]  # [word, dim]
        if len(w) < 2:
            continue
        mean = w.mean(0)
        cos = (w @ mean) / np.clip(np.linalg.norm(w, axis=1) * np.linalg.norm(mean), 1e-12, None)
        values.append(float(cos.mean()))
    return float(np.mean(values)) if values else float("nan")


_BASELINES: dict[tuple, np.ndarray] = {}  # per loaded model: computed once per process
_BASELINES_LOCK = threading.Lock()


def clear_baselines() -> None:
    """Forget the anisotropy baselines computed so far (a benchmark times the first one)."""
    with _BASELINES_LOCK:
        _BASELINES.clear()


def anisotropy_baseline(lm: LoadedModel, pooling: Pooling = "mean", pairs: int = 2000,
                        seed: int = 0) -> np.ndarray:
    """[layer+1] mean cosine between random words in random contexts of the shipped corpus."""
    key = (id(lm.model), lm.name, pooling, pairs, seed)
    with _BASELINES_LOCK:
        if key in _BASELINES:
            return _BASELINES[key]
    vectors = []  # [word, layer+1, dim] per batch, with each word's sentence index
    owners = []

    def plan_of(batch) -> PoolingPlan:
        groups = []
        for b, index in enumerate(batch.indices):
            words = _word_groups(batch.row(b))
            groups += [(b, w, pooling) for w in words]
            owners.extend([index] * len(words))
        return PoolingPlan.from_groups(groups)

    for _, pooled in pooled_hidden_states(lm, shipped_corpus(), plan_of, batch_size=32):
        vectors.append(pooled)
    allv = np.concatenate(vectors)  # [words, layer+1, dim]
    owners = np.array(owners)
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(allv), pairs * 2)
    j = rng.integers(0, len(allv), pairs * 2)
    keep = owners[i] != owners[j]  # different contexts
    i, j = i[keep][:pairs], j[keep][:pairs]
    a, b = allv[i], allv[j]  # [pair, layer+1, dim]
    cos = (a * b).sum(-1) / np.clip(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12, None)
    baseline = cos.mean(0)  # [layer+1]
    with _BASELINES_LOCK:
        _BASELINES[key] = baseline
    return baseline


@dataclass(frozen=True)
class LayerMetrics:
    layer: int
    within: float
    across: float
    gap: float
    centroid_accuracy: float
    self_similarity: float
    intra_sentence: float
    anisotropy: float

    @property
    def self_similarity_adjusted(self) -> float:
        return self.self_similarity - self.anisotropy

    @property
    def intra_sentence_adjusted(self) -> float:
        return self.intra_sentence - self.anisotropy

    def to_json(self) -> dict:
        return {
            "layer": hidden_label(self.layer), "within": self.within, "across": self.across, "gap": self.gap,
            "centroid_accuracy": self.centroid_accuracy, "self_similarity": self.self_similarity,
            "intra_sentence": self.intra_sentence, "anisotropy": self.anisotropy,
            "self_similarity_adjusted": self.self_similarity_adjusted,
            "intra_sentence_adjusted": self.intra_sentence_adjusted,
        }


def layer_metrics(result: ShiftResult, baseline: np.ndarray) -> list[LayerMetrics]:
    """Ethayarajh's (2019) measures and the sense separation of the word's vectors at every hidden state.

    Args:
        result: the word's vectors (``collect``).
        baseline: [state] the anisotropy baseline (``anisotropy_baseline``): the mean cosine of random words in random
            contexts, subtracted for the adjusted values.

    Returns:
        One ``LayerMetrics`` a hidden state, in order: ``layer`` is the state's index (0 = the embeddings, l = layer
            l - 1's output; ``to_json`` names it); mean cosine within a sense, across senses and their gap (rows without
            a label form one sense), leave-one-out nearest-centroid accuracy (NaN under two senses), self-similarity,
            intra-sentence similarity and the baseline.
    """
    out = []
    for layer in range(result.n_layers):
        sim = cosine_matrix(result.vectors[:, layer])
        overall, within, across = _pair_means(sim, result.labels)
        out.append(LayerMetrics(
            layer, within, across, within - across,
            centroid_accuracy(result.vectors[:, layer], result.labels),
            overall, intra_sentence_similarity(result.sentence_word_vectors, layer),
            float(baseline[layer]),
        ))
    return out


def nearest_vocabulary(lm: LoadedModel, vectors: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
    """vectors [n, dim] -> for each, the k input-embedding rows nearest by cosine."""
    emb = lm.model.get_input_embeddings().weight.detach().float().cpu().numpy()  # [vocab, dim]
    if emb.shape[1] != vectors.shape[1]:
        raise BertScopeError("The input embeddings have another width than the hidden states "
                             "(factorised embeddings, e.g. ALBERT): neighbours cannot be compared.")
    special = list(lm.tokenizer.all_special_ids)
    e = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
    v = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    sims = v @ e.T  # [n, vocab]
    sims[:, [s for s in special if s < sims.shape[1]]] = -np.inf
    best = np.argsort(-sims, axis=1)[:, :k]
    tokens = lm.tokenizer.convert_ids_to_tokens
    return [[(tokens(int(t)), float(sims[n, t])) for t in row] for n, row in enumerate(best)]
