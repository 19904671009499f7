"""Hidden states of a probe task, extracted once and kept on disk, one file per layer.

    >>> states = hidden_states(lm, shipped_task("pos"), pooling="mean")   # doctest: +SKIP
    >>> states.hit, states.layer(4).shape                                   # [example, dim]

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

import hashlib
import json
import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np

from .errors import BertScopeError
from .inspect import PoolingPlan, pooled_hidden_states
from .models import LoadedModel
from .probe_data import UNLABELLED, ProbeTask
from .user_cache import user_cache_dir

FORMAT_VERSION = 2  # 2: each example's sentence index (``sentences``)
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


_FINGERPRINTS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


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
        return states

    def write(self, key: CacheKey, fill: Callable[[Path], dict]) -> CachedStates:
        """``fill(tmp_folder)`` writes the layer files and returns the metadata; the folder
        becomes visible only complete (rename), so an interrupted write leaves no entry."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=self.root))
        try:
            meta = fill(tmp)
            names = [f"layer_{i:02d}.npy" for i in key.layers]
            meta["files"] = {n: {"shape": list(np.load(tmp / n, mmap_mode="r").shape)} for n in names}
            meta["key"] = key.to_json()
            (tmp / "meta.json").write_text(json.dumps(meta))
            final = self.folder(key)
            with _LOCK:
                if final.exists():
                    shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        states = self.read(key)
        if states is None:
            raise BertScopeError(f"The cache at {self.root} could not be read back after writing.")
        states.hit = False
        return states


def _example_positions(task: ProbeTask, offsets: list[tuple[int, int]], sequence_ids: list[int | None],
                       sentence: int) -> list[tuple[list[int], str, str]]:
    """Token-level: (token positions, label, word type) of each labelled word.

    Word i spans [start_i, end_i) of the text (``task.word_spans``: words joined by single
    spaces unless the task says otherwise); a token belongs to the word its first character
    falls in (one vectorised pass, not words x tokens).
    """
    words, tags = task.words[sentence], task.labels[sentence]
    bounds = np.array(task.word_spans(sentence), dtype=np.int64).reshape(-1, 2)  # [word, 2]
    starts, lengths = bounds[:, 0], bounds[:, 1] - bounds[:, 0]
    span = np.array(offsets, dtype=np.int64).reshape(-1, 2)  # [token, 2]
    real = np.array([seq == 0 for seq in sequence_ids]) & (span[:, 1] > span[:, 0])
    owner = np.searchsorted(starts, span[:, 0], side="right") - 1  # [token] word index
    inside = real & (owner >= 0) & (span[:, 0] < starts[np.clip(owner, 0, None)] + lengths[np.clip(owner, 0, None)])
    positions: dict[int, list[int]] = {}
    for token in np.flatnonzero(inside):
        positions.setdefault(int(owner[token]), []).append(int(token))
    return [(positions[i], tag, words[i].lower()) for i, tag in enumerate(tags)
            if tag != UNLABELLED and i in positions]  # a word past the truncation point has no tokens


def extract(lm: LoadedModel, task: ProbeTask, folder: Path, pooling: Pooling, batch_size: int = 64,
            progress: Callable[[int, int], None] | None = None, sort_by_length: bool = True) -> dict:
    """Run every sentence once; write ``layer_XX.npy`` [example, dim] into ``folder``.

    Rows are written into memory-mapped files as batches arrive, so memory holds one batch,
    never the whole task. Words cut off by truncation (always a sentence's last ones) leave
    rows that are dropped at the end.
    """
    texts = task.texts
    layers = range(lm.num_layers + 1)
    if task.level == "sentence":
        expected = [1] * len(texts)
    else:
        expected = [sum(t != UNLABELLED for t in tags) for tags in task.labels]
    first_row = np.concatenate([[0], np.cumsum(expected)]).astype(int)  # [sentence + 1]
    total = int(first_row[-1])
    files = [np.lib.format.open_memmap(folder / f"layer_{i:02d}.npy", mode="w+", dtype=np.float32,
                                       shape=(total, lm.hidden_size)) for i in layers]
    kept = np.zeros(total, bool)
    labels, types = [""] * total, [""] * total
    done = 0
    plans: dict[int, list] = {}  # batch -> [(sentence, found)] in plan order

    def plan_of(batch) -> PoolingPlan:
        groups, meta = [], []
        for b, sentence in enumerate(batch.indices):
            if task.level == "sentence":
                if pooling == "cls":
                    positions = [0]
                else:
                    positions = np.flatnonzero(~batch.special_mask[b]).tolist()
                found = [(positions, task.labels[sentence][0], texts[sentence])]
            else:
                found = _example_positions(task, batch.offsets[b], batch.sequence_ids[b], sentence)
            groups += [(b, pos, pooling) for pos, _, _ in found]
            meta.append((sentence, found))
        plans[id(batch)] = meta
        return PoolingPlan.from_groups(groups)

    for batch, vectors in pooled_hidden_states(lm, texts, plan_of, batch_size=batch_size,
                                               sort_by_length=sort_by_length):
        at = 0  # vectors: [example, layer+1, dim] pooled on the model's device, in plan order
        for sentence, found in plans.pop(id(batch)):
            if not found:
                continue
            row = first_row[sentence]
            for layer in layers:
                files[layer][row:row + len(found)] = vectors[at:at + len(found), layer]
            kept[row:row + len(found)] = True
            for k, (_, tag, kind) in enumerate(found):
                labels[row + k], types[row + k] = tag, kind
            at += len(found)
        done += len(batch)
        if progress:
            progress(done, len(texts))
    del files  # closed without msync: the kernel writes the pages back; readers see them at once
    if not kept.any():
        raise BertScopeError("No labelled word survived tokenisation.")
    if not kept.all():  # drop the rows of words lost to truncation
        for layer in layers:
            name = folder / f"layer_{layer:02d}.npy"
            rows = np.load(name, mmap_mode="r")[kept]
            np.save(name, rows, allow_pickle=False)
    owners = np.asarray(task.groups) if task.groups is not None else np.arange(len(texts))
    groups = np.repeat(owners, expected)  # [example] split group: its sentence, or its document
    sentence_of = np.repeat(np.arange(len(texts)), expected)  # [example] its sentence
    return {
        "sentences": [int(i) for i, k in zip(sentence_of, kept) if k],
        "labels": [x for x, k in zip(labels, kept) if k],
        "types": [x for x, k in zip(types, kept) if k],
        "groups": [int(g) for g, k in zip(groups, kept) if k],
    }


def hidden_states(lm: LoadedModel, task: ProbeTask, pooling: Pooling = "mean",
                  cache: HiddenStateCache | None = None, batch_size: int = 64,
                  progress: Callable[[int, int], None] | None = None) -> CachedStates:
    """The task's states at every layer: from the cache, or extracted and cached now."""
    allowed = ("mean", "first") if task.level == "token" else ("mean", "cls")
    if pooling not in allowed:
        raise BertScopeError(f"Pooling for a {task.level}-level task: {' or '.join(allowed)}.")
    cache = cache or HiddenStateCache()
    key = CacheKey(lm.name, weights_fingerprint(lm), tokenizer_fingerprint(lm), task.digest(), task.level,
                   pooling, tuple(range(lm.num_layers + 1)))
    found = cache.read(key)
    if found is not None:
        if progress:
            progress(len(task.words), len(task.words))
        return found
    return cache.write(key, lambda tmp: extract(lm, task, tmp, pooling, batch_size, progress))
