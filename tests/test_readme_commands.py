"""Every ``bertscope`` command the README and the documentation site show in their code blocks
(``bertscope …``, ``python -m bertscope …``, ``accelerate launch … -m bertscope …``) parses with the command
line's own parser: a renamed or dropped flag fails here, not in a reader's terminal."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bertscope.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"(?:^|\s|-m )bertscope ((?:[a-z][a-z-]*)(?:\s.*)?)$")


def shown_commands(path: Path) -> list[str]:
    """The argument strings of a page's ``bertscope`` lines inside ``` blocks."""
    commands, inside = [], False
    for line in path.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        stripped = line.strip()
        if not inside or stripped.startswith("#") or "import" in stripped:
            continue
        found = COMMAND.search(re.split(r"\s+#", stripped)[0])
        if found:
            commands.append(re.split(r"[|;&<>]", found.group(1))[0].strip())
    return commands


ALL = [(path.relative_to(ROOT).as_posix(), c) for path in PAGES for c in shown_commands(path)]


def test_the_pages_show_commands():
    assert len(ALL) >= 60
    assert len(shown_commands(ROOT / "README.md")) >= 4 and len(shown_commands(ROOT / "docs" / "commands.md")) >= 40


@pytest.mark.parametrize("page, command", ALL)
def test_each_shown_command_parses(page, command):
    try:
        build_parser().parse_args(shlex.split(command))
    except SystemExit as err:
        pytest.fail(f"{page}: `bertscope {command}` does not parse (exit {err.code})")
