"""Where BertScope keeps what it builds: converted models and hidden-state caches."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def user_cache_dir() -> Path:
    """BERTSCOPE_CACHE, else $XDG_CACHE_HOME/bertscope, else ~/.cache/bertscope."""
    chosen = os.environ.get("BERTSCOPE_CACHE", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "bertscope"


def publish_folder(tmp: Path, folder: Path, marker: str) -> None:
    """Put the finished folder ``tmp`` at ``folder`` unless another process published it first (then
    theirs, whole: it holds ``marker``, is kept); a cache entry is whole or absent."""
    try:
        os.replace(tmp, folder)
    except OSError:
        if not (folder / marker).is_file():
            raise


def replace_folder(tmp: Path, folder: Path) -> None:
    """Put the finished folder ``tmp`` (written beside ``folder``) in ``folder``'s place: readers
    see the old folder or the new one, never a half-written one."""
    if not folder.exists():
        os.replace(tmp, folder)
        return
    old = folder.with_name(f"{folder.name}.old-{uuid.uuid4().hex[:12]}")
    os.replace(folder, old)  # renames only: the old folder stays whole until the new one is in place
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)
