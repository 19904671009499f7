"""How similar are two encoders, layer by layer: linear CKA over the words of a corpus.

Linear CKA (Kornblith, Norouzi, Lee & Hinton 2019, "Similarity of Neural Network
Representations Revisited") between hidden state a of model A and hidden state b of model B,
with the unbiased minibatch estimator of Nguyen, Raghu & Kornblith (2021, "Do Wide and Deep
Networks Learn the Same Things?", §3.1):

    CKA(a, b) = mean_i HSIC₁(K_i^a, L_i^b) / sqrt(mean_i HSIC₁(K_i^a, K_i^a) · mean_i HSIC₁(L_i^b, L_i^b))

where K_i^a = X_i^a X_i^aᵀ is the linear Gram matrix of minibatch i (``MINIBATCH`` words) and
HSIC₁ is Song et al. (2012)'s unbiased estimator. Only the running sums of the HSIC terms are
kept: memory is bounded by a chunk of sentences whose word vectors fit ``CHUNK_BYTES`` per model,
never by the corpus, so N is bounded by time. Each chunk runs through each model in batches
sorted by length (little padding), and its words are shuffled (seeded) before they are cut into
minibatches, so a minibatch is a random sample of words, as the estimator assumes.

Rows are words, not word pieces: each model's pieces of a word are pooled (their mean, or the
first piece) with the word's character span, so models with different tokenizers compare. A
word that either model drops (truncation) is left out of both. Hidden states are numbered as
everywhere: 0 = the embeddings, then block l's output at l + 1 (``core.layers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np
import torch

from bertscope.analysis.hidden_cache import token_plan, word_table
from bertscope.core.forward import pooled_hidden_states
from bertscope.core.layers import hidden_labels
from bertscope.core.models import LoadedModel
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.errors import BertScopeError

Pool = Literal["mean", "first"]
POOLS = ("mean", "first")
MINIBATCH = 256  # words per Gram matrix
MIN_MINIBATCHES = 4  # fewer and the estimate swings with the sample: refused, with the minimum
CHUNK_BYTES = 256 * 2**20  # pooled word vectors of one model held at a time (float32, every hidden state)


def hsic_terms(grams_a: torch.Tensor, grams_b: torch.Tensor) -> torch.Tensor:
    """[state_a, state_b] unbiased HSIC₁ between every Gram of A and every Gram of B, float64.

    ``grams_*``: [state, n, n] linear Gram matrices of one minibatch of n ≥ 4 words (Song et al.
    2012, eq. 5): with K̃ = K with its diagonal zeroed,
    HSIC₁ = [tr(K̃L̃) + 1ᵀK̃1 · 1ᵀL̃1 / ((n−1)(n−2)) − 2/(n−2) · 1ᵀK̃L̃1] / (n(n−3))."""
    n = grams_a.shape[-1]
    if n < 4:
        raise BertScopeError("An unbiased HSIC needs at least 4 words a minibatch.")
    ka = grams_a.double().clone()
    kb = grams_b.double().clone()
    ka.diagonal(dim1=-2, dim2=-1).zero_()
    kb.diagonal(dim1=-2, dim2=-1).zero_()
    trace = ka.reshape(len(ka), -1) @ kb.reshape(len(kb), -1).T  # [state_a, state_b] tr(K̃L̃) (both symmetric)
    row_a, row_b = ka.sum(-1), kb.sum(-1)  # [state, n] K̃1
    total_a, total_b = row_a.sum(-1), row_b.sum(-1)  # [state] 1ᵀK̃1
    cross = row_a @ row_b.T  # [state_a, state_b] 1ᵀK̃L̃1
    return (trace + total_a[:, None] * total_b[None, :] / ((n - 1) * (n - 2)) - 2 * cross / (n - 2)) / (n * (n - 3))


def grams(x: torch.Tensor) -> torch.Tensor:
    """[word, state, dim] -> [state, word, word] linear Gram matrices: the products in the
    vectors' precision (float64 stays float64), the HSIC sums after them in float64."""
    x = x.transpose(0, 1).float() if x.dtype != torch.float64 else x.transpose(0, 1)  # [state, word, dim]
    return x @ x.transpose(1, 2)


class CkaAccumulator:
    """Running sums of HSIC₁ over minibatches: add [word, state, dim] pairs of the same words."""

    def __init__(self) -> None:
        self.ab = self.aa = self.bb = None
        self.minibatches = 0

    def add(self, xa: torch.Tensor, xb: torch.Tensor) -> None:
        ga, gb = grams(xa), grams(xb)  # [state, word, word] each
        ab = hsic_terms(ga, gb)
        aa = hsic_terms(ga, ga).diagonal()  # [state_a] HSIC₁(K, K)
        bb = hsic_terms(gb, gb).diagonal()  # [state_b]
        if self.ab is None:
            self.ab, self.aa, self.bb = ab, aa, bb
        else:
            self.ab, self.aa, self.bb = self.ab + ab, self.aa + aa, self.bb + bb
        self.minibatches += 1

    def cka(self) -> np.ndarray:
        """[state_a, state_b] float64."""
        if self.ab is None:
            raise BertScopeError("No minibatch was added.")
        denominator = torch.sqrt((self.aa[:, None] * self.bb[None, :]).clamp_min(1e-300))
        return (self.ab / denominator).cpu().numpy()


def linear_cka(xa: np.ndarray | torch.Tensor, xb: np.ndarray | torch.Tensor) -> float:
    """The full-batch unbiased linear CKA of two [example, dim] matrices (one minibatch of all)."""
    acc = CkaAccumulator()
    acc.add(torch.as_tensor(np.asarray(xa))[:, None], torch.as_tensor(np.asarray(xb))[:, None])
    return float(acc.cka()[0, 0])


@dataclass(frozen=True)
class LayerSimilarity:
    model_a: str
    model_b: str
    cka: np.ndarray  # [state_a, state_b]: 0 = the embeddings, l + 1 = block l's output
    n_words: int
    n_sentences: int
    minibatch: int
    minibatches: int
    pool: str
    source: str

    def to_json(self) -> dict:
        return {"model_a": self.model_a, "model_b": self.model_b, "cka": np.round(self.cka, 6).tolist(),
                "layers_a": hidden_labels(self.cka.shape[0] - 1), "layers_b": hidden_labels(self.cka.shape[1] - 1),
                "n_words": self.n_words, "n_sentences": self.n_sentences, "minibatch": self.minibatch,
                "minibatches": self.minibatches, "pool": self.pool, "source": self.source,
                "estimator": "unbiased minibatch linear CKA (Nguyen et al. 2021)"}


def text_task(lines: Sequence[str]) -> ProbeTask:
    """Sentences of a user's file as words (runs of non-space characters) with their spans."""
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise BertScopeError("The file has no sentences.")
    words, spans = [], []
    for text in texts:
        found = list(re.finditer(r"\S+", text))
        words.append(tuple(m.group() for m in found))
        spans.append(tuple(m.span() for m in found))
    labels = tuple(tuple("w" for _ in w) for w in words)
    return ProbeTask("sentences", "token", tuple(words), labels, tuple(texts), tuple(spans))


def _chunk(task: ProbeTask, start: int, stop: int) -> ProbeTask:
    return ProbeTask(task.name, "token", task.words[start:stop], task.labels[start:stop],
                     tuple(task.texts[start:stop]), tuple(task.spans[start:stop]) if task.spans else None)


def word_vectors(lm: LoadedModel, task: ProbeTask, pool: Pool) -> dict[int, np.ndarray]:
    """Word index (in ``task``) -> [state, dim] float32 pooled vector of ``lm``."""
    table = word_table(task)
    out: dict[int, np.ndarray] = {}
    rows_of: dict[int, np.ndarray] = {}

    def plan_of(batch):
        plan, rows_of[id(batch)] = token_plan(table, batch, pool)
        return plan

    for batch, vectors in pooled_hidden_states(lm, task.texts, plan_of):  # vectors [example, state, dim]
        for row, vector in zip(rows_of.pop(id(batch)), vectors):
            out[int(row)] = vector
    return out


def check_size(n_words: int, minibatch: int) -> None:
    if n_words < MIN_MINIBATCHES * minibatch:
        raise BertScopeError(f"{n_words:,} words make fewer than {MIN_MINIBATCHES} minibatches of {minibatch}: a "
                             f"stable estimate needs at least {MIN_MINIBATCHES * minibatch:,} words (about "
                             f"{MIN_MINIBATCHES * minibatch // 20:,} Brown sentences).")


def chunks(task: ProbeTask, bytes_per_word: int, budget: int = CHUNK_BYTES) -> list[tuple[int, int]]:
    """[start, stop) sentence ranges whose words' vectors fit ``budget`` (at least one sentence)."""
    out, start, words = [], 0, 0
    for i, sentence in enumerate(task.words):
        if i > start and (words + len(sentence)) * bytes_per_word > budget:
            out.append((start, i))
            start, words = i, 0
        words += len(sentence)
    out.append((start, len(task.words)))
    return out


def compare_layers(lm_a: LoadedModel, lm_b: LoadedModel, task: ProbeTask, pool: Pool = "mean",
                   minibatch: int = MINIBATCH, source: str = "", seed: int = 0, max_chunk_bytes: int = CHUNK_BYTES,
                   progress: Callable[[int, int], None] | None = None) -> LayerSimilarity:
    """CKA between every hidden state of A and every hidden state of B over ``task``'s words."""
    if pool not in POOLS:
        raise BertScopeError(f"Unknown pooling {pool!r}: use mean (of a word's pieces) or first (its first piece).")
    if minibatch < 4:
        raise BertScopeError("A minibatch needs at least 4 words.")
    check_size(sum(len(w) for w in task.words), minibatch)
    rng = np.random.default_rng(seed)
    per_word = 4 * max((lm_a.num_layers + 1) * lm_a.hidden_size, (lm_b.num_layers + 1) * lm_b.hidden_size)
    acc = CkaAccumulator()
    waiting_a: list[np.ndarray] = []  # words of the last chunk that did not fill a minibatch
    waiting_b: list[np.ndarray] = []
    used = 0
    total = len(task.words)
    for start, stop in chunks(task, per_word, max_chunk_bytes):
        chunk = _chunk(task, start, stop)
        va, vb = word_vectors(lm_a, chunk, pool), word_vectors(lm_b, chunk, pool)
        shared = sorted(set(va) & set(vb))
        for w in rng.permutation(len(shared)):  # a minibatch is a random sample of the chunk's words
            waiting_a.append(va.pop(shared[w]))
            waiting_b.append(vb.pop(shared[w]))
        while len(waiting_a) >= minibatch:
            xa = torch.from_numpy(np.stack(waiting_a[:minibatch])).to(lm_a.device)  # [word, state_a, dim_a]
            xb = torch.from_numpy(np.stack(waiting_b[:minibatch])).to(lm_a.device)  # [word, state_b, dim_b]
            acc.add(xa, xb)
            used += minibatch
            del waiting_a[:minibatch], waiting_b[:minibatch]
        if progress:
            progress(stop, total)
    check_size(used, minibatch)
    return LayerSimilarity(lm_a.name, lm_b.name, acc.cka(), used, total, minibatch, acc.minibatches, pool, source)
