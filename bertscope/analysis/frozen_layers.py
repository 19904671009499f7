"""Feature-based or fine-tuned? The BERT paper's Table 7 question (Devlin et al. 2019, §5.3: for NER,
the concatenation of the last four frozen layers came within 0.3 F1 of fine-tuning), asked with a
linear probe on the frozen encoder's word states.

Each word is its first piece's state (as the fine-tuned tagger reads it), at every hidden state
(``analysis.hidden_cache``, "first" pooling: the embeddings, then each layer's output). The same
linear softmax classifier (features standardised on the training words; Adam, 8 passes over the
words in minibatches of 512, at least 2,000 of them, seeded) is trained on each combination:

- the embeddings; the last layer; the second-to-last; the sum of the last four; the concatenation
  of the last four (4 x the width);
- a learned weighted sum of all the states (ELMo's scalar mix, Peters et al. 2018: softmax weights
  and a scale, trained with the classifier), its weights reported.

Scored on held-out words (word accuracy and macro-F1 over the labels), beside the fine-tuned model's
figure on the same words where one is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.analysis.hidden_cache import CachedStates
from bertscope.errors import BertScopeError

MIXES = ("embeddings", "last", "second_to_last", "sum_last_four", "concat_last_four", "weighted_sum")
TITLES = {"embeddings": "embeddings", "last": "last layer", "second_to_last": "second-to-last layer",
          "sum_last_four": "sum of the last four layers", "concat_last_four": "concatenation of the last four",
          "weighted_sum": "weighted sum of every state (learned)"}


@dataclass(frozen=True)
class MixResult:
    name: str
    accuracy: float
    macro_f1: float
    width: int  # features the classifier reads
    weights: list[float] | None = None  # weighted_sum: each state's softmax weight ("embeddings" first)

    def to_json(self) -> dict:
        out = {"features": self.name, "title": TITLES[self.name], "accuracy": self.accuracy,
               "macro_f1": self.macro_f1, "width": self.width}
        if self.weights is not None:
            out["state_weights"] = self.weights
        return out


def _states(states: CachedStates, mix: str) -> list[int]:
    """The cache's hidden-state indices a mix reads (0 = embeddings, L = the last layer)."""
    last = states.layers[-1]
    if last < 4:
        raise BertScopeError("The last four layers need a model with at least four layers.")
    return {"embeddings": [0], "last": [last], "second_to_last": [last - 1],
            "sum_last_four": list(range(last - 3, last + 1)), "concat_last_four": list(range(last - 3, last + 1)),
            "weighted_sum": list(states.layers)}[mix]


def _features(states: CachedStates, mix: str, rows: np.ndarray) -> np.ndarray:
    """[word, feature] float32 of a mix (weighted_sum: [word, state, dim])."""
    chosen = _states(states, mix)
    parts = [np.asarray(states.layer(s)[rows], np.float32) for s in chosen]  # each [word, dim]
    if mix == "sum_last_four":
        return np.sum(parts, axis=0)
    if mix == "weighted_sum":
        return np.stack(parts, axis=1)
    return np.concatenate(parts, axis=1)


class _Probe(torch.nn.Module):
    def __init__(self, width: int, classes: int, states: int = 0):
        super().__init__()
        self.mix = torch.nn.Parameter(torch.zeros(states)) if states else None  # softmax weights over the states
        self.scale = torch.nn.Parameter(torch.ones(())) if states else None
        self.linear = torch.nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [batch, width] or [batch, state, dim]
        if self.mix is not None:
            x = self.scale * torch.einsum("s,bsd->bd", torch.softmax(self.mix, 0), x)
        return self.linear(x)


def train_probe(x: np.ndarray, y: np.ndarray, classes: int, seed: int = 0, epochs: int = 8,
                batch: int = 512, lr: float = 1e-3, min_steps: int = 2_000) -> tuple[_Probe, np.ndarray, np.ndarray]:
    """(probe, mean, std): a linear softmax classifier on standardised features, ``epochs`` passes
    (more on small data: at least ``min_steps`` minibatches)."""
    mean = x.mean(axis=0, keepdims=True)
    std = x.std(axis=0, keepdims=True) + 1e-6
    torch.manual_seed(seed)
    probe = _Probe(x.shape[-1], classes, x.shape[1] if x.ndim == 3 else 0)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    features = torch.from_numpy((x - mean) / std)
    labels = torch.from_numpy(y.astype(np.int64))
    generator = torch.Generator().manual_seed(seed)
    per_epoch = -(-len(labels) // batch)
    for _ in range(max(epochs, -(-min_steps // per_epoch))):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            loss = torch.nn.functional.cross_entropy(probe(features[idx]), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return probe, mean, std


@torch.no_grad()
def predict(probe: _Probe, mean: np.ndarray, std: np.ndarray, x: np.ndarray) -> np.ndarray:
    return probe(torch.from_numpy((x - mean) / std)).argmax(-1).numpy()


def accuracy_and_f1(gold: np.ndarray, predicted: np.ndarray, classes: int) -> tuple[float, float]:
    from sklearn.metrics import f1_score

    present = sorted(set(gold.tolist()))
    return float((gold == predicted).mean()), float(f1_score(gold, predicted, labels=present, average="macro",
                                                               zero_division=0))


def frozen_layer_probes(train: CachedStates, held: CachedStates, mixes: Sequence[str] = MIXES, seed: int = 0,
                  max_train_words: int | None = None, lr: float = 1e-3, min_steps: int = 2_000,
                  progress: Callable[[int, int], None] | None = None) -> list[MixResult]:
    """Every mix's held-out word accuracy and macro-F1 (the labels are ``train``'s); ``lr`` and
    ``min_steps`` go to ``train_probe``."""
    unknown = [m for m in mixes if m not in MIXES]
    if unknown:
        raise BertScopeError(f"Unknown features {unknown[0]!r}: use {', '.join(MIXES)}.")
    classes = sorted(set(train.labels))
    index = {c: i for i, c in enumerate(classes)}
    train_rows = np.arange(len(train.labels))
    if max_train_words is not None and max_train_words < len(train_rows):
        train_rows = np.sort(np.random.default_rng(seed).choice(train_rows, max_train_words, replace=False))
    y_train = np.array([index[train.labels[i]] for i in train_rows])
    held_rows = np.array([i for i, label in enumerate(held.labels) if label in index])
    y_held = np.array([index[held.labels[i]] for i in held_rows])
    out = []
    for n, mix in enumerate(mixes, 1):
        x_train = _features(train, mix, train_rows)
        probe, mean, std = train_probe(x_train, y_train, len(classes), seed, lr=lr, min_steps=min_steps)
        del x_train
        predicted = predict(probe, mean, std, _features(held, mix, held_rows))
        acc, f1 = accuracy_and_f1(y_held, predicted, len(classes))
        weights = torch.softmax(probe.mix, 0).tolist() if probe.mix is not None else None
        width = probe.linear.in_features
        out.append(MixResult(mix, acc, f1, width, weights))
        if progress:
            progress(n, len(mixes))
    return out


SHIPPED = "frozen_layers_upos.json"  # measured by benchmarks/frozen_layers.py for the bundled encoder


def shipped_table() -> dict:
    """The table measured for the bundled encoder and bundled-upos (``benchmarks/frozen_layers.py``)."""
    import json

    from bertscope.corpora import DATA_DIR

    path = DATA_DIR / SHIPPED
    if not path.is_file():
        raise BertScopeError(f"{path} is missing: run benchmarks/frozen_layers.py --out {path}.")
    return json.loads(path.read_text())
