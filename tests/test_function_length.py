"""No function in ``bertscope/`` runs past 80 lines of code (issue 68: one job a function): its docstring is not
counted (an ``Args:`` table documents a call, it does not lengthen its job). A function past the bar is listed in
``LONGER`` with the reason it stays whole."""

from __future__ import annotations

import ast
from pathlib import Path

import bertscope

LIMIT = 80
LONGER: dict[str, str] = {}  # "module.py:function" -> why it stays whole


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1  # type: ignore[operator]
    return lines


def function_lengths() -> dict[str, int]:
    root = Path(bertscope.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{path.relative_to(root)}:{node.name}"] = max(found.get(f"{path.relative_to(root)}:{node.name}",
                                                                               0), _code_lines(node))
    return found


def test_no_function_runs_past_the_bar():
    long = {name: n for name, n in function_lengths().items() if n > LIMIT and name not in LONGER}
    assert not long, f"functions past {LIMIT} lines of code (split them, or say in LONGER why not): {long}"


def test_every_exception_is_still_long():
    lengths = function_lengths()
    stale = [name for name in LONGER if lengths.get(name, 0) <= LIMIT]
    assert not stale, f"no longer past the bar: drop from LONGER: {stale}"
