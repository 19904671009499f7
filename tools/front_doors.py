"""Write each package face's ``if TYPE_CHECKING:`` block from its ``_EXPORTS``: the same names, imported for real,
for a reader's tools (IDEs, mypy, static walks) that stop at the lazy ``__getattr__`` (PEP 562). At run time the
block is skipped, so importing a package stays as cheap as before. ``tests/test_public_api.py`` holds every face to
its ``_EXPORTS``.

    python tools/front_doors.py          # rewrite the blocks
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py"


def exports_of(face: Path) -> dict[str, str] | None:
    for node in ast.parse(face.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def block(exports: dict[str, str]) -> str:
    by_module: dict[str, list[str]] = defaultdict(list)
    for name, module in exports.items():
        by_module[module].append(name)
    lines = [MARK]
    for module in sorted(by_module):
        names = [f"{n} as {n}" for n in sorted(by_module[module], key=lambda n: (n.lower(), n))]  # a re-export
        line = f"    from bertscope.{module} import {', '.join(names)}"
        if len(line) > 120:
            line = f"    from bertscope.{module} import (\n        " + ",\n        ".join(names) + ",\n    )"
        lines.append(line)
    return "\n".join(lines) + "\n"


def rewrite(face: Path) -> bool:
    exports = exports_of(face)
    if not exports:
        return False
    text = face.read_text()
    if MARK in text:
        text = text[:text.index(MARK)].rstrip("\n") + "\n"
    if "from typing import TYPE_CHECKING" not in text:
        anchor = "from bertscope."
        at = text.index(anchor)
        text = text[:at] + "from typing import TYPE_CHECKING\n\n" + text[at:]
    face.write_text(text.rstrip("\n") + "\n\n" + block(exports))
    return True


def main() -> int:
    faces = [p for p in sorted((ROOT / "bertscope").glob("**/__init__.py")) if rewrite(p)]
    print(f"{len(faces)} faces written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
