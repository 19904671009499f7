"""Learned sparse retrieval explained exactly: a text as the vocabulary terms it activates through the masked-LM
head, and a score that is a sum over shared terms (SPLADE: Formal, Piwowarski & Clinchant, SIGIR 2021; SPLADE v2,
Formal et al. 2021), computed as sentence-transformers' ``SparseEncoder`` computes it (its ``SpladePooling``).

    >>> from bertscope import load_model
    >>> from bertscope.retrieval.sparse import explain_sparse
    >>> x = explain_sparse(load_model("bundled-mlm"), "Who wrote the Iliad?", "Homer wrote the Iliad.")
    >>> x.terms[0].term, abs(float(x.pairs.sum()) - x.score) < 1e-9   # the strongest shared term; the map sums exactly
    ('the', True)

For a text with masked-LM logits ``z`` [token, vocab] (special tokens included, padding masked out), a term's weight
is ``w_j = pool_i f(z_ij)`` with ``f = log(1 + relu(.))`` (``log1p_relu``: that twice) and ``pool`` the maximum
(SPLADE v2 on) or the sum (SPLADE v1) over the text's tokens. Two texts score ``sum_j w_j(a) w_j(b)`` (a dot
product: sentence-transformers' default for sparse encoders). The explanation is exact by construction, no
approximation to report:

- each shared term's share ``w_j(a) w_j(b)``, which sum to the score;
- the token-pair map: a term's share goes to the pair of tokens it came from (the maximising token of each text;
  for sum pooling ``sum_j f(z_aij) f(z_bkj)`` over the pair), so the map sums to the score as well;
- each text's top terms, and which of them are **expansion** (terms the text does not contain: what the head adds).

A checkpoint saved by sentence-transformers as a sparse encoder (``modules.json`` with ``SpladePooling``) is read
with its declared pooling and activation; any other masked LM (``bundled-mlm``) is read with SPLADE v2's defaults
(max, relu) and a note saying it was not trained for retrieval: it shows what the head already knows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertscope.core.hooked_pass import check_text, model_inputs, run
from bertscope.core.models import LoadedModel
from bertscope.core.passes import mlm_logits
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import model_folder
from bertscope.retrieval.search import RetrievalScores
from bertscope.retrieval.settings import read_json

POOLINGS = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")
BATCH_BYTES = 256 * 2**20  # one batch's [row, token, vocab] logits and their transform, at most
TOP_TERMS = 30  # each text's terms listed
QUERY_BLOCK = 256  # questions scored at once in the evaluation
DENSE_FROM = 0.05  # documents' share of active terms past which their scores go through dense BLAS
DENSE_BYTES = 512 * 2**20  # ... when the dense documents fit in this


@dataclass(frozen=True)
class SpladeSettings:
    """How the masked-LM logits become one sparse vector."""

    pooling: str = "max"
    activation: str = "relu"
    max_seq_length: int | None = None
    declared: bool = False  # read from a sparse encoder's folder; False: SPLADE v2's defaults on a masked LM

    @property
    def note(self) -> str:
        f = "log(1 + log(1 + relu(logit)))" if self.activation == "log1p_relu" else "log(1 + relu(logit))"
        how = f"each vocabulary term weighs the {self.pooling} over the text's tokens of {f}; two texts score the " \
              "dot product of their term weights"
        if self.declared:
            return f"A sparse encoder (sentence-transformers' SpladePooling in its folder): {how}."
        return f"A masked LM read as SPLADE reads one (SPLADE v2's defaults; not trained for retrieval): {how}."


def _json(path: Path) -> dict:
    """A JSON object from ``path`` ({} when there is no file); one line for what cannot be read as one."""
    return read_json(path) if path.is_file() else {}


def read_splade(folder: str | Path | None) -> SpladeSettings | None:
    """The settings of a sentence-transformers sparse encoder in ``folder`` (``modules.json`` naming
    ``SpladePooling``); None for any other folder."""
    root = Path(folder) if folder is not None else None
    if root is None or not (root / "modules.json").is_file():
        return None
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if "SpladePooling" not in kinds:
        return None
    other = [k for k in kinds if k not in ("Transformer", "MLMTransformer", "SpladePooling")]
    if other:
        raise BertScopeError(f"{root}: a sparse encoder with {', '.join(other)}: BertScope reads a masked LM followed "
                             "by SpladePooling only.")
    path = next(m for m in modules if str(m.get("type", "")).endswith("SpladePooling")).get("path", "")
    config = _json(root / str(path) / "config.json")
    pooling, activation = str(config.get("pooling_strategy", "max")), str(config.get("activation_function", "relu"))
    if pooling not in POOLINGS or activation not in ACTIVATIONS:
        raise BertScopeError(f"{root}: SpladePooling {pooling!r}/{activation!r}: BertScope computes pooling "
                             f"{' or '.join(POOLINGS)} with activation {' or '.join(ACTIVATIONS)}.")
    bert = _json(root / "sentence_bert_config.json")
    st = _json(root / "config_sentence_transformers.json")
    unread = [k for k, bad in (("max_active_dims", st.get("max_active_dims") is not None),
                               ("similarity_fn_name", str(st.get("similarity_fn_name") or "dot") not in ("dot",
                                                                                                        "dot_product")),
                               ("prompts", any(v for v in (st.get("prompts") or {}).values()))) if bad]
    if unread:
        raise BertScopeError(f"{root}: a sparse encoder with {', '.join(unread)} set: BertScope reads SPLADE's plain "
                             "dot product of every active term, with no prompts, and would not equal its scores.")
    return SpladeSettings(pooling, activation, int(bert["max_seq_length"]) if bert.get("max_seq_length") else None,
                          declared=True)


def splade_settings(lm: LoadedModel) -> SpladeSettings:
    """The model's SPLADE settings: declared in its folder, else SPLADE v2's defaults on its masked-LM head; a
    one-line error for a model without one."""
    if "mlm" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has no masked-LM head: the sparse view reads the vocabulary through one. "
                             "Load a SPLADE checkpoint or a masked LM (bundled-mlm).")
    return read_splade(model_folder(lm)) or SpladeSettings()


def _cut(lm: LoadedModel, settings: SpladeSettings) -> int:
    return min(settings.max_seq_length or lm.max_length, lm.max_length)


def term_activations(logits: torch.Tensor, mask: torch.Tensor, settings: SpladeSettings) -> torch.Tensor:
    """[batch, token, vocab] f(z) of ``logits`` [batch, token, vocab] with ``mask`` [batch, token] (0: padding), as
    ``SpladePooling`` computes it before pooling."""
    f = torch.log1p(torch.relu(logits.float() * mask[..., None].float()))
    return torch.log1p(f) if settings.activation == "log1p_relu" else f


def pooled(f: torch.Tensor, settings: SpladeSettings) -> torch.Tensor:
    """[batch, vocab] term weights from [batch, token, vocab] activations."""
    return f.max(dim=1).values if settings.pooling == "max" else f.sum(dim=1)


def _feed(lm: LoadedModel, texts: list[str], settings: SpladeSettings) -> dict[str, torch.Tensor]:
    enc = lm.tokenizer([t.strip() for t in texts], padding=True, truncation="longest_first",
                       max_length=_cut(lm, settings), return_tensors="pt")
    return model_inputs(lm, enc)


@dataclass(frozen=True)
class SparseVectors:
    """Texts as term weights: ``weights`` [text, vocab] (scipy CSR: only the active terms are kept)."""

    model: str
    weights: object  # scipy.sparse.csr_matrix [text, vocab] float32
    truncated: np.ndarray  # [text] bool
    settings: SpladeSettings

    def active(self) -> np.ndarray:
        """[text] the number of active terms of each text."""
        return np.diff(self.weights.indptr)  # type: ignore[attr-defined]


@torch.no_grad()
def sparse_embed(lm: LoadedModel, texts: list[str], settings: SpladeSettings | None = None,
                 progress: Callable[[int, int], None] | None = None) -> SparseVectors:
    """Every text's term weights, in length-sorted batches bounded by bytes (the [token, vocab] logits dominate).

    Args:
        lm: a masked LM or a SPLADE checkpoint.
        texts: the texts (empty ones refused).
        settings: ``splade_settings(lm)`` when None.
        progress: called with (done, total) texts.

    Returns:
        ``SparseVectors``: a CSR [text, vocab] matrix of term weights.
    """
    from scipy import sparse

    settings = settings or splade_settings(lm)
    texts = [check_text(t, f"text {n + 1}") for n, t in enumerate(texts)]
    if not texts:
        raise BertScopeError("Give at least one text.")
    cut = _cut(lm, settings)
    lengths = [len(ids) for ids in lm.tokenizer([t.strip() for t in texts], truncation=False, verbose=False)["input_ids"]]
    order = np.argsort([-n for n in lengths], kind="stable")
    rows: list = [None] * len(texts)
    start = 0
    while start < len(order):
        longest = min(lengths[order[start]], cut)
        per_row = longest * lm.vocab_size * 4 * 3  # logits, their transform, the maximum's work
        chosen = order[start:start + max(1, min(64, BATCH_BYTES // max(1, per_row)))]
        feed = _feed(lm, [texts[i] for i in chosen], settings)
        logits = mlm_logits(run(lm, feed, grad=False))  # [batch, token, vocab]
        weights = pooled(term_activations(logits, feed["attention_mask"], settings), settings).cpu().numpy()
        for i, w in zip(chosen, weights):
            rows[i] = sparse.csr_matrix(w.astype(np.float32))
        start += len(chosen)
        if progress:
            progress(start, len(order))
    return SparseVectors(lm.name, sparse.vstack(rows, format="csr"), np.asarray(lengths) > cut, settings)


def sparse_scores(queries: SparseVectors, documents: SparseVectors) -> np.ndarray:
    """[query, document] dot products of the term weights: the documents' CSR rows against the queries made dense
    (a SPLADE model's few hundred terms a text), or both dense through BLAS where the documents are dense enough
    for that to be faster and small enough to hold (an untrained head activates most of the vocabulary)."""
    docs = documents.weights
    q = queries.weights.toarray().T  # type: ignore[attr-defined]  # [vocab, query]
    density = docs.nnz / max(1, docs.shape[0] * docs.shape[1])  # type: ignore[attr-defined]
    if density > DENSE_FROM and docs.shape[0] * docs.shape[1] * 4 <= DENSE_BYTES:  # type: ignore[attr-defined]
        return (docs.toarray() @ q).T.astype(np.float64)  # type: ignore[attr-defined]
    return np.asarray(docs @ q, dtype=np.float64).T  # [query, document]


@dataclass(frozen=True)
class SharedTerm:
    term: str
    a_weight: float
    b_weight: float
    share: float  # a_weight * b_weight: its part of the score
    a_token: int  # the token of a it came from (max pooling; sum pooling: the one contributing most)
    b_token: int
    in_a: bool  # the term is one of a's own pieces (else the head expanded a to it)
    in_b: bool


@dataclass(frozen=True)
class SparseMatch:
    """Why two texts score as they do under a sparse encoder: shared terms, exactly."""

    model: str
    settings: SpladeSettings
    a_tokens: list[str]
    b_tokens: list[str]
    score: float
    terms: list[SharedTerm]  # every shared term, largest share first
    a_top: list[tuple[str, float, bool]]  # (term, weight, the text holds it) a's strongest terms
    b_top: list[tuple[str, float, bool]]
    pairs: np.ndarray  # [a token, b token] each pair's share; sums to score
    a_active: int  # a's active terms
    b_active: int
    error: float  # |sum of the shares - score|: float rounding only
    truncated: tuple[bool, bool] = (False, False)  # (a, b) cut at the model's length

    def to_json(self) -> dict:
        return {"model": self.model, "method": "splade", "score": self.score, "settings": self.settings.note,
                "a_tokens": self.a_tokens, "b_tokens": self.b_tokens,
                "terms": [{"term": t.term, "a_weight": t.a_weight, "b_weight": t.b_weight, "share": t.share,
                           "a_token": t.a_token, "b_token": t.b_token, "expansion_a": not t.in_a,
                           "expansion_b": not t.in_b} for t in self.terms],
                "a_top": [{"term": t, "weight": w, "expansion": not held} for t, w, held in self.a_top],
                "b_top": [{"term": t, "weight": w, "expansion": not held} for t, w, held in self.b_top],
                "pairs": self.pairs.round(7).tolist(), "a_scores": self.pairs.sum(1).round(7).tolist(),
                "b_scores": self.pairs.sum(0).round(7).tolist(), "a_active": self.a_active,
                "b_active": self.b_active, "error": self.error,
                "truncated": {"a": self.truncated[0], "b": self.truncated[1]}}


def _side(lm: LoadedModel, text: str, settings: SpladeSettings, what: str
          ) -> tuple[list[str], torch.Tensor, set[int], bool]:
    """(tokens, [token, vocab] f(z) in float32 as the model computes it, the text's own vocabulary ids, cut at the
    model's length). At most ``_cut`` tokens: 512 x a 250,000-term vocabulary is the largest, 512 MB; only the
    shared terms' columns are taken to float64."""
    feed = _feed(lm, [check_text(text, what)], settings)
    with torch.no_grad():
        f = term_activations(mlm_logits(run(lm, feed, grad=False)), feed["attention_mask"], settings)[0]
    ids = feed["input_ids"][0].tolist()
    whole = len(lm.tokenizer(text.strip(), truncation=False, verbose=False)["input_ids"])
    return lm.tokenizer.convert_ids_to_tokens(ids), f.cpu(), set(ids), whole > _cut(lm, settings)


def _term(tokenizer, i: int) -> str:
    """The vocabulary term ``i``: the tokenizer's piece, or ``<id i>`` for a row of the head the tokenizer never
    produces (a vocabulary padded past the tokenizer's, or a hole in it)."""
    found = tokenizer.convert_ids_to_tokens(i)
    return found if isinstance(found, str) else f"<id {i}>"


def _top(f: torch.Tensor, weights: torch.Tensor, held: set[int], tokenizer, n: int,
         settings: SpladeSettings) -> list[tuple[str, float, bool]]:
    """A text's ``n`` strongest terms, chosen on ``weights`` [vocab] (float32) and weighed again in float64 from
    their columns of ``f`` [token, vocab], as the shared terms are (so a term's weight reads the same in both lists)."""
    ids = weights.topk(min(n, int((weights > 0).sum()))).indices  # [n]
    values = pooled(f[:, ids].double()[None], settings)[0]  # [n] float64
    order = values.argsort(descending=True, stable=True)  # near-ties in float32 ordered by the float64 weight
    ids, values = ids[order], values[order]
    return [(_term(tokenizer, int(i)), float(v), int(i) in held) for v, i in zip(values, ids)]


def explain_sparse(lm: LoadedModel, a: str, b: str, settings: SpladeSettings | None = None,
                   top: int = TOP_TERMS) -> SparseMatch:
    """Two texts' sparse score, split exactly over their shared terms and over their token pairs.

    Args:
        lm: a masked LM or a SPLADE checkpoint.
        a: the first text (a query, say).
        b: the second (a passage).
        settings: ``splade_settings(lm)`` when None.
        top: each text's strongest terms listed.

    Returns:
        A ``SparseMatch``.
    """
    if top < 0:
        raise BertScopeError(f"top {top}: give the number of terms to list (0 or more).")
    settings = settings or splade_settings(lm)
    a_tokens, fa, held_a, cut_a = _side(lm, a, settings, "text a")  # [ta, vocab]
    b_tokens, fb, held_b, cut_b = _side(lm, b, settings, "text b")  # [tb, vocab]
    wa, wb = pooled(fa[None], settings)[0], pooled(fb[None], settings)[0]  # [vocab] float32
    shared = torch.nonzero((wa > 0) & (wb > 0)).flatten()
    sa, sb = fa[:, shared].double(), fb[:, shared].double()  # [ta, shared], [tb, shared]: the shared terms only
    wa_s, wb_s = pooled(sa[None], settings)[0], pooled(sb[None], settings)[0]  # [shared] float64
    share = wa_s * wb_s  # [shared]
    ia, ib = sa.argmax(0), sb.argmax(0)  # [shared] the token each term came from
    if settings.pooling == "max":
        pairs = torch.zeros(len(a_tokens), len(b_tokens), dtype=torch.float64)
        pairs.index_put_((ia, ib), share, accumulate=True)
    else:
        pairs = sa @ sb.T  # [ta, tb]: sum_j f(z_aij) f(z_bkj)
    order = share.argsort(descending=True)
    terms = [SharedTerm(_term(lm.tokenizer, int(shared[k])), float(wa_s[k]), float(wb_s[k]), float(share[k]),
                        int(ia[k]), int(ib[k]), int(shared[k]) in held_a, int(shared[k]) in held_b)
             for k in order.tolist()]
    score = float(share.sum())
    a_top, b_top = _top(fa, wa, held_a, lm.tokenizer, top, settings), _top(fb, wb, held_b, lm.tokenizer, top, settings)
    return SparseMatch(lm.name, settings, a_tokens, b_tokens, score, terms, a_top, b_top, pairs.numpy(),
                       int((wa > 0).sum()), int((wb > 0).sum()),
                       abs(float(pairs.sum()) - score), (cut_a, cut_b))


def sparse_name(lm: LoadedModel, settings: SpladeSettings | None = None) -> str:
    """The system's name in a retrieval table: the model, read sparse (and said so when its head is untrained)."""
    settings = settings or splade_settings(lm)
    return f"{lm.name} (sparse{'' if settings.declared else ', untrained head'})"


def sparse_ranked(lm: LoadedModel, passages: Sequence[str], queries: Sequence[str], depth: int = 10,
                  progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[query, depth] the passages' rows, best first, by the exact dot product of term weights.

    Args:
        lm: a SPLADE checkpoint or a masked LM.
        passages: the texts searched.
        queries: the texts asked.
        depth: passages kept a query.
        progress: called with (done, total) passages.

    Returns:
        An integer array, each query's ``depth`` best passages in order (ties in the passages' order).
    """
    settings = splade_settings(lm)
    docs = sparse_embed(lm, list(passages), settings, progress)
    top = []
    for start in range(0, len(queries), QUERY_BLOCK):
        q = sparse_embed(lm, list(queries[start:start + QUERY_BLOCK]), settings)
        s = sparse_scores(q, docs)  # [block, passage]
        top.append(np.argsort(-s, axis=1, kind="stable")[:, :depth])
    return np.concatenate(top) if top else np.zeros((0, depth), np.int64)


def sparse_squad(lm: LoadedModel, limit: int | None = None, depth: int = 10,
                 progress: Callable[[int, int], None] | None = None) -> tuple[RetrievalScores, np.ndarray]:
    """The sparse view's scores on SQuAD dev (``evaluate_sparse_squad``) and each question's ``depth`` best passages,
    for a reranker to reorder without embedding the passages again.

    Args:
        lm: a SPLADE checkpoint or a masked LM.
        limit: the first questions only.
        depth: passages kept a question (10 or more).
        progress: called with (done, total) passages.

    Returns:
        (``RetrievalScores`` of the first 10, [question, depth] the passages' rows, best first).
    """
    from bertscope.retrieval.search import rank_scores, squad_retrieval

    corpus, questions, gold = squad_retrieval(limit)
    top = sparse_ranked(lm, corpus.texts, questions, max(10, depth), progress)
    return rank_scores(sparse_name(lm), gold, top[:, :10], len(corpus.texts)), top


def evaluate_sparse_squad(lm: LoadedModel, limit: int | None = None,
                          progress: Callable[[int, int], None] | None = None) -> RetrievalScores:
    """The sparse view's MRR@10 and recall@1/10 on SQuAD dev's questions against its passages (exact: every
    passage scored by the dot product of term weights), as ``search.evaluate_squad`` scores a dense model.

    Args:
        lm: a SPLADE checkpoint or a masked LM.
        limit: the first questions only.
        progress: called with (done, total) passages.

    Returns:
        ``RetrievalScores``.
    """
    return sparse_squad(lm, limit, 10, progress)[0]
