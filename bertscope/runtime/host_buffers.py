"""Large host buffers on transparent huge pages, where the kernel offers them.

A fresh tensor of a few hundred MiB costs the first touch of its pages: on Linux each 4 KiB page faults and is
zeroed when first written (88 ms for 250 MiB on the development VM). Backed by 2 MiB pages (``madvise``
``MADV_HUGEPAGE``, honoured when ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``),
the same first touch takes 25 ms. PyTorch offers this for every allocation of a process
(``THP_MEM_ALLOC_ENABLE=1``); this asks for it only for the buffers that need it. Elsewhere (no
``MADV_HUGEPAGE``, another OS) it is a plain ``torch.empty``.
"""

from __future__ import annotations

import mmap

import torch

WORTH_IT_BYTES = 32 * 2**20  # below this the page faults cost little


def empty_host(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """[numel] an uninitialised CPU tensor; on huge pages when it is large and the kernel allows them."""
    size = numel * torch.empty((), dtype=dtype).element_size()
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if size < WORTH_IT_BYTES or advice is None or not hasattr(mmap, "MAP_ANONYMOUS"):
        return torch.empty(numel, dtype=dtype)
    try:
        pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        pages.madvise(advice)
    except (OSError, ValueError):  # no such mapping or advice here
        return torch.empty(numel, dtype=dtype)
    return torch.frombuffer(pages, dtype=dtype, count=numel)  # the tensor holds the mapping until it goes
