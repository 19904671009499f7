"""A SentencePiece "precompiled charsmap" built from a per-codepoint normalisation map.

The ``tokenizers`` library runs SentencePiece normalisation through ``normalizers.Precompiled``,
which reads the charsmap format of SentencePiece's ``normalizer.cc``: a little-endian u32 with
the trie's size in bytes, the trie as a darts-clone double array of u32 units, then the
replacement strings, each ending in NUL. A unit holds a label byte (bits 0-7), a has-leaf flag
(bit 8) and the XOR offset to its children (bits 10-30; bit 9 would scale it by 256); a leaf
unit has bit 31 set and holds the replacement's position in the string blob.

    >>> from tokenizers import normalizers
    >>> normalizers.Precompiled(precompiled_charsmap({0xFF21: (0x41,)})).normalize_str("ＡB")
    'AB'
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import numpy as np

_LEAF = 0x80000000
_HAS_LEAF = 1 << 8
_MAX_OFFSET = 1 << 21


def precompiled_charsmap(mapping: Mapping[int, Sequence[int]]) -> bytes:
    """{codepoint: replacement codepoints (empty = delete)} -> charsmap bytes."""
    blob = bytearray()
    where: dict[bytes, int] = {}
    keys: dict[bytes, int] = {}
    for cp, out in sorted(mapping.items()):
        text = "".join(map(chr, out)).encode("utf-8")
        if text not in where:
            where[text] = len(blob)
            blob += text + b"\0"
        keys[chr(cp).encode("utf-8")] = where[text]

    children: list[dict[int, int]] = [{}]  # byte trie over the keys' UTF-8
    value: list[int | None] = [None]
    for key, v in keys.items():
        node = 0
        for byte in key:
            if byte not in children[node]:
                children[node][byte] = len(children)
                children.append({})
                value.append(None)
            node = children[node][byte]
        value[node] = v

    units = np.zeros(1 << 16, np.uint32)
    used = np.zeros(1 << 16, bool)
    used[0] = True  # the root
    position = [0] * len(children)
    lowest = 1
    queue, head = [0], 0
    while head < len(queue):  # breadth first: place each node's children in free slots
        node = queue[head]
        head += 1
        labels = sorted(children[node])
        need = np.array([0, *labels])  # slot 0 of the block: the leaf (reserved either way)
        while True:
            while used[lowest]:
                lowest += 1
            start = max(0, lowest - 255)
            candidates = np.arange(start, start + 4096)
            slots = candidates[:, None] ^ need[None, :]  # [candidate, slot]
            if slots.max() >= len(used):
                units = np.concatenate([units, np.zeros_like(units)])
                used = np.concatenate([used, np.zeros_like(used)])
                continue
            free = ~used[slots].any(axis=1)
            if free.any():
                base = int(candidates[np.argmax(free)])
                break
            lowest = start + 4096
        here = position[node]
        offset = here ^ base
        if not 0 < offset < _MAX_OFFSET:
            raise ValueError("normalisation map too large for a charsmap")
        label = 0 if node == 0 else int(units[here]) & 0xFF
        leaf = value[node]
        units[here] = (offset << 10) | label | (_HAS_LEAF if leaf is not None else 0)
        used[base] = True
        if leaf is not None:
            units[base] = leaf | _LEAF
        for byte in labels:
            slot = base ^ byte
            used[slot] = True
            units[slot] = byte
            position[children[node][byte]] = slot
            queue.append(children[node][byte])
    units = units[: int(np.flatnonzero(used).max()) + 1]
    return struct.pack("<I", len(units) * 4) + units.astype("<u4").tobytes() + bytes(blob)
