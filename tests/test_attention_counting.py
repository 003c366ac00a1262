"""Unit tests of mlbook.attention.counting against torch's FlopCounterMode and a tile count."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mlbook.attention import tiled as ta
from mlbook.attention.counting import CountMatmuls


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def flop_counter(fn, *args, **kwargs) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((5, 7), (7, 3)),
        ((2, 5, 7), (7, 3)),
        ((4, 2, 5, 7), (4, 2, 7, 3)),
        ((2, 1, 5, 7), (3, 7, 4)),
    ],
)
def test_one_product_counts_two_flops_per_multiply_add(a_shape, b_shape):
    a, b = randn(*a_shape), randn(*b_shape, seed=1)
    with CountMatmuls() as counter:
        out = a @ b
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    assert counter.n == 1
    assert counter.flops == 2 * m * k * n * out[..., 0, 0].numel()
    assert counter.flops == flop_counter(torch.matmul, a, b)


def test_every_matmul_function_is_counted_and_nothing_else():
    a, b, c = randn(6, 4), randn(4, 5, seed=1), randn(3, 6, 4, seed=2)
    with CountMatmuls() as counter:
        torch.matmul(a, b)
        torch.mm(a, b)
        torch.bmm(c, b.expand(3, 4, 5))
        a.exp() + a  # elementwise: not a product
    assert counter.n == 3
    assert counter.flops == 2 * 6 * 4 * 5 * (1 + 1 + 3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T, b_q, b_k", [(45, 16, 16), (64, 32, 8), (17, None, 5)])
def test_tiled_attention_matches_flop_counter_mode(causal, T, b_q, b_k):
    q, k, v = randn(2, T, 8), randn(2, T, 8, seed=1), randn(2, T, 6, seed=2)
    with CountMatmuls() as counter:
        ta.tiled_attention(q, k, v, causal, block_q=b_q, block_k=b_k)
    assert counter.flops == flop_counter(
        ta.tiled_attention, q, k, v, causal, block_q=b_q, block_k=b_k
    )
    # two products a computed tile: Q_i K_j^T and P V_j; causal tiles right of the diagonal skipped
    bq = T if b_q is None else b_q
    tiles = sum(-(-(min(i0 + bq, T) if causal else T) // b_k) for i0 in range(0, T, bq))
    assert counter.n == 2 * tiles
