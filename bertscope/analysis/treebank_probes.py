"""Label probes on UD English-EWT, beside the structural probe and reading the same cached states:
each word's UPOS, and each dependency arc's label (Tenney et al. 2019's edge probing: the
dependent's and its head's vectors, concatenated, → the deprel), each with Hewitt & Liang's
control task, trained on EWT train and scored on EWT test (its own split, not a random one).

- Words are the mean of their pieces (as the structural probe and Hewitt & Manning).
- The control task gives every word type one random label drawn from the task's label
  distribution (for arcs: the dependent's type), fixed across train and test, and the same probe
  is trained on it. Selectivity = accuracy − control accuracy.
- Arcs to the root have no head word and are left out of the deprel probe (as Tenney et al.).

    >>> from bertscope import load_model
    >>> result, hit = treebank_probe(load_model("bundled"), "ewt-deprel", size=500)     # doctest: +SKIP
    >>> result.best.name, round(result.best.selectivity, 2)                                 # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertscope.analysis.hidden_cache import CachedStates, HiddenStateCache, count_pieces, hidden_states, states_on_disk
from bertscope.analysis.probing import LOGREG_STEPS, ProbeKind, ProbeResult, control_labels, fit_layers, gold_indices
from bertscope.analysis.structural_runs import sample_indices, sentence_rows
from bertscope.core.models import LoadedModel
from bertscope.corpora.ewt import TreebankSentence, ewt_task, read_ewt
from bertscope.corpora.suites import TREEBANK_TASKS
from bertscope.errors import BertScopeError
from bertscope.runtime.engine import Engine

DEFAULT_TRAIN = 2000  # training sentences sampled when no size is given (the Brown tasks' default)
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Examples:
    """One split's examples: the rows of the states the probe reads (a word, or a dependent and its
    head), their labels and the word type the control task keys on."""

    rows: np.ndarray  # [example] the word's (the dependent's) row in the split's states
    heads: np.ndarray | None  # [example] the head's row (ewt-deprel), else None
    labels: np.ndarray  # [example]
    types: list[str]  # [example] the (dependent) word, lower-cased

    def features(self, states: CachedStates, layer: int) -> np.ndarray:
        """[example, dim] (a word) or [example, 2 dim] (the dependent, then its head)."""
        matrix = states.layer(layer)  # [word, dim], memory-mapped
        if self.heads is None:
            return np.asarray(matrix[self.rows], np.float32)
        return np.concatenate([matrix[self.rows], matrix[self.heads]], axis=1).astype(np.float32, copy=False)


def split_examples(task: str, states: CachedStates, treebank: Sequence[TreebankSentence],
                   keep: Sequence[int]) -> tuple[Examples, int]:
    """The ``keep`` sentences' examples, and how many of them were left out because the model saw
    fewer words than they have (longer than it reads)."""
    where = sentence_rows(states, treebank)
    rows, heads, labels, types, lost = [], [], [], [], 0
    for i in keep:
        if where[i] is None:
            lost += 1
            continue
        first = where[i][0]
        sentence = treebank[i]
        for j, word in enumerate(sentence.tokens):
            if task == "ewt-upos":
                label = sentence.upos[j]
            elif sentence.heads[j] == 0:
                continue  # the root's arc has no head word
            else:
                label = sentence.deprels[j]
                heads.append(first + sentence.heads[j] - 1)
            rows.append(first + j)
            labels.append(label)
            types.append(word.lower())
    return Examples(np.array(rows, np.int64), np.array(heads, np.int64) if task == "ewt-deprel" else None,
                    np.array(labels), types), lost


def split_control(train_set: Examples, test_set: Examples, seed: int) -> np.ndarray:
    """[train + test] the control task's labels: one function of the word type over both splits, so a
    type keeps its control label on either side (drawn from the labels of both)."""
    labels = np.concatenate([train_set.labels, test_set.labels]).tolist()
    return control_labels(train_set.types + test_set.types, labels, seed=seed)


def treebank_probe(lm: LoadedModel, task: str, layers: Sequence[int] | None = None, size: int | None = None,
                   kind: ProbeKind = "logreg", seed: int = 0, cache: HiddenStateCache | None = None,
                   batch_size: int = 64, weights_dir: Path | None = None, engine: Engine | None = None,
                   states_progress: Callable[[int, int], None] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   steps: int = LOGREG_STEPS) -> tuple[ProbeResult, bool]:
    """(the probe and its control at every hidden state, whether every split's states were a cache
    hit). ``size``: EWT training sentences (default 2,000, 0 = all 12,543); the test split is
    scored whole. ``progress(done, total)`` counts fits: two per layer."""
    if task not in TREEBANK_TASKS:
        raise BertScopeError(f"No treebank task {task!r}: choose {' or '.join(TREEBANK_TASKS)}.")
    size = DEFAULT_TRAIN if size is None else size
    if size < 0:
        raise BertScopeError("The number of training sentences must be 0 (all) or more.")
    chosen = list(layers) if layers is not None else list(range(lm.num_layers + 1))
    if not chosen or not all(0 <= s <= lm.num_layers for s in chosen):
        raise BertScopeError(f"Hidden states are 0 (the embeddings) to {lm.num_layers}.")
    treebank = {split: read_ewt(split) for split in SPLITS}
    keep = {"train": sample_indices(len(treebank["train"]), size or None, seed), "test": range(len(treebank["test"]))}
    tasks = {split: ewt_task(split) for split in SPLITS}
    # one count of word pieces over the splits a pass will run (a split on disk costs none)
    pieces = {split: count_pieces(lm, tasks[split].texts)
              if states_progress and not states_on_disk(lm, tasks[split], "mean", cache) else 0 for split in SPLITS}
    states, hits, offset, total = {}, [], 0, sum(pieces.values())
    for split in SPLITS:  # the whole split's states: the structural probe reads the same cache entry
        report = None if states_progress is None or not pieces[split] else \
            (lambda done, _, offset=offset, end=offset + pieces[split]: states_progress(min(offset + done, end), total))
        states[split] = hidden_states(lm, tasks[split], "mean", cache, batch_size, progress=report, engine=engine)
        hits.append(states[split].hit)
        offset += pieces[split]
        if states_progress is not None and pieces[split]:
            states_progress(offset, total)
    examples, lost = {}, 0
    for split in SPLITS:
        examples[split], dropped = split_examples(task, states[split], treebank[split], keep[split])
        lost += dropped
        if not len(examples[split].rows):
            raise BertScopeError(f"{lm.name} reads no EWT {split} sentence whole (its limit is {lm.max_length} tokens).")
    train_set, test_set = examples["train"], examples["test"]
    labels = np.concatenate([train_set.labels, test_set.labels])
    control = split_control(train_set, test_set, seed)
    train = slice(0, len(train_set.labels))  # slices: the features are read without a copy
    test = slice(len(train_set.labels), len(labels))
    classes = tuple(sorted(set(train_set.labels.tolist())))
    majority = Counter(train_set.labels.tolist()).most_common(1)[0][0]
    results = fit_layers(chosen, lambda layer: np.concatenate([train_set.features(states["train"], layer),
                                                              test_set.features(states["test"], layer)]),
                         labels, control, train, test, kind, seed, steps, weights_dir, progress)
    level = "token" if task == "ewt-upos" else "arc"
    result = ProbeResult(lm.name, task, level, "mean", kind, float((test_set.labels == majority).mean()),
                         len(train_set.labels), len(test_set.labels), results, classes, gold_indices(classes, test_set.labels),
                         test_set.rows, lost)
    return result, all(hits)
