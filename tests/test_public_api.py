"""The public face: every name a notebook imports exists, every docstring example runs, and each
floor of ``bertscope`` imports only the floors its ``__init__`` docstring allows."""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
import re
import tempfile
from pathlib import Path

import pytest

import bertscope

ROOT = Path(bertscope.__file__).parent


def test_every_exported_name_imports():
    for package in ["bertscope", *(f"bertscope.{m.name}" for m in pkgutil.iter_modules([str(ROOT)]) if m.ispkg)]:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", []):
            assert getattr(module, name) is not None, f"{package}.{name}"
    from bertscope import attribute, patch, probe_layers, run_with_cache, train  # noqa: F401  the notebook's verbs
    from bertscope.attribution import Target  # noqa: F401  (a docstring example that used to fail)
    from bertscope.training import RecipeConfig  # noqa: F401
    with pytest.raises(AttributeError):
        bertscope.nothing_here  # noqa: B018


def _modules_with_examples() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if ">>>" in path.read_text():
            found.append(".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    """``python -m doctest``'s rules: every ``>>>`` line runs and prints what the docstring says (a
    ``tempfile.mkdtemp()`` of theirs lands in pytest's folder, removed with it: a random BERT is 440 MB)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, name) if t.examples]  # in the module's own namespace
    assert tests, f"{name} has >>> lines that doctest does not find"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (see the output)"


def _allowed(package: Path) -> set[str]:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    found = re.search(r"May import:(.*?)(?:\.\s*$|\.\s*\n\s*\n)", doc, re.S)
    assert found, f"{package.name}/__init__.py does not say what it may import"
    return set(re.findall(r"``(\w+)``", found.group(1)))


def _imports(path: Path) -> set[str]:
    floors = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            if name.startswith("bertscope."):
                floors.add(name.split(".")[1])
    return floors


def test_each_floor_imports_only_what_its_docstring_allows():
    packages = [p for p in sorted(ROOT.iterdir()) if (p / "__init__.py").is_file()]
    assert len(packages) >= 12
    for package in packages:
        allowed = _allowed(package) | {package.name}
        for path in sorted(package.rglob("*.py")):
            extra = _imports(path) - allowed
            assert not extra, f"{path.relative_to(ROOT)} imports {sorted(extra)}; {package.name} may import {sorted(allowed)}"


def test_no_package_exports_a_name_its_submodule_has():
    """``from bertscope.tasks import predict`` would give the module or the function depending on what
    was imported before: a package's verbs never share a name with its modules."""
    for package in [p for p in sorted(ROOT.iterdir()) if (p / "__init__.py").is_file()]:
        module = importlib.import_module(f"bertscope.{package.name}")
        modules = {m.name for m in pkgutil.iter_modules([str(package)])}
        assert not set(getattr(module, "__all__", [])) & modules, package.name


def test_only_the_app_floor_imports_streamlit():
    """The library is usable from a notebook with no web server: streamlit is the top floor's alone."""
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).parts[0] == "app":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not any(n.split(".")[0] == "streamlit" for n in names), path.relative_to(ROOT)


def test_every_face_shows_its_exports_to_a_readers_tools():
    """A package's names come through a lazy ``__getattr__`` (cheap imports), where IDEs and type checkers stop:
    each face's ``if TYPE_CHECKING:`` block imports the very same names from the very same modules
    (``python tools/front_doors.py`` writes it)."""
    import ast

    faces = 0
    for face in sorted(ROOT.glob("**/__init__.py")):
        tree = ast.parse(face.read_text())
        exports = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", None) == "_EXPORTS" for t in n.targets)), None)
        if exports is None:
            continue
        faces += 1
        guarded = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
        seen = {alias.name: node.module.removeprefix("bertscope.") for node in guarded.body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
        assert seen == exports, f"{face}: run python tools/front_doors.py"
    assert faces >= 13


def test_the_root_docstrings_map_names_every_subpackage():
    import bertscope

    listed = {m.group(1) for m in re.finditer(r"^ {4}(\w+) {2,}\S", bertscope.__doc__, re.M)}  # "    name  what"
    real = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert real - {"configs", "data"} <= listed, sorted(real - listed)
    assert listed <= real | {"errors"}, sorted(listed - real)
