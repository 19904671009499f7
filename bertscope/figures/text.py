"""Text as figures and tables show it: tokens safe for plotly's labels, pieces of right-to-left
scripts kept in reading order, and a word centred in its sentence (a concordance line).

A WordPiece continuation of an Arabic or Hebrew word, ``##ر``, starts with neutral characters and
then a right-to-left letter, so a browser lays the whole label out right to left and shows
``ر##``: the mark lands on the far side of the piece from the token it continues (axes list tokens
left to right). A left-to-right mark (U+200E) first fixes the label's direction: the mark stays on
the left, facing the previous token, and the letters themselves still run right to left. The same
mark keeps such a cell left-aligned in a table, like its neighbours.
"""

from __future__ import annotations

import html
import unicodedata

LRM = "\u200e"


def right_to_left(text: str) -> bool:
    """Whether ``text`` has a letter of a right-to-left script (Arabic, Hebrew, Syriac, Thaana, …)."""
    return any(unicodedata.bidirectional(c) in ("R", "AL") for c in text)


def table_text(token: str) -> str:
    """A token for a table cell: as written, anchored left to right when it holds RTL letters."""
    return LRM + token if right_to_left(token) else token


def label(token: str) -> str:
    """A token as safe text for plotly, which renders a subset of HTML in labels."""
    return table_text(html.escape(token, quote=False))  # plotly decodes &lt; &gt; &amp; but shows &quot; raw


def in_context(text: str, start: int, end: int, width: int = 48) -> tuple[str, str, str]:
    """(left, word, right): the word at ``text[start:end]`` with up to ``width`` characters of
    context on each side, cut at a space where one is near and marked with "…"; for a table
    whose left column is right-aligned, so every word lines up in the middle (exBERT's view)."""
    left, word, right = text[:start], text[start:end], text[end:]
    if len(left) > width:
        cut = left[-width:]
        space = cut.find(" ")
        left = "…" + (cut[space + 1:] if 0 <= space < width // 3 else cut)
    if len(right) > width:
        cut = right[:width]
        space = cut.rfind(" ")
        right = (cut[:space] if space > 2 * width // 3 else cut) + "…"
    return left.rstrip() + (" " if left.endswith(" ") else ""), word, right
