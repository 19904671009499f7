"""A layer's token activations over a corpus, kept on disk: what an SAE trains and is scored on.

Every word piece of every sentence except the special tokens ([CLS], [SEP]: their vectors are of
another kind, and huge) and padding, read at the hook point ``blocks.{l}.hook_resid_post`` (layer l's
output) through the one owner of a pass, stored as float16 ``.npy`` (half the bytes; an SAE's
reconstruction error is far above float16's rounding) with each row's (sentence, position), keyed
by the weights, tokenizer, texts, layer and token cap; written to a temporary folder and renamed
into place, so a folder is whole or absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertscope.analysis.hidden_cache import tokenizer_fingerprint, weights_fingerprint
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.errors import BertScopeError
from bertscope.runtime.user_cache import publish_folder, user_cache_dir

FORMAT_VERSION = 1


def resid_post(layer: int) -> str:
    """The hook name of layer ``layer``'s output (hidden state ``layer + 1``)."""
    return f"blocks.{layer}.hook_resid_post"


@dataclass(frozen=True)
class ActivationSet:
    folder: Path
    layer: int
    rows: np.ndarray  # [token, d_model] float16, memory-mapped
    where: np.ndarray  # [token, 2] int32: (sentence, position in its word pieces)
    texts: tuple[str, ...]

    @property
    def tokens(self) -> int:
        return len(self.rows)


def check_layer(lm: LoadedModel, layer: int) -> int:
    if not 0 <= int(layer) < lm.num_layers:
        raise BertScopeError(f"Layer {layer} does not exist: {lm.name} has layers 0 to {lm.num_layers - 1} (an SAE "
                             "reads a layer's output; the embeddings are not a layer).")
    return int(layer)


def _folder(lm: LoadedModel, texts: Sequence[str], layer: int, max_tokens: int, root: Path | None) -> Path:
    key = repr((FORMAT_VERSION, weights_fingerprint(lm), tokenizer_fingerprint(lm), lm.max_length, layer, max_tokens,
                hashlib.sha256("\n".join(texts).encode()).hexdigest()))
    return (root or user_cache_dir() / "features" / "activations") / hashlib.sha256(key.encode()).hexdigest()[:24]


def layer_activations(lm: LoadedModel, texts: Sequence[str], layer: int, max_tokens: int = 200_000,
                      root: Path | None = None, batch_size: int = 32,
                      progress: Callable[[int, int], None] | None = None) -> ActivationSet:
    """Layer ``layer``'s output at every word piece of ``texts`` (in order, up to ``max_tokens``): from
    disk, or run now and kept. ``progress(done, total)`` counts sentences."""
    layer = check_layer(lm, layer)
    texts = tuple(texts)
    if not texts:
        raise BertScopeError("No sentences to read activations from.")
    folder = _folder(lm, texts, layer, max_tokens, root)
    if (folder / "meta.json").is_file():
        return _read(folder, layer, texts)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # the first sentences that hold max_tokens word pieces (a pass runs shortest first: choosing after it
    # would favour short sentences)
    marks = lm.tokenizer(list(texts), truncation=True, max_length=lm.max_length,
                         return_special_tokens_mask=True)["special_tokens_mask"]
    counts = np.cumsum([len(m) - sum(m) for m in marks])  # real word pieces up to each sentence
    needed = int(np.searchsorted(counts, max_tokens)) + 1
    used = list(texts[:needed])
    space = int(counts[min(needed, len(counts)) - 1])  # every piece of the sentences used; cut to the cap below
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        rows = np.lib.format.open_memmap(tmp / "rows.npy", "w+", np.float16, (space, lm.hidden_size))
        where = np.zeros((space, 2), np.int32)
        filled, done = 0, 0
        name = resid_post(layer)
        for chosen, padded, feed in batches(lm, used, batch_size):
            _, cache = lm.run_with_cache(feed, [name], encoder_only=True)
            keep = torch.from_numpy(~padded.special).to(cache[name].device)  # [batch, token]: real word pieces
            hidden = cache[name][keep].to(torch.float16).cpu().numpy()  # [kept, d_model], reduced on the device
            b, t = np.nonzero(~padded.special)
            n = min(len(hidden), space - filled)
            rows[filled:filled + n] = hidden[:n]
            where[filled:filled + n] = np.stack([np.asarray(chosen)[b[:n]], t[:n]], axis=1)
            filled += n
            done += len(chosen)
            if progress:
                progress(done, len(used))
        rows.flush()
        del rows
        order = np.lexsort((where[:filled, 1], where[:filled, 0]))  # by sentence, then position
        if filled > max_tokens:
            order = order[:max_tokens]
        full = np.load(tmp / "rows.npy", mmap_mode="r")
        np.save(tmp / "sorted.npy", np.ascontiguousarray(full[order]))  # the text's order, at most the cap
        del full
        os.replace(tmp / "sorted.npy", tmp / "rows.npy")
        filled = len(order)
        np.save(tmp / "where.npy", where[order])
        (tmp / "meta.json").write_text(json.dumps({
            "model": lm.name, "hook_name": resid_post(layer), "layer": layer, "tokens": filled,
            "sentences": len(texts), "max_tokens": max_tokens, "format_version": FORMAT_VERSION}))
        (tmp / "texts.json").write_text(json.dumps(list(texts)))
        publish_folder(tmp, folder, "meta.json")  # another process finished first: theirs is kept
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return _read(folder, layer, texts)


def _read(folder: Path, layer: int, texts: tuple[str, ...]) -> ActivationSet:
    rows = np.load(folder / "rows.npy", mmap_mode="r", allow_pickle=False)
    where = np.load(folder / "where.npy", allow_pickle=False)
    return ActivationSet(folder, layer, rows, where, texts)
