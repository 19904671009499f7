"""Every page is a script over named functions that runs only as Streamlit's ``__main__`` (issue 68): importing a
page (a reader's tools, ``pytest --doctest-modules bertscope``, the docs' API walk) runs nothing. At a page's top
level: imports, functions, classes, constants, and the ``if __name__ == "__main__": page()`` guard."""

from __future__ import annotations

import ast
import importlib

import pytest

from bertscope.app.kit.pages import APP_DIR, PAGES


def _top_level_work(path) -> list[str]:
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
            continue
        source = ast.unparse(node)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and ("st." not in source or "st.column_config" in source):
            continue  # a constant (a column format is an object, not a widget)
        found.append(f"line {node.lineno}: {source[:80]}")
    return found


@pytest.mark.parametrize("entry", PAGES, ids=[p.script for p in PAGES])
def test_a_page_runs_only_as_main(entry):
    path = APP_DIR / entry.script
    assert not _top_level_work(path), _top_level_work(path)
    module = importlib.import_module(f"bertscope.app.{path.stem}")  # imports without a running script: nothing drawn
    assert callable(module.page)


PAGE_LINES = 40  # issue 68: a page's own code a short script; what it draws lives in named functions


@pytest.mark.parametrize("entry", PAGES, ids=[p.script for p in PAGES])
def test_a_page_is_a_short_script(entry):
    """``page()`` runs at most ``PAGE_LINES`` lines, its docstring not counted."""
    tree = ast.parse((APP_DIR / entry.script).read_text())
    (page,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "page"]
    body = page.body[1:] if isinstance(page.body[0], ast.Expr) and isinstance(page.body[0].value, ast.Constant) \
        else page.body
    lines = page.end_lineno - body[0].lineno + 1
    assert lines <= PAGE_LINES, f"{entry.script}: page() runs {lines} lines; give its steps names"
