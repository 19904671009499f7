"""The circuit pass's fused LayerNorm transport (``circuits.norm_transport``): the numba kernel gives what
torch's kernels give, with and without a receiver reading in the same sweep, and the circuit pass gives the
same metric through either."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from bertscope.circuits import norm_transport
from bertscope.circuits.decomposed import run_pass
from bertscope.circuits.edges import record_pairs
from bertscope.circuits.graph import CircuitGraph
from bertscope.circuits.norm_transport import carry_through_norm_
from bertscope.circuits.pairs import Pair
from bertscope.circuits.runs import layer_weights
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


@pytest.fixture
def kernel_calls(monkeypatch) -> list[int]:
    """Counts the fused kernel's runs (so a test knows it ran, not torch's kernels in its place)."""
    calls: list[int] = []
    built = norm_transport._kernel

    def counted() -> object:
        kernel = built()

        def run(*args: object) -> None:
            calls.append(1)
            kernel(*args)
        return run
    monkeypatch.setattr(norm_transport, "_kernel", counted)
    return calls


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("rows,with_reader", [(1, False), (1, True), (3, True)])
def test_the_fused_kernel_gives_what_torch_gives(dtype, tol, rows, with_reader, kernel_calls):
    pos, senders, d, n = 7, 9, 48, 6  # the last 3 senders not yet reached: left as they are
    kept, ablated, gamma, sigma_clean, sigma_ablated = _buffers(rows, pos, senders, d, dtype)
    reader = None
    if with_reader:
        reader = (torch.rand(rows, 4, n, generator=torch.Generator().manual_seed(1)) < 0.5).to(dtype)  # 4 receivers
        reader[:, :, 0] = 1  # some weight in every row; some senders not read
        reader[0, :, 1] = 0
        reader[:, 3] *= 0.5  # weights other than 0 and 1 (a gradient pass's fractions)
    want_k, want_a, want_read = _by_hand(kept, ablated, n, gamma, sigma_clean, sigma_ablated, reader)
    fused_runs = 0
    for fused, given in ((True, False), (True, True), (False, False), (False, True)):
        fused_runs += fused
        k, a = kept.clone(), ablated.clone()
        out = torch.full((rows, pos, 4, d), float("nan"), dtype=dtype) if given and with_reader else None  # never read
        with torch.no_grad():  # as the circuit pass runs
            read = carry_through_norm_(k, a, n, gamma, sigma_clean, sigma_ablated, reader, out, fused=fused)
        if out is not None:
            assert read is out
        assert len(kernel_calls) == fused_runs  # the fused runs, not torch's in their place
        torch.testing.assert_close(k[:, :, :n], want_k, atol=tol, rtol=tol)
        torch.testing.assert_close(a[:, :n], want_a, atol=tol, rtol=tol)
        assert torch.equal(k[:, :, n:], kept[:, :, n:]) and torch.equal(a[:, n:], ablated[:, n:])
        if reader is None:
            assert read is None
        else:
            assert read is not None and read.shape == (rows, pos, 4, d)
            torch.testing.assert_close(read, want_read, atol=tol * 10, rtol=tol)


def test_float32_at_bert_base_width_is_float64_to_float32_precision(kernel_calls):
    """A row of 768 values summed in float32 inside the kernel, against the same transport in float64."""
    kept, ablated, gamma, sigma_clean, sigma_ablated = _buffers(2, 6, 20, 768, torch.float64, seed=3)
    reader = (torch.rand(2, 36, 16, generator=torch.Generator().manual_seed(4)) < 0.3).double()
    want_k, want_a, want_read = _by_hand(kept, ablated, 16, gamma, sigma_clean, sigma_ablated, reader)
    k, a = kept.float(), ablated.float()
    with torch.no_grad():
        read = carry_through_norm_(k, a, 16, gamma.float(), sigma_clean.float(), sigma_ablated.float(), reader.float())
    assert kernel_calls
    torch.testing.assert_close(k[:, :, :16].double(), want_k, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(a[:, :16].double(), want_a, atol=2e-5, rtol=1e-5)
    assert read is not None
    torch.testing.assert_close(read.double(), want_read, atol=1e-4, rtol=1e-5)


def test_shapes_that_do_not_fit_are_refused_before_the_kernel_reads_memory():
    kept, ablated, gamma, sigma_clean, sigma_ablated = _buffers(1, 5, 6, 16, torch.float32)
    for bad in ({"n": 7}, {"readers": torch.ones(1, 2, 3)}, {"sigma_clean": sigma_clean.flatten()},
                {"readers": torch.ones(1, 2, 4), "out": torch.empty(1, 5, 3, 16)}):
        args = {"n": 4, "readers": None, "out": None, "sigma_clean": sigma_clean} | bad
        with pytest.raises(ValueError, match="do not fit together"):
            carry_through_norm_(kept, ablated, args["n"], gamma, args["sigma_clean"], sigma_ablated, args["readers"],
                                args["out"])


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
        except Exception as e:  # reported below
            out.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not out


@pytest.mark.parametrize("ablation", ["patch", "mean"])
def test_a_circuit_pass_gives_the_same_metric_through_either_kernel(tiny_mlm_dir, monkeypatch, kernel_calls,
                                                                     ablation):
    """Partial circuits, in float64: the fused pass (the kernel, a scratch buffer for what receivers read)
    against the pass autograd runs (torch's kernels, fresh tensors), and against torch's kernels alone."""
    lm = load_model(str(tiny_mlm_dir))
    lm.model.double()
    weights = layer_weights(lm)
    pairs = [Pair("the man [MASK] here .", "the dog [MASK] here .", "is", "was"),
             Pair("the dog sat by the [MASK] .", "the man sat by the [MASK] .", "river", "bank")]
    where, recorded = record_pairs(lm, pairs, ablation, weights)
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    rng = np.random.default_rng(0)
    keep = torch.from_numpy(np.stack([rng.random(graph.real.shape) < share for share in (0.05, 0.3, 0.9)])
                            & graph.real).double()
    pair = recorded[1]
    with torch.inference_mode():
        fused = run_pass(lm, graph, weights, pair, where, keep=keep)
    assert len(kernel_calls) == 2 * lm.num_layers  # every LayerNorm carried by the kernel
    with torch.enable_grad():
        differentiable = run_pass(lm, graph, weights, pair, where, keep=keep.clone().requires_grad_(True))
    assert len(kernel_calls) == 2 * lm.num_layers  # autograd's pass ran torch's kernels
    monkeypatch.setattr(norm_transport, "_fits_kernel", lambda kept, ablated, readers: False)
    with torch.inference_mode():
        plain = run_pass(lm, graph, weights, pair, where, keep=keep)
    torch.testing.assert_close(fused, differentiable.detach(), atol=1e-10, rtol=0)
    torch.testing.assert_close(fused, plain, atol=1e-10, rtol=0)
    assert len(set(fused.tolist())) == 3  # three different circuits, three different metrics
