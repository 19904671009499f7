"""Does the model use what the probe finds? Amnesic probing (Elazar, Ravfogel, Jacovi & Goldberg
2021, "Amnesic Probing", TACL) with LEACE or INLP (``analysis.erasure``), against a random erasure
of the same rank.

For each chosen layer L: the concept's eraser is fitted on the training side's word vectors at L
(the hidden-state cache), and applied to every position of L's output during the forward pass (the
hook point ``state_hook``), so every later layer and the output see the erased states. Then, each
before, after erasing the concept, and after erasing random directions of the same rank:

- **the probe**: a logistic probe (``analysis.probing``'s) retrained and scored on the test side, at
  L (LEACE brings it to the majority baseline) and at every later layer (can the model rebuild it?);
- **the masked LM** (when the model has its head): top-1 at BERT's 15% positions of the test
  sentences (``importance.bert_corruption``, seeded: the same positions in every arm), overall and per
  gold label of the word each position belongs to, and the words whose prediction changes most;
- **the structural probe** (the EWT concepts): Hewitt & Manning's distance probe, trained on the
  clean training side at each later layer, read on the test side: UUAS;
- **the task model's accuracy** (a tagger or classifier whose labels are the concept's:
  ``bundled-upos`` on ``ewt-upos``, ``bundled-sentiment`` on ``sentiment``).

    >>> from bertscope import load_model
    >>> result = amnesic_probe(load_model("bundled-mlm"), "ewt-upos", layers=[2])      # doctest: +SKIP
    >>> result.layers[0].probe.after, result.layers[0].majority                              # doctest: +SKIP
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertscope.analysis.erasure import METHODS, EditReport, Eraser, control_for, edit_report, fit_eraser
from bertscope.analysis.hidden_cache import CachedStates, CacheKey, HiddenStateCache, extract, hidden_states
from bertscope.analysis.probing import fit_score
from bertscope.analysis.structural_probe import TrainedProbe, distance_report, train_structural_probe
from bertscope.analysis.structural_runs import MIN_WORDS, probe_sentences, sentence_rows
from bertscope.core.hook_points import state_hook
from bertscope.core.layers import Layer, hidden_index, hidden_label
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.core.task_head import SEQUENCE, TOKEN
from bertscope.core.word_pieces import piece_words
from bertscope.corpora.probe_tasks import UNLABELLED
from bertscope.errors import BertScopeError
from bertscope.interventions.concepts import Concept, load_concept
from bertscope.interventions.importance import bert_corruption, chosen_logits

Progress = Callable[[int, int, str], None]
CHANGED_SHOWN = 12  # words whose masked prediction changes most, per layer: those it got right and lost first
ARMS = ("before", "after", "random_after")
GUARD_MARGIN = 0.02  # LEACE's probe at the erased layer must score within this of the majority baseline
UUAS_READER = "the distance probe trained on the clean states, read on each run's states"


@dataclass(frozen=True)
class Arms:
    """One behaviour's value before, after erasing the concept, and after the random erasure."""

    before: float | None
    after: float | None
    random_after: float | None

    @property
    def change(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before

    @property
    def control_change(self) -> float | None:
        return None if self.before is None or self.random_after is None else self.random_after - self.before

    def to_json(self) -> dict:
        return {"before": self.before, "after": self.after, "random_after": self.random_after}


@dataclass(frozen=True)
class LaterLayer:
    """A layer after the erased one."""

    layer: Layer
    probe: Arms
    uuas: Arms | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"layer": self.layer, "probe": self.probe.to_json()}
        if self.uuas is not None:
            out["uuas"] = self.uuas.to_json()
        return out


@dataclass(frozen=True)
class ChangedWord:
    """A masked position whose top-1 prediction the erasure changed."""

    sentence: str
    word: str
    tag: str
    gold: str  # the piece that was there
    before: str  # top-1 before, and after erasing the concept
    after: str
    logp_before: float  # log p(gold)
    logp_after: float

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LayerErasure:
    """Everything measured when the concept is erased at one layer."""

    layer: Layer
    rank: int
    majority: float  # the test side's majority-label accuracy
    probe: Arms  # at the erased layer
    later: tuple[LaterLayer, ...]
    mlm_top1: Arms | None = None
    mlm_by_tag: dict[str, tuple[Arms, int]] = field(default_factory=dict)  # tag -> (top-1, positions)
    task_accuracy: Arms | None = None
    changed: tuple[ChangedWord, ...] = ()
    fitted: EditReport | None = None  # the eraser on the rows it was fitted on (class-mean gap, edit size)
    control: EditReport | None = None  # the random erasure on the same rows

    @property
    def guarded(self) -> bool | None:
        """The probe at the erased layer scores at most the majority baseline (within ``GUARD_MARGIN``)."""
        return None if self.probe.after is None else self.probe.after <= self.majority + GUARD_MARGIN

    @property
    def uuas(self) -> Arms | None:
        """At the last layer (the structural probe's reading of what reaches the output)."""
        return self.later[-1].uuas if self.later else None

    def to_json(self) -> dict:
        return {"layer": self.layer, "rank": self.rank, "majority": self.majority,
                "probe_before": self.probe.before, "probe_after": self.probe.after,
                "probe_random_after": self.probe.random_after,
                "mlm_top1": None if self.mlm_top1 is None else self.mlm_top1.to_json(),
                "mlm_top1_by_tag": {tag: {**arms.to_json(), "positions": n} for tag, (arms, n) in self.mlm_by_tag.items()},
                "uuas": None if self.uuas is None else self.uuas.to_json(),
                "task_accuracy": None if self.task_accuracy is None else self.task_accuracy.to_json(),
                "guarded": self.guarded,
                "class_mean_gap": None if self.fitted is None else self.fitted.class_mean_gap,
                "edit": None if self.fitted is None or self.control is None else
                {"concept": self.fitted.edit, "random": self.control.edit},
                "later_layers": [x.to_json() for x in self.later],
                "changed_words": [w.to_json() for w in self.changed]}


@dataclass(frozen=True)
class AmnesicResult:
    model: str
    concept: str
    method: str
    level: str
    classes: tuple[str, ...]
    train_sentences: int
    test_sentences: int
    layers: tuple[LayerErasure, ...]
    notes: tuple[str, ...] = ()  # behaviours left out, and why

    def to_json(self) -> dict:
        return {"model": self.model, "concept": self.concept, "method": self.method, "level": self.level,
                "classes": list(self.classes), "train_sentences": self.train_sentences,
                "test_sentences": self.test_sentences, "control": "a random erasure of the same rank",
                "numbering": "layers from 0; 'embeddings' is the embedding output",
                "uuas_reader": UUAS_READER,
                "edit": "mean squared change of a fitted row over the states' total variance",
                "layers": [x.to_json() for x in self.layers], "notes": list(self.notes)}


# --- the erased passes -----------------------------------------------------------------------

def erasing(lm: LoadedModel, state: int, eraser: Eraser | None) -> Any:
    """Every pass of this thread inside erases hidden state ``state`` (0 = the embeddings)."""
    if eraser is None:
        return nullcontext()
    return lm.hooks({state_hook(lm.model, state): eraser.hook()})


def erased_states(lm: LoadedModel, task: Any, state: int, eraser: Eraser, folder: Path,
                  batch_size: int, progress: Callable[[int, int], None] | None = None) -> CachedStates:
    """The task's word (or sentence) vectors at every layer from passes that erase ``state``,
    written to ``folder`` (never to the cache: the key would be the clean model's). Layers up to
    ``state`` are the clean ones as the model returns them; the erased layer is ``eraser.apply`` of
    the clean vectors (affine maps commute with the mean of a word's pieces)."""
    folder.mkdir(parents=True, exist_ok=True)
    with erasing(lm, state, eraser):
        meta = extract(lm, task, folder, "mean", batch_size, progress)
    key = CacheKey(lm.name, "erased", "", task.digest(), task.level, "mean", tuple(range(lm.num_layers + 1)))
    return CachedStates(key, folder, meta["labels"], np.asarray(meta["groups"], np.int64), meta["types"], hit=False,
                        sentences=np.asarray(meta["sentences"], np.int64))


def _accuracy(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, seed: int) -> float:
    if len(set(y_train.tolist())) < 2:
        return float((y_test == y_train[0]).mean())
    return float(fit_score(x_train, y_train, x_test, y_test, "logreg", seed)[1].mean())


# --- the masked LM ---------------------------------------------------------------------------

@dataclass
class _Masked:
    feed: dict
    chosen: torch.Tensor  # [batch, token] bool
    gold: torch.Tensor  # [chosen]
    tags: list[str]  # [chosen] the gold label of the word each position is in ("" outside every word)
    where: list[tuple[int, int]]  # [chosen] (sentence, word) (-1: none)


def masked_test(lm: LoadedModel, task: Any, seed: int, batch_size: int) -> list[_Masked]:
    """The test sentences with BERT's corruption (seeded), each chosen position's word and label."""
    generator = torch.Generator().manual_seed(seed + 1_000_003)
    out = []
    texts = task.texts
    for rows, padded, feed in batches(lm, texts, batch_size):
        inputs, labels = bert_corruption(lm, padded.feed["input_ids"], generator)
        chosen = labels != -100  # [batch, token]
        tags, where = [], []
        for b, row in enumerate(rows):
            owners = piece_words(task.word_spans(row), padded.offsets[b], ~padded.special[b])  # [token]
            for t in np.flatnonzero(chosen[b].numpy()).tolist():
                w = int(owners[t])
                label = task.labels[row][0] if task.level == "sentence" else (task.labels[row][w] if w >= 0 else "")
                tags.append("" if label == UNLABELLED else label)
                where.append((row, w))
        out.append(_Masked({**feed, "input_ids": inputs.to(lm.device)}, chosen.to(lm.device),
                           labels.to(lm.device)[chosen.to(lm.device)], tags, where))
    return out


def masked_predictions(lm: LoadedModel, masked: list[_Masked], beat: Callable[[int, int], None] | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """([position] top-1 id, [position] log p(gold)) over every batch; ``beat(done, total)`` after each."""
    best, logp = [], []
    for done, m in enumerate(masked, 1):
        logits = chosen_logits(lm, m.feed, m.chosen).float()  # [chosen, vocab]
        lp = torch.log_softmax(logits, -1)
        best.append(lp.argmax(-1).cpu().numpy())
        logp.append(lp.gather(1, m.gold[:, None]).squeeze(1).cpu().numpy())
        if beat:
            beat(done, len(masked))
    return np.concatenate(best), np.concatenate(logp)


def _changed(lm: LoadedModel, task: Any, masked: list[_Masked], gold: np.ndarray, before: tuple, after: tuple
             ) -> tuple[ChangedWord, ...]:
    tags = [t for m in masked for t in m.tags]
    where = [w for m in masked for w in m.where]
    moved = np.flatnonzero(before[0] != after[0])
    lost = (before[0][moved] == gold[moved]) & (after[0][moved] != gold[moved])  # right before, wrong after: first
    order = moved[np.lexsort((-(before[1][moved] - after[1][moved]), ~lost))][:CHANGED_SHOWN]
    piece = lambda i: lm.tokenizer.convert_ids_to_tokens(int(i))  # noqa: E731
    out = []
    for i in order.tolist():
        row, w = where[i]
        word = task.words[row][w] if task.level == "token" and w >= 0 else ""
        out.append(ChangedWord(task.texts[row][:200], word, tags[i], piece(gold[i]), piece(before[0][i]),
                               piece(after[0][i]), float(before[1][i]), float(after[1][i])))
    return tuple(out)


# --- the task model --------------------------------------------------------------------------

def task_fits(lm: LoadedModel, concept: Concept) -> str | None:
    """Why the model's task head cannot be scored on the concept, or None when it can."""
    if lm.task is None:
        return "the model has no task head"
    wanted = {TOKEN: "token", SEQUENCE: "sentence"}.get(lm.task.kind)
    if wanted != concept.level:
        return f"its head ({lm.task.describe()}) does not label what the concept labels"
    unknown = set(concept.test.classes) - set(lm.task.labels)
    if unknown:
        return f"its labels are not the concept's (it lacks {', '.join(sorted(unknown)[:5])})"
    return None


def task_accuracy(lm: LoadedModel, task: Any, batch_size: int, beat: Callable[[int, int], None] | None = None
                  ) -> float:
    """A tagger's word accuracy (its label at the word's first piece) or a classifier's accuracy;
    ``beat(sentences done, sentences)`` after each batch."""
    if lm.task is None:
        raise BertScopeError(f"{lm.name} has no task head to score.")
    labels = list(lm.task.labels)
    right = total = read = 0
    for rows, padded, feed in batches(lm, task.texts, batch_size):
        best = lm.run(feed).logits.argmax(-1).cpu().numpy()  # [batch] or [batch, token]
        for b, row in enumerate(rows):
            if task.level == "sentence":
                right += labels[int(best[b])] == task.labels[row][0]
                total += 1
                continue
            owners = piece_words(task.word_spans(row), padded.offsets[b], ~padded.special[b])  # [token]
            seen = set()
            for t, w in enumerate(owners.tolist()):
                if w < 0 or w in seen:
                    continue
                seen.add(w)
                right += labels[int(best[b, t])] == task.labels[row][w]
                total += 1
        read += len(rows)
        if beat:
            beat(read, len(task.texts))
    return right / max(total, 1)


# --- the structural probe --------------------------------------------------------------------

def _trees(states: CachedStates, trees: Sequence[Any]) -> list[int]:
    whole = sentence_rows(states, trees)
    return [i for i, t in enumerate(trees) if whole[i] is not None and len(t) >= MIN_WORDS]


def structural_readers(concept: Concept, train: CachedStates, states: Sequence[int], seed: int
                       ) -> dict[int, TrainedProbe]:
    """A distance probe per hidden state, trained on the clean training side (a tenth for early stopping)."""
    trees = concept.train_trees or ()
    keep = _trees(train, trees)
    cut = max(1, len(keep) // 10)
    dev, fit = keep[:cut], keep[cut:]
    return {s: train_structural_probe(probe_sentences(train, trees, s, fit), probe_sentences(train, trees, s, dev),
                                      "distance", None, seed) for s in states}


def uuas(reader: TrainedProbe, states: CachedStates, trees: Sequence[Any], state: int, keep: Sequence[int]) -> float:
    sentences = probe_sentences(states, trees, state, keep)
    return float(distance_report([reader.predict(s) for s in sentences], sentences)["uuas"])


# --- the run ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Plan:
    """Which behaviours run on this model and concept, and a note for each asked that cannot."""

    probe: bool
    mlm: bool
    trees: bool
    task: bool
    notes: tuple[str, ...]

    @property
    def steps_per_layer(self) -> int:  # the fit, each arm's two sides, and each arm's masked LM and task passes
        return 1 + 2 * (2 + self.mlm + self.task)


def _plan(lm: LoadedModel, concept: Concept, behaviours: Sequence[str]) -> _Plan:
    notes = []
    mlm = "mlm" in behaviours and "mlm" in lm.outputs
    if "mlm" in behaviours and not mlm:
        notes.append("masked LM: the model has no masked-LM head")
    trees = "syntax" in behaviours and concept.trees is not None
    if "syntax" in behaviours and not trees:
        notes.append("structural probe: the concept's sentences have no trees (the EWT concepts do)")
    why_not = task_fits(lm, concept) if "task" in behaviours else "not asked"
    if "task" in behaviours and why_not:
        notes.append(f"task accuracy: {why_not}")
    return _Plan("probe" in behaviours, mlm, trees, why_not is None, tuple(notes))


@dataclass
class _Clean:
    """The unerased model's side of every behaviour, measured once for all layers."""

    train: CachedStates
    test: CachedStates
    y_train: np.ndarray
    y_test: np.ndarray
    majority: float  # the test side's majority-label share
    probe: dict[int, float]  # state -> probe accuracy
    readers: dict[int, TrainedProbe]  # state -> the distance probe trained on clean states
    trees: Sequence[Any]
    test_trees: list[int]
    uuas: dict[int, float]
    masked: list[_Masked]
    gold: np.ndarray  # [position] the masked tokens' ids
    tags: list[str]  # [position] the gold label of each masked position's word
    mlm: tuple[np.ndarray, np.ndarray] | None
    task: float | None


class _Stages:
    """The run's bar: ``step(what)`` ends a stage; ``beat(done, total)`` reports within one (a batch of a pass), so a
    Stop acts between batches rather than between whole passes over a side."""

    def __init__(self, total: int, progress: Callable[[int, int, str], None] | None):
        self.total, self.done, self.progress, self.what = total, 0, progress, "hidden states of the training side"

    def __call__(self, what: str) -> None:
        self.done += 1
        self.what = what
        if self.progress:
            self.progress(self.done, self.total, what)

    def beat(self, done: int, total: int) -> None:
        if self.progress:
            self.progress(self.done, self.total, f"past {self.what}" if self.done else "reading the training side")


def _clean(lm: LoadedModel, concept: Concept, plan: _Plan, first: int, seed: int, batch_size: int,
           cache: HiddenStateCache, step: _Stages) -> _Clean:
    train = hidden_states(lm, concept.train, "mean", cache, batch_size, step.beat)
    step("hidden states of the training side")
    test = hidden_states(lm, concept.test, "mean", cache, batch_size, step.beat)
    step("hidden states of the test side")
    y_train, y_test = np.asarray(train.labels), np.asarray(test.labels)
    majority_label = max(set(y_train.tolist()), key=y_train.tolist().count)
    probe = {s: _accuracy(train.layer(s), y_train, test.layer(s), y_test, seed)
             for s in range(first, lm.num_layers + 1)} if plan.probe else {}
    readers = structural_readers(concept, train, range(first + 1, lm.num_layers + 1), seed) if plan.trees else {}
    trees = concept.trees or ()
    test_trees = _trees(test, trees) if plan.trees else []
    masked = masked_test(lm, concept.test, seed, batch_size) if plan.mlm else []
    return _Clean(train, test, y_train, y_test, float((y_test == majority_label).mean()), probe, readers, trees,
                  test_trees, {s: uuas(r, test, trees, s, test_trees) for s, r in readers.items()}, masked,
                  np.concatenate([m.gold.cpu().numpy() for m in masked]) if masked else np.zeros(0, np.int64),
                  [t for m in masked for t in m.tags], masked_predictions(lm, masked, step.beat) if plan.mlm else None,
                  task_accuracy(lm, concept.test, batch_size, step.beat) if plan.task else None)


def _erased_arm(lm: LoadedModel, concept: Concept, plan: _Plan, clean: _Clean, state: int, eraser: Eraser, label: str,
                seed: int, batch_size: int, step: _Stages) -> dict[str, Any]:
    """One arm (the concept's eraser, or the random control) at ``state``: {"probe": {later state: accuracy},
    "uuas": {later state: UUAS}, "mlm": predictions, "task": accuracy}, for the behaviours the plan runs."""
    name = hidden_label(state)
    out: dict[str, Any] = {"probe": {}, "uuas": {}}
    with tempfile.TemporaryDirectory(prefix="bertscope-erased-") as tmp:
        erased_train = erased_states(lm, concept.train, state, eraser, Path(tmp) / "train", batch_size, step.beat) \
            if plan.probe and state < lm.num_layers else None
        step(f"layer {name}, {label}: training side")
        erased_test = erased_states(lm, concept.test, state, eraser, Path(tmp) / "test", batch_size, step.beat) \
            if state < lm.num_layers else None
        step(f"layer {name}, {label}: test side")
        for s in range(state + 1, lm.num_layers + 1):
            if erased_train is not None and erased_test is not None:
                out["probe"][s] = _accuracy(erased_train.layer(s), clean.y_train, erased_test.layer(s), clean.y_test,
                                            seed)
            if plan.trees and erased_test is not None:
                out["uuas"][s] = uuas(clean.readers[s], erased_test, clean.trees, s, clean.test_trees)
    if plan.mlm:
        with erasing(lm, state, eraser):
            out["mlm"] = masked_predictions(lm, clean.masked, step.beat)
        step(f"layer {name}, {label}: masked LM")
    if plan.task:
        with erasing(lm, state, eraser):
            out["task"] = task_accuracy(lm, concept.test, batch_size, step.beat)
        step(f"layer {name}, {label}: task model")
    return out


def _mlm_rows(lm: LoadedModel, concept: Concept, clean: _Clean, after: tuple, random_after: tuple
              ) -> tuple[Arms, dict[str, tuple[Arms, int]], tuple[ChangedWord, ...]]:
    """(top-1 in each arm, top-1 by gold label with its count, the words whose prediction changed most)."""
    assert clean.mlm is not None
    predictions = {"before": clean.mlm, "after": after, "random_after": random_after}
    right = {a: predictions[a][0] == clean.gold for a in ARMS}  # [position]
    top1 = Arms(*(float(right[a].mean()) if len(clean.gold) else None for a in ARMS))
    tag_array = np.asarray(clean.tags)
    by_tag = {}
    for tag in sorted(set(clean.tags) - {""}):
        at = tag_array == tag
        by_tag[tag] = (Arms(*(float(right[a][at].mean()) for a in ARMS)), int(at.sum()))
    return top1, by_tag, _changed(lm, concept.test, clean.masked, clean.gold, clean.mlm, after)


def _layer(lm: LoadedModel, concept: Concept, plan: _Plan, clean: _Clean, state: int, method: str, seed: int,
           batch_size: int, step: _Stages) -> LayerErasure:
    """Erase at ``state``: the eraser fitted, both arms run, every behaviour set beside the clean model's."""
    name = hidden_label(state)
    x = clean.train.layer(state)
    eraser = fit_eraser(x, clean.y_train, method, seed, groups=clean.train.groups)
    control = control_for(eraser, seed)
    fitted, control_edit = edit_report(eraser, x, clean.y_train), edit_report(control, x, clean.y_train)
    step(f"{method} fitted at layer {name} (rank {eraser.rank})")
    arms = {arm: _erased_arm(lm, concept, plan, clean, state, e, label, seed, batch_size, step)
            for arm, e, label in (("after", eraser, "the concept erased"),
                                  ("random_after", control, "random directions erased"))}
    probe = Arms(None, None, None)
    if plan.probe:
        test_x = clean.test.layer(state)
        probe = Arms(clean.probe[state], *(_accuracy(e.apply(x), clean.y_train, e.apply(test_x), clean.y_test, seed)
                                          for e in (eraser, control)))
    later = tuple(LaterLayer(hidden_label(s),
                             Arms(clean.probe.get(s) if plan.probe else None,
                                  *(arms[a]["probe"].get(s) for a in ARMS[1:])),
                             Arms(clean.uuas.get(s), *(arms[a]["uuas"].get(s) for a in ARMS[1:])) if plan.trees
                             else None)
                  for s in range(state + 1, lm.num_layers + 1))
    top1, by_tag, changed = _mlm_rows(lm, concept, clean, arms["after"]["mlm"], arms["random_after"]["mlm"]) \
        if plan.mlm else (None, {}, ())
    task = Arms(clean.task, arms["after"]["task"], arms["random_after"]["task"]) if plan.task else None
    return LayerErasure(name, eraser.rank, clean.majority, probe, later, top1, by_tag, task, changed, fitted,
                        control_edit)


def amnesic_probe(lm: LoadedModel, concept: Concept | str, layers: Sequence[Layer], method: str = "leace",
                  seed: int = 0, batch_size: int = 32, cache: HiddenStateCache | None = None,
                  progress: Progress | None = None, behaviours: Sequence[str] = ("probe", "mlm", "syntax", "task")
                  ) -> AmnesicResult:
    """Erase ``concept`` at the output of each of ``layers`` (block numbers from 0, or "embeddings") by
    ``method`` and measure every behaviour against a random erasure of the same rank.

    Args:
        lm: the model.
        concept: a concept (``interventions.concepts``) or its name (``ewt-upos``, ``sentiment``, …).
        layers: where to erase: block numbers from 0, or "embeddings".
        method: "leace" or "inlp".
        seed: the probes', the masking's and the control's seed.
        batch_size: sentences a pass.
        cache: where hidden states are kept (default: the user cache).
        progress: called with (done, total, what).
        behaviours: any of "probe", "mlm", "syntax", "task"; those the model or concept cannot run are noted.

    Returns:
        An ``AmnesicResult``: a ``LayerErasure`` a layer (each behaviour before, after, and after the random
        control), and the notes.
    """
    if method not in METHODS:
        raise BertScopeError(f"No erasure method {method!r}: choose {' or '.join(METHODS)}.")
    chosen = sorted({hidden_index(layer, lm.num_layers) for layer in layers})  # hidden states: 0 = the embeddings
    if not chosen:
        raise BertScopeError("Choose at least one layer to erase.")
    concept = load_concept(concept) if isinstance(concept, str) else concept
    plan = _plan(lm, concept, behaviours)
    step = _Stages(len(chosen) * plan.steps_per_layer + 2, progress)
    clean = _clean(lm, concept, plan, min(chosen), seed, batch_size, cache or HiddenStateCache(), step)
    notes = list(plan.notes)
    rows = []
    for state in chosen:
        row = _layer(lm, concept, plan, clean, state, method, seed, batch_size, step)
        if method == "leace" and row.guarded is False:
            notes.append(f"layer {row.layer}: the probe reads {row.probe.after:.3f} after LEACE, above the majority "
                         f"({clean.majority:.3f}): the test side differs from the side it was fitted on")
        rows.append(row)
    return AmnesicResult(lm.name, concept.name, method, concept.level, concept.classes, len(concept.train.words),
                         len(concept.test.words), tuple(rows), tuple(notes))
