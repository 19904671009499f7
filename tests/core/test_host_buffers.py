"""Large host buffers (``runtime.host_buffers``): what ``torch.empty`` gives, on huge pages where the kernel
offers them, released with the tensor."""

from __future__ import annotations

import gc
from pathlib import Path

import torch

from bertscope.runtime.host_buffers import WORTH_IT_BYTES, empty_host


def _mapped_bytes() -> int:
    return sum(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmSize:")) * 1024


def test_small_buffers_are_plain_tensors_and_large_ones_behave_alike():
    small = empty_host(10, torch.float64)
    assert small.shape == (10,) and small.dtype == torch.float64 and small.is_contiguous()
    numel = WORTH_IT_BYTES // 4 + 3
    large = empty_host(numel, torch.float32)
    assert large.shape == (numel,) and large.dtype == torch.float32 and large.device.type == "cpu"
    large.fill_(2.0)
    view = large[:6].view(2, 3)
    view += 1  # a view writes through, as with any tensor
    assert float(large[:6].sum()) == 18.0 and float(large[6:].sum()) == 2.0 * (numel - 6)


def test_a_large_buffer_is_released_with_its_tensor():
    """Mapped for the tensor alone (either way: its own mapping, or the allocator's for a block this large)."""
    before = _mapped_bytes()
    x = empty_host(WORTH_IT_BYTES, torch.float32)  # 128 MiB
    x.fill_(1.0)
    assert _mapped_bytes() - before >= 4 * WORTH_IT_BYTES
    del x
    gc.collect()
    assert _mapped_bytes() - before < WORTH_IT_BYTES
