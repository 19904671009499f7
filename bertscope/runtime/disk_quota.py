"""One quota, in bytes, for everything BertScope writes on its visitors' behalf: hidden-state caches, cached
vectors, feature statistics and activations, training runs, uploads. Set on a hosted demo (the app sets it from
``BERTSCOPE_DISK_MB``); without one, nothing is counted or removed (a user's own machine, a user's own runs).

Each entry (a folder or file directly under one of ``KEPT``) is counted by its bytes on disk and dated by its last
use (its modification time: a reader ``touch``es what it reads). Before a writer writes, ``make_room(need)``
removes the least recently used entries until ``need`` more fit; an entry a running job uses is pinned and never
removed; a job larger than the quota is refused in one line before it runs.

    quota = disk_quota()                 # None: no quota here
    if quota: quota.make_room(2 * 2**30)  # or BertScopeError naming what to lower
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import TMP
from bertscope.runtime.user_cache import user_cache_dir

# what is kept for visitors under the user cache (models, corpora and the app's own files are not: they are the
# installation's, bounded by what it ships)
KEPT = ("hidden", "align", "retrieval", "training", "uploads", "features/activations", "features/statistics")

_LOCK = threading.RLock()  # make_room asks is_pinned while it holds it
_PINNED: dict[Path, int] = {}
_SET: list[int | None] = [None]


def set_disk_quota(limit: int | None) -> None:
    """The quota in bytes for this process (None: none); the app sets it on a hosted demo."""
    _SET[0] = limit


def bytes_on_disk(path: Path) -> int:
    """A file's or a folder's bytes on disk (blocks, not lengths; a link counts as itself)."""
    if path.is_symlink() or not path.is_dir():
        try:
            return path.lstat().st_blocks * 512
        except OSError:
            return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


@dataclass(frozen=True)
class Entry:
    path: Path
    bytes: int
    used: float  # last use (modification time)


def touch(path: Path) -> None:
    """Mark ``path`` as used now (its entry becomes the most recently used)."""
    try:
        os.utime(path)
    except OSError:
        pass


def is_pinned(path: Path) -> bool:
    """Whether a job of this process holds the entry at ``path`` (``pinned``)."""
    with _LOCK:
        return Path(path).resolve() in _PINNED


def being_written(path: Path) -> bool:
    """Whether the entry at ``path`` is a write under way (a temporary name, renamed into place when whole)."""
    return TMP in path.name or path.name.startswith(".partial-")


def remove_entry(path: Path) -> None:
    """Remove an entry: a folder with everything in it, or a file or link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class pinned:
    """``with pinned(path):`` the entry at ``path`` is never removed to make room (a running job's folder)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()

    def __enter__(self) -> Path:
        with _LOCK:
            _PINNED[self.path] = _PINNED.get(self.path, 0) + 1
        return self.path

    def __exit__(self, *exc: object) -> None:
        with _LOCK:
            left = _PINNED.get(self.path, 1) - 1
            if left:
                _PINNED[self.path] = left
            else:
                _PINNED.pop(self.path, None)


def folder_entries(folder: Path) -> list[Entry]:
    """The entries directly under ``folder`` (none when it is absent), each with its bytes on disk and its last use
    (modification time), least recently used first."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        try:
            used = path.lstat().st_mtime
        except OSError:
            continue
        found.append(Entry(path, bytes_on_disk(path), used))
    return sorted(found, key=lambda e: e.used)


class DiskQuota:
    """The entries under ``root``'s kept folders, and the bytes they may take together."""

    def __init__(self, root: Path, limit: int) -> None:
        self.root, self.limit = Path(root), int(limit)

    def entries(self) -> list[Entry]:
        """Every entry, least recently used first; temporary names (a write under way) count as used now."""
        now = time.time()
        found = [Entry(e.path, e.bytes, now) if being_written(e.path) else e
                 for kept in KEPT for e in folder_entries(self.root / kept)]
        return sorted(found, key=lambda e: e.used)

    def used(self) -> int:
        return sum(e.bytes for e in self.entries())

    def make_room(self, need: int, what: str = "this job") -> list[Path]:
        """Remove the least recently used entries (never a pinned one, nor a write under way) until ``need`` more
        bytes fit; one line when ``need`` alone is over the quota or the pinned entries leave no room. Returns
        what was removed."""
        if need > self.limit:
            raise BertScopeError(f"{what.capitalize()} would write about {need / 2**20:,.0f} MiB; this server keeps "
                                 f"{self.limit / 2**20:,.0f} MiB for its visitors: use a smaller file or fewer "
                                 "sentences.")
        removed: list[Path] = []
        with _LOCK:
            entries = self.entries()
            total = sum(e.bytes for e in entries)
            for entry in entries:
                if total + need <= self.limit:
                    break
                if is_pinned(entry.path) or being_written(entry.path):
                    continue
                remove_entry(entry.path)
                total -= entry.bytes
                removed.append(entry.path)
            if total + need > self.limit:
                raise BertScopeError(f"This server's {self.limit / 2**20:,.0f} MiB for its visitors are taken by jobs "
                                     f"still running; try {what} again when they end.")
        return removed


def disk_quota() -> DiskQuota | None:
    """The quota over the user cache: ``set_disk_quota``'s, else ``BERTSCOPE_DISK_MB``'s, else None."""
    limit = _SET[0]
    if limit is None:
        raw = os.environ.get("BERTSCOPE_DISK_MB", "").strip()
        try:
            limit = int(float(raw) * 2**20) if raw else None
        except ValueError:
            limit = None
    return DiskQuota(user_cache_dir(), limit) if limit is not None else None


def make_room(need: int, what: str = "this job") -> None:
    """``disk_quota().make_room(need)`` where there is a quota; nothing otherwise."""
    quota = disk_quota()
    if quota is not None:
        quota.make_room(need, what)
