"""How similar are two encoders, layer by layer: linear CKA over the words of a corpus.

Linear CKA (Kornblith, Norouzi, Lee & Hinton 2019, "Similarity of Neural Network
Representations Revisited") between hidden state a of model A and hidden state b of model B,
with the unbiased minibatch estimator of Nguyen, Raghu & Kornblith (2021, "Do Wide and Deep
Networks Learn the Same Things?", §3.1):

    CKA(a, b) = mean_i HSIC₁(K_i^a, L_i^b) / sqrt(mean_i HSIC₁(K_i^a, K_i^a) · mean_i HSIC₁(L_i^b, L_i^b))

where K_i^a = X_i^a X_i^aᵀ is the linear Gram matrix of minibatch i (``MINIBATCH`` words) and
HSIC₁ is Song et al. (2012)'s unbiased estimator. Only the running sums of the HSIC terms are
kept: memory is bounded by a chunk of sentences (at most ``CHUNK_SENTENCES``, their word vectors
within ``CHUNK_BYTES`` per model), never by the corpus, so N is bounded by time. Each chunk runs
through each model in batches sorted by length (little padding), and its words are shuffled
(seeded with the seed and the chunk's number) before they are cut into minibatches, so a
minibatch is a random sample of words, as the estimator assumes; a chunk's last words (fewer
than a minibatch) join the next chunks' in chunk order. A chunk's sums do not depend on where it
runs, so a Ray cluster's actors (``--engine ray``) can each take chunks and the sums add up to
this process's.

Rows are words, not word pieces: each model's pieces of a word are pooled (their mean, or the
first piece) with the word's character span, so models with different tokenizers compare. A
word that either model drops (truncation) is left out of both. Hidden states are numbered as
everywhere: 0 = the embeddings, then block l's output at l + 1 (``core.layers``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from bertscope.analysis.hidden_cache import token_plan, word_table
from bertscope.core.layers import hidden_labels
from bertscope.core.models import LoadedModel
from bertscope.core.pooling import pooled_hidden_states
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.errors import BertScopeError
from bertscope.runtime.engine import Engine

Pool = Literal["mean", "first"]
POOLS = ("mean", "first")
MINIBATCH = 256  # words per Gram matrix
MIN_MINIBATCHES = 4  # fewer and the estimate swings with the sample: refused, with the minimum
CHUNK_BYTES = 256 * 2**20  # pooled word vectors of one model held at a time (float32, every hidden state)
CHUNK_SENTENCES = 256  # sentences a chunk at most: the unit of work of a Ray actor


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
        ab = hsic_terms(ga, gb).cpu()  # the sums are kept on the host: a few numbers a minibatch
        aa = hsic_terms(ga, ga).diagonal().cpu()  # [state_a] HSIC₁(K, K)
        bb = hsic_terms(gb, gb).diagonal().cpu()  # [state_b]
        if self.ab is None:
            self.ab, self.aa, self.bb = ab, aa, bb
        else:
            self.ab, self.aa, self.bb = self.ab + ab, self.aa + aa, self.bb + bb
        self.minibatches += 1

    def merge(self, sums: ChunkSums) -> None:
        """Add another accumulator's sums (a chunk's, from this process or a Ray actor)."""
        if sums.minibatches == 0:
            return
        ab, aa, bb = (torch.tensor(x, dtype=torch.float64) for x in (sums.ab, sums.aa, sums.bb))  # copies: a few numbers
        if self.ab is None:
            self.ab, self.aa, self.bb = ab, aa, bb
        else:
            self.ab, self.aa, self.bb = self.ab + ab, self.aa + aa, self.bb + bb
        self.minibatches += sums.minibatches

    def cka(self) -> np.ndarray:
        """[state_a, state_b] float64."""
        if self.ab is None:
            raise BertScopeError("No minibatch was added.")
        denominator = torch.sqrt((self.aa[:, None] * self.bb[None, :]).clamp_min(1e-300))
        return (self.ab / denominator).cpu().numpy()


def linear_cka(xa: np.ndarray | torch.Tensor, xb: np.ndarray | torch.Tensor) -> float:
    """The full-batch unbiased linear CKA of two [example, dim] matrices (one minibatch of all).

    Args:
        xa: [example, dim_a] one model's states.
        xb: [example, dim_b] the other's, the same examples.

    Returns:
        Linear CKA, 0 to 1.
    """
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


def chunks(task: ProbeTask, bytes_per_word: int, budget: int = CHUNK_BYTES,
           sentences: int = CHUNK_SENTENCES) -> list[tuple[int, int]]:
    """[start, stop) sentence ranges of at most ``sentences`` sentences whose words' vectors fit
    ``budget`` (at least one sentence each)."""
    out, start, words = [], 0, 0
    for i, sentence in enumerate(task.words):
        if i > start and ((words + len(sentence)) * bytes_per_word > budget or i - start >= sentences):
            out.append((start, i))
            start, words = i, 0
        words += len(sentence)
    out.append((start, len(task.words)))
    return out


@dataclass(frozen=True)
class ChunkSums:
    """What one chunk of sentences adds: the HSIC₁ sums of its full minibatches and the words
    left over (fewer than a minibatch), which join the next chunks' left-overs in chunk order."""

    ab: np.ndarray | None  # [state_a, state_b] float64 Σ HSIC₁(K_a, L_b); None when no minibatch filled
    aa: np.ndarray | None  # [state_a]
    bb: np.ndarray | None  # [state_b]
    minibatches: int
    rest_a: np.ndarray  # [word, state_a, dim_a] float32
    rest_b: np.ndarray  # [word, state_b, dim_b] float32


def chunk_sums(lm_a: LoadedModel, lm_b: LoadedModel, chunk: ProbeTask, pool: Pool, minibatch: int, seed: int,
               index: int) -> ChunkSums:
    """One chunk through both models: its words (those both kept) shuffled with (seed, index), cut
    into minibatches, their HSIC₁ terms summed on A's device. The same for any chunk wherever it
    runs, so the sums add up alike in this process and on a Ray cluster."""
    va, vb = word_vectors(lm_a, chunk, pool), word_vectors(lm_b, chunk, pool)
    shared = sorted(set(va) & set(vb))
    order = [shared[w] for w in np.random.default_rng([seed, index]).permutation(len(shared))]
    acc = CkaAccumulator()
    full = len(order) - len(order) % minibatch
    for start in range(0, full, minibatch):  # a minibatch is a random sample of the chunk's words
        words = order[start:start + minibatch]
        xa = torch.from_numpy(np.stack([va.pop(w) for w in words])).to(lm_a.device)  # [word, state_a, dim_a]
        xb = torch.from_numpy(np.stack([vb.pop(w) for w in words])).to(lm_a.device)  # [word, state_b, dim_b]
        acc.add(xa, xb)
    rest = order[full:]

    def left(vectors: dict[int, np.ndarray], lm: LoadedModel) -> np.ndarray:
        if not rest:
            return np.zeros((0, lm.num_layers + 1, lm.hidden_size), np.float32)
        return np.stack([vectors[w] for w in rest])

    def host(x: torch.Tensor | None) -> np.ndarray | None:
        return None if x is None else x.numpy()

    return ChunkSums(host(acc.ab), host(acc.aa), host(acc.bb), acc.minibatches, left(va, lm_a), left(vb, lm_b))


def compare_layers(lm_a: LoadedModel, lm_b: LoadedModel, task: ProbeTask, pool: Pool = "mean",
                   minibatch: int = MINIBATCH, source: str = "", seed: int = 0, max_chunk_bytes: int = CHUNK_BYTES,
                   progress: Callable[[int, int], None] | None = None,
                   engine: Engine | None = None) -> LayerSimilarity:
    """CKA between every hidden state of A and every hidden state of B over ``task``'s words.
    ``engine``: who runs the chunks (``runtime.engine``: a Ray cluster's actors, yielding each
    chunk's sums in chunk order); by default this process, chunk after chunk.

    Args:
        lm_a: model A.
        lm_b: model B.
        task: the words compared (a probe task's sentences).
        pool: how a word's pieces are pooled: "mean" or "first".
        minibatch: words a minibatch of the unbiased estimator.
        source: where the words came from, for the result.
        seed: the minibatches' seed.
        max_chunk_bytes: about how many bytes a chunk of states may hold.
        progress: called with (done, total) chunks.
        engine: who runs the chunks (``runtime.engine``).

    Returns:
        ``LayerSimilarity``: [state of A, state of B] linear CKA.
    """
    if pool not in POOLS:
        raise BertScopeError(f"Unknown pooling {pool!r}: use mean (of a word's pieces) or first (its first piece).")
    if minibatch < 4:
        raise BertScopeError("A minibatch needs at least 4 words.")
    check_size(sum(len(w) for w in task.words), minibatch)
    per_word = 4 * max((lm_a.num_layers + 1) * lm_a.hidden_size, (lm_b.num_layers + 1) * lm_b.hidden_size)
    ranges = chunks(task, per_word, max_chunk_bytes)
    pieces = [_chunk(task, start, stop) for start, stop in ranges]
    if engine is None:
        parts = (chunk_sums(lm_a, lm_b, piece, pool, minibatch, seed, i) for i, piece in enumerate(pieces))
    else:
        parts = engine.chunk_sums(lm_a, lm_b, pieces, pool, minibatch, seed)
    acc = CkaAccumulator()
    waiting_a: list[np.ndarray] = []  # left-over words of the chunks so far, in chunk order: [state, dim] each
    waiting_b: list[np.ndarray] = []
    for (_, stop), part in zip(ranges, parts):
        acc.merge(part)
        waiting_a.extend(part.rest_a)
        waiting_b.extend(part.rest_b)
        while len(waiting_a) >= minibatch:
            xa = torch.from_numpy(np.stack(waiting_a[:minibatch])).to(lm_a.device)  # [word, state_a, dim_a]
            xb = torch.from_numpy(np.stack(waiting_b[:minibatch])).to(lm_a.device)  # [word, state_b, dim_b]
            acc.add(xa, xb)
            del waiting_a[:minibatch], waiting_b[:minibatch]
        if progress:
            progress(stop, len(task.words))
    used = acc.minibatches * minibatch
    check_size(used, minibatch)
    return LayerSimilarity(lm_a.name, lm_b.name, acc.cka(), used, len(task.words), minibatch, acc.minibatches, pool,
                           source)


HEAD_SENTENCE_TOKENS = 64  # sentences longer than this are left out of the head comparison


@dataclass(frozen=True)
class HeadDivergence:
    """Jensen–Shannon divergence (natural log, 0 to ln 2) between attention rows of every head of A
    and every head of B, averaged over every query row of every sentence."""

    model_a: str
    model_b: str
    js: np.ndarray  # [layer_a x head_a, layer_b x head_b] mean JS
    shape_a: tuple[int, int]  # (layers, heads)
    shape_b: tuple[int, int]
    n_sentences: int
    n_rows: int

    @property
    def same_head(self) -> np.ndarray | None:
        """[layer, head] JS between the head and the same (layer, head) of B; None when shapes differ."""
        if self.shape_a != self.shape_b:
            return None
        return np.diag(self.js).reshape(self.shape_a)

    def best_match(self) -> list[dict]:
        """For each head of A, the head of B whose rows are closest."""
        out = []
        hb = self.shape_b[1]
        for index, row in enumerate(self.js):
            j = int(np.argmin(row))
            out.append({"layer": index // self.shape_a[1], "head": index % self.shape_a[1], "b_layer": j // hb,
                        "b_head": j % hb, "js": round(float(row[j]), 6)})
        return out

    def to_json(self) -> dict:
        same = self.same_head
        return {"js_same_head": None if same is None else np.round(same, 6).tolist(), "best_match": self.best_match(),
                "n_sentences": self.n_sentences, "n_rows": self.n_rows, "divergence": "Jensen-Shannon, natural log"}


def same_tokenizer(lm_a: LoadedModel, lm_b: LoadedModel, texts: Sequence[str]) -> bool:
    """Whether both models cut ``texts`` into the same ids (checked on every text)."""
    if lm_a.tokenizer.get_vocab() != lm_b.tokenizer.get_vocab():
        return False
    a = lm_a.tokenizer(list(texts), verbose=False)["input_ids"]
    b = lm_b.tokenizer(list(texts), verbose=False)["input_ids"]
    return a == b


JS_SLAB_BYTES = 64 * 2**20  # one [head_a block, head_b, row, key] float64 slab


def pairwise_js(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[head_a, head_b] summed over rows: JS(p_r, q_r) for every head pair. ``p``: [head_a, row,
    key], ``q``: [head_b, row, key], each row a distribution (float64). Heads of A a block at a
    time, so the [block, head_b, row, key] mixture stays within ``JS_SLAB_BYTES``."""
    per = max(1, JS_SLAB_BYTES // max(1, q.numel() * 8))
    q_log_q = torch.xlogy(q, q).sum(-1)  # [head_b, row]
    out = []
    for start in range(0, len(p), per):
        block = p[start:start + per]  # [block, row, key]
        m = 0.5 * (block[:, None] + q[None, :])  # [block, head_b, row, key]
        log_m = torch.log(m.clamp_min(1e-300))
        cross_p = (block[:, None] * log_m).sum(-1)  # [block, head_b, row]
        cross_q = (q[None, :] * log_m).sum(-1)
        p_log_p = torch.xlogy(block, block).sum(-1)  # [block, row]
        js = 0.5 * (p_log_p[:, None] - cross_p) + 0.5 * (q_log_q[None, :] - cross_q)  # [block, head_b, row]
        out.append(js.clamp_min(0).sum(-1))
    return torch.cat(out)


def compare_heads(lm_a: LoadedModel, lm_b: LoadedModel, texts: Sequence[str],
                  progress: Callable[[int, int], None] | None = None) -> HeadDivergence:
    """Every head of A against every head of B by the mean JS divergence of their attention rows,
    over the sentences of ``texts`` of at most ``HEAD_SENTENCE_TOKENS`` tokens. Both models must cut
    the text into the same tokens.

    Args:
        lm_a: model A.
        lm_b: model B (the same tokenizer).
        texts: the sentences.
        progress: called with (done, total) sentences.

    Returns:
        ``HeadDivergence``: [head of A, head of B] mean Jensen–Shannon divergence of their attention rows.
    """
    from bertscope.core.forward import inspect

    if not same_tokenizer(lm_a, lm_b, texts):
        raise BertScopeError(f"{lm_a.name} and {lm_b.name} do not cut the text into the same tokens: heads are "
                             "compared row by row only between models that share a tokenizer (CKA compares any two).")
    na, nb = lm_a.num_layers * lm_a.num_heads, lm_b.num_layers * lm_b.num_heads
    sums = torch.zeros(na, nb, dtype=torch.float64)
    used = rows = 0
    for done, text in enumerate(texts, 1):
        ra = inspect(lm_a, text, with_hidden_states=False, with_logits=False)
        if ra.n_tokens <= HEAD_SENTENCE_TOKENS:
            rb = inspect(lm_b, text, with_hidden_states=False, with_logits=False)
            t = ra.n_tokens
            p = torch.from_numpy(ra.attentions.astype(np.float64)).reshape(na, t, t)  # [head, query, key]
            q = torch.from_numpy(rb.attentions.astype(np.float64)).reshape(nb, t, t)
            p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)  # float16 weights renormalised
            sums += pairwise_js(p, q)
            used, rows = used + 1, rows + t
        if progress:
            progress(done, len(texts))
    if not used:
        raise BertScopeError(f"No sentence of at most {HEAD_SENTENCE_TOKENS} tokens to compare heads on.")
    return HeadDivergence(lm_a.name, lm_b.name, (sums / rows).numpy(), (lm_a.num_layers, lm_a.num_heads),
                          (lm_b.num_layers, lm_b.num_heads), used, rows)
