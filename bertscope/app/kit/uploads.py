"""What a visitor uploads, read one way on every page: capped in bytes, decoded as UTF-8 with one message
(``training.task_data.decode``), and kept on disk, where a job needs a file, under its digest: a file's name is
shown as text and used for its format, never as a path."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bertscope.app.kit.limits import check_upload
from bertscope.runtime.atomic import write_bytes
from bertscope.runtime.disk_quota import make_room, touch
from bertscope.runtime.user_cache import user_cache_dir
from bertscope.training.task_data import decode

SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".conllu", ".txt")  # what a reader tells formats by


def shown_name(upload) -> str:
    """The upload's name as messages show it: its last part, at most 80 characters."""
    name = str(upload.name).replace("\\", "/").rsplit("/", 1)[-1] or "the upload"
    return name if len(name) <= 80 else name[:77] + "…"


def uploaded_text(upload) -> str:
    """The upload's text: over the cap or not UTF-8, one line."""
    check_upload(upload)
    return decode(upload.getvalue(), shown_name(upload))


def keep_upload(upload) -> Path:
    """The upload's bytes in the user cache as ``uploads/<digest><suffix>`` (the suffix only if a reader knows it),
    written whole, within a hosted demo's disk quota; the same bytes twice are one file."""
    check_upload(upload)
    content = upload.getvalue()
    suffix = Path(shown_name(upload)).suffix.lower()
    path = user_cache_dir() / "uploads" / (hashlib.sha256(content).hexdigest()[:32] + (suffix if suffix in SUFFIXES else ""))
    if path.is_file():
        touch(path)
        return path
    make_room(len(content), "keeping this upload")
    write_bytes(path, content)
    return path
