"""The circuit pass's fused LayerNorm transport (``circuits.norm_transport``): the numba kernel gives what
torch's kernels give, with and without a receiver reading in the same sweep, and the circuit pass gives the
same metric through either."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from bertscope.circuits import norm_transport
from bertscope.circuits.decomposed import layer_weights, run_pass
from bertscope.circuits.edges import record_pairs
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.norm_transport import carry_through_norm_
from bertscope.circuits.pairs import Pair
from bertscope.core.models import load_model


def _buffers(rows: int, pos: int, senders: int, d: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    kept = torch.randn(rows, pos, senders, d, generator=g, dtype=dtype)
    ablated = torch.randn(pos, senders, d, generator=g, dtype=dtype)
    gamma = torch.rand(d, generator=g, dtype=dtype) + 0.5
    sigma_clean = torch.rand(pos, 1, generator=g, dtype=dtype) + 0.5
    sigma_ablated = torch.rand(pos, 1, generator=g, dtype=dtype) + 0.5
    return kept, ablated, gamma, sigma_clean, sigma_ablated


def _by_hand(kept, ablated, n, gamma, sigma_clean, sigma_ablated, reader):
    """The transport written out as the docstring states it, out of place."""
    a = ablated[:, :n]
    a = gamma * (a - a.mean(-1, keepdim=True)) / sigma_ablated[:, None]
    k = kept[:, :, :n]
    k = gamma * (k - k.mean(-1, keepdim=True)) / sigma_clean[:, None] + (sigma_ablated / sigma_clean - 1)[:, None] * a
    read = None if reader is None else torch.einsum("rcs,rpsd->rpcd", reader.to(k.dtype), k)
    return k, a, read


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("rows,with_reader", [(1, False), (1, True), (3, True)])
def test_the_fused_kernel_gives_what_torch_gives(dtype, tol, rows, with_reader):
    pos, senders, d, n = 7, 9, 48, 6  # the last 3 senders not yet reached: left as they are
    kept, ablated, gamma, sigma_clean, sigma_ablated = _buffers(rows, pos, senders, d, dtype)
    reader = None
    if with_reader:
        reader = (torch.rand(rows, 4, n, generator=torch.Generator().manual_seed(1)) < 0.5).to(dtype)  # 4 receivers
        reader[:, :, 0] = 1  # some weight in every row; some senders not read
        reader[0, :, 1] = 0
        reader[:, 3] *= 0.5  # weights other than 0 and 1 (a gradient pass's fractions)
    want_k, want_a, want_read = _by_hand(kept, ablated, n, gamma, sigma_clean, sigma_ablated, reader)
    for fused, given in ((True, False), (True, True), (False, False), (False, True)):
        k, a = kept.clone(), ablated.clone()
        out = torch.full((rows, pos, 4, d), float("nan"), dtype=dtype) if given and with_reader else None  # never read
        with torch.no_grad():  # as the circuit pass runs
            read = carry_through_norm_(k, a, n, gamma, sigma_clean, sigma_ablated, reader, out, fused=fused)
        if out is not None:
            assert read is out
        torch.testing.assert_close(k[:, :, :n], want_k, atol=tol, rtol=tol)
        torch.testing.assert_close(a[:, :n], want_a, atol=tol, rtol=tol)
        assert torch.equal(k[:, :, n:], kept[:, :, n:]) and torch.equal(a[:, n:], ablated[:, n:])
        if reader is None:
            assert read is None
        else:
            assert read is not None and read.shape == (rows, pos, 4, d)
            torch.testing.assert_close(read, want_read, atol=tol * 10, rtol=tol)
    assert norm_transport._KERNEL is not None  # the fused path ran


def test_nothing_carried_reads_zero():
    kept, ablated, gamma, sigma_clean, sigma_ablated = _buffers(2, 3, 4, 8, torch.float32)
    before = kept.clone()
    read = carry_through_norm_(kept, ablated, 0, gamma, sigma_clean, sigma_ablated, torch.ones(2, 5, 0))
    assert read is not None and read.shape == (2, 3, 5, 8) and not read.any() and torch.equal(kept, before)


def test_threads_may_carry_at_once():
    """Sessions of a hosted app run passes in threads: the kernel is entered by one at a time."""
    out: list[Exception] = []

    def work(seed: int) -> None:
        try:
            kept, ablated, gamma, sigma_clean, sigma_ablated = _buffers(1, 64, 12, 96, torch.float32, seed)
            want_k, _, _ = _by_hand(kept, ablated, 12, gamma, sigma_clean, sigma_ablated, None)
            for _ in range(20):
                k, a = kept.clone(), ablated.clone()
                carry_through_norm_(k, a, 12, gamma, sigma_clean, sigma_ablated)
                torch.testing.assert_close(k, want_k, atol=1e-5, rtol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported below
            out.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not out


def test_a_circuit_pass_gives_the_same_metric_through_either_kernel(tiny_mlm_dir, monkeypatch):
    lm = load_model(str(tiny_mlm_dir))
    weights = layer_weights(lm)
    where, recorded = record_pairs(lm, [Pair("the man [MASK] here .", "the dog [MASK] here .", "is", "was")], "patch",
                                   weights)
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    rng = np.random.default_rng(0)
    keep = torch.from_numpy(np.stack([rng.random(graph.real.shape) < share for share in (0.05, 0.3, 0.9)])
                            & graph.real).float()
    with torch.inference_mode():
        fused = run_pass(lm, graph, weights, recorded[0], where, keep=keep)
        monkeypatch.setattr(norm_transport, "_fits_kernel", lambda kept, ablated: False)
        plain = run_pass(lm, graph, weights, recorded[0], where, keep=keep)
    torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)
    assert len(set(fused.tolist())) == 3  # three different circuits, three different metrics
