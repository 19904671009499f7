"""A circuit pass's two carried buffers through one LayerNorm whose scales are known, in one sweep, and
what the receivers right after it read of them.

At every LayerNorm the circuit pass (``circuits.decomposed.run_pass``) carries each sender's ablated
contribution A with the ablated run's scale, and each sender's kept change K (patched − ablated) with the
clean run's, K gaining the part of A the two scales disagree on (EAP's replay, ``circuits.edges``, carries
clean − ablated the same way):

    A ← γ ⊙ (A − mean A) / σ_ablated
    K ← γ ⊙ (K − mean K) / σ_clean + (σ_ablated / σ_clean − 1) · A

and each receiver reading next (a block's q, k and v inputs, a feed-forward, the decision) reads
Σ_sender weight · K. In torch that is thirteen sweeps over the buffers (two means, two subtractions, two
products, the mix), each the size of every sender's contribution at every position, then a product per
position for the receivers: at BERT-base size and 512 tokens the transports alone were 0.7 s of a 1.7 s
pass, against 0.6 s for the forward itself. On a CPU one numba kernel reads each row once and writes it
once (a row of d_model values stays in cache between its mean and its update) and adds it to each
receiver with an edge from it while it is in cache: 2-3x torch's kernels for the transport, 1.5-2x with
the receivers' sums (``benchmarks/circuits.py --transport``). On other devices torch's kernels run (a
GPU's bandwidth makes the sweeps cheap).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

_KERNEL: Callable[..., None] | None = None
_BROKEN: list[str] = []  # why the kernel could not be built or run here, once: torch's kernels run instead
# one caller at a time: numba's fallback threading layer (workqueue, where neither TBB nor OpenMP loads) must not
# be entered by two threads at once, and each caller sets the kernel's thread count
_LOCK = threading.Lock()


def layer_norm_linear(comps: torch.Tensor, gamma: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """[..., pos, d] each contribution through a LayerNorm whose scale ``sigma`` [pos, 1] is known (β apart)."""
    return gamma * (comps - comps.mean(dim=-1, keepdim=True)) / sigma


def transport_(comps: torch.Tensor, gamma: torch.Tensor, sigma: torch.Tensor) -> None:
    """``layer_norm_linear`` in place (two passes over memory, not five; under autograd too, where ``gamma`` and
    ``sigma`` need no gradient);
    ``sigma`` broadcasts against ``comps`` ([pos, 1] sender-major, [pos, 1, 1] position-major)."""
    comps -= comps.mean(dim=-1, keepdim=True)
    comps *= gamma / sigma


def _build() -> Callable[..., None]:
    import numpy as np
    from numba import njit, prange

    def carry(kept: Any, ablated: Any, n: int, scale_clean: Any, scale_ablated: Any, factor: Any, readers: Any,
              read: Any) -> None:
        # kept [rows, pos, S, d], ablated [pos, S, d]: their first n senders; scales [pos, d]; factor [pos];
        # readers [rows, receiver, n] each receiver's weight on each sender, summed into read [rows, pos, receiver, d]
        rows, pos, senders, d = kept.shape
        receivers = readers.shape[1]
        for p in prange(pos):
            f = factor[p]
            for r in range(rows):  # read's rows of this position, zeroed while in cache (no sweep of their own)
                for c in range(receivers):
                    for j in range(d):
                        read[r, p, c, j] = 0
            for s in range(n):
                mean = np.float32(0.0)  # float32 sums for float32 buffers (numba widens them for float64)
                for j in range(d):
                    mean += ablated[p, s, j]
                mean /= np.float32(d)
                for j in range(d):
                    ablated[p, s, j] = (ablated[p, s, j] - mean) * scale_ablated[p, j]
                for r in range(rows):
                    mean = np.float32(0.0)
                    for j in range(d):
                        mean += kept[r, p, s, j]
                    mean /= np.float32(d)
                    for j in range(d):
                        kept[r, p, s, j] = (kept[r, p, s, j] - mean) * scale_clean[p, j] + f * ablated[p, s, j]
                    for c in range(receivers):  # the row is in cache: each receiver reading it adds it now
                        w = readers[r, c, s]
                        if w != 0:
                            for j in range(d):
                                read[r, p, c, j] += w * kept[r, p, s, j]

    try:  # compiled once per machine: cached beside the module, or in the user's cache when that is read-only
        return njit(parallel=True, fastmath=True, cache=True)(carry)
    except RuntimeError:  # nowhere to cache: compiled in each process (about a second)
        return njit(parallel=True, fastmath=True)(carry)


def _kernel() -> Callable[..., None]:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build()
    return _KERNEL


def _fits_kernel(kept: torch.Tensor, ablated: torch.Tensor, readers: torch.Tensor | None) -> bool:
    """Whether the fused kernel may run on these tensors: a CPU's, one float dtype, no gradient to keep."""
    return (not _BROKEN and kept.device.type == "cpu" and ablated.device.type == "cpu" and kept.dtype == ablated.dtype
            and kept.dtype in (torch.float32, torch.float64) and kept.is_contiguous() and ablated.is_contiguous()
            and not kept.requires_grad and not ablated.requires_grad
            and not (readers is not None and readers.requires_grad))


def read_carried(kept: torch.Tensor, n: int, readers: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[rows, pos, receiver, d] what each receiver reads of the first ``n`` senders of ``kept``
    [rows, pos, S, d], by its weight on each, ``readers`` [rows, receiver, n]: one product per position
    (into ``out`` when given)."""
    rows, pos, _, d = kept.shape
    count = readers.shape[1]
    part = kept[:, :, :n]  # [rows, pos, n, d]
    if torch.is_grad_enabled():  # the buffer changes in place later: autograd keeps its own copy
        part = part.clone()
    weight = readers.to(kept.dtype)[:, None].expand(rows, pos, count, n).reshape(rows * pos, count, n)
    if out is None or torch.is_grad_enabled():  # (autograd differentiates no product written into a given tensor)
        return torch.bmm(weight, part.reshape(rows * pos, n, d)).view(rows, pos, count, d)  # views: no copy
    torch.bmm(weight, part.reshape(rows * pos, n, d), out=out.view(rows * pos, count, d))
    return out


def _check_shapes(kept: torch.Tensor, ablated: torch.Tensor, n: int, gamma: torch.Tensor, sigma_clean: torch.Tensor,
                  sigma_ablated: torch.Tensor, readers: torch.Tensor | None, out: torch.Tensor | None) -> None:
    """The kernel reads raw memory without bounds checks: shapes torch would refuse are refused here."""
    rows, pos, senders, d = kept.shape
    ok = (ablated.shape == (pos, senders, d) and 0 <= n <= senders and gamma.shape == (d,)
          and sigma_clean.shape == (pos, 1) and sigma_ablated.shape == (pos, 1)
          and (readers is None or (readers.dim() == 3 and readers.shape[0] == rows and readers.shape[2] == n))
          and (out is None or (readers is not None and out.is_contiguous() and out.dtype == kept.dtype
                               and out.shape == (rows, pos, readers.shape[1], d))))
    if not ok:
        raise ValueError(f"carry_through_norm_: kept {tuple(kept.shape)}, ablated {tuple(ablated.shape)}, n {n}, "
                         f"gamma {tuple(gamma.shape)}, sigma {tuple(sigma_clean.shape)} / {tuple(sigma_ablated.shape)}, "
                         f"readers {None if readers is None else tuple(readers.shape)}, "
                         f"out {None if out is None else tuple(out.shape)} do not fit together")


def _run_kernel(*tensors: Any) -> bool:
    """The fused kernel on these tensors' memory (kept, ablated, n, scales, factor, weights, read); False,
    and torch's kernels from then on, where numba cannot build it here (said once)."""
    try:
        kernel = _kernel()
        import numba

        most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # (set when numba loads)
        arrays = [t if isinstance(t, int) else t.detach().numpy() for t in tensors]
        with _LOCK:
            numba.set_num_threads(max(1, min(torch.get_num_threads(), most)))  # as many threads as torch's
            kernel(*arrays)
        return True
    except (ImportError, OSError) as e:  # numba missing or its compiler unusable: nothing was written yet
        _BROKEN.append(f"{type(e).__name__}: {e}")
    except Exception as e:  # numba's typing and lowering errors: raised before any write
        if type(e).__module__.split(".")[0] != "numba":
            raise
        _BROKEN.append(f"{type(e).__name__}: {e}")
    warnings.warn(f"The circuit pass's fused LayerNorm transport is unavailable ({_BROKEN[0]}); torch's kernels "
                  "run instead (slower on a CPU).", RuntimeWarning, stacklevel=3)
    return False


def carry_through_norm_(kept: torch.Tensor, ablated: torch.Tensor, n: int, gamma: torch.Tensor,
                        sigma_clean: torch.Tensor, sigma_ablated: torch.Tensor, readers: torch.Tensor | None = None,
                        out: torch.Tensor | None = None, fused: bool = True) -> torch.Tensor | None:
    """In place, the first ``n`` senders of ``kept`` [rows, pos, S, d] (patched − ablated) and ``ablated``
    [pos, S, d] through a LayerNorm of scale ``gamma`` [d] whose σ per position is known on each run
    (``sigma_clean``, ``sigma_ablated`` [pos, 1]); β apart. ``readers`` [rows, receiver, n]: the weight of
    each receiver reading right after this LayerNorm on each of those senders; returns what they read of
    ``kept`` after it, [rows, pos, receiver, d] (``read_carried``, summed in the same sweep), written into
    ``out`` when given (a buffer of that shape, its contents never read). ``fused=False``:
    torch's kernels even where the fused one runs (what the tests hold the fused one to)."""
    rows, pos, _, d = kept.shape
    if n == 0:
        return None if readers is None else (kept.new_zeros(rows, pos, readers.shape[1], d) if out is None
                                             else out.zero_())
    if fused and _fits_kernel(kept, ablated, readers):
        _check_shapes(kept, ablated, n, gamma, sigma_clean, sigma_ablated, readers, out)
        dtype = kept.dtype
        scale_clean = (gamma / sigma_clean).to(dtype).contiguous()  # [pos, d]
        scale_ablated = (gamma / sigma_ablated).to(dtype).contiguous()  # [pos, d]
        factor = (sigma_ablated / sigma_clean - 1).flatten().to(dtype).contiguous()  # [pos]
        weights = kept.new_zeros(rows, 0, n) if readers is None else readers.to(dtype).contiguous()  # [rows, c, n]
        read = kept.new_empty(rows, pos, weights.shape[1], d) if out is None else out  # [rows, pos, receiver, d]
        if _run_kernel(kept, ablated, n, scale_clean, scale_ablated, factor, weights, read):
            return None if readers is None else read
    part_kept, part_ablated = kept[:, :, :n], ablated[:, :n]  # [rows, pos, n, d], [pos, n, d]
    transport_(part_kept, gamma, sigma_clean[:, None])
    transport_(part_ablated, gamma, sigma_ablated[:, None])
    part_kept.addcmul_(part_ablated, (sigma_ablated / sigma_clean - 1)[:, None])
    return None if readers is None else read_carried(kept, n, readers, out)
