"""The installed app: ``bertscope app`` runs a main script in its launch folder (the user cache), not the checkout's
``app.py``, so a link named by a path relative to the checkout breaks there (``StreamlitPageNotFoundError``: the
newcomer's fifth pass, rows 1-4). Every cross-page link goes through a page's record; these tests run the pages and
follow a link from the launch folder's own main script."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import bertscope.app
from bertscope.app.kit.pages import PAGES, page
from bertscope.cli.app import launch_folder

APP = Path(bertscope.app.__file__).parent
LINKS = ("page_link", "switch_page")


def _link_calls() -> list[tuple[str, int, ast.Call]]:
    calls = []
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LINKS:
                calls.append((path.relative_to(APP).as_posix(), node.lineno, node))
    return calls


def test_every_cross_page_link_names_a_page_record_never_a_path_string():
    calls = _link_calls()
    assert len(calls) >= 5  # home's list, circuits, the feature edit, masked -> pretraining, fine-tuning -> predictions
    for where, line, call in calls:
        target = call.args[0] if call.args else next(k.value for k in call.keywords if k.arg == "page")
        assert not isinstance(target, ast.Constant), f"{where}:{line}: a link by a path string"
        for sub in ast.walk(target):  # page("x.py"): the script must be a page
            if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "page":
                page(sub.args[0].value)


def test_a_page_that_is_not_there_is_named_with_those_that_are():
    with pytest.raises(KeyError, match="no page 'atention.py'; the pages are home.py, attention.py"):
        page("atention.py")


def _installed(monkeypatch, model: str) -> AppTest:
    """The app as ``bertscope app`` starts it: the launch folder's main script, in the test's user cache."""
    monkeypatch.setenv("BERTSCOPE_MODEL", model)
    main = launch_folder() / "app.py"
    assert not main.resolve().is_relative_to(APP.parents[1])  # not the checkout's app.py
    return AppTest.from_file(str(main), default_timeout=180).run()


@pytest.mark.parametrize("entry", [p for p in PAGES if not p.default], ids=lambda p: p.script)
def test_every_page_renders_from_the_installed_main_script(monkeypatch, tiny_mlm_dir, entry):
    at = _installed(monkeypatch, str(tiny_mlm_dir))
    assert not at.exception
    at.switch_page(str(entry.path)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title][:1] == [entry.title]


def test_masked_pages_link_to_pretraining_opens_it_from_the_installed_main_script(monkeypatch, tiny_mlm_dir):
    """Row 4: a masked-LM without a sentence-pair head offers BERT's NSP by training it; the button opens the
    Pretraining page with that objective (it raised StreamlitPageNotFoundError in the installed app)."""
    at = _installed(monkeypatch, str(tiny_mlm_dir))
    at.switch_page(str(page("masked.py").path)).run()
    go = at.button(key="nsp_go_pretrain")
    go.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title][:1] == ["Pretraining"]
    assert at.session_state["pretrain_pair"] == "nsp"
