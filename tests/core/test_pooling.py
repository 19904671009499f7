"""Pooling hidden states where they are (``core.pooling``): the plan built from word groups, and the
sparse product giving the weighted sums a plain loop gives, for every layer, in any order of the plan's
entries."""

from __future__ import annotations

import pytest
import torch

from bertscope.core import pooling
from bertscope.core.pooling import PoolingPlan, pool_layers

GROUPS = [(0, [1, 2], "mean"), (1, [3], "mean"), (3, [0, 4, 5], "mean"), (2, [7, 8], "first"), (0, [2], "mean"),
          (1, [8, 0, 4], "mean")]


def _looped(hidden_states, groups) -> torch.Tensor:
    """[example, layer + 1, dim]: each vector the mean (or first) of its row's token states, per layer."""
    out = []
    for row, positions, how in groups:
        chosen = positions[:1] if how == "first" else positions
        out.append(torch.stack([h[row, chosen].float().mean(dim=0) for h in hidden_states]))
    return torch.stack(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("pool_bytes", [pooling.POOL_BYTES, 1], ids=["one-product", "a-product-a-layer"])
def test_the_product_gives_the_looped_sums(monkeypatch, dtype, pool_bytes):
    monkeypatch.setattr(pooling, "POOL_BYTES", pool_bytes)
    generator = torch.Generator().manual_seed(0)
    states = [torch.randn(4, 9, 16, generator=generator).to(dtype) for _ in range(5)]  # [batch, token, dim] each
    plan = PoolingPlan.from_groups(GROUPS)
    expected = _looped(states, GROUPS)
    shuffled = torch.randperm(len(plan.example), generator=generator).numpy()  # entries in any order
    plan_shuffled = PoolingPlan(plan.n_examples, plan.example[shuffled], plan.row[shuffled], plan.token[shuffled],
                                plan.weight[shuffled])
    for result in (pool_layers(states, plan), pool_layers(states, plan_shuffled)):
        assert result.dtype == torch.float32 and result.shape == (len(GROUPS), 5, 16)
        torch.testing.assert_close(result, expected, rtol=0, atol=1e-6)


def test_the_plan_holds_one_entry_a_piece_weighted_by_the_pieces_and_an_empty_example_pools_to_zeros():
    plan = PoolingPlan.from_groups([(0, [1], "mean"), (1, [], "mean"), (1, (0, 2, 5), "mean"), (2, [3, 4], "first")])
    assert plan.n_examples == 4
    assert plan.example.tolist() == [0, 2, 2, 2, 3] and plan.row.tolist() == [0, 1, 1, 1, 2]
    assert plan.token.tolist() == [1, 0, 2, 5, 3]
    assert plan.weight.dtype.name == "float32" and plan.weight.tolist() == pytest.approx([1, 1 / 3, 1 / 3, 1 / 3, 1])
    states = [torch.ones(3, 6, 4) for _ in range(3)]
    result = pool_layers(states, plan)
    assert torch.equal(result[1], torch.zeros(3, 4)) and torch.equal(result[[0, 2, 3]], torch.ones(3, 3, 4))
    assert PoolingPlan.from_groups([]).n_examples == 0
