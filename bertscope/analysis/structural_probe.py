"""The structural probe (Hewitt & Manning 2019, "A Structural Probe for Finding Syntax in Word
Representations", NAACL), as their code (john-hewitt/structural-probes) trains and scores it.

- Distance probe: a matrix B [dim, rank] (uniform in ±0.05, no bias) under which the squared
  distance ‖(h_i − h_j)B‖² between two words' vectors approximates their distance in the
  dependency tree; depth probe: ‖h_i B‖² approximates the word's depth (the root's is 0).
- Loss: L1, per sentence Σ|pred − gold| over all its n² pairs divided by n² (depth: over its n
  words, divided by n), averaged over the batch's sentences.
- Training: Adam (lr 1e-3), batches of 20 sentences, the learning rate times 0.1 when the dev
  loss does not fall (ReduceLROnPlateau, patience 0), at most 40 epochs, stopped after 5 without
  a dev improvement above 1e-4; the best dev epoch's B is kept. Seeded.
- Metrics (their ``reporter.py``): UUAS, the minimum spanning tree (Kruskal over every pair,
  ties in row order) of the predicted distances among the non-punctuation words against the same
  tree built on the gold distances, micro-averaged over sentences; DSpr., each word's row of
  predicted distances against its gold row by Spearman, averaged for each sentence length and
  then over lengths 5-50; root accuracy, the non-punctuation word of least predicted depth is the
  gold root; NSpr., Spearman of predicted and gold depths per sentence, averaged the same way.
  Punctuation is their PTB XPOS set (EWT's XPOS are PTB tags).

Word vectors: the mean of a word's pieces (as Hewitt & Manning averaged BERT's word pieces), read
from the hidden-state cache (``analysis.hidden_cache``) at every hidden state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import spearmanr

from bertscope.errors import BertScopeError

PUNCTUATION_XPOS = frozenset({"''", ",", ".", ":", "``", "-LRB-", "-RRB-"})  # reporter.py's set
LENGTHS = (5, 50)  # DSpr. and NSpr. average over these sentence lengths (inclusive)
WHATS = ("distance", "depth")


def tree_distances(heads: Sequence[int]) -> np.ndarray:
    """[word, word] path lengths in the undirected tree of ``heads`` (1-based, 0 the root)."""
    n = len(heads)
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h:
            neighbours[i].append(h - 1)
            neighbours[h - 1].append(i)
    out = np.zeros((n, n), np.float32)
    for start in range(n):
        seen = np.full(n, -1)
        seen[start] = 0
        queue = deque([start])
        while queue:
            at = queue.popleft()
            for nxt in neighbours[at]:
                if seen[nxt] < 0:
                    seen[nxt] = seen[at] + 1
                    queue.append(nxt)
        if (seen < 0).any():
            raise BertScopeError("The heads do not make one tree.")
        out[start] = seen
    return out


def tree_depths(heads: Sequence[int]) -> np.ndarray:
    """[word] hops to the root (the root's depth is 0)."""
    n = len(heads)
    out = np.zeros(n, np.float32)
    for i in range(n):
        at, hops = i, 0
        while heads[at]:
            at = heads[at] - 1
            hops += 1
            if hops > n:
                raise BertScopeError("The heads have a cycle.")
        out[i] = hops
    return out


def spanning_edges(distances: np.ndarray, keep: Sequence[bool]) -> set[tuple[int, int]]:
    """The minimum spanning tree's edges (i < j) among the kept words, by Kruskal over every pair in
    row order (stable ties), as reporter.py's ``prims_matrix_to_edges``."""
    n = len(distances)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pairs = [(distances[i, j], i, j) for i in range(n) for j in range(n) if i != j and keep[i] and keep[j]]
    pairs.sort(key=lambda p: p[0])  # stable: ties stay in row order
    edges = set()
    for _, i, j in pairs:
        a, b = root(i), root(j)
        if a != b:
            parent[a] = b
            edges.add((min(i, j), max(i, j)))
    return edges


@dataclass(frozen=True)
class ProbeSentence:
    """One sentence's word vectors and gold structure."""

    id: str
    vectors: np.ndarray  # [word, dim]
    heads: list[int]
    xpos: list[str]

    @property
    def punctuation(self) -> np.ndarray:
        return np.array([x in PUNCTUATION_XPOS for x in self.xpos])


class PSDProbe(torch.nn.Module):
    """B as their code keeps it: [dim, rank], uniform in ±0.05."""

    def __init__(self, dim: int, rank: int):
        super().__init__()
        self.proj = torch.nn.Parameter(torch.empty(dim, rank).uniform_(-0.05, 0.05))

    def distances(self, h: torch.Tensor) -> torch.Tensor:  # h [batch, word, dim] -> [batch, word, word]
        t = h @ self.proj  # [batch, word, rank]
        # ‖t_i − t_j‖² as ‖t_i‖² + ‖t_j‖² − 2 t_i·t_j: the [batch, word, word, rank] differences never exist
        norms = (t ** 2).sum(-1)  # [batch, word]
        return (norms[:, :, None] + norms[:, None, :] - 2 * t @ t.transpose(1, 2)).clamp_min(0)

    def depths(self, h: torch.Tensor) -> torch.Tensor:  # [batch, word, dim] -> [batch, word]
        return ((h @ self.proj) ** 2).sum(-1)


def gold_of(s: ProbeSentence, what: str) -> np.ndarray:
    """The sentence's gold: tree distances [word, word] or depths [word]."""
    return tree_distances(s.heads) if what == "distance" else tree_depths(s.heads)


def _batch(sentences: Sequence[ProbeSentence], what: str,
           golds: Sequence[np.ndarray] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(vectors [batch, word, dim], gold [batch, word(, word)] with -1 as padding, lengths [batch]);
    ``golds``: each sentence's gold computed before (training reuses them every epoch)."""
    n = max(len(s.heads) for s in sentences)
    dim = sentences[0].vectors.shape[1]
    h = torch.zeros(len(sentences), n, dim)
    gold = torch.full((len(sentences), n, n) if what == "distance" else (len(sentences), n), -1.0)
    for b, s in enumerate(sentences):
        k = len(s.heads)
        h[b, :k] = torch.from_numpy(np.asarray(s.vectors, np.float32))
        target = torch.from_numpy(golds[b] if golds is not None else gold_of(s, what))
        if what == "distance":
            gold[b, :k, :k] = target
        else:
            gold[b, :k] = target
    return h, gold, torch.tensor([len(s.heads) for s in sentences], dtype=torch.float32)


def l1_loss(predicted: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor, what: str) -> torch.Tensor:
    """Their L1 loss: per sentence Σ|pred − gold| / n² (distance) or / n (depth), the batch's mean."""
    mask = (gold != -1).float()
    per_sentence = (torch.abs(predicted * mask - gold * mask)).flatten(1).sum(1)
    norm = lengths ** 2 if what == "distance" else lengths
    return (per_sentence / norm).sum() / (lengths > 0).sum()


@dataclass
class TrainedProbe:
    probe: PSDProbe
    what: str
    epochs: int  # trained
    best_epoch: int
    dev_loss: float

    @torch.no_grad()
    def predict(self, s: ProbeSentence) -> np.ndarray:
        h = torch.from_numpy(np.asarray(s.vectors, np.float32))[None]
        out = self.probe.distances(h) if self.what == "distance" else self.probe.depths(h)
        return out[0].numpy()


def train_structural_probe(train: Sequence[ProbeSentence], dev: Sequence[ProbeSentence], what: str = "distance",
                           rank: int | None = None, seed: int = 0, max_epochs: int = 40, batch_size: int = 20,
                           lr: float = 1e-3, patience: int = 4,
                           progress: Callable[[int, int], None] | None = None) -> TrainedProbe:
    """Their regimen (module docstring); ``patience``: epochs without a dev improvement after the
    best one before stopping (theirs: ``min_dev_loss_epoch < epoch - 4``)."""
    if what not in WHATS:
        raise BertScopeError(f"Unknown probe {what!r}: use distance or depth.")
    if not train or not dev:
        raise BertScopeError("A structural probe needs training and dev sentences.")
    dim = train[0].vectors.shape[1]
    rank = rank or dim
    if not 1 <= rank <= 4096:
        raise BertScopeError("The probe's rank must be between 1 and 4,096.")
    torch.manual_seed(seed)
    probe = PSDProbe(dim, rank)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.1, patience=0)
    order_rng = np.random.default_rng(seed)
    dev_batches = [_batch(dev[i:i + batch_size], what) for i in range(0, len(dev), batch_size)]
    golds = [gold_of(s, what) for s in train]  # once: every epoch reuses them
    best, best_epoch, best_state, epoch = float("inf"), -1, None, 0
    for epoch in range(max_epochs):
        probe.train()
        order = order_rng.permutation(len(train))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            h, gold, lengths = _batch([train[i] for i in rows], what, [golds[i] for i in rows])
            predicted = probe.distances(h) if what == "distance" else probe.depths(h)
            loss = l1_loss(predicted, gold, lengths, what)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        probe.eval()
        with torch.no_grad():
            total, count = 0.0, 0
            for h, gold, lengths in dev_batches:
                predicted = probe.distances(h) if what == "distance" else probe.depths(h)
                total += float(l1_loss(predicted, gold, lengths, what)) * len(lengths)
                count += len(lengths)
        dev_loss = total / count
        scheduler.step(total)
        if progress:
            progress(epoch + 1, max_epochs)
        if dev_loss < best - 1e-4:
            best, best_epoch = dev_loss, epoch
            best_state = probe.proj.detach().clone()
        elif best_epoch < epoch - patience:
            break
    with torch.no_grad():
        probe.proj.copy_(best_state)
    return TrainedProbe(probe, what, epoch + 1, best_epoch + 1, best)


def _by_length_mean(values_by_length: dict[int, list[float]]) -> float | None:
    means = [float(np.mean(v)) for n, v in values_by_length.items() if LENGTHS[0] <= n <= LENGTHS[1] and v]
    return float(np.mean(means)) if means else None


def distance_report(predicted: Sequence[np.ndarray], sentences: Sequence[ProbeSentence]) -> dict:
    """UUAS and DSpr. of predicted distance matrices (reporter.py)."""
    right = total = 0
    rows: dict[int, list[float]] = {}
    trees = []
    for d, s in zip(predicted, sentences):
        keep = ~s.punctuation
        gold = tree_distances(s.heads)
        gold_edges = spanning_edges(gold, keep)
        edges = spanning_edges(d, keep)
        right += len(gold_edges & edges)
        total += len(gold_edges)
        trees.append(sorted(edges))
        n = len(s.heads)
        for i in range(n):
            if np.ptp(d[i]) > 0 and np.ptp(gold[i]) > 0:
                rows.setdefault(n, []).append(float(spearmanr(d[i], gold[i]).statistic))
    return {"uuas": right / total if total else None, "dspr": _by_length_mean(rows), "edges": trees}


def depth_report(predicted: Sequence[np.ndarray], sentences: Sequence[ProbeSentence]) -> dict:
    """Root accuracy and NSpr. of predicted depths (reporter.py)."""
    right = 0
    by_length: dict[int, list[float]] = {}
    for depth, s in zip(predicted, sentences):
        gold = tree_depths(s.heads)
        masked = np.where(s.punctuation, np.inf, depth)
        if np.isfinite(masked).any() and int(np.argmin(masked)) == int(np.argmin(gold)):
            right += 1
        n = len(s.heads)
        if np.ptp(depth) > 0 and np.ptp(gold) > 0:
            by_length.setdefault(n, []).append(float(spearmanr(depth, gold).statistic))
    return {"root_accuracy": right / len(sentences) if sentences else None, "nspr": _by_length_mean(by_length)}


def chain_report(sentences: Sequence[ProbeSentence]) -> dict:
    """The right-branching chain: distance |i − j|, depth i (the first word the root)."""
    distances = [np.abs(np.subtract.outer(np.arange(len(s.heads)), np.arange(len(s.heads)))).astype(np.float32)
                 for s in sentences]
    depths = [np.arange(len(s.heads), dtype=np.float32) for s in sentences]
    out = distance_report(distances, sentences)
    out.pop("edges")
    return {**out, **depth_report(depths, sentences)}
