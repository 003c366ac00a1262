"""Unit tests of mlbook.architectures.mixture_of_depths: top-C token routing and FLOP counts."""

import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.architectures import mixture_of_depths as mod

TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
DTYPES = [torch.float64, torch.float32]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def setup_block(B=2, T=24, d=8, h=16, dtype=torch.float64, seed=0):
    g = gen(seed)
    x = torch.randn(B, T, d, generator=g, dtype=dtype)
    params = mod.init_block(d, h, generator=g, dtype=dtype)
    w = torch.randn(d, generator=g, dtype=dtype) / math.sqrt(d)
    return x, params, w


def test_mod_capacity():
    assert mod.mod_capacity(256, 0.125) == 32
    assert mod.mod_capacity(10, 0.125) == 1
    assert mod.mod_capacity(64, 1.0) == 64
    assert mod.mod_capacity(3, 0.01) == 1


def test_select_matches_rank_definition_and_is_sorted():
    scores = torch.randn(3, 40, generator=gen(1))
    for C in (1, 5, 40):
        idx = mod.mod_select(scores, C)
        assert idx.shape == (3, C)
        assert (idx[:, 1:] > idx[:, :-1]).all()
        mask = torch.zeros(3, 40, dtype=torch.bool).scatter(1, idx, True)
        assert torch.equal(mask, mod.mod_select_naive(scores, C))
        # every selected score is at least every unselected one
        if C < 40:
            sel_min = torch.where(mask, scores, torch.inf).min(1).values
            rest_max = torch.where(mask, -torch.inf, scores).max(1).values
            assert (sel_min > rest_max).all()


def test_block_attention_matches_sdpa():
    x, P, _ = setup_block()
    q, k, v = x @ P["Wq"], x @ P["Wk"], x @ P["Wv"]
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True) @ P["Wo"]
    ref = a + torch.relu((x + a) @ P["W1"]) @ P["W2"]
    torch.testing.assert_close(mod.block_delta(x, P), ref, atol=1e-12, rtol=0)


def test_block_is_causal():
    x, P, _ = setup_block()
    x2 = x.clone()
    x2[:, 15:] += 1.0
    torch.testing.assert_close(
        mod.block_delta(x2, P)[:, :15], mod.block_delta(x, P)[:, :15], atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("C", [1, 3, 12, 24])
def test_mod_block_matches_naive(dtype, C):
    x, P, w = setup_block(dtype=dtype)
    torch.testing.assert_close(
        mod.mod_block(x, P, w, C), mod.mod_block_naive(x, P, w, C), atol=TOL[dtype], rtol=0
    )


def test_full_capacity_and_skipped_tokens():
    x, P, w = setup_block()
    T = x.shape[1]
    r = x @ w
    torch.testing.assert_close(
        mod.mod_block(x, P, w, T), x + r[..., None] * mod.block_delta(x, P), atol=1e-12, rtol=0
    )
    y = mod.mod_block(x, P, w, 5)
    mask = torch.zeros(2, T, dtype=torch.bool).scatter(1, mod.mod_select(r, 5), True)
    assert torch.equal(y[~mask], x[~mask])
    assert not torch.equal(y[mask], x[mask])


def test_router_receives_gradient():
    x, P, w = setup_block()
    w = w.clone().requires_grad_(True)
    mod.mod_block(x, P, w, 6).pow(2).sum().backward()
    assert w.grad is not None and float(w.grad.abs().max()) > 0


def test_stack_forward_mixes_dense_and_routed():
    x, P, w = setup_block()
    out = mod.stack_forward(x, [P, P], [None, w], 4)
    torch.testing.assert_close(
        out, mod.mod_block(mod.dense_block(x, P), P, w, 4), atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("C", [2, 8, 24])
def test_flops_measured_equal_analytic(C):
    x, P, w = setup_block(B=3)
    B, T, d = x.shape
    h = P["W1"].shape[1]
    assert mod.count_flops(mod.dense_block, x, P) == mod.block_flops(T, d, h, B)
    assert mod.count_flops(mod.mod_block, x, P, w, C) == mod.stack_flops(T, d, h, [True], C, B)
    pattern = [False, True, True]
    rs = [None if not r else w for r in pattern]
    assert mod.count_flops(mod.stack_forward, x, [P] * 3, rs, C) == mod.stack_flops(
        T, d, h, pattern, C, B
    )


def test_block_flops_closed_form():
    # S = 1, d = 1, h = 1: 8 projections-FLOPs + 4 attention + 4 MLP.
    assert mod.block_flops(1, 1, 1) == 16
    assert mod.block_flops(10, 4, 8, batch=2) == 2 * (8 * 10 * 16 + 4 * 100 * 4 + 4 * 10 * 4 * 8)


def test_savings_every_block_vs_every_other():
    T, d, h, L = 256, 64, 256, 8
    C = mod.mod_capacity(T, 0.125)
    dense = mod.stack_flops(T, d, h, [False] * L, C)
    all_routed = mod.stack_flops(T, d, h, [True] * L, C)
    every_other = mod.stack_flops(T, d, h, [i % 2 == 1 for i in range(L)], C)
    assert 1 - all_routed / dense >= 0.5
    assert 1 - every_other / dense < 0.5


def test_bad_arguments_raise():
    x, P, w = setup_block()
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        mod.mod_capacity(0, 0.5)
    with pytest.raises(ValueError, match=r"fraction must be a finite number in \(0.0, 1.0\]"):
        mod.mod_capacity(10, 0.0)
    with pytest.raises(ValueError, match=r"fraction must be a finite number in \(0.0, 1.0\]"):
        mod.mod_capacity(10, 1.5)
    with pytest.raises(ValueError, match=r"capacity must be in \[1, 5\]"):
        mod.mod_select(torch.randn(2, 5), 6)
    with pytest.raises(ValueError, match="scores must have 2 axes"):
        mod.mod_select(torch.randn(5), 2)
    with pytest.raises(TypeError, match="scores must be a floating-point tensor"):
        mod.mod_select_naive(torch.arange(5)[None], 2)
    with pytest.raises(ValueError, match="d must be a positive int"):
        mod.init_block(0, 4)
    with pytest.raises(ValueError, match="x must have 3 axes"):
        mod.block_delta(x[0], P)
    with pytest.raises(ValueError, match=r"capacity must be in \[1, 24\]"):
        mod.mod_block(x, P, w, 0)  # an empty selection would skip the block silently
    with pytest.raises(ValueError, match="shorter"):
        mod.stack_forward(x, [P, P], [None], 3)
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        mod.block_flops(0, 4, 4)
    with pytest.raises(ValueError, match=r"capacity must be in \[1, 10\]"):
        mod.stack_flops(10, 4, 4, [True], 11)


def test_router_of_the_wrong_shape_raises():
    x, P, w = setup_block()
    with pytest.raises(ValueError, match=r"w_router must have shape \(8\)"):
        mod.mod_block(x, P, w[:1], 3)  # a (1,) router would broadcast
    with pytest.raises(ValueError, match=r"w_router must have shape \(8\)"):
        mod.mod_block_naive(x, P, w[:, None], 3)
