"""Where BertScope keeps what it builds: converted models and hidden-state caches."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """BERTSCOPE_CACHE, else $XDG_CACHE_HOME/bertscope, else ~/.cache/bertscope."""
    chosen = os.environ.get("BERTSCOPE_CACHE", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "bertscope"
