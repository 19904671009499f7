"""A layer's token activations over a corpus, kept on disk: what an SAE trains and is scored on.

Every word piece of every sentence except the special tokens ([CLS], [SEP]: their vectors are of
another kind, and huge) and padding, read at the hook point ``blocks.{l}.hook_resid_post`` (layer l's
output) through the one owner of a pass, stored as float16 ``.npy`` (half the bytes; an SAE's
reconstruction error is far above float16's rounding) with each row's (sentence, position), keyed
by the weights, tokenizer, texts, layer and token cap; written to a temporary folder and renamed
into place, so a folder is whole or absent.

``positions="cls"`` keeps instead each sentence's first token alone ([CLS], ``<s>``): what a sequence
classifier's head reads at the last layer, one row a sentence (the cap then counts sentences).

``point`` reads another per-layer hook point instead of the layer's output (``POINTS``: a transcoder reads
``hook_resid_mid``, the feed-forward's input, and ``hook_mlp_out``, its output); every point of one pass keeps the
same rows in the same order (sentence, then position), so two points' sets pair row by row.

``masking`` (a seed) reads the texts as BERT's pretraining saw them: each batch's ids through the seeded 80/10/10
corruption (``interventions.importance.bert_corruption``), so 15 % of the rows are [MASK], random or kept tokens
the model is asked to predict. A replacement read at masked positions needs a dictionary that has seen them. Such a
set also keeps which rows were chosen for prediction (``chosen.npy``, [token] bool): where the replacement model and a
graph are read, and where a trainer may weigh the error more (``SaeTrainConfig.chosen_weight``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertscope.analysis.hidden_cache import tokenizer_fingerprint, weights_fingerprint
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.errors import BertScopeError
from bertscope.interventions.importance import bert_corruption
from bertscope.mlm.masking import IGNORE_INDEX
from bertscope.runtime.atomic import fsync_tree, publish, temporary_folder
from bertscope.runtime.disk_quota import make_room
from bertscope.runtime.user_cache import user_cache_dir

FORMAT_VERSION = 1
POSITIONS = ("pieces", "cls")  # every word piece but the special tokens, or each sentence's first token
POINTS = ("hook_resid_post", "hook_resid_mid", "hook_mlp_out")  # per-layer hook points kept (blocks.{l}.POINT)


def resid_post(layer: int) -> str:
    """The hook name of layer ``layer``'s output (hidden state ``layer + 1``)."""
    return f"blocks.{layer}.hook_resid_post"


def point_name(layer: int, point: str = "hook_resid_post") -> str:
    """The hook name of ``point`` (``POINTS``) in layer ``layer``."""
    if point not in POINTS:
        raise BertScopeError(f"No kept hook point {point!r}: read {', '.join(POINTS)}.")
    return f"blocks.{layer}.{point}"


@dataclass(frozen=True)
class ActivationSet:
    folder: Path
    layer: int
    rows: np.ndarray  # [token, d_model] float16, memory-mapped
    where: np.ndarray  # [token, 2] int32: (sentence, position in its word pieces)
    texts: tuple[str, ...]
    chosen: np.ndarray | None = None  # [token] bool: the rows BERT's corruption chose for prediction (masking only)

    @property
    def tokens(self) -> int:
        return len(self.rows)

    def of_sentences(self, chosen: Sequence[int]) -> ActivationSet:
        """The rows of the sentences ``chosen`` (indices into ``texts``; taken in ascending order, each once) as a
        set of their own: their rows read into memory, in the same order, the sentences numbered from 0 among
        them."""
        ids = np.unique(np.asarray(chosen, np.int64))  # rows are stored by sentence: ascending keeps them in order
        keep = np.isin(self.where[:, 0], ids)  # [token]
        number = np.full(len(self.texts), -1, np.int32)
        number[ids] = np.arange(len(ids), dtype=np.int32)
        where = self.where[keep].copy()
        where[:, 0] = number[where[:, 0]]
        return ActivationSet(self.folder, self.layer, np.asarray(self.rows[keep]), where,
                             tuple(self.texts[i] for i in ids), None if self.chosen is None else self.chosen[keep])


def row_mean(rows: np.ndarray, block: int = 65_536) -> np.ndarray:
    """[d_model] float64 mean of ``rows`` ([token, d_model], memory-mapped), a block at a time: 2M rows of a
    384-wide layer are 6 GB as float64 all at once."""
    total = np.zeros(rows.shape[1], np.float64)
    for start in range(0, len(rows), block):
        total += np.asarray(rows[start:start + block], np.float64).sum(0)
    return total / max(len(rows), 1)


def check_layer(lm: LoadedModel, layer: int) -> int:
    if not 0 <= int(layer) < lm.num_layers:
        raise BertScopeError(f"Layer {layer} does not exist: {lm.name} has layers 0 to {lm.num_layers - 1} (an SAE "
                             "reads a layer's output; the embeddings are not a layer).")
    return int(layer)


def _folder(lm: LoadedModel, texts: Sequence[str], layer: int, max_tokens: int, root: Path | None,
            positions: str = "pieces", point: str = "hook_resid_post", masking: int | None = None) -> Path:
    parts: tuple = (FORMAT_VERSION, weights_fingerprint(lm), tokenizer_fingerprint(lm), lm.max_length, layer, max_tokens,
                    hashlib.sha256("\n".join(texts).encode()).hexdigest())
    if positions != "pieces":  # word pieces' folders of the layer's output keep their names
        parts = (*parts, positions)
    if point != "hook_resid_post":
        parts = (*parts, point)
    if masking is not None:
        parts = (*parts, "masked", int(masking))
    key = repr(parts)
    return (root or user_cache_dir() / "features" / "activations") / hashlib.sha256(key.encode()).hexdigest()[:24]


def layer_activations(lm: LoadedModel, texts: Sequence[str], layer: int, max_tokens: int = 200_000,
                      root: Path | None = None, batch_size: int = 32,
                      progress: Callable[[int, int], None] | None = None, positions: str = "pieces",
                      point: str = "hook_resid_post") -> ActivationSet:
    """Layer ``layer``'s output at every word piece of ``texts`` (in order, up to ``max_tokens``; ``positions``
    "cls": at each sentence's first token): from disk, or run now and kept. ``progress(done, total)`` counts
    sentences.

    Args:
        lm: the model.
        texts: the sentences.
        layer: the block whose output is read, from 0.
        max_tokens: word pieces kept at most.
        root: where activations are kept on disk (default: the user cache).
        batch_size: sentences a batch.
        progress: called with (done, total) sentences.
        positions: "pieces" (every word piece) or "cls" (each sentence's first token).
        point: the hook point read in the layer (``POINTS``; default its output).

    Returns:
        An ``ActivationSet``: [piece, d_model] on disk, with each row's sentence and token.
    """
    return points_activations(lm, texts, [layer], (point,), max_tokens, root, batch_size, progress,
                              positions)[(int(layer), point)]


def layers_activations(lm: LoadedModel, texts: Sequence[str], layers: Sequence[int], max_tokens: int = 200_000,
                       root: Path | None = None, batch_size: int = 32,
                       progress: Callable[[int, int], None] | None = None,
                       positions: str = "pieces") -> dict[int, ActivationSet]:
    """``layer_activations`` of several layers, the ones not on disk read in one pass (each layer its own folder,
    the same as one layer read alone).

    Args:
        lm: the model.
        texts: the sentences.
        layers: the blocks read.
        max_tokens: word pieces kept at most.
        root: where activations are kept on disk.
        batch_size: sentences a batch.
        progress: called with (done, total) sentences.
        positions: "pieces" or "cls".

    Returns:
        {layer: ``ActivationSet``}.
    """
    found = points_activations(lm, texts, layers, ("hook_resid_post",), max_tokens, root, batch_size, progress,
                               positions)
    return {layer: found[(layer, "hook_resid_post")] for layer, _ in found}


def points_activations(lm: LoadedModel, texts: Sequence[str], layers: Sequence[int], points: Sequence[str],
                       max_tokens: int = 200_000, root: Path | None = None, batch_size: int = 32,
                       progress: Callable[[int, int], None] | None = None,
                       positions: str = "pieces", masking: int | None = None) -> dict[tuple[int, str], ActivationSet]:
    """Every ``point`` (``POINTS``) of every layer, those not on disk read in one pass.

    Args:
        lm: the model.
        texts: the texts read.
        layers: layers from 0.
        points: hook names of a block (``POINTS``: ``hook_resid_mid``, ``hook_mlp_out``, ...).
        max_tokens: word pieces read, at most.
        root: the folder the sets are kept in (default: the user cache).
        batch_size: texts a pass.
        progress: called with (done, total) texts.
        positions: which positions are kept (``POSITIONS``).
        masking: a seed: read the texts through BERT's seeded 80/10/10 corruption (None: as written).

    Returns:
        {(layer, point): ``ActivationSet``}; the sets of one layer pair row by row (the same tokens in order).
    """
    if positions not in POSITIONS:
        raise BertScopeError(f"Positions {positions!r}: read {' or '.join(POSITIONS)}.")
    layers = [check_layer(lm, layer) for layer in dict.fromkeys(int(x) for x in layers)]
    keys = [(layer, point) for layer in layers for point in dict.fromkeys(points)]
    for _, point in keys:
        point_name(0, point)
    texts = tuple(texts)
    if not texts:
        raise BertScopeError("No sentences to read activations from.")
    if masking is not None and lm.tokenizer.mask_token_id is None:
        raise BertScopeError(f"{lm.name}'s tokenizer has no mask token: its text cannot be read as BERT's pretraining "
                             "read it (leave out --masked).")
    folders = {key: _folder(lm, texts, key[0], max_tokens, root, positions, key[1], masking) for key in keys}
    missing = [key for key in keys if not (folders[key] / "meta.json").is_file()
               or masking is not None and not (folders[key] / "chosen.npy").is_file()]  # kept before chosen.npy was
    if missing and masking is not None:  # one draw of the corruption for every point: a set kept alone (or kept
        for key in keys:                 # without its chosen rows) is read again
            shutil.rmtree(folders[key], ignore_errors=True)
        missing = keys
    if missing:
        _write(lm, texts, {key: folders[key] for key in missing}, max_tokens, batch_size, progress, positions, masking)
    return {key: _read(folders[key], key[0], texts) for key in keys}


def read_positions(attention_mask: torch.Tensor, added: torch.Tensor, positions: str = "pieces") -> torch.Tensor:
    """[batch, token] bool: the positions a feature pass reads, from the feed's ``attention_mask`` and ``added``
    ([batch, token] bool: the tokens the tokenizer added, [CLS] [SEP] <s> </s>): every real word piece but those
    ([UNK] stays), or with ``positions`` "cls" each row's first real token alone, past any left padding."""
    real = attention_mask.bool()  # [batch, token]
    if positions != "cls":
        return real & ~added
    first = torch.zeros_like(real)
    first[torch.arange(len(real), device=real.device), real.int().argmax(1)] = True
    return first


def _write(lm: LoadedModel, texts: tuple[str, ...], folders: dict[tuple[int, str], Path], max_tokens: int,
           batch_size: int,
           progress: Callable[[int, int], None] | None, positions: str = "pieces", masking: int | None = None
           ) -> None:
    # the first sentences that hold max_tokens word pieces (a pass runs shortest first: choosing after it
    # would favour short sentences)
    marks = lm.tokenizer(list(texts), truncation=True, max_length=lm.max_length,
                         return_special_tokens_mask=True)["special_tokens_mask"]
    if positions == "cls":  # one row a sentence
        counts = np.arange(1, len(marks) + 1)
    else:
        counts = np.cumsum([len(m) - sum(m) for m in marks])  # real word pieces up to each sentence
    needed = int(np.searchsorted(counts, max_tokens)) + 1
    used = list(texts[:needed])
    space = int(counts[min(needed, len(counts)) - 1])  # every piece of the sentences used; cut to the cap below
    make_room(len(folders) * space * lm.hidden_size * 2, "keeping these activations")  # float16 rows
    tmps = {}
    try:
        for key, folder in folders.items():
            tmps[key] = temporary_folder(folder)
        rows = {key: np.lib.format.open_memmap(tmp / "rows.npy", "w+", np.float16, (space, lm.hidden_size))
                for key, tmp in tmps.items()}
        where = np.zeros((space, 2), np.int32)
        picked = np.zeros(space, bool)  # the rows chosen for prediction (masking)
        filled, done = 0, 0
        names = {key: point_name(*key) for key in folders}
        generator = torch.Generator().manual_seed(int(masking)) if masking is not None else None
        for chosen, padded, feed in batches(lm, used, batch_size):
            if generator is not None:  # the ids as pretraining saw them; the rows kept stay every word piece
                corrupted, labels = bert_corruption(lm, padded.feed["input_ids"], generator)
                feed = {**feed, "input_ids": corrupted.to(feed["input_ids"].device)}
            _, cache = lm.run_with_cache(feed, list(names.values()), encoder_only=True)
            read = read_positions(padded.feed["attention_mask"], torch.from_numpy(padded.special), positions).numpy()
            b, t = np.nonzero(read)  # read [batch, token]
            n = min(len(b), space - filled)
            for key, name in names.items():
                keep = torch.from_numpy(read).to(cache[name].device)  # [batch, token]: the rows kept
                hidden = cache[name][keep].to(torch.float16).cpu().numpy()  # [kept, d_model], reduced on the device
                rows[key][filled:filled + n] = hidden[:n]
            where[filled:filled + n] = np.stack([np.asarray(chosen)[b[:n]], t[:n]], axis=1)
            if generator is not None:
                picked[filled:filled + n] = (labels.numpy() != IGNORE_INDEX)[b[:n], t[:n]]
            filled += n
            done += len(chosen)
            if progress:
                progress(done, len(used))
        order = np.lexsort((where[:filled, 1], where[:filled, 0]))  # by sentence, then position
        if filled > max_tokens:
            order = order[:max_tokens]
        for key, tmp in tmps.items():
            rows[key].flush()
            del rows[key]
            full = np.load(tmp / "rows.npy", mmap_mode="r")
            _save_in_order(full, order, tmp / "sorted.npy")  # the text's order, at most the cap
            del full
            os.replace(tmp / "sorted.npy", tmp / "rows.npy")
            np.save(tmp / "where.npy", where[order])
            if masking is not None:
                np.save(tmp / "chosen.npy", picked[order])
            (tmp / "meta.json").write_text(json.dumps({
                "model": lm.name, "hook_name": point_name(*key), "layer": key[0], "tokens": len(order),
                "sentences": len(texts), "max_tokens": max_tokens, "format_version": FORMAT_VERSION,
                "positions": positions, "masking": masking}))
            (tmp / "texts.json").write_text(json.dumps(list(texts)))
            fsync_tree(tmp)
            publish(tmp, folders[key], replace=False)  # another process finished first: theirs is kept
    finally:
        for tmp in tmps.values():
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def _save_in_order(rows: np.ndarray, order: np.ndarray, path: Path, block: int = 262_144) -> None:
    """``rows[order]`` written to ``path`` a block at a time (memory bounded by the block, not the layer)."""
    out = np.lib.format.open_memmap(path, "w+", rows.dtype, (len(order), rows.shape[1]))
    for start in range(0, len(order), block):
        out[start:start + block] = rows[order[start:start + block]]
    out.flush()
    del out


def _read(folder: Path, layer: int, texts: tuple[str, ...]) -> ActivationSet:
    rows = np.load(folder / "rows.npy", mmap_mode="r", allow_pickle=False)
    where = np.load(folder / "where.npy", mmap_mode="r", allow_pickle=False)  # read where used: bounded by bytes
    chosen = np.load(folder / "chosen.npy", mmap_mode="r", allow_pickle=False) if (folder / "chosen.npy").is_file() \
        else None
    return ActivationSet(folder, layer, rows, where, texts, chosen)
