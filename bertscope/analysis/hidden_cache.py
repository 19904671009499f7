"""Hidden states of a probe task, extracted once and kept on disk, one file per layer.

    >>> from bertscope import load_model, shipped_task
    >>> states = hidden_states(load_model("bundled"), shipped_task("pos"), pooling="mean")
    >>> states.layer(4).shape                                   # [example, dim]
    (2091, 384)

Layout: ``<cache>/hidden/<key>/`` holds ``layer_00.npy`` ... (float32 ``[example, dim]``, read
memory-mapped with ``allow_pickle=False``, so reading one layer never loads the others and
nothing in the cache can run code) and ``meta.json`` (labels, sentence of each example, word
types, and the key: model and weights fingerprint, tokenizer fingerprint, dataset hash,
level, pooling, layers, format version). A change in any of these is a new key, so a miss.
The folder is written under a temporary name and renamed when complete; a folder whose files
do not match its ``meta.json`` (partial, corrupted, or holding pickled objects) is a miss,
removed and rebuilt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from bertscope.core.batch_plan import tokenize
from bertscope.core.models import LoadedModel
from bertscope.core.pooling import PoolingPlan, pooled_hidden_states
from bertscope.corpora.probe_tasks import UNLABELLED, ProbeTask
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import fsync_tree, publish, temporary_folder
from bertscope.runtime.disk_quota import disk_quota, make_room, touch
from bertscope.runtime.engine import Engine
from bertscope.runtime.user_cache import user_cache_dir

FORMAT_VERSION = 3  # 2: each example's sentence index (``sentences``); 3: a piece out of the gap before a word is the word's
Pooling = Literal["mean", "first", "cls"]  # token level: mean / first piece; sentence: mean / cls
_LOCK = threading.Lock()


def weights_fingerprint(lm: LoadedModel) -> str:
    """The hub revision when known; else sizes and edge bytes of the weight files; else the
    parameters' own bytes (a model built in memory)."""
    if lm.revision:
        return f"rev:{lm.revision}"
    folder = Path(lm.source)
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")) if folder.is_dir() else []
    sha = hashlib.sha256()
    if files:
        for f in files:
            size = f.stat().st_size
            sha.update(f"{f.name}:{size}".encode())
            with open(f, "rb") as handle:
                sha.update(handle.read(1 << 20))
                handle.seek(max(0, size - (1 << 20)))
                sha.update(handle.read(1 << 20))
        return "files:" + sha.hexdigest()[:16]
    for name, tensor in sorted(lm.model.state_dict().items()):
        sha.update(name.encode())
        sha.update(tensor.detach().float().cpu().numpy().tobytes())
    return "params:" + sha.hexdigest()[:16]


_FINGERPRINTS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(lm: LoadedModel) -> str:
    """The tokenizer's definition (padding and truncation are call settings, left out);
    computed once per tokenizer object: serialising a large vocabulary takes a while."""
    if lm.tokenizer not in _FINGERPRINTS:
        spec = json.loads(lm.tokenizer.backend_tokenizer.to_str())
        spec.pop("padding", None)
        spec.pop("truncation", None)
        _FINGERPRINTS[lm.tokenizer] = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return _FINGERPRINTS[lm.tokenizer]


@dataclass(frozen=True)
class CacheKey:
    model: str
    weights: str
    tokenizer: str
    dataset: str
    level: str
    pooling: str
    layers: tuple[int, ...]
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict:
        return {**self.__dict__, "layers": list(self.layers)}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:24]


@dataclass
class CachedStates:
    """Examples of one task at every layer, read from disk one layer at a time."""

    key: CacheKey
    folder: Path
    labels: list[str]  # [example]
    groups: np.ndarray  # [example] split group (its sentence, or its document): never on both sides of a split
    types: list[str]  # [example] the word (lower-cased) for token tasks, the label's sentence otherwise
    hit: bool  # found on disk rather than extracted now
    sentences: np.ndarray | None = None  # [example] index of its sentence in the task
    _layers: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def layers(self) -> tuple[int, ...]:
        return self.key.layers

    @property
    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.folder.iterdir() if f.is_file())

    def layer(self, layer: int) -> np.ndarray:
        """[example, dim] float32, memory-mapped (read-only)."""
        if layer not in self.key.layers:
            first, last = self.key.layers[0], self.key.layers[-1]
            raise BertScopeError(f"Layer {layer} is not in this cache (layers {first}–{last}).")
        if layer not in self._layers:
            self._layers[layer] = np.load(self.folder / f"layer_{layer:02d}.npy", mmap_mode="r", allow_pickle=False)
        return self._layers[layer]


class HiddenStateCache:
    """A folder of extracted hidden states keyed by everything that produced them."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root else user_cache_dir() / "hidden"

    def folder(self, key: CacheKey) -> Path:
        return self.root / key.digest()

    def read(self, key: CacheKey) -> CachedStates | None:
        """The cached states, or None when absent or not intact (then the folder is removed)."""
        folder = self.folder(key)
        meta_file = folder / "meta.json"
        if not meta_file.is_file():
            return None
        try:
            meta = json.loads(meta_file.read_text())
            if meta.get("key") != key.to_json():
                raise ValueError("another key")
            for name, info in meta["files"].items():
                array = np.load(folder / name, mmap_mode="r", allow_pickle=False)  # refuses pickles
                if list(array.shape) != info["shape"] or array.dtype != np.float32:
                    raise ValueError(f"{name} does not match its metadata")
            states = CachedStates(key, folder, meta["labels"], np.asarray(meta["groups"], np.int64),
                                  meta["types"], hit=True,
                                  sentences=np.asarray(meta["sentences"], np.int64) if "sentences" in meta else None)
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError):
            shutil.rmtree(folder, ignore_errors=True)  # partial or corrupted: rebuild
            return None
        touch(folder)  # the most recently used, for a disk quota
        return states

    def write(self, key: CacheKey, fill: Callable[[Path], dict], expected_bytes: int = 0) -> CachedStates:
        """``fill(tmp_folder)`` writes the layer files and returns the metadata; the folder
        becomes visible only complete (synced, then renamed), so an interrupted write leaves no entry. Where
        a disk quota is set (a hosted demo), room for ``expected_bytes`` is made first."""
        make_room(expected_bytes, "extracting these hidden states")
        final = self.folder(key)
        tmp = temporary_folder(final)
        try:
            meta = fill(tmp)
            names = [f"layer_{i:02d}.npy" for i in key.layers]
            meta["files"] = {n: {"shape": list(np.load(tmp / n, mmap_mode="r").shape)} for n in names}
            meta["key"] = key.to_json()
            (tmp / "meta.json").write_text(json.dumps(meta))
            fsync_tree(tmp)
            with _LOCK:  # two sessions that extracted the same states: one rename at a time
                publish(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        states = self.read(key)
        if states is None:
            raise BertScopeError(f"The cache at {self.root} could not be read back after writing.")
        states.hit = False
        return states


STRIDE = 1 << 40  # keeps each row's character positions apart in one sorted array per batch


class WordTable(NamedTuple):
    """Every word of a token-level task, flat in task order: where it is and where its vector goes."""

    start: np.ndarray  # [word] first character in its sentence's text
    end: np.ndarray  # [word] one past its last character
    first: np.ndarray  # [sentence + 1] flat index of each sentence's first word
    output_row: np.ndarray  # [word] its row in the layer files; -1 for an unlabelled word


def word_table(task: ProbeTask) -> WordTable:
    """The flat table, built once per extraction (words joined by single spaces unless the task
    gives its own spans, as ``ProbeTask.word_spans``)."""
    counts = np.array([len(w) for w in task.words], np.int64)
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # [sentence + 1]
    if task.spans is not None:
        bounds = np.array([span for spans in task.spans for span in spans], np.int64).reshape(-1, 2)  # [word, 2]
        start, end = bounds[:, 0], bounds[:, 1]
    else:
        lengths = np.array([len(w) for words in task.words for w in words], np.int64)  # [word]
        after = np.cumsum(lengths + 1)  # [word] one past the separating space, counted over the whole task
        start = after - lengths - 1 - np.repeat(np.concatenate([[0], after])[first[:-1]], counts)
        end = start + lengths
    labelled = np.array([tag != UNLABELLED for tags in task.labels for tag in tags], bool)  # [word]
    return WordTable(start, end, first, np.where(labelled, np.cumsum(labelled) - 1, -1))


def token_plan(table: WordTable, batch, pooling: str) -> tuple[PoolingPlan, np.ndarray]:
    """Token level, for one padded batch: the pooling plan (one vector per labelled word that kept
    a token, the mean of its pieces or its first piece) and [example] each vector's row in the
    layer files. Tokens go to words as ``core.word_pieces.piece_words`` places them (the word a
    token's first character falls in, or the word a token reaching out of a gap reaches into:
    SentencePiece's space); words past the truncation point have no tokens and no vector. One
    vectorised pass over the batch."""
    offsets = np.asarray(batch.offsets, np.int64).reshape(len(batch), -1, 2)  # [batch, token, 2]
    rows, width = offsets.shape[:2]
    sentences = np.asarray(batch.indices, np.int64)  # [batch]
    words = np.concatenate([np.arange(table.first[s], table.first[s + 1]) for s in sentences])  # [word] flat index
    word_row = np.repeat(np.arange(rows), table.first[sentences + 1] - table.first[sentences])  # [word]
    token_row = np.repeat(np.arange(rows), width)  # [batch x token]
    start, end = offsets[..., 0].ravel(), offsets[..., 1].ravel()  # [batch x token]
    # a token task has no second segment: its real tokens are the ones neither special nor padding
    real = ~np.asarray(batch.special_mask).ravel() & (end > start)
    keys = np.append(word_row * STRIDE + table.start[words], np.iinfo(np.int64).max)  # [word + 1] a sentinel
    before = np.searchsorted(keys[:-1], token_row * STRIDE + start, side="right") - 1  # [batch x token]
    safe = np.clip(before, 0, None)
    in_word = (before >= 0) & (word_row[safe] == token_row) & (start < table.end[words[safe]])
    after = np.clip(before + 1, 0, len(words) - 1)  # the next word: SentencePiece's space before it
    reaches_next = (keys[before + 1] < token_row * STRIDE + end) & (word_row[after] == token_row)
    owner = np.where(in_word, before, np.where(reaches_next, before + 1, -1))
    inside = real & (owner >= 0)
    safe = np.clip(owner, 0, None)
    inside &= table.output_row[words[safe]] >= 0  # labelled words only
    tokens = np.flatnonzero(inside)  # row by row, so each word's pieces come together and words in order
    owned = owner[tokens]
    new_word = np.concatenate([[True], owned[1:] != owned[:-1]]) if len(owned) else np.zeros(0, bool)
    if pooling == "first":
        tokens, owned, new_word = tokens[new_word], owned[new_word], new_word[new_word]
    example = np.cumsum(new_word) - 1  # [entry]
    n_examples = int(example[-1]) + 1 if len(example) else 0
    weight = (1.0 / np.bincount(example, minlength=n_examples)[example]).astype(np.float32)  # [entry]
    plan = PoolingPlan(n_examples, example, token_row[tokens], tokens % width, weight)
    return plan, table.output_row[words[owned[new_word]]]


def batch_plan(table: WordTable | None, pooling: str, batch) -> tuple[PoolingPlan, np.ndarray]:
    """For one padded batch: its pooling plan and [example] each vector's row in the layer files
    (token level: one per labelled word that kept a token; sentence level: one per sentence)."""
    if table is not None:
        return token_plan(table, batch, pooling)
    plan = PoolingPlan.from_groups([(b, [0] if pooling == "cls" else np.flatnonzero(~batch.special_mask[b]).tolist(),
                                     pooling) for b in range(len(batch))])
    return plan, np.asarray(batch.indices, np.int64)  # one example per sentence


Rows = Iterator[tuple[int, np.ndarray, np.ndarray]]  # (word pieces run, rows [example], vectors [example, layer + 1, dim])


def pooled_rows(lm: LoadedModel, texts: Sequence[str], table: WordTable | None, pooling: str, batch_size: int = 64,
                sort_by_length: bool = True, plan: Sequence[Sequence[int]] | None = None,
                indices: np.ndarray | None = None) -> Rows:
    """Per batch: (its word pieces, special tokens included; the rows its vectors go to; the vectors pooled
    on the device).
    ``indices``: each text's place in the task, when ``texts`` are a part of it (a Ray actor's
    share), with ``plan`` the batches of that part to run."""
    destinations: dict[int, np.ndarray] = {}  # batch -> [example] row in the layer files

    def plan_of(batch) -> PoolingPlan:
        seen = batch if indices is None else dataclasses.replace(  # the task's numbering, as the word table's
            batch, indices=[int(indices[i]) for i in batch.indices])
        pooling_plan, destinations[id(batch)] = batch_plan(table, pooling, seen)
        return pooling_plan

    for batch, vectors in pooled_hidden_states(lm, texts, plan_of, batch_size=batch_size,
                                               sort_by_length=sort_by_length, plan=plan):
        pieces = int(batch.attention_mask.sum())
        yield pieces, destinations.pop(id(batch)), vectors  # vectors: [example, layer + 1, dim] in plan order


def expected_rows(task: ProbeTask, table: WordTable | None) -> np.ndarray:
    """[sentence] how many examples each sentence gives (labelled words, or 1)."""
    if table is None:
        return np.ones(len(task.texts), np.int64)
    return np.bincount(np.repeat(np.arange(len(task.texts)), np.diff(table.first))[table.output_row >= 0],
                       minlength=len(task.texts))


def extract(lm: LoadedModel, task: ProbeTask, folder: Path, pooling: Pooling, batch_size: int = 64,
            progress: Callable[[int, int], None] | None = None, sort_by_length: bool = True,
            rows: Callable[[LoadedModel, ProbeTask, WordTable | None, str, int], Rows] | None = None,
            pieces: int | None = None) -> dict:
    """Run every sentence once; write ``layer_XX.npy`` [example, dim] into ``folder``.

    Rows are written into memory-mapped files as batches arrive (each layer once a batch), so
    memory holds one batch, never the whole task. Words cut off by truncation (always a
    sentence's last ones) leave rows that are dropped at the end. ``rows``: where the vectors
    come from (default: this process's passes, ``pooled_rows``; the Ray engine passes its own).

    ``progress(done, total)`` counts word pieces (``count_pieces``), not sentences: a corpus runs
    shortest first, so its later sentences cost more, and a count of sentences promised too little
    time left (issue 54: 5 s said, 12 s taken, at 10% of the sentences).
    """
    texts = task.texts
    layers = range(lm.num_layers + 1)
    table = word_table(task) if task.level == "token" else None
    expected = expected_rows(task, table)
    total = int(expected.sum())
    files = [np.lib.format.open_memmap(folder / f"layer_{i:02d}.npy", mode="w+", dtype=np.float32,
                                       shape=(total, lm.hidden_size)) for i in layers]
    kept = np.zeros(total, bool)
    done = 0
    total_pieces = (pieces if pieces is not None else count_pieces(lm, texts)) if progress else 0
    if rows is None:
        source = pooled_rows(lm, texts, table, pooling, batch_size, sort_by_length)
    else:
        source = rows(lm, task, table, pooling, batch_size)
    for ran, destination, vectors in source:
        if len(destination):
            for layer in layers:
                files[layer][destination] = vectors[:, layer]
            kept[destination] = True
        done += ran
        if progress:
            progress(done, total_pieces)
    del files  # closed without msync: the kernel writes the pages back; readers see them at once
    if not kept.any():
        raise BertScopeError("No labelled word survived tokenisation.")
    if not kept.all():  # drop the rows of words lost to truncation
        for layer in layers:
            name = folder / f"layer_{layer:02d}.npy"
            kept_rows = np.load(name, mmap_mode="r")[kept]
            np.save(name, kept_rows, allow_pickle=False)
    if table is None:
        labels, types = [tags[0] for tags in task.labels], texts
    else:
        pairs = [(tag, word.lower()) for words, tags in zip(task.words, task.labels)
                 for word, tag in zip(words, tags) if tag != UNLABELLED]
        labels, types = [tag for tag, _ in pairs], [word for _, word in pairs]
    owners = np.asarray(task.groups) if task.groups is not None else np.arange(len(texts))
    groups = np.repeat(owners, expected)  # [example] split group: its sentence, or its document
    sentence_of = np.repeat(np.arange(len(texts)), expected)  # [example] its sentence
    return {
        "sentences": sentence_of[kept].tolist(),
        "labels": [x for x, k in zip(labels, kept) if k],
        "types": [x for x, k in zip(types, kept) if k],
        "groups": groups[kept].tolist(),
    }


@dataclass(frozen=True)
class TaskSize:
    """What extracting a task's hidden states runs and keeps, known from its tokens before any pass: what a page
    checks (and a hosted demo caps) before the work starts."""

    pieces: int  # word pieces a pass runs, special tokens included, cut at the model's maximum
    examples: int  # vectors kept per layer: labelled words that keep a token (token level), or sentences
    labels: frozenset[str]  # the labels of those examples
    cut_words: int  # labelled words past the model's maximum, which keep no vector
    bytes: int  # on disk: the layer files (examples x width x 4 each, layers + 1 of them) and the metadata

    def check_labels(self, needed: int = 2) -> None:
        """One line when fewer than ``needed`` different labels survive the model's cut."""
        if len(self.labels) < needed:
            past = f" ({self.cut_words:,} labelled words lie past the model's maximum length, where it reads nothing)" \
                if self.cut_words else ""
            raise BertScopeError(f"A probe needs at least {needed} different labels among the words the model reads; "
                                 f"this task has {len(self.labels)}{past}.")


def task_size(lm: LoadedModel, task: ProbeTask) -> TaskSize:
    """The task tokenised once (no pass): its word pieces, and the labelled words that keep a token."""
    encodings = tokenize(lm, list(task.texts), [None] * len(task.texts)).encodings
    pieces = sum(len(e.ids) for e in encodings)
    if task.level == "token":
        table = word_table(task)
        covered = np.array([max((end for _, end in e.offsets), default=0) for e in encodings], np.int64)  # [sentence]
        sentence = np.repeat(np.arange(len(task.texts)), np.diff(table.first))  # [word]
        labelled = table.output_row >= 0
        kept = labelled & (table.start < covered[sentence])
        flat = [tag for tags in task.labels for tag in tags]
        labels = frozenset(flat[i] for i in np.flatnonzero(kept))
        examples, cut = int(kept.sum()), int(labelled.sum() - kept.sum())
    else:
        labels, examples, cut = frozenset(tags[0] for tags in task.labels), len(task.texts), 0
    layer_file = -(-(examples * lm.hidden_size * 4 + 128) // 4096) * 4096  # .npy header; whole 4 KiB blocks on disk
    return TaskSize(pieces, examples, labels, cut, (lm.num_layers + 1) * layer_file + 8192)  # and meta.json


def count_pieces(lm: LoadedModel, texts: Sequence[str]) -> int:
    """The word pieces a pass over ``texts`` runs: each text's, special tokens included, cut at the
    model's maximum (the unit ``extract`` reports progress in)."""
    return sum(len(e.ids) for e in tokenize(lm, list(texts), [None] * len(texts)).encodings)


def states_key(lm: LoadedModel, task: ProbeTask, pooling: Pooling) -> CacheKey:
    return CacheKey(lm.name, weights_fingerprint(lm), tokenizer_fingerprint(lm), task.digest(), task.level,
                    pooling, tuple(range(lm.num_layers + 1)))


def states_on_disk(lm: LoadedModel, task: ProbeTask, pooling: Pooling = "mean",
                   cache: HiddenStateCache | None = None) -> bool:
    """Whether ``hidden_states`` would read this task's states from the cache (no pass needed)."""
    return (cache or HiddenStateCache()).read(states_key(lm, task, pooling)) is not None


def hidden_states(lm: LoadedModel, task: ProbeTask, pooling: Pooling = "mean",
                  cache: HiddenStateCache | None = None, batch_size: int = 64,
                  progress: Callable[[int, int], None] | None = None, engine: Engine | None = None,
                  size: TaskSize | None = None) -> CachedStates:
    """The task's states at every layer: from the cache, or extracted and cached now (by this
    process, or by an ``engine``'s workers: see ``extract``). Either way the
    entry is the same: the key does not say how it was computed. ``size``: the task's ``task_size`` when the
    caller has it (its pieces and bytes are not counted again).

    Args:
        lm: the model.
        task: the probe task (``corpora``: a shipped suite or a user's file).
        pooling: "mean" or "first" piece of each word.
        cache: where the states are kept (default: the user cache).
        batch_size: sentences a batch.
        progress: called with (done, total) sentences.
        engine: who extracts (``runtime.engine``).
        size: the task's ``task_size``, when the caller has it.

    Returns:
        ``CachedStates``: [example, state, dim] on disk, with the labels and groups.
    """
    allowed = ("mean", "first") if task.level == "token" else ("mean", "cls")
    if pooling not in allowed:
        raise BertScopeError(f"Pooling for a {task.level}-level task: {' or '.join(allowed)}.")
    cache = cache or HiddenStateCache()
    key = states_key(lm, task, pooling)
    found = cache.read(key)
    if found is not None:
        if progress:
            progress(1, 1)
        return found
    if size is None and disk_quota() is not None:  # a quota needs the bytes before the pass
        size = task_size(lm, task)
    rows = None if engine is None else engine.hidden_rows
    return cache.write(key, lambda tmp: extract(lm, task, tmp, pooling, batch_size, progress, rows=rows,
                                                pieces=size.pieces if size else None),
                       size.bytes if size else 0)
