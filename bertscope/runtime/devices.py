"""Device and dtype choice: cuda > mps > cpu, fp32 unless half precision is asked for on a GPU."""

from __future__ import annotations

import torch

from bertscope.errors import BertScopeError

DTYPES = {"auto": None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.insert(0, "cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.insert(0 if "cuda" not in found else 1, "mps")
    return found


def resolve_device(name: str = "auto") -> torch.device:
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device(available_devices()[0])
    kind = name.split(":")[0]
    if kind not in {"cpu", "cuda", "mps"}:
        raise BertScopeError(f"Unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps.")
    if kind not in available_devices():
        raise BertScopeError(f"Device {name!r} is not available here: use auto or cpu.")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    key = (name or "auto").strip().lower()
    if key not in DTYPES:
        raise BertScopeError(f"Unknown dtype {name!r}: use one of {', '.join(DTYPES)}.")
    dtype = DTYPES[key]
    if dtype is None:
        return torch.float32
    if dtype != torch.float32 and device.type == "cpu":
        raise BertScopeError(f"{key} needs a GPU; on the CPU use float32 (or auto).")
    return dtype


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a CPU tensor to ``device`` without making the host wait for queued GPU work: from
    pinned memory the copy is queued like a kernel (from pageable memory CUDA first drains
    the stream, which would serialise tokenising the next batch behind this one's pass). A tensor
    already on an accelerator (``cuda:0`` when ``device`` says ``cuda``) only moves if it must: pinning
    is for host memory alone."""
    if t.device.type != "cpu":
        return t.to(device, non_blocking=True)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
