"""The app's text helpers: user text is shown, never rendered; an error's commands stay code."""

from __future__ import annotations

from bertscope.app.kit.chrome import plain, plain_but_code


def test_plain_escapes_markdown():
    assert plain("**x** [a](b)") == r"\*\*x\*\* \[a\]\(b\)"


def test_an_errors_commands_stay_code_and_the_rest_is_escaped():
    text = "EWT is not installed: run `python -m bertscope corpus install ewt` (it needs pip)."
    assert plain_but_code(text) == r"EWT is not installed\: run `python -m bertscope corpus install ewt` \(it needs pip\)\."
    assert plain_but_code("a `b_c` and `d*`") == r"a `b_c` and `d*`"  # nothing inside a code span is rendered
    assert plain_but_code("one ` tick") == r"one \` tick"  # an unmatched backtick is text
