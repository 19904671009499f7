"""What the user typed -> where the files come from: a bundled model's folder, a local folder, or
a hub id (read from the local cache alone when the hub is out of reach)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from bertscope.errors import BertScopeError
from bertscope.sources.bundled import BUNDLED_MODELS
from bertscope.sources.hub import hub_reachable

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_source(name: str) -> tuple[str, bool]:
    """(hub id or directory, local_files_only) for what the user typed."""
    name = (name or "").strip()
    if not name:
        raise BertScopeError("No model given: pick a preset, type a hub id or a local folder.")
    if name in BUNDLED_MODELS:
        return str(BUNDLED_MODELS[name].folder()), True
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BertScopeError(f"{name} has no config.json: point to a saved model folder.")
        return str(path.resolve()), True
    if name.startswith(("/", ".", "~")) or os.sep in name.strip("/").replace("/", "", 1):
        raise BertScopeError(f"No model folder at {name}: check the path.")
    if not _HUB_ID.match(name):
        raise BertScopeError(f"{name!r} is neither a hub id (org/name) nor a local folder.")
    return name, not hub_reachable()
