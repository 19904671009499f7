"""What one run trains on, built once: documents cut into chunks of ``seq_len`` tokens, or sentence
pairs for NSP / SOP as google-research/bert's ``create_instances_from_document``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.training.config import RecipeConfig


@dataclass(frozen=True)
class Chunks:
    """What training takes and the held-out set scores: rows of ``seq_len`` tokens."""

    ids: torch.Tensor  # [chunk, seq_len] int64: [CLS] ... [SEP] (pairs: [CLS] A [SEP] B [SEP]), padded
    token_types: torch.Tensor | None = None  # [chunk, seq_len] 0 = segment A, 1 = segment B (pairs only)
    pair_labels: torch.Tensor | None = None  # [chunk] 0 = B follows A / in order, 1 = B random (NSP) / swapped (SOP)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, idx: torch.Tensor | slice) -> Chunks:
        return Chunks(self.ids[idx], None if self.token_types is None else self.token_types[idx],
                      None if self.pair_labels is None else self.pair_labels[idx])


def tokenize_documents(tokenizer: Any, documents: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Per document, per sentence: its token ids (no special tokens); empty ones dropped."""
    out = []
    for sentences in documents:
        sentences = [s for s in sentences if s.strip()]
        if sentences:
            rows = [r for r in tokenizer(list(sentences), add_special_tokens=False)["input_ids"] if r]
            if rows:
                out.append(rows)
    return out


def _special_ids(tokenizer: Any) -> tuple[int, int, int]:
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    if cls is None or sep is None or pad is None:
        raise BertScopeError("The tokenizer needs [CLS], [SEP] and [PAD] tokens (or <s>, </s>, <pad>).")
    return cls, sep, pad


def chunk_documents(tokenizer: Any, documents: Sequence[Sequence[str]], seq_len: int) -> torch.Tensor:
    """[chunk, seq_len] int64: each document's tokens cut into [CLS] piece [SEP] chunks, padded.
    A document's last piece is kept when it has at least a quarter of a chunk."""
    body = seq_len - 2
    cls, sep, pad = _special_ids(tokenizer)
    chunks = []
    for sentences in tokenize_documents(tokenizer, documents):
        ids = [i for row in sentences for i in row]
        for start in range(0, len(ids), body):
            piece = ids[start:start + body]
            if len(piece) < max(4, body // 4) and start > 0:
                continue
            chunks.append([cls, *piece, sep] + [pad] * (body - len(piece)))
    if not chunks:
        raise BertScopeError("The corpus has no text to train on.")
    return torch.tensor(chunks, dtype=torch.long)


def pair_instances(tokenizer: Any, documents: Sequence[Sequence[str]], seq_len: int, task: str,
                   seed: int) -> Chunks:
    """Sentence pairs for NSP or SOP, as google-research/bert's ``create_instances_from_document``
    (and ALBERT's): a document's sentences are gathered until they fill a chunk, then cut at a
    random sentence boundary into segment A and segment B (a one-sentence piece is cut inside
    the sentence). NSP: half the time B is replaced by text from a random other document
    (label 1, NotNext; from a distant part of the same one when there is only one document),
    and the sentences it displaced start the next pair. SOP: half the time
    A and B swap places (label 1). The pair is trimmed to fit as in ``truncate_seq_pair``: the
    longer segment loses a token at a random end until both fit."""
    import random

    if task not in ("nsp", "sop"):
        raise BertScopeError("Sentence pairs are built for 'nsp' or 'sop'.")
    cls, sep, pad = _special_ids(tokenizer)
    docs = tokenize_documents(tokenizer, documents)
    rng = random.Random(seed)
    target = seq_len - 3  # [CLS] A [SEP] B [SEP]
    rows, types, labels = [], [], []
    for d, sentences in enumerate(docs):
        i, chunk, length = 0, [], 0
        while i < len(sentences):
            chunk.append(sentences[i])
            length += len(sentences[i])
            if i == len(sentences) - 1 or length >= target:
                if len(chunk) == 1:  # one sentence: two pieces of it
                    piece = chunk[0][:target + 1]
                    cut = rng.randint(1, len(piece) - 1) if len(piece) > 1 else 0
                    parts, a_end = [piece[:cut], piece[cut:]], 1
                else:
                    parts, a_end = chunk, rng.randint(1, len(chunk) - 1)
                a = [t for part in parts[:a_end] for t in part]
                b = [t for part in parts[a_end:] for t in part]
                label = 0
                if task == "nsp" and rng.random() < 0.5:
                    if len(docs) > 1:
                        other = rng.randrange(len(docs) - 1)
                        other += other >= d  # any document but this one
                        start = rng.randrange(len(docs[other]))
                    else:  # one document (as google's code then does): a part of it away from this pair
                        other, near = d, range(i - len(chunk) + 1, i + 2)
                        far = [j for j in range(len(sentences)) if j not in near]
                        start = rng.choice(far) if far else rng.randrange(len(sentences))
                    b = []
                    for sentence in docs[other][start:]:
                        b.extend(sentence)
                        if len(b) >= target - len(a):
                            break
                    label = 1
                    if len(chunk) > 1:
                        i -= len(chunk) - a_end  # the displaced sentences start the next pair
                elif task == "sop" and rng.random() < 0.5:
                    a, b, label = b, a, 1
                while len(a) + len(b) > target:  # truncate_seq_pair
                    longer = a if len(a) > len(b) else b
                    del longer[0 if rng.random() < 0.5 else -1]
                if a and b:
                    row = [cls, *a, sep, *b, sep]
                    rows.append(row + [pad] * (seq_len - len(row)))
                    types.append([0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * (seq_len - len(row)))
                    labels.append(label)
                chunk, length = [], 0
            i += 1
    if not rows:
        raise BertScopeError("The corpus has no text to build sentence pairs from.")
    return Chunks(torch.tensor(rows, dtype=torch.long), torch.tensor(types, dtype=torch.long),
                  torch.tensor(labels, dtype=torch.long))


def build_chunks(tokenizer: Any, documents: Sequence[Sequence[str]], cfg: RecipeConfig, seed: int) -> Chunks:
    """Plain chunks for masked-LM alone, sentence pairs when ``cfg.pair_task`` asks for them."""
    if cfg.pair_task == "none":
        return Chunks(chunk_documents(tokenizer, documents, cfg.seq_len))
    return pair_instances(tokenizer, documents, cfg.seq_len, cfg.pair_task, seed)
