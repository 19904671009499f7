"""Every file and folder BertScope writes is published whole: written under a temporary name beside its place,
flushed to disk (fsync), then renamed into place, so a reader (or the next run after a kill) finds the whole
old state or the whole new one, never a part.

    with writing_folder(folder) as tmp:      # fill tmp; on leaving, tmp is synced and becomes folder
        (tmp / "meta.json").write_text(...)
    write_file(path, lambda tmp: np.save(tmp, array, allow_pickle=False))
    recover(folder)                          # a kill between a replacement's two renames: the old one back
    sweep(user_cache_dir())                  # temporary names of writers that are no longer running

Names: a temporary folder or file is ``.{name}.tmp-{pid}-{random}`` beside ``name`` (the pid says whether its
writer still runs); replacing a folder renames the old one to ``{name}.old-{random}`` for the moment between two
renames (a kill there leaves the old folder whole under that name, and ``recover`` puts it back).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

TMP = ".tmp-"
OLD = ".old-"
STALE_S = 3600.0  # a temporary name without a readable pid is a leftover after this long


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}{TMP}{os.getpid()}-"


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened for syncing
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder``, then the folders themselves, to disk."""
    for root, dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for name in dirs:
            _fsync_dir(Path(root) / name)
    _fsync_dir(folder)


def publish(tmp: Path, folder: Path, replace: bool = True) -> None:
    """Put the finished, synced folder ``tmp`` (beside ``folder``) in ``folder``'s place. ``replace``: an existing
    ``folder`` is replaced (renamed aside first, so readers see the old or the new); else another writer's folder
    published first is kept whole and ``tmp`` is dropped."""
    if not folder.exists():
        try:
            os.replace(tmp, folder)
        except OSError:
            if replace or not folder.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process published first: theirs is kept
        _fsync_dir(folder.parent)
        return
    if not replace:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = folder.with_name(f"{folder.name}{OLD}{uuid.uuid4().hex[:12]}")
    os.replace(folder, old)  # renames only: the old folder stays whole until the new one is in place
    os.replace(tmp, folder)
    _fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def temporary_folder(folder: Path) -> Path:
    """A fresh temporary folder beside ``folder`` (named so that ``sweep`` knows its writer), for a writer that
    fills several at once and publishes each (``fsync_tree``, ``publish``)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=_temporary_prefix(folder), dir=folder.parent))


@contextlib.contextmanager
def writing_folder(folder: Path, replace: bool = True) -> Iterator[Path]:
    """A fresh temporary folder beside ``folder`` to fill; when the block ends without an error it is synced and
    published (``publish``), else removed. The parent folders are made."""
    tmp = temporary_folder(folder)
    recover(folder)
    try:
        yield tmp
        fsync_tree(tmp)
        publish(tmp, folder, replace)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_file(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` writes the file's content to a temporary path beside ``path``; it is synced and renamed into
    place. The parent folder is made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=path.suffix, dir=path.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared file (an SAE, a cache) from its other readers
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    write_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    write_file(path, lambda tmp: tmp.write_bytes(data))


def recover(folder: Path) -> bool:
    """After a kill between a replacement's two renames, ``folder`` is missing and its last whole state is
    ``{folder}.old-…``: rename it back (True). Where ``folder`` is there, its ``.old-`` leftovers go."""
    old = sorted(folder.parent.glob(f"{folder.name}{OLD}*"), key=lambda p: p.stat().st_mtime) \
        if folder.parent.is_dir() else []
    if not old:
        return False
    restored = False
    if not folder.exists():
        with contextlib.suppress(OSError):
            os.replace(old.pop(), folder)
            restored = True
    for stale in old:
        shutil.rmtree(stale, ignore_errors=True)
    return restored


def _writer_alive(name: str) -> bool | None:
    """Whether the writer of a temporary name still runs (None: the name carries no pid)."""
    pid = name.partition(TMP)[2].split("-", 1)[0]
    if not pid.isdigit():
        return None
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(root: Path, recursive: bool = True, now: float | None = None) -> list[Path]:
    """Remove, in ``root`` (and its subfolders: ``recursive``), the temporary names of writers that are no longer running (or, without a pid,
    older than an hour: the names of earlier versions, ``.partial-…``), and recover the ``.old-`` cases. Returns
    what was removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        for name in [*dirs, *files]:
            path = here / name
            if OLD in name:
                recover(here / name.partition(OLD)[0])
                continue
            if not (TMP in name or name.startswith(".partial-")):
                continue
            alive = _writer_alive(name)
            with contextlib.suppress(OSError):
                if alive is False or alive is None and now - path.lstat().st_mtime > STALE_S:
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
                    removed.append(path)
        dirs[:] = [d for d in dirs if recursive and (here / d).is_dir() and not (here / d).is_symlink()]
    return removed
