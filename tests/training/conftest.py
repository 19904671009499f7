"""Shared by the fine-tuning tests: the ``finetune`` command run on bad input."""

from __future__ import annotations

import pytest

from bertscope.cli import main


@pytest.fixture
def refused(tiny_bert_dir, tmp_path, capsys):
    """``refused(*extra, data=…, task=…)``: runs ``finetune`` on the tiny BERT, asserts it ends with
    one ``bertscope: error:`` line and exit status 2, and returns that line."""

    def run(*extra, data, task="classify") -> str:
        capsys.readouterr()
        status = main(["finetune", str(tiny_bert_dir), "--task", task, "--data", str(data), "--out",
                       str(tmp_path / "out"), "--device", "cpu", *extra])
        err = capsys.readouterr().err
        assert status == 2 and err.startswith("bertscope: error: ") and err.count("\n") == 1, err
        return err

    return run
