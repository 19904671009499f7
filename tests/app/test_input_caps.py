"""Every input box says its cap before a button refuses: enumerated over every page's source, so a
new page cannot forget it (a guardrail remembered page by page is forgotten on the next page)."""

import ast
from pathlib import Path

import pytest

VIEWS = Path(__file__).resolve().parents[2] / "bertscope" / "app"
NEEDS = {"text_area": "max_chars", "text_input": "max_chars", "file_uploader": "max_upload_size"}


def widget_calls():
    for path in sorted(VIEWS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in NEEDS:
                yield path, node


def test_there_are_boxes_to_check():
    kinds = {node.func.attr for _, node in widget_calls()}
    assert kinds == set(NEEDS)


@pytest.mark.parametrize("kind", sorted(NEEDS))
def test_every_box_states_its_cap(kind):
    missing = [f"{path.relative_to(VIEWS.parent)}:{node.lineno}" for path, node in widget_calls()
               if node.func.attr == kind and NEEDS[kind] not in {k.arg for k in node.keywords}]
    assert not missing, f"{kind} without {NEEDS[kind]}: {missing}"


def test_uploaders_say_the_demo_cap(monkeypatch):
    from bertscope.app.kit.limits import Limits

    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    assert Limits.upload_mb == 1 and Limits.upload_bytes == 1_000_000
    monkeypatch.delenv("BERTSCOPE_DEMO")
    assert Limits.upload_mb == 20
    uploads = [node for _, node in widget_calls() if node.func.attr == "file_uploader"]
    assert all(ast.unparse(next(k.value for k in n.keywords if k.arg == "max_upload_size")) == "Limits.upload_mb"
               for n in uploads)
