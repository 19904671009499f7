"""A least-recently-used cache bounded by bytes, safe to share between threads (sessions).

    >>> import numpy as np
    >>> cache = ResultCache(max_bytes=512 * 2**20)
    >>> ones = cache.get_or_compute(("ones", 3), lambda: np.ones(3, np.float32))   # computed once
    >>> cache.get(("ones", 3)) is ones, cache.bytes
    (True, 12)

Entries are weighed by ``size_of`` (numpy arrays and tensors by their buffers, containers and
dataclasses by their contents); past the budget the least recently used go first. An entry
larger than the whole budget is returned but not kept. Two threads asking for the same key
compute it once: the second waits for the first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np


def size_of(obj: Any, _seen: set[int] | None = None) -> int:
    """Approximate bytes held by ``obj``: arrays by their data, everything else by its parts."""
    seen = _seen if _seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) if obj.dtype != object else sum(size_of(x, seen) for x in obj.flat)
    if type(obj).__module__.startswith("torch") and hasattr(obj, "element_size"):
        return int(obj.element_size() * obj.nelement())
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return sys.getsizeof(obj)
    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(size_of(k, seen) + size_of(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sys.getsizeof(obj) + sum(size_of(x, seen) for x in obj)
    if dataclasses.is_dataclass(obj):
        return sys.getsizeof(obj) + sum(size_of(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    if hasattr(obj, "__dict__"):
        return sys.getsizeof(obj) + size_of(vars(obj), seen)
    return sys.getsizeof(obj)


def _libc_trim() -> Callable[[int], object] | None:
    """glibc's malloc_trim, or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _libc_trim()


def return_freed_memory() -> None:
    """Hand memory freed by dropped results back to the OS. glibc keeps freed blocks in the
    arena of the thread that allocated them, and a server runs each session in its own thread,
    so without this a process's RSS keeps what the byte budget already let go."""
    if _TRIM is not None:
        _TRIM(0)


class ResultCache:
    """LRU by bytes. ``get``/``put``/``get_or_compute``; ``bytes`` is what is held now."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key: Hashable, value: Any) -> bool:
        """Keep ``value``; False when it alone exceeds the budget (then it is not kept)."""
        size = size_of(value)
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            if size > self.max_bytes:
                return False
            self._items[key] = (value, size)
            self._bytes += size
            evicted = []
            while self._bytes > self.max_bytes:
                _, (old, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
                evicted.append(old)
        if evicted:
            del evicted, old  # the last references this cache held
            return_freed_memory()
        return True

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        missing = object()
        value = self.get(key, missing)
        if value is not missing:
            return value
        with self._lock:
            gate = self._computing.setdefault(key, threading.Lock())
        try:
            with gate:  # one computation per key; others wait here and then find it
                value = self.get(key, missing)
                if value is missing:
                    value = compute()  # an error reaches the caller; nothing is kept
                    self.put(key, value)
        finally:
            with self._lock:
                self._computing.pop(key, None)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
