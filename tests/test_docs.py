"""The documentation site agrees with the code: its API page lists every exported name (regenerated, it
is the same page), its hook-point table is the family records' bindings, and every page of the app has a
page of its own with a screenshot. The strict build itself runs in `make docs` (inside `make test`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bertscope.app.kit.pages import PAGES
from bertscope.core.hook_points import LN_FINAL, UNEMBED_IN, _binding, block_suffixes
from bertscope.runtime.families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WORDS = {"input": "input", "output": "output", "input_heads": "input, by head", "output_heads": "output, by head",
         "weights": "weights", "result": "per-head share of"}


def _generator():
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "tools" / "api_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_page_is_current():
    assert (DOCS / "api.md").read_text() == _generator().page(), "run: python tools/api_reference.py"


def hook_table() -> str:
    """The per-family table of docs/hook-points.md, from the records."""

    def cell(family, suffix: str) -> str:
        if suffix not in block_suffixes(family):
            return "—"
        path, how, part = _binding(family, suffix)
        words = {"output_fused": f"output, part {part} of 3", "output_half": f"output, half {part}"}.get(how) or WORDS[how]
        return f"{words} `{path or '(block)'}`"

    gated = next(f for f in FAMILIES if f.gated_mlp)
    lines = ["| hook point | " + " | ".join(f.name for f in FAMILIES) + " |", "|---|" + "---|" * len(FAMILIES),
             "| `embed` | " + " | ".join(" or ".join(f"`{p}`" for p in f.embed) for f in FAMILIES) + " |"]
    lines += [f"| `blocks.L.{s}` | " + " | ".join(cell(f, s) for f in FAMILIES) + " |" for s in block_suffixes(gated)]
    lines.append(f"| `{LN_FINAL}` | " + " | ".join(f"`{f.final_norm}` output" if f.final_norm else "—"
                                                   for f in FAMILIES) + " |")
    lines.append(f"| `{UNEMBED_IN}` | " + " | ".join("input of the vocabulary projection" for _ in FAMILIES) + " |")
    return "\n".join(lines)


def test_the_hook_point_table_is_the_family_records():
    assert hook_table() in (DOCS / "hook-points.md").read_text()


def test_every_page_of_the_app_has_its_docs_page_and_screenshot():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        if page.default:
            continue
        doc = DOCS / "pages" / f"{page.url_path}.md"
        assert doc.is_file() and f"pages/{page.url_path}.md" in nav, page.title
        assert (DOCS / "assets" / "screens" / f"{page.url_path}.png").is_file(), page.title
        text = doc.read_text()
        assert "## From the command line" in text and "## From a notebook" in text, page.title


def test_the_peers_page_lists_the_hook_name_record():
    """docs/peers.md's table of names beside TransformerLens's bridge is ``interop.hook_names`` (the peers lane
    holds the record to the tensors)."""
    from bertscope.interop.hook_names import DIFFERENT, SAME

    page = (DOCS / "peers.md").read_text()
    for ours, theirs in SAME.items():
        assert f"| `{ours.replace('{l}', 'L')}` | `{theirs.replace('{l}', 'L')}` |" in page, ours
    for name in DIFFERENT:
        assert f"| `{name.replace('{l}', 'L')}` |" in page, name


def test_every_tl_adapter_is_an_entry_point_in_pyproject():
    """TransformerLens finds the adapters through ``pyproject.toml``'s entry points: one per architecture of
    ``interop.tl_adapters.ARCHITECTURES`` (read from its source: transformer_lens is not in this environment)."""
    import ast
    import tomllib

    source = (ROOT / "bertscope" / "interop" / "tl_adapters.py").read_text()
    table = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", "") == "ARCHITECTURES")
    architectures = {k.value for k in table.value.keys}
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["transformer_lens.architectures"]
    assert points == {a: f"bertscope.interop.tl_adapters:{a}Adapter" for a in architectures}
    assert all(f"{a}Adapter = _adapter(\"{a}\")" in source for a in architectures)
