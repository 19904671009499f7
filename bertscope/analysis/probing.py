"""Linear probes per layer, with a majority baseline, a control task and a confidence interval.

- Probe: ``Pipeline(StandardScaler(), LogisticRegression())`` (or a small MLP for contrast),
  trained on a split that never puts one sentence on both sides (grouped by sentence).
- Control task (Hewitt & Liang 2019, "Designing and Interpreting Probes with Control Tasks",
  EMNLP, §2-3): every word type gets a random label, fixed for the type and drawn from the
  task's label distribution; the same probe is trained on it. Selectivity = task accuracy -
  control accuracy: how much of the accuracy needs the representation rather than the probe's
  capacity to memorise word identities. (For sentence-level tasks the "type" is the sentence,
  so the control sits at chance.)
- 95% interval: bootstrap over the test examples (1,000 resamples).
Probe weights are saved as ``.npz`` arrays plus JSON, never pickled.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupShuffleSplit
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from bertscope.analysis.hidden_cache import CachedStates
from bertscope.analysis.probe_store import save_probe
from bertscope.core.layers import hidden_label, hidden_name
from bertscope.corpora.probe_tasks import UNLABELLED, ProbeTask
from bertscope.errors import BertScopeError

ProbeKind = Literal["logreg", "mlp"]


def sentence_split(groups: np.ndarray, test_size: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) example indices; every sentence's examples fall on one side."""
    if len(np.unique(groups)) < 2:
        raise BertScopeError("A probe needs at least two sentences.")
    splitter = GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed)
    train, test = next(splitter.split(np.zeros(len(groups)), groups=groups))
    return train, test


def control_labels(types: Sequence[str], labels: Sequence[str], seed: int = 0) -> np.ndarray:
    """Hewitt & Liang's control task: one random label per type, drawn from the label distribution."""
    counts = Counter(labels)
    classes = sorted(counts)
    p = np.array([counts[c] for c in classes], float) / len(labels)
    rng = np.random.default_rng(seed)
    chosen = {t: classes[i] for t, i in zip(sorted(set(types)), rng.choice(len(classes), size=len(set(types)), p=p))}
    return np.array([chosen[t] for t in types])


# L-BFGS steps for the logistic probe, the same budget for the task and its control (Hewitt & Liang
# train both probes alike). On Brown POS (bundled-mlm, 2,000 sentences, every layer) 30 steps give the
# held-out accuracy and control accuracy of 100 steps to within 0.003 and a third of the time: the
# task's optimiser is at its held-out plateau long before its gradient tolerance, and the control
# task never reaches that tolerance (`python benchmarks/probe.py --real brown-pos` prints both).
LOGREG_STEPS = 30


def make_probe(kind: ProbeKind = "logreg", seed: int = 0, steps: int = LOGREG_STEPS) -> Pipeline:
    if kind == "logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=steps, C=1.0))
    if kind == "mlp":
        return make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(128,), max_iter=200,
                                                             early_stopping=True, random_state=seed))
    raise BertScopeError("The probe must be 'logreg' or 'mlp'.")


def bootstrap_interval(correct: np.ndarray, resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of ``correct`` (bools)."""
    rng = np.random.default_rng(seed)
    means = correct[rng.integers(0, len(correct), size=(resamples, len(correct)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def fit_score(x_train, y_train, x_test, y_test, kind: ProbeKind, seed: int,
              steps: int = LOGREG_STEPS) -> tuple[Pipeline, np.ndarray]:
    """The fitted probe and, per test example, whether it was right."""
    probe = make_probe(kind, seed, steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the accuracy is what we report
        probe.fit(x_train, y_train)
    return probe, probe.predict(x_test) == y_test


@dataclass(frozen=True)
class LayerResult:
    layer: int  # index into the hidden states: 0 = the embeddings, l = block l - 1's output
    accuracy: float
    control_accuracy: float
    ci: tuple[float, float]
    external_accuracy: float | None = None  # the same probe scored on a user's test file, when given
    predicted: np.ndarray | None = field(default=None, repr=False, compare=False)  # [test] class index
    confidence: np.ndarray | None = field(default=None, repr=False, compare=False)  # [test] p(predicted)

    @property
    def selectivity(self) -> float:
        return self.accuracy - self.control_accuracy

    @property
    def name(self) -> str:
        """The layer as every surface names it: "embeddings" or the block number (``core.layers``)."""
        return hidden_name(self.layer)

    def to_json(self) -> dict:
        out = {"layer": hidden_label(self.layer), "accuracy": self.accuracy, "control_accuracy": self.control_accuracy,
               "selectivity": self.selectivity, "ci": list(self.ci)}
        if self.external_accuracy is not None:
            out["external_accuracy"] = self.external_accuracy
        return out


@dataclass(frozen=True)
class ProbeResult:
    model: str
    task: str
    level: str
    pooling: str
    probe: str
    majority_baseline: float
    n_train: int
    n_test: int
    layers: list[LayerResult]
    classes: tuple[str, ...] = ()  # the probe's classes; predicted/gold index them
    gold: np.ndarray | None = field(default=None, repr=False, compare=False)  # [test] class index
    test_examples: np.ndarray | None = field(default=None, repr=False, compare=False)  # [test] row in the (test) states
    left_out_sentences: int = 0  # sentences the model could not read whole (too long, a word without a piece)

    @property
    def best(self) -> LayerResult:
        return max(self.layers, key=lambda r: r.accuracy)

    def layer_result(self, layer: int) -> LayerResult:
        for r in self.layers:
            if r.layer == layer:
                return r
        raise BertScopeError(f"Layer {layer} was not probed: layers {[r.layer for r in self.layers]}.")

    def confusion(self, layer: int) -> np.ndarray:
        """[gold class, predicted class] counts over the test examples at ``layer``."""
        r = self.layer_result(layer)
        if r.predicted is None or self.gold is None:
            raise BertScopeError("This result kept no per-example predictions.")
        matrix = np.zeros((len(self.classes), len(self.classes)), np.int64)
        seen = self.gold >= 0  # a test label never trained on has no row
        np.add.at(matrix, (self.gold[seen], r.predicted[seen]), 1)
        return matrix

    def examples(self, layer: int, errors_only: bool = False) -> list[dict]:
        """Test examples at ``layer``: row in the states, gold, predicted, p(predicted)."""
        r = self.layer_result(layer)
        if r.predicted is None or self.gold is None:
            raise BertScopeError("This result kept no per-example predictions.")
        rows = []
        for k, row in enumerate(self.test_examples):
            gold = self.classes[self.gold[k]] if self.gold[k] >= 0 else "(not in training)"
            pred = self.classes[r.predicted[k]]
            if errors_only and gold == pred:
                continue
            rows.append({"example": int(row), "gold": gold, "predicted": pred, "probability": float(r.confidence[k])})
        return rows

    def to_json(self) -> dict:
        return {"model": self.model, "task": self.task, "level": self.level, "pooling": self.pooling,
                "probe": self.probe, "majority_baseline": self.majority_baseline, "n_train": self.n_train,
                "n_test": self.n_test, "layers": [r.to_json() for r in self.layers],
                **({"left_out_sentences": self.left_out_sentences} if self.left_out_sentences else {})}


def example_texts(states: CachedStates, task: ProbeTask, rows: Sequence[int]) -> list[tuple[str, str, int, int]]:
    """(sentence, word, start, end) of each example row: what a person reads to judge a prediction,
    with the word's characters in the sentence so it can be shown in its context (for a
    sentence-level task the word is empty and the span the whole sentence)."""
    texts = task.texts
    if states.sentences is None:
        return [("", "", 0, 0) for _ in rows]
    sentence_of = np.asarray(states.sentences)
    # an example is the k-th kept labelled word of its sentence (truncation only drops a sentence's last words)
    first = {int(s): i for i, s in reversed(list(enumerate(sentence_of)))}  # sentence -> its first example row
    out = []
    for row in rows:
        s = int(sentence_of[row])
        if states.key.level != "token":
            out.append((texts[s], "", 0, len(texts[s])))
            continue
        labelled = [i for i, tag in enumerate(task.labels[s]) if tag != UNLABELLED]
        start, end = task.word_spans(s)[labelled[int(row) - first[s]]]
        out.append((texts[s], states.types[row], start, end))
    return out


def check_external_labels(train_labels: Sequence[str], external_labels: Sequence[str]) -> None:
    """A test file may use only labels the probe is trained on: list the others in one line."""
    unknown = sorted(set(external_labels) - set(train_labels))
    if unknown:
        shown = ", ".join(unknown[:12]) + (f" (and {len(unknown) - 12} more)" if len(unknown) > 12 else "")
        raise BertScopeError(f"The test file has {len(unknown)} label(s) the task never trains on: {shown}.")


def probe_layer(layer: int, x: np.ndarray, labels: np.ndarray, control: np.ndarray, train: np.ndarray | slice,
                test: np.ndarray | slice, kind: ProbeKind = "logreg", seed: int = 0,
                steps: int = LOGREG_STEPS, on_task_done: Callable[[], None] | None = None,
                external: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[LayerResult, Pipeline]:
    """The probe and its control at one layer: ``x`` [example, dim] (rows ``train`` fit, rows
    ``test`` score: index arrays, or slices, which read ``x`` without a copy); ``external``
    ([example, dim], labels) a user's test file scored by the same probe. The predictions index the
    probe's classes, the sorted training labels."""
    x_train, x_test = x[train], x[test]
    # the task's probe and its control fitted at once, each on one core: one BLAS thread each is twice as fast as
    # two threads for one fit on this size of problem (their synchronisation costs more than the matmuls), and the
    # two fits then use both cores (`python benchmarks/probe.py --real brown-pos`)
    with threadpool_limits(1, "blas"), warnings.catch_warnings(), ThreadPoolExecutor(2) as pool:
        warnings.simplefilter("ignore", ConvergenceWarning)  # the filters are the process's: set once, for both
        controlled = pool.submit(fit_score, x_train, control[train], x_test, control[test], kind, seed, steps)
        probe, right = fit_score(x_train, labels[train], x_test, labels[test], kind, seed, steps)
        proba = probe.predict_proba(x_test)  # [test, class], columns in probe.classes_ order (sorted)
        if on_task_done:
            on_task_done()
        _, control_right = controlled.result()
    outside = None if external is None else float((probe.predict(external[0]) == external[1]).mean())
    result = LayerResult(layer, float(right.mean()), float(control_right.mean()), bootstrap_interval(right, seed=seed),
                         outside, proba.argmax(axis=1).astype(np.int64), proba.max(axis=1).astype(np.float32))
    return result, probe


def gold_indices(classes: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """[example] each label's index among ``classes``; -1 for a label never trained on."""
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index.get(y, -1) for y in labels], np.int64)


def fit_layers(chosen: Sequence[int], features: Callable[[int], np.ndarray], labels: np.ndarray, control: np.ndarray,
               train: np.ndarray | slice, test: np.ndarray | slice, kind: ProbeKind, seed: int, steps: int,
               weights_dir: Path | None = None, progress: Callable[[int, int], None] | None = None,
               external: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None) -> list[LayerResult]:
    """``probe_layer`` at each of ``chosen``, ``features(layer)`` [example, dim] its inputs; the probes
    saved into ``weights_dir`` (``layer_XX``); ``progress(done, total)`` counts fits (two per layer)."""
    results = []
    for i, layer in enumerate(chosen):
        result, probe = probe_layer(
            layer, features(layer), labels, control, train, test, kind, seed, steps,
            on_task_done=(lambda i=i: progress(2 * i + 1, 2 * len(chosen))) if progress else None,
            external=None if external is None else external(layer))
        results.append(result)
        if weights_dir is not None:
            weights_dir.mkdir(parents=True, exist_ok=True)
            save_probe(probe, weights_dir, f"layer_{layer:02d}")
        if progress:
            progress(2 * i + 2, 2 * len(chosen))
    return results


def probe_layers(states: CachedStates, task_name: str, pooling: str, kind: ProbeKind = "logreg",
                 seed: int = 0, layers: Sequence[int] | None = None, weights_dir: Path | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 external: CachedStates | None = None, steps: int = LOGREG_STEPS) -> ProbeResult:
    """Train and score the probe and its control at every layer of ``states``; with
    ``external`` (hidden states of a user's test file, same labels), also score the trained
    probe there: train here, test there. ``progress(done, total)`` counts fits (two per layer:
    the task, then its control), so a bar moves within a layer too.

    Args:
        states: the task's hidden states (``hidden_states``).
        task_name: the task's name, for the result.
        pooling: how the states were pooled, for the result.
        kind: "logreg" or "mlp".
        seed: the probes' and the control task's seed.
        layers: hidden states to probe (default every one).
        weights_dir: where each probe's weights are saved (safetensors), if anywhere.
        progress: called with (done, total) fits.
        external: a user's test file's states, scored by the probes trained here.
        steps: the logistic probe's optimisation steps.

    Returns:
        ``ProbeResult``: accuracy, control accuracy and selectivity at each layer.
    """
    labels = np.array(states.labels)
    if len(set(labels)) < 2:
        raise BertScopeError("A probe needs at least two different labels.")
    train, test = sentence_split(states.groups, seed=seed)
    if external is not None:
        check_external_labels(labels[train].tolist(), external.labels)
        external_labels = np.array(external.labels)
    control = control_labels(states.types, states.labels, seed=seed)
    majority = Counter(labels[train]).most_common(1)[0][0]
    baseline = float((labels[test] == majority).mean())
    chosen = list(layers) if layers is not None else list(states.layers)
    classes = tuple(sorted(set(labels[train])))
    results = fit_layers(chosen, lambda layer: np.asarray(states.layer(layer)), labels, control, train, test,
                         kind, seed, steps, weights_dir, progress,
                         None if external is None else lambda layer: (np.asarray(external.layer(layer)), external_labels))
    return ProbeResult(states.key.model, task_name, states.key.level, pooling, kind, baseline, len(train),
                       len(test), results, classes, gold_indices(classes, labels[test]), np.asarray(test, np.int64))
