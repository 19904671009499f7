"""Writes docs/api.md from the package's faces: every name of ``bertscope.__all__`` and of each subpackage's
``__all__``, each object rendered once (mkdocstrings) where its subpackage lists it. Run after changing an
``__all__``: ``python tools/api_reference.py`` (tests/test_docs.py checks the page is current)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout: its own package, installed or not
import bertscope  # noqa: E402

ROOT = Path(bertscope.__file__).parent
PAGE = ROOT.parent / "docs" / "api.md"


def faces() -> list[tuple[str, dict[str, str]]]:
    """(package, {name: its object's dotted path}) for bertscope and each subpackage with a face."""
    out = []
    for name in ["bertscope"] + [f"bertscope.{m.name}" for m in sorted(pkgutil.iter_modules([str(ROOT)]),
                                                                         key=lambda m: m.name) if m.ispkg]:
        module = importlib.import_module(name)
        exports = getattr(module, "_EXPORTS", {})
        names = {n: f"bertscope.{exports[n]}.{n}" for n in getattr(module, "__all__", []) if n in exports}
        if name == "bertscope":
            names = {"BertScopeError": "bertscope.errors.BertScopeError", **names}
        if names:
            out.append((name, names))
    return out


def page() -> str:
    lines = ["# API reference", "",
             "Generated from the docstrings (`python tools/api_reference.py`): what `bertscope` exports, then each",
             "subpackage's face. Every name is importable from the package it is listed under.", ""]
    everything = faces()
    shown: set[str] = set()
    top = dict(everything[0][1])
    lines += ["## `bertscope`", "", "| name | documented at |", "|---|---|"]
    in_faces = {path for pkg, names in everything[1:] for path in names.values()}
    for name, path in top.items():
        lines.append(f"| `{name}` | [{path}][{path}] |")
    lines.append("")
    extra = [(n, p) for n, p in top.items() if p not in in_faces]
    if extra:
        lines += ["### Defined elsewhere", ""]
        for _, path in extra:
            lines += [f"::: {path}", "    options:", "      heading_level: 4", ""]
            shown.add(path)
    for pkg, names in everything[1:]:
        lines += [f"## `{pkg}`", "", f"::: {pkg}", "    options:", "      members: false", "      show_root_heading: false", ""]
        for name, path in names.items():
            if path in shown:
                lines.append(f"- `{name}`: [{path}][{path}]")
                continue
            shown.add(path)
            lines += [f"::: {path}", "    options:", "      heading_level: 3", ""]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    PAGE.write_text(page())
    print(f"{PAGE}: {sum(len(n) for _, n in faces())} names")
