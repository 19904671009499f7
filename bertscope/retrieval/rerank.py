"""Rerankers (cross-encoders): a (query, passage) pair read as one input, one relevance score; explained.

    lm = load_model("bundled-reranker")                       # all-MiniLM-L6-v2 fine-tuned here on SQuAD pairs
    rerank(lm, "Who wrote the Iliad?", passages)              # [Hit(rank, id, text, score), ...] best first
    explain_relevance(lm, query, passage)                     # integrated gradients: each token's share
    interactions(lm, query, passage)                          # [query word, passage word] pair interactions
    evaluate_rerank(retriever, lm, depth=20)                  # SQuAD dev: the retriever's top 20, reranked

A reranker is a sequence classifier over the pair ``[CLS] query [SEP] passage [SEP]`` (the task models' path:
``*ForSequenceClassification``). Its **relevance** is what it is trained to rank by: one label (the MS MARCO
cross-encoders' regression head) → that logit; two or more → the log-probability of the relevant label (named
relevant, positive, true, yes or entailment; else the last), the target integrated gradients explain, so the
tokens' shares sum to the relevance less the baseline's (the completeness error is stated).

**Which query word's evidence flows through which passage word.** Integrated gradients give each token one
number; they do not say which query word a passage word answers. The interaction of a query word *i* and a passage
word *j* is the discrete mixed difference of the relevance when each is removed (its pieces replaced by the padding
token, the baseline integrated gradients use), the rest of the input as it is::

    δ_ij = f(x) − f(x without i) − f(x without j) + f(x without i and j)

ArchDetect's pairwise interaction with the input as its context (Tsang, Rambhatla & Liu, "How does this interaction
affect me? Interpretable attribution for feature interactions", NeurIPS 2020): positive where the two words count
together for more than apart (the passage's answer to the query's question word, a name matched), exact for the
model (no gradient, no path), one pass a pair: (query words × passage words) + both sides' words + 1 passes in
batches. Chosen over attention maps (not attributions) and over integrated Hessians (Janizek et al. 2021: a pass
per step squared per query token) because it is exact, cheap at sentence scale, and reads the same removal as the
deletion test; capped at ``MAX_PAIRS`` word pairs (a longer passage: shorten it or raise the cap).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.hooked_pass import model_inputs
from bertscope.core.models import LoadedModel
from bertscope.core.task_head import SEQUENCE
from bertscope.errors import BertScopeError

RELEVANT_NAMES = ("relevant", "positive", "true", "yes", "entailment", "1")
MAX_PAIRS = 4_096  # word pairs an interaction map computes (a pass each)
MAX_PASSAGES = 1_000  # passages one call reranks
BATCH_ROWS = 32


def check_reranker(lm: LoadedModel) -> None:
    if lm.task is None or lm.task.kind != SEQUENCE:
        has = "no task head" if lm.task is None else f"a {lm.task.kind.replace('-', ' ')} head"
        raise BertScopeError(f"{lm.name} is not a reranker (a cross-encoder: a sequence classifier over "
                             f"(query, passage)); it has {has}. Try bundled-reranker.")


def relevant_label(lm: LoadedModel) -> int:
    """The label whose score ranks passages: the only one, or the one named relevant (else the last)."""
    check_reranker(lm)
    assert lm.task is not None
    labels = [label.lower() for label in lm.task.labels]
    return next((labels.index(n) for n in RELEVANT_NAMES if n in labels), len(labels) - 1)


def relevance_of(lm: LoadedModel, logits: torch.Tensor) -> torch.Tensor:
    """[batch] relevance from [batch, label] logits: the one logit, else the relevant label's log-probability."""
    logits = logits.float()
    c = relevant_label(lm)
    return logits[:, 0] if logits.shape[-1] == 1 else torch.log_softmax(logits, -1)[:, c]


def relevance_target(lm: LoadedModel):
    """The attribution target whose value is the relevance (``attribution.Target``)."""
    from bertscope.attribution.targets import Target

    assert lm.task is not None
    return Target("class", label=lm.task.labels[relevant_label(lm)])


def check_query(lm: LoadedModel, query: str) -> None:
    """One line for a query that leaves the passage no room in the reranker's input (the query is never cut: a
    passage is)."""
    if not query or not query.strip():
        raise BertScopeError("The query is empty: a reranker reads a query and a passage.")
    room = lm.max_length - lm.tokenizer.num_special_tokens_to_add(pair=True)
    pieces = len(lm.tokenizer(query, add_special_tokens=False, verbose=False)["input_ids"])
    if pieces >= room:
        raise BertScopeError(f"The query has {pieces:,} word pieces; {lm.name} reads {lm.max_length} with the "
                             f"passage, so keep the query under {room:,} to leave the passage room.")


def pair_lengths(lm: LoadedModel, query: str, passages: Sequence[str]) -> list[int]:
    """[passage] the tokens the reranker reads of each (query, passage) pair, the passage cut where it is cut: what
    a reranking passes through the model (a hosted demo caps their sum before the job)."""
    check_reranker(lm)
    check_query(lm, query)
    enc = lm.tokenizer([query] * len(passages), list(passages), truncation="only_second", max_length=lm.max_length)
    return [len(ids) for ids in enc["input_ids"]]


def explain_cost(lm: LoadedModel, query: str, passage: str, steps: int = 50) -> int:
    """The word pieces ``explain_relevance`` (``steps`` rows) and ``interactions`` (a pass a word, and a pass a word
    pair) pass through the model for one pair; one line for an empty passage or a map over ``MAX_PAIRS``."""
    if not passage or not passage.strip():
        raise BertScopeError("The passage is empty: a reranker reads a query and a passage (give both).")
    check_reranker(lm)
    check_query(lm, query)
    _check_fast(lm)
    enc = lm.tokenizer(query, passage, truncation="only_second", max_length=lm.max_length, return_tensors="pt")
    nq, npw = len(_words(enc, query, 0)[1]), len(_words(enc, passage, 1)[1])
    _check_pairs(nq, npw)
    return enc["input_ids"].shape[1] * (steps + 1 + nq + npw + nq * npw)  # the pair read once, a pass each


def _check_fast(lm: LoadedModel) -> None:
    if not lm.tokenizer.is_fast:
        raise BertScopeError(f"{lm.name}'s tokenizer has no word map (a fast tokenizer): interactions need one.")


def _check_pairs(query_words: int, passage_words: int) -> None:
    if query_words * passage_words > MAX_PAIRS:
        raise BertScopeError(f"{query_words} query words x {passage_words} passage words = "
                             f"{query_words * passage_words:,} pairs, a pass each: at most {MAX_PAIRS:,}. Shorten "
                             "the passage.")


@torch.no_grad()
def relevance(lm: LoadedModel, query: str, passages: Sequence[str],
              progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[passage] the reranker's relevance of each passage to ``query``."""
    from bertscope.core.passes import batches

    check_reranker(lm)
    check_query(lm, query)
    if not passages:
        raise BertScopeError("No passages to rerank: a reranker scores a query against each passage.")
    if len(passages) > MAX_PASSAGES:
        raise BertScopeError(f"{len(passages):,} passages: rerank at most {MAX_PASSAGES:,} at a time (the top of a "
                             "first-stage search).")
    out = np.zeros(len(passages), np.float64)
    done = 0
    for rows, _, feed in batches(lm, [query] * len(passages), BATCH_ROWS, pairs=list(passages)):
        out[rows] = relevance_of(lm, lm.run(feed).logits).cpu().numpy()
        done += len(rows)
        if progress:
            progress(done, len(passages))
    return out


def rerank(lm: LoadedModel, query: str, passages: Sequence[str], ids: Sequence[str] | None = None,
           progress: Callable[[int, int], None] | None = None):
    """The passages in the reranker's order, best first (``search.Hit``: rank, id, text, relevance).

    Args:
        lm: a reranker (``check_reranker``).
        query: the query.
        passages: what to order (a first-stage search's top hits).
        ids: their ids (default their positions).
        progress: called with (done, total) passages.

    Returns:
        A ``Hit`` a passage, best first.
    """
    from bertscope.retrieval.search import Hit

    scores = relevance(lm, query, passages, progress)
    ids = list(ids) if ids is not None else [str(i) for i in range(len(passages))]
    order = np.argsort(-scores, kind="stable")
    return [Hit(r + 1, ids[i], passages[i], float(scores[i])) for r, i in enumerate(order)]


def explain_relevance(lm: LoadedModel, query: str, passage: str, steps: int = 50,
                      progress: Callable[[int, int], None] | None = None):
    """Integrated gradients of the relevance over the pair's tokens.

    Args:
        lm: a reranker (a cross-encoder with its head).
        query: the query.
        passage: the passage.
        steps: integration steps.
        progress: called with (done, total) steps.

    Returns:
        ``attribution.TokenScores``: the query's tokens, then the passage's; their sum is the relevance less the
        baseline's, to the stated completeness error.
    """
    from bertscope.attribution.methods import attribute

    check_reranker(lm)
    check_query(lm, query)
    if not passage or not passage.strip():
        raise BertScopeError("The passage is empty: a reranker reads a query and a passage (give both).")
    return attribute(lm, query, passage, "ig", relevance_target(lm), steps=steps, progress=progress)


@dataclass(frozen=True)
class Interactions:
    """The pairwise interactions of a query's words with a passage's words in the reranker's relevance."""

    model: str
    query_words: tuple[str, ...]
    passage_words: tuple[str, ...]
    pairs: np.ndarray  # [query word, passage word] δ_ij
    query_alone: np.ndarray  # [query word] f(x) − f(x without i): each word's removal effect
    passage_alone: np.ndarray  # [passage word]
    score: float  # f(x), the relevance
    passes: int

    def strongest(self, k: int = 10) -> list[tuple[str, str, float]]:
        order = np.argsort(-np.abs(self.pairs), axis=None)[:k]
        return [(self.query_words[i], self.passage_words[j], float(self.pairs[i, j]))
                for i, j in zip(*np.unravel_index(order, self.pairs.shape))]

    def to_json(self) -> dict:
        return {"model": self.model, "method": "archdetect", "score": self.score,
                "query_words": list(self.query_words), "passage_words": list(self.passage_words),
                "pairs": self.pairs.round(6).tolist(), "query_alone": self.query_alone.round(6).tolist(),
                "passage_alone": self.passage_alone.round(6).tolist(), "passes": self.passes}


def _words(enc, text: str, sequence: int) -> tuple[list[str], list[list[int]]]:
    """(each word of segment ``sequence`` as typed in ``text``, [word] its token positions)."""
    seq, words = enc.sequence_ids(0), enc.word_ids(0)
    groups: dict[int, list[int]] = {}
    for pos, (s, w) in enumerate(zip(seq, words)):
        if s == sequence and w is not None:
            groups.setdefault(w, []).append(pos)
    spans = [enc.word_to_chars(0, w, sequence_index=sequence) for w in groups]
    return [text[a:b] for a, b in spans], list(groups.values())


@torch.no_grad()
def interactions(lm: LoadedModel, query: str, passage: str,
                 progress: Callable[[int, int], None] | None = None) -> Interactions:
    """Every (query word, passage word) interaction in the reranker's relevance (ArchDetect's mixed difference;
    the module's docstring). One pass a pair, in batches; at most ``MAX_PAIRS`` pairs.

    Args:
        lm: a reranker.
        query: the query.
        passage: the passage.
        progress: called with (done, total) passes.

    Returns:
        ``Interactions``: [query word, passage word] mixed differences and the words.
    """
    check_reranker(lm)
    if not query.strip() or not passage.strip():
        raise BertScopeError("A reranker reads a query and a passage: give both, neither empty.")
    check_query(lm, query)
    enc = lm.tokenizer(query, passage, truncation="only_second", max_length=lm.max_length, return_tensors="pt")
    _check_fast(lm)
    q_words, q_pos = _words(enc, query, 0)
    p_words, p_pos = _words(enc, passage, 1)
    _check_pairs(len(q_words), len(p_words))
    base = enc["input_ids"][0]
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.unk_token_id
    removals: list[list[int]] = [[]] + q_pos + p_pos + [a + b for a in q_pos for b in p_pos]
    feed = model_inputs(lm, enc)
    values = np.zeros(len(removals))
    for start in range(0, len(removals), BATCH_ROWS):
        chunk = removals[start:start + BATCH_ROWS]
        ids = base.repeat(len(chunk), 1)  # [rows, token]
        for r, positions in enumerate(chunk):
            ids[r, positions] = pad
        rows = {k: v.expand(len(chunk), -1) for k, v in feed.items()}
        rows["input_ids"] = ids.to(lm.device)
        values[start:start + len(chunk)] = relevance_of(lm, lm.run(rows).logits).cpu().numpy()
        if progress:
            progress(min(start + BATCH_ROWS, len(removals)), len(removals))
    nq, npw = len(q_pos), len(p_pos)
    f = values[0]
    without_q, without_p = values[1:1 + nq], values[1 + nq:1 + nq + npw]
    without_both = values[1 + nq + npw:].reshape(nq, npw)
    pairs = f - without_q[:, None] - without_p[None, :] + without_both
    return Interactions(lm.name, tuple(q_words), tuple(p_words), pairs, f - without_q, f - without_p, float(f),
                        len(removals))


def check_depth(depth: int) -> None:
    """One line unless 10 ≤ ``depth`` ≤ ``MAX_PASSAGES`` (the passages a question a reranker reorders)."""
    if not 10 <= depth <= MAX_PASSAGES:
        raise BertScopeError(f"--depth {depth}: rerank 10 to {MAX_PASSAGES:,} passages a question (MRR@10 reads 10).")


def evaluate_rerank(retriever: LoadedModel, reranker: LoadedModel, limit: int | None = None, depth: int = 20,
                    progress: Callable[[int, int], None] | None = None, sparse: bool = False,
                    top: np.ndarray | None = None):
    """SQuAD dev as retrieval, the retriever's top ``depth`` passages reordered by the reranker.

    Args:
        retriever: the embedding model that ranks every passage first.
        reranker: the cross-encoder that reorders its top ``depth``.
        limit: the first questions only.
        depth: passages a question reordered (a gold passage outside them stays missed).
        progress: called with (done, total) questions.
        sparse: the retriever read as a sparse encoder (``sparse.sparse_ranked``: a SPLADE checkpoint, or a masked
            LM's head) rather than by its embedding.
        top: [question, at least ``depth``] the retriever's passages, best first, when already ranked
            (``search.dense_squad``, ``sparse.sparse_squad``); None ranks them here.

    Returns:
        ``search.RetrievalScores`` of the reordered lists.
    """
    from bertscope.retrieval.search import build_index, rank_scores, ranked, squad_retrieval

    check_reranker(reranker)
    check_depth(depth)
    corpus, questions, gold = squad_retrieval(limit)
    name = retriever.name
    if sparse:
        from bertscope.retrieval.sparse import sparse_name, sparse_ranked

        name = sparse_name(retriever)
    if top is not None:
        if top.shape[0] != len(questions) or top.shape[1] < depth:
            raise BertScopeError(f"{top.shape[0]} ranked lists of {top.shape[1]} for {len(questions)} questions "
                                 f"reordered {depth} deep: rank them with the same --limit and at least --depth.")
    elif sparse:
        top = sparse_ranked(retriever, corpus.texts, questions, depth)
    else:
        top, _ = ranked(retriever, build_index(retriever, corpus), questions, depth)
    top = top[:, :depth]  # [question, depth]
    order = np.zeros_like(top)
    for q, (question, rows) in enumerate(zip(questions, top)):
        scores = relevance(reranker, question, [corpus.texts[i] for i in rows])
        order[q] = rows[np.argsort(-scores, kind="stable")]
        if progress:
            progress(q + 1, len(questions))
    return rank_scores(f"{name} + {reranker.name}", gold, order, len(corpus.texts))
