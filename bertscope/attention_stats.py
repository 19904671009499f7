"""Head statistics over a corpus, as in Clark et al. (2019), "What Does BERT Look At? An
Analysis of BERT's Attention" (BlackboxNLP; Sections 3 and 4, Figures 2-4).

For every layer x head, each statistic is first averaged over the query tokens of one
sentence, then over sentences (the paper's released code does the same):

- ``entropy``: -sum_k p log p in nats, with Clark et al.'s smoothing
  p <- 0.9999 p + 0.0001 / n before the log (n = the sentence's length);
- ``cls`` / ``sep`` / ``punct``: attention mass on [CLS] / [SEP] / "." and "," tokens
  (the model's own special tokens, e.g. <s> and </s> for RoBERTa);
- ``prev`` / ``next`` / ``self``: mass on the token one to the left / right / itself, averaged
  over all n queries (the first query has no previous token and counts 0, as in the paper);
- ``distance``: mean |query - key| weighted by attention (Vig & Belinkov 2019).

Word pieces: statistics are computed over tokens as the model sees them (word pieces), as
in Clark et al. for these statistics; "previous token" means the previous word piece.
Padding never counts: each sentence uses only its own n positions as queries and keys.
Sentences are streamed in batches, so memory is bounded by one batch of attentions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .errors import BertScopeError
from .inspect import BatchInspection, inspect_batch
from .models import LoadedModel

STATISTICS = {
    "entropy": "mean attention entropy (nats, smoothed as Clark et al. 2019)",
    "cls": "share of attention to [CLS]",
    "sep": "share of attention to [SEP]",
    "punct": "share of attention to . and ,",
    "prev": "share of attention to the previous token",
    "next": "share of attention to the next token",
    "self": "share of attention to the token itself",
    "distance": "mean attention distance (tokens)",
}
PUNCTUATION = frozenset({".", ","})
SMOOTHING = 1e-4
MAX_SENTENCES = 20_000


@dataclass(frozen=True)
class HeadStats:
    stats: dict[str, np.ndarray]  # name -> [layer, head], means over sentences
    sentences: int
    tokens: int  # real (unpadded) tokens seen, special tokens included

    @property
    def layers(self) -> int:
        return int(next(iter(self.stats.values())).shape[0])

    @property
    def heads(self) -> int:
        return int(next(iter(self.stats.values())).shape[1])

    def ranking(self, statistic: str, descending: bool = True) -> list[tuple[int, int, float]]:
        """(layer, head, value) for every head, sorted by ``statistic``."""
        if statistic not in self.stats:
            raise BertScopeError(f"Unknown statistic {statistic!r}: use one of {', '.join(STATISTICS)}.")
        values = self.stats[statistic]
        order = np.argsort(-values if descending else values, axis=None, kind="stable")
        return [(int(i // self.heads), int(i % self.heads), float(values.flat[i])) for i in order]

    def rows(self) -> list[dict[str, float | int]]:
        """One row per head, for a table or CSV."""
        return [
            {"layer": layer, "head": head, **{k: float(v[layer, head]) for k, v in self.stats.items()}}
            for layer in range(self.layers)
            for head in range(self.heads)
        ]

    def to_json(self) -> dict:
        return {
            "layers": self.layers,
            "heads": self.heads,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "stats": {k: v.tolist() for k, v in self.stats.items()},
        }


def sentence_statistics(
    attentions: np.ndarray,  # [batch, layer, head, query, key]; rows over real keys sum to 1
    mask: np.ndarray,  # [batch, token] bool, False = padding
    is_cls: np.ndarray,  # [batch, token] bool
    is_sep: np.ndarray,  # [batch, token] bool
    is_punct: np.ndarray,  # [batch, token] bool
) -> dict[str, np.ndarray]:
    """Each statistic per sentence: name -> [batch, layer, head]."""
    a = attentions.astype(np.float32, copy=False)  # float32 halves a batch's memory
    m = mask.astype(np.float32)  # [b, t]
    n = m.sum(axis=1)  # [b]
    q_mask = m[:, None, None, :]  # [b, 1, 1, q]
    k_mask = m[:, None, None, None, :]  # [b, 1, 1, 1, k]
    per_query_mean = lambda x: (x * q_mask).sum(-1) / n[:, None, None]  # noqa: E731  [b, l, h]

    # pad keys become p = 1, whose p log p is 0, so they drop out of the sum
    smooth = np.where(k_mask > 0, (1 - SMOOTHING) * a + (SMOOTHING / n)[:, None, None, None, None], 1.0)
    entropy = -(smooth * np.log(smooth)).sum(-1)  # [b, l, h, q]

    # mass on [CLS], [SEP] and punctuation in one batched matmul: [b, l*h*q, k] @ [b, k, 3]
    b_, l_, h_, t_, _ = a.shape
    selectors = np.stack([is_cls & mask, is_sep & mask, is_punct & mask], axis=-1).astype(np.float32)
    masses = np.matmul(a.reshape(b_, l_ * h_ * t_, t_), selectors).reshape(b_, l_, h_, t_, 3)

    t = a.shape[-1]
    positions = np.arange(t)
    distance = np.abs(positions[:, None] - positions[None, :]).astype(np.float32)  # [q, k]
    prev = np.zeros(a.shape[:-1], np.float32)  # [b, l, h, q]
    prev[..., 1:] = np.diagonal(a, offset=-1, axis1=-2, axis2=-1)  # (q, q-1)
    nxt = np.zeros(a.shape[:-1], np.float32)
    nxt[..., :-1] = np.diagonal(a, offset=1, axis1=-2, axis2=-1) * m[:, None, None, 1:]  # (q, q+1)
    return {
        "entropy": per_query_mean(entropy),
        "cls": per_query_mean(masses[..., 0]),
        "sep": per_query_mean(masses[..., 1]),
        "punct": per_query_mean(masses[..., 2]),
        "prev": per_query_mean(prev),
        "next": per_query_mean(nxt),
        "self": per_query_mean(np.diagonal(a, axis1=-2, axis2=-1)),
        "distance": per_query_mean((a * k_mask * distance).sum(-1)),
    }


def _token_flags(lm: LoadedModel, batch: BatchInspection) -> tuple[np.ndarray, ...]:
    tok = lm.tokenizer
    ids = batch.input_ids
    is_cls = np.isin(ids, [i for i in {tok.cls_token_id, tok.bos_token_id} if i is not None])
    is_sep = np.isin(ids, [i for i in {tok.sep_token_id, tok.eos_token_id} if i is not None])
    # the first special token is the sentence start even where cls and sep share an id
    is_cls &= batch.special_mask
    is_sep &= batch.special_mask & ~is_cls
    is_punct = np.array([[t in PUNCTUATION for t in row] for row in batch.tokens]) & ~batch.special_mask
    return is_cls, is_sep, is_punct


def head_stats(
    lm: LoadedModel,
    sentences: Iterable[str],
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
) -> HeadStats:
    """Statistics for every head of ``lm`` over ``sentences`` (streamed, padding excluded)."""
    texts = [s.strip() for s in sentences if s and s.strip()]
    if not texts:
        raise BertScopeError("The corpus is empty: give at least one sentence (one per line).")
    if len(texts) > MAX_SENTENCES:
        raise BertScopeError(f"The corpus has {len(texts):,} sentences; the limit is {MAX_SENTENCES:,}.")
    sums: dict[str, np.ndarray] = {}
    tokens = done = 0
    for batch in inspect_batch(lm, texts, batch_size=batch_size, with_hidden_states=False):
        flags = _token_flags(lm, batch)
        per_sentence = sentence_statistics(batch.attentions, batch.attention_mask, *flags)
        for name, values in per_sentence.items():
            sums[name] = sums.get(name, 0) + values.sum(axis=0, dtype=np.float64)
        tokens += int(batch.attention_mask.sum())
        done += len(batch)
        if progress is not None:
            progress(done, len(texts))
    return HeadStats({k: v / len(texts) for k, v in sums.items()}, len(texts), tokens)


def read_corpus(text: str) -> list[str]:
    """One sentence per non-empty line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def shipped_corpus() -> list[str]:
    """The project's sample of varied English sentences (bertscope/data/attention_corpus.txt)."""
    from pathlib import Path

    return read_corpus((Path(__file__).parent / "data" / "attention_corpus.txt").read_text("utf-8"))
