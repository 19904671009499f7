"""What BertScope keeps in the user cache, kind by kind, and removing a kind's entries (``bertscope cache``).

On a hosted demo the quota (``disk_quota``) bounds the cache; on a user's own machine nothing is removed on its own,
and work that reads much keeps much: training transcoders on the six layers of bundled-mlm keeps each layer's
feed-forward inputs and outputs, 2.4 GB a layer at 1,600,000 word pieces. This says where the bytes are and removes
what the user names. The kinds are the quota's (``KEPT``: everything is built again when next needed); the
installed models and corpora are listed beside them and never removed here.

    >>> from bertscope.runtime.cache_usage import cache_usage
    >>> sorted(k.kind for k in cache_usage().kinds)[:3]
    ['activations', 'align', 'hidden']
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertscope.errors import BertScopeError
from bertscope.runtime.disk_quota import (
    KEPT,
    Entry,
    being_written,
    bytes_on_disk,
    folder_entries,
    is_pinned,
    remove_entry,
)
from bertscope.runtime.user_cache import user_cache_dir

INSTALLED = ("models", "corpora")  # the installation's: listed, never removed here


def kind_of(kept: str) -> str:
    """A kept folder's kind: its last part ("features/activations" → "activations")."""
    return kept.rsplit("/", 1)[-1]


KINDS = {kind_of(kept): kept for kept in KEPT}


@dataclass(frozen=True)
class KindUsage:
    kind: str
    folder: Path
    entries: tuple[Entry, ...]  # least recently used first

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    @property
    def last_used(self) -> float | None:
        return self.entries[-1].used if self.entries else None


@dataclass(frozen=True)
class CacheUsage:
    root: Path
    kinds: tuple[KindUsage, ...]  # in KEPT's order
    installed: tuple[tuple[str, int], ...]  # (folder, bytes) of the installation's folders

    @property
    def bytes(self) -> int:
        return sum(k.bytes for k in self.kinds) + sum(b for _, b in self.installed)


def cache_usage(root: Path | None = None) -> CacheUsage:
    """Every kind's entries under ``root`` (default the user cache) with their bytes on disk and last use."""
    root = Path(root) if root is not None else user_cache_dir()
    kinds = tuple(KindUsage(kind_of(kept), root / kept, tuple(folder_entries(root / kept))) for kept in KEPT)
    installed = tuple((name, bytes_on_disk(root / name)) for name in INSTALLED if (root / name).exists())
    return CacheUsage(root, kinds, installed)


def check_kinds(kinds: Sequence[str]) -> list[str]:
    """The kinds named (``all``: every one), each checked; one line naming the kinds for one that is not."""
    if not kinds:
        raise BertScopeError(f"Name what to remove: {', '.join(KINDS)} or all (`bertscope cache` lists their sizes).")
    chosen: list[str] = []
    for kind in kinds:
        if kind == "all":
            chosen.extend(KINDS)
        elif kind in INSTALLED:
            raise BertScopeError(f"The {kind} in {user_cache_dir() / kind} are the installation's, not a cache: "
                                 "`bertscope cache` never removes them.")
        elif kind in KINDS:
            chosen.append(kind)
        else:
            raise BertScopeError(f"No cached kind {kind!r}: name {', '.join(KINDS)} or all.")
    return list(dict.fromkeys(chosen))


def clear_cache(kinds: Sequence[str], older_than_days: float = 0.0, dry_run: bool = False,
                root: Path | None = None) -> list[Entry]:
    """Remove the entries of ``kinds`` last used more than ``older_than_days`` ago (0: every one), never a write
    under way nor an entry a job of this process holds. ``dry_run``: remove nothing. Returns what was (or would
    be) removed."""
    if not older_than_days >= 0:
        raise BertScopeError(f"--older-than {older_than_days}: give days, 0 or more.")
    chosen = check_kinds(kinds)
    usage = cache_usage(root)
    before = time.time() - older_than_days * 86_400
    removed = []
    for kind in usage.kinds:
        if kind.kind not in chosen:
            continue
        for entry in kind.entries:
            if entry.used > before or being_written(entry.path) or is_pinned(entry.path):
                continue
            if not dry_run:
                remove_entry(entry.path)
            removed.append(entry)
    return removed
