"""A package's public names, imported when first used (PEP 562): ``from bertscope.attribution import
attribute`` works, while importing a package (or one of its modules) stays as cheap as the module."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for ``package``, whose name ``n`` is ``exports[n]``'s ``n``
    (a module path relative to ``bertscope``)."""

    def getattr_(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"bertscope.{exports[name]}"), name)
        globals_of_package = importlib.import_module(package).__dict__
        globals_of_package[name] = value  # found once, then an ordinary attribute
        return value

    def dir_() -> list[str]:
        return sorted(set(exports) | set(importlib.import_module(package).__dict__))

    return getattr_, dir_
