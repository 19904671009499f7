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
Sentences are streamed in batches bounded by bytes, and every reduction runs in torch on the
model's device, over as many layers at once as ``STACK_BYTES`` allows, accumulating in
float32 (float64 across batches). Nothing crosses to the CPU until the end, when the
[statistic, layer, head] sums do: on a GPU the host never waits, so it tokenises the next
batch while the device works.

Punctuation is recognised by token id: a vocabulary entry that is "." or "," once its
word-boundary marker ("Ġ", "▁") is dropped. For WordPiece and byte-level BPE this is exactly
the readable token; for SentencePiece it also counts a "." glued to the previous word
("river." -> "▁river", "."), which is still the sentence's full stop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from bertscope.core.forward import device_batches
from bertscope.core.inspection import BatchInspection
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import to_device
from bertscope.runtime.engine import Engine

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
STACK_BYTES = 64 * 2**20  # attention of several layers reduced in one go (fewer kernel launches)
BOUNDARY_MARKERS = "Ġ▁"


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

    @classmethod
    def from_sums(cls, total: np.ndarray, sentences: int, tokens: int) -> HeadStats:
        """From [statistic, layer, head] sums over ``sentences`` sentences (``head_sums``)."""
        return cls({name: total[i] / sentences for i, name in enumerate(STATISTICS)}, sentences, tokens)

    def to_json(self) -> dict:
        return {
            "layers": self.layers,
            "heads": self.heads,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "stats": {k: v.tolist() for k, v in self.stats.items()},
        }


def layer_statistics(
    a: torch.Tensor,  # [batch, head, query, key] one layer's attention; rows over real keys sum to 1
    mask: torch.Tensor,  # [batch, token] bool, False = padding
    is_cls: torch.Tensor,  # [batch, token] bool
    is_sep: torch.Tensor,  # [batch, token] bool
    is_punct: torch.Tensor,  # [batch, token] bool
) -> dict[str, torch.Tensor]:
    """Each statistic per sentence for one layer: name -> [batch, head] float32, on a's device."""
    a = a.float()  # a half-precision model's weights are summed in float32
    m = mask.float()  # [b, t]
    n = m.sum(dim=1)  # [b]
    q_mask = m[:, None, :]  # [b, 1, q]
    k_mask = m[:, None, None, :]  # [b, 1, 1, k]
    per_query_mean = lambda x: (x * q_mask).sum(-1) / n[:, None]  # noqa: E731  [b, h, q] -> [b, h]

    # pad keys become p = 1, whose p log p is 0, so they drop out of the sum
    smooth = torch.where(k_mask > 0, (1 - SMOOTHING) * a + (SMOOTHING / n)[:, None, None, None],
                         torch.ones((), device=a.device))
    entropy = -(smooth * torch.log(smooth)).sum(-1)  # [b, h, q]
    del smooth

    # mass on [CLS], [SEP] and punctuation in one batched matmul: [b, h*q, k] @ [b, k, 3]
    b_, h_, t_, _ = a.shape
    selectors = torch.stack([is_cls & mask, is_sep & mask, is_punct & mask], dim=-1).float()  # [b, k, 3]
    masses = torch.bmm(a.reshape(b_, h_ * t_, t_), selectors).reshape(b_, h_, t_, 3)

    positions = torch.arange(t_, device=a.device)
    distance = (positions[:, None] - positions[None, :]).abs().float()  # [q, k]
    prev = torch.zeros(a.shape[:-1], device=a.device)  # [b, h, q]
    prev[..., 1:] = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1)  # (q, q-1)
    nxt = torch.zeros(a.shape[:-1], device=a.device)
    nxt[..., :-1] = torch.diagonal(a, offset=1, dim1=-2, dim2=-1) * m[:, None, 1:]  # (q, q+1)
    return {
        "entropy": per_query_mean(entropy),
        "cls": per_query_mean(masses[..., 0]),
        "sep": per_query_mean(masses[..., 1]),
        "punct": per_query_mean(masses[..., 2]),
        "prev": per_query_mean(prev),
        "next": per_query_mean(nxt),
        "self": per_query_mean(torch.diagonal(a, dim1=-2, dim2=-1)),
        "distance": per_query_mean((a * k_mask * distance).sum(-1)),
    }


def sentence_statistics(
    attentions: np.ndarray,  # [batch, layer, head, query, key]; rows over real keys sum to 1
    mask: np.ndarray,  # [batch, token] bool, False = padding
    is_cls: np.ndarray,  # [batch, token] bool
    is_sep: np.ndarray,  # [batch, token] bool
    is_punct: np.ndarray,  # [batch, token] bool
) -> dict[str, np.ndarray]:
    """Each statistic per sentence from CPU arrays: name -> [batch, layer, head]."""
    flags = [torch.from_numpy(np.asarray(f, bool)) for f in (mask, is_cls, is_sep, is_punct)]
    per_layer = [layer_statistics(torch.from_numpy(np.ascontiguousarray(attentions[:, i])), *flags)
                 for i in range(attentions.shape[1])]
    return {name: torch.stack([s[name] for s in per_layer], dim=1).numpy() for name in STATISTICS}


@lru_cache(maxsize=16)
def punctuation_ids(tokenizer: Any, vocab_size: int) -> np.ndarray:
    """[vocab] bool: ids whose piece is "." or "," (word-boundary markers dropped)."""
    table = np.zeros(max(vocab_size, len(tokenizer)), bool)
    for piece, i in tokenizer.get_vocab().items():
        if piece.lstrip(BOUNDARY_MARKERS) in PUNCTUATION:
            table[i] = True
    return table


def token_flags(lm: LoadedModel, batch: BatchInspection) -> tuple[np.ndarray, ...]:
    """(is_cls, is_sep, is_punct), each [batch, token] bool, from the ids alone."""
    tok = lm.tokenizer
    ids = batch.input_ids
    is_cls = np.isin(ids, [i for i in {tok.cls_token_id, tok.bos_token_id} if i is not None])
    is_sep = np.isin(ids, [i for i in {tok.sep_token_id, tok.eos_token_id} if i is not None])
    # the first special token is the sentence start even where cls and sep share an id
    is_cls &= batch.special_mask
    is_sep &= batch.special_mask & ~is_cls
    is_punct = punctuation_ids(tok, lm.vocab_size)[ids] & ~batch.special_mask
    return is_cls, is_sep, is_punct


def _layer_groups(n_layers: int, layer_bytes: int) -> list[slice]:
    """Consecutive layers whose float32 attentions (and the reductions' temporaries, about 4x)
    fit ``STACK_BYTES`` together; at least one layer each."""
    per = max(1, STACK_BYTES // max(1, 4 * layer_bytes))
    return [slice(i, min(i + per, n_layers)) for i in range(0, n_layers, per)]


def batch_statistics(attentions: tuple[torch.Tensor, ...], flags: torch.Tensor) -> torch.Tensor:
    """[statistic, layer, head] sums over the batch's sentences, on the attentions' device.

    attentions: per layer [batch, head, query, key]; flags: [4, batch, token] bool
    (real token, [CLS], [SEP], punctuation)."""
    b, h, t, _ = attentions[0].shape
    parts = []
    for group in _layer_groups(len(attentions), b * h * t * t * 4):
        a = torch.stack(attentions[group])  # [layers, batch, head, q, k]
        n = a.shape[0]
        repeated = [f.repeat(n, 1) for f in flags]  # [layers * batch, token] each
        stats = layer_statistics(a.flatten(0, 1), *repeated)  # name -> [layers * batch, head]
        parts.append(torch.stack([stats[name].reshape(n, b, h).sum(1) for name in STATISTICS]))
    return torch.cat(parts, dim=1)  # [statistic, layer, head]


def corpus_texts(sentences: Iterable[str], limit: int | None = MAX_SENTENCES) -> list[str]:
    """The corpus's non-empty sentences, within ``limit`` (None: any number, for engines that
    spread a corpus over a cluster)."""
    texts = [s.strip() for s in sentences if s and s.strip()]
    if not texts:
        raise BertScopeError("The corpus is empty: give at least one sentence (one per line).")
    if limit is not None and len(texts) > limit:
        raise BertScopeError(f"The corpus has {len(texts):,} sentences; the limit is {limit:,} "
                             "(--engine ray takes any number).")
    return texts


def head_sums(
    lm: LoadedModel,
    texts: list[str],
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
    plan: list[list[int]] | None = None,
) -> tuple[np.ndarray, int]:
    """([statistic, layer, head] float64 sums over ``texts``' sentences, real tokens seen):
    what ``head_stats`` divides by the number of sentences, and what engines that split a
    corpus (Ray) add up. ``plan``: the batches to run (``core.forward.corpus_plan``)."""
    sums = []  # [statistic, layer, head] per batch, left on the device until the end
    tokens = done = 0
    for batch, out in device_batches(lm, texts, batch_size=batch_size, with_attentions=True, plan=plan):
        flags = np.stack([batch.attention_mask, *token_flags(lm, batch)])  # [4, batch, token]
        with torch.inference_mode():
            sums.append(batch_statistics(out.attentions, to_device(torch.from_numpy(flags), lm.device)))
        del out
        tokens += int(batch.attention_mask.sum())
        done += len(batch)
        if progress is not None:
            progress(done, len(texts))
    return torch.stack(sums).cpu().double().sum(dim=0).numpy(), tokens  # the one copy


def head_stats(
    lm: LoadedModel,
    sentences: Iterable[str],
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
    engine: Engine | None = None,
) -> HeadStats:
    """Statistics for every head of ``lm`` over ``sentences`` (streamed, padding excluded); with an
    ``engine`` (``runtime.engine``) its workers run the batches, with no cap on sentences.

    Args:
        lm: the model.
        sentences: one text each.
        batch_size: sentences a batch.
        progress: called with (done, total) sentences.
        engine: who runs the batches (``runtime.engine``), by default this process.

    Returns:
        ``HeadStats``: Clark et al.'s statistics, [layer, head] each.
    """
    if engine is None:
        texts = corpus_texts(sentences)
        total, tokens = head_sums(lm, texts, batch_size, progress)
    else:
        texts = corpus_texts(sentences, limit=None)
        total, tokens = engine.head_sums(lm, texts, batch_size, progress)
    return HeadStats.from_sums(total, len(texts), tokens)
