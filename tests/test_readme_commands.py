"""Every ``-m bertscope`` command the README's code blocks show (``python -m bertscope …``,
``accelerate launch … -m bertscope …``) parses with the command line's own parser: a renamed or
dropped flag fails here, not in a reader's terminal."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bertscope.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[str]:
    """The argument strings of the README's ``-m bertscope`` lines inside ``` blocks."""
    commands, inside = [], False
    for line in README.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        found = re.search(r"-m bertscope (.*)", line) if inside and not line.lstrip().startswith("#") else None
        if found:
            commands.append(re.split(r"\s+#|[|;&<>]", found.group(1))[0].strip())
    return commands


def test_the_readme_shows_commands():
    assert len(readme_commands()) >= 40


@pytest.mark.parametrize("command", readme_commands())
def test_each_readme_command_parses(command):
    try:
        build_parser().parse_args(shlex.split(command))
    except SystemExit as err:
        pytest.fail(f"`bertscope {command}` does not parse (exit {err.code})")
