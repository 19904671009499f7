"""The concepts amnesic probing erases: labelled words or sentences, a training side (the eraser and
the probes are fitted on it) and a test side (every behaviour is scored on it).

- ``ewt-upos``: each word's universal part of speech, UD English-EWT train / test (17 tags);
- ``ewt-deprel``: each word's dependency relation to its head, EWT train / test, the universal
  relation (``nsubj:pass`` counts as ``nsubj``; the root's is ``root``): a label per word, so it can
  be erased from a layer's word vectors (the arc probe of ``analysis.treebank_probes`` reads pairs);
- ``brown-pos``: the Brown corpus's universal tags, its documents split as the tagger's data;
- ``sentiment``: each tweet's sentiment, split as ``bundled-sentiment`` was trained (stratified 10%
  held out, seed 0), so a classifier is scored on tweets it never saw;
- a file (.conllu, .csv or .jsonl: ``corpora.probe_tasks``), its sentences split 75 / 25 (seeded).

Sides are sampled (``size`` training and ``test_size`` test sentences, seeded); the EWT sides keep
their trees, which the structural probe reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertscope.analysis.structural_runs import sample_indices, subset_task
from bertscope.corpora.ewt import TreebankSentence
from bertscope.corpora.probe_tasks import ProbeTask, finish_task
from bertscope.errors import BertScopeError

CONCEPTS: dict[str, str] = {  # the only list: the command, its help and the page read it
    "ewt-upos": "each word's universal part of speech (UD English-EWT)",
    "ewt-deprel": "each word's dependency relation to its head (UD English-EWT)",
    "brown-pos": "each word's universal tag in the Brown corpus",
    "sentiment": "each tweet's sentiment (negative, neutral, positive)",
}
DEFAULT_SIZE = 1000  # training sentences
DEFAULT_TEST = 400  # test sentences
FILE_TEST_SHARE = 0.25


@dataclass(frozen=True)
class Concept:
    """A concept's two sides, as probe tasks (word tags, or a label per sentence)."""

    name: str
    level: str  # token or sentence
    train: ProbeTask
    test: ProbeTask
    trees: tuple[TreebankSentence, ...] | None = None  # [test sentence] its gold tree (the EWT concepts)
    train_trees: tuple[TreebankSentence, ...] | None = None  # [train sentence]

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.train.classes)


def _sample(task: ProbeTask, limit: int | None, seed: int) -> tuple[ProbeTask, list[int]]:
    rows = sample_indices(len(task.words), limit, seed)
    return subset_task(task, rows), rows


def _ewt(name: str, size: int | None, test_size: int | None, seed: int) -> Concept:
    from bertscope.corpora.ewt import read_ewt

    sides = {}
    for split, limit in (("train", size), ("test", test_size)):
        sentences = read_ewt(split)
        labels = [s.upos if name == "ewt-upos" else [d.split(":")[0] for d in s.deprels] for s in sentences]
        task = finish_task(f"{name}-{split}", "token", [s.tokens for s in sentences], labels)
        task, rows = _sample(task, limit, seed)
        sides[split] = (task, tuple(sentences[i] for i in rows))
    return Concept(name, "token", sides["train"][0], sides["test"][0], sides["test"][1], sides["train"][1])


def _task_data(name: str, size: int | None, test_size: int | None, seed: int) -> Concept:
    from bertscope.corpora.labelled import LabelledTexts
    from bertscope.training.task_data import Tagged, load_task_data

    data = load_task_data("classify" if name == "sentiment" else "tag", name)
    tasks = []
    for side, limit in ((data.train, size), (data.held_out, test_size)):
        if isinstance(side, LabelledTexts):
            task = finish_task(f"{name}-{side.name}", "sentence", [[t] for t in side.texts],
                               [[label] for label in side.labels])
        else:
            assert isinstance(side, Tagged)  # brown-pos
            task = finish_task(f"{name}-{side.name}", "token", side.words, side.tags)
        tasks.append(_sample(task, limit, seed)[0])
    return Concept(name, tasks[0].level, tasks[0], tasks[1])


def _file(path: str, size: int | None, test_size: int | None, seed: int) -> Concept:
    from bertscope.corpora.probe_tasks import read_task
    from bertscope.training.task_data import decode

    file = Path(path)
    if not file.is_file():
        raise BertScopeError(f"No concept {path!r}: choose {', '.join(CONCEPTS)} or a .conllu, .csv or .jsonl file.")
    try:
        task = read_task(decode(file.read_bytes(), file.name), file.name)
    except BertScopeError as err:
        if "two different labels" in str(err):
            raise BertScopeError(f"{file.name} has one label: erasing a concept needs two or more.") from err
        raise
    return concept_from_task(task, size, test_size, seed)


def concept_from_task(task: ProbeTask, size: int | None = DEFAULT_SIZE, test_size: int | None = DEFAULT_TEST,
                      seed: int = 0) -> Concept:
    """A probe task a user brings, its sentences split 75 / 25 (seeded), each side sampled."""
    n = len(task.words)
    if n < 4:
        raise BertScopeError(f"{task.name} has {n} sentences: erasure needs at least 4 (3 to fit on, 1 to test).")
    order = np.random.default_rng(seed).permutation(n)
    cut = max(1, round(n * FILE_TEST_SHARE))
    train = subset_task(task, sorted(order[cut:].tolist()))
    test = subset_task(task, sorted(order[:cut].tolist()))
    train, test = _sample(train, size, seed)[0], _sample(test, test_size, seed)[0]
    return _checked(Concept(task.name, task.level, train, test))


def _checked(concept: Concept) -> Concept:
    if len(concept.classes) < 2:
        which = f"one label ({concept.classes[0]})" if concept.classes else "no labelled word"
        raise BertScopeError(f"{concept.name}'s training side has {which}: erasing a concept needs two labels or "
                             "more.")
    return concept


def load_concept(name: str, size: int | None = DEFAULT_SIZE, test_size: int | None = DEFAULT_TEST,
                 seed: int = 0) -> Concept:
    """A named concept (``CONCEPTS``) or a file; ``size`` / ``test_size``: sentences sampled from
    each side (None: all).

    Args:
        name: "ewt-upos", "ewt-deprel", "brown-pos", "sentiment", or the path of a .conllu, .csv or .jsonl file
            (its sentences split 75 / 25 by ``seed``).
        size: training sentences, at least 1 (None: every one).
        test_size: test sentences, at least 1 (None: every one).
        seed: the samples (and a file's split).

    Returns:
        A ``Concept``: its name, level ("token" or "sentence"), the training and test sides as probe tasks, and for
            the EWT concepts each side's gold trees.
    """
    for what, value in (("training", size), ("test", test_size)):
        if value is not None and value < 1:
            raise BertScopeError(f"The number of {what} sentences must be at least 1.")
    if name in ("ewt-upos", "ewt-deprel"):
        concept = _ewt(name, size, test_size, seed)
    elif name in ("brown-pos", "sentiment"):
        concept = _task_data(name, size, test_size, seed)
    else:
        concept = _file(name, size, test_size, seed)
    return _checked(concept)


def concept_names() -> Sequence[str]:
    return tuple(CONCEPTS)
