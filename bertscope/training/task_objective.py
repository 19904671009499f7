"""The second stage's objective (``loop.Objective``): a task head's cross-entropy on labelled texts
or tagged words, batches padded to their longest row, gradients accumulated in micro-batches
within the byte budget, and the held-out figures every epoch.

Labels on word pieces as the BERT paper does (§4.3, NER): a word's first piece carries its tag,
the others are ignored (-100), as are special tokens. Inputs longer than ``seq_len`` are cut
(texts: ``longest_first`` over a pair; sentences: the words beyond the cut lose their tags) and
counted. Losses: the batch's summed cross-entropy over its rows (classification) or tagged
pieces (tagging), divided by the batch's count (its total class weight with ``class_weights``),
so micro-batches add up to the batch's gradient, as in pretraining.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.corpora.labelled import LabelledTexts
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import to_device
from bertscope.training.processes import Processes
from bertscope.training.task_data import TAG, Tagged

IGNORE = -100


@dataclass(frozen=True)
class Encoded:
    """One side, tokenised: rows of ids (special tokens in, not padded) and their labels."""

    ids: list[list[int]]
    types: list[list[int]] | None  # segment ids (pairs, models with token types)
    labels: list  # classification: a label id a row; tagging: per piece, a label id or IGNORE
    truncated: int  # rows cut at seq_len
    unscored_words: int = 0  # tagging: words that got no piece or were cut away

    def __len__(self) -> int:
        return len(self.ids)


def _cut(tokenizer: Any, enc, whole) -> int:
    """How many rows of ``enc`` (tokenised with truncation) were cut: a fast tokenizer keeps what
    it cut off in each encoding's ``overflowing``; a slow one is asked again without truncation
    (``whole()``)."""
    if enc.encodings is not None:
        return sum(1 for e in enc.encodings if e.overflowing)
    return sum(len(f) > len(e) for f, e in zip(whole()["input_ids"], enc["input_ids"]))


def encode(tokenizer: Any, task: str, side: LabelledTexts | Tagged, labels: Sequence[str], seq_len: int) -> Encoded:
    index = {label: i for i, label in enumerate(labels)}
    with_types = "token_type_ids" in tokenizer.model_input_names
    if task == TAG:
        enc = tokenizer(side.words, is_split_into_words=True, truncation=True, max_length=seq_len)
        rows, unscored = [], 0
        for i, tags in enumerate(side.tags):
            previous, row = None, []
            for w in enc.word_ids(i):
                row.append(IGNORE if w is None or w == previous else index[tags[w]])
                previous = w
            unscored += len(tags) - sum(1 for v in row if v != IGNORE)
            rows.append(row)
        truncated = _cut(tokenizer, enc, lambda: tokenizer(side.words, is_split_into_words=True, truncation=False))
        return Encoded(enc["input_ids"], enc["token_type_ids"] if with_types else None, rows, truncated, unscored)
    pairs = side.pairs
    enc = tokenizer(side.texts, pairs, truncation=True, max_length=seq_len)
    truncated = _cut(tokenizer, enc, lambda: tokenizer(side.texts, pairs, truncation=False))
    return Encoded(enc["input_ids"], enc["token_type_ids"] if with_types else None,
                   [index[label] for label in side.labels], truncated)


@dataclass(frozen=True)
class Batch:
    rows: torch.Tensor  # [batch] which rows of the side
    ids: torch.Tensor  # [batch, token] padded
    mask: torch.Tensor  # [batch, token]
    types: torch.Tensor | None  # [batch, token]
    labels: torch.Tensor  # [batch] or [batch, token]

    def __len__(self) -> int:
        return len(self.ids)

    def part(self, rows: slice | torch.Tensor, device: torch.device) -> tuple[dict, torch.Tensor]:
        """(the model's inputs, labels) of some rows, cut to their own longest row."""
        width = int(self.mask[rows].sum(dim=1).max())
        feed = {"input_ids": self.ids[rows, :width], "attention_mask": self.mask[rows, :width]}
        if self.types is not None:
            feed["token_type_ids"] = self.types[rows, :width]
        labels = self.labels[rows] if self.labels.ndim == 1 else self.labels[rows, :width]
        # pinned and queued: a pageable copy would make the host wait for the GPU every step
        return {k: to_device(v, device) for k, v in feed.items()}, to_device(labels, device)


def pad(encoded: Encoded, rows: Sequence[int], pad_id: int, tagging: bool) -> Batch:
    """Rows of ``encoded`` padded to the longest of them."""
    rows = list(rows)
    width = max(len(encoded.ids[r]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    types = None if encoded.types is None else torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long) if tagging else \
        torch.tensor([encoded.labels[r] for r in rows], dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(encoded.ids[r])
        ids[i, :n] = torch.tensor(encoded.ids[r])
        mask[i, :n] = 1
        if types is not None:
            types[i, :n] = torch.tensor(encoded.types[r])
        if tagging:
            labels[i, :n] = torch.tensor(encoded.labels[r])
    return Batch(torch.tensor(rows), ids, mask, types, labels)


def scores(confusion: np.ndarray, labels: Sequence[str]) -> dict:
    """Accuracy, macro-F1 and each label's precision, recall, F1 and support, from a [gold,
    predicted] confusion matrix."""
    confusion = np.asarray(confusion, np.int64)
    right = np.diag(confusion)
    gold, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    precision = np.divide(right, predicted, out=np.zeros(len(right)), where=predicted > 0)
    recall = np.divide(right, gold, out=np.zeros(len(right)), where=gold > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(len(right)), where=precision + recall > 0)
    present = gold > 0  # macro-F1 over the labels the side has
    return {"accuracy": float(right.sum() / max(1, confusion.sum())),
            "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
            "per_label": {label: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                                  "support": int(gold[i])} for i, label in enumerate(labels)},
            "labels": list(labels), "confusion": confusion.tolist()}


@dataclass
class TaskObjective:
    """Training and held-out scoring of one task head."""

    task: str
    labels: list[str]
    train: Encoded
    held: Encoded
    pad_id: int
    device: torch.device
    weights: torch.Tensor | None = None  # [label] class weights for the loss, or None
    by_length: bool = False  # batches of rows of like length (``order``)
    # the last held-out scoring's per-row results (one process): the worst examples reuse them
    last_rows: dict | None = field(default=None, repr=False)

    @property
    def tagging(self) -> bool:
        return self.task == TAG

    def __len__(self) -> int:
        return len(self.train)

    def order(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        """A random order, or with ``by_length`` transformers' ``group_by_length`` order (the same
        function): megabatches of up to 50 batches, each sorted longest first, so a batch holds rows of
        like length and pads little."""
        if not self.by_length:
            return torch.randperm(len(self.train), generator=generator)
        from transformers.trainer_pt_utils import get_length_grouped_indices

        lengths = [len(ids) for ids in self.train.ids]
        return torch.tensor(get_length_grouped_indices(lengths, batch_size, generator=generator), dtype=torch.long)

    def batch(self, idx: torch.Tensor, generator: torch.Generator) -> Batch:
        return pad(self.train, idx.tolist(), self.pad_id, self.tagging)

    def tokens(self, batch: Batch) -> int:
        return int(batch.mask.sum())

    def _count(self, labels: torch.Tensor) -> float:
        """The loss's denominator over these labels: their number, or their total weight."""
        kept = labels[labels != IGNORE]
        if self.weights is None:
            return float(len(kept))
        return float(self.weights[kept.cpu()].sum())

    def loss_sum(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Summed (weighted) cross-entropy of [rows(, token), label] logits."""
        weights = None if self.weights is None else self.weights.to(logits.device)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), weight=weights,
                               ignore_index=IGNORE, reduction="sum")

    def output_loss(self, output, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The summed loss of a forward pass's output against its labels (``mask`` [batch, token]:
        the rows' real tokens)."""
        return self.loss_sum(output.logits, labels)

    def accumulate(self, runner, batch: Batch, micro: int, group: Processes, context, scaler
                   ) -> dict[str, torch.Tensor]:
        count = max(self._count(batch.labels), 1e-12)
        mine = group.share(len(batch))
        # this process's rows longest first, so each micro-batch pads to rows of its own length (the
        # summed gradient is the same in any order)
        rows = torch.arange(mine.start, mine.stop)[batch.mask[mine].sum(dim=1).argsort(descending=True, stable=True)]
        parts = [rows[s:s + micro] for s in range(0, len(rows), micro)]
        weight = 1.0 if parts else 0.0
        parts = parts or [torch.tensor([0])]
        total = torch.zeros((), dtype=torch.float64, device=self.device)  # on the device: no host wait a step
        for k, part in enumerate(parts):
            with group.no_sync(runner, last=k == len(parts) - 1):
                feed, labels = batch.part(part, self.device)
                with context:
                    output = runner(**feed)  # through DDP's wrapper when several processes train
                loss = self.output_loss(output, labels, feed["attention_mask"]) / count
                scaled = loss * (weight * group.world)
                (scaler.scale(scaled) if scaler is not None else scaled).backward()
            total += weight * loss.detach().double()
        if group.world > 1:
            total = group.sum(total.reshape(1))[0]
        return {"loss": total}

    @torch.no_grad()
    def predictions(self, model, encoded: Encoded, rows: int, group: Processes = Processes()) -> tuple:
        """(loss sum, scored count, confusion [gold, predicted], per-row (gold, predicted) lists) over
        this process's share of ``encoded``."""
        was = model.training
        model.eval()
        mine = group.share(len(encoded))
        order = sorted(range(mine.start, mine.stop), key=lambda r: len(encoded.ids[r]))  # little padding
        n = len(self.labels)
        confusion = np.zeros((n, n), np.int64)
        loss_sum, count, per_row = 0.0, 0, {}
        for start in range(0, len(order), rows):
            chosen = order[start:start + rows]
            batch = pad(encoded, chosen, self.pad_id, self.tagging)
            feed, labels = batch.part(slice(None), self.device)
            logits = model(**feed).logits.float()
            loss_sum += float(F.cross_entropy(logits.reshape(-1, n), labels.reshape(-1), ignore_index=IGNORE,
                                              reduction="sum"))
            predicted = logits.argmax(dim=-1)
            keep = labels != IGNORE
            np.add.at(confusion, (labels[keep].cpu().numpy(), predicted[keep].cpu().numpy()), 1)
            count += int(keep.sum())
            logp = torch.log_softmax(logits, dim=-1)
            for i, r in enumerate(chosen):
                if self.tagging:
                    k = keep[i]
                    gold = labels[i][k]
                    per_row[r] = (gold.tolist(), predicted[i][k].tolist(),
                                  float(logp[i][k].gather(-1, gold[:, None]).sum()))
                else:
                    per_row[r] = (int(labels[i]), int(predicted[i]), float(logp[i, labels[i]]))
        model.train(was)
        return loss_sum, count, confusion, per_row

    def evaluate(self, model, rows: int, group: Processes) -> dict:
        loss_sum, count, confusion, per_row = self.predictions(model, self.held, rows, group)
        self.last_rows = per_row if group.world == 1 else None
        if group.world > 1:
            sums = group.sum(torch.tensor([loss_sum, count, *confusion.ravel().tolist()], dtype=torch.float64))
            loss_sum, count = float(sums[0]), int(sums[1])
            confusion = sums[2:].numpy().round().astype(np.int64).reshape(confusion.shape)
        if count == 0:
            raise BertScopeError("The held-out side has nothing to score.")
        out = {"loss": loss_sum / count, **scores(confusion, self.labels),
               ("words" if self.tagging else "examples"): count}
        return out
