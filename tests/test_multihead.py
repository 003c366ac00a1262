"""Unit tests of mlbook.attention.multihead against torch.nn.MultiheadAttention and counts."""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mlbook.attention import dot_product as at
from mlbook.attention import multihead as mh

# float64 agrees with torch's MHA to a few ulps of unit-size outputs; float32 to ~1e-6.
TOL = {torch.float64: 1e-12, torch.float32: 2e-5}


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def torch_pair(d=16, H=4, kdim=None, bias=True, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    t = nn.MultiheadAttention(d, H, bias=bias, batch_first=True, kdim=kdim, vdim=kdim, dtype=dtype)
    with torch.no_grad():
        for p in t.parameters():  # non-zero biases too, so that their placement is tested
            p.copy_(0.3 * randn(*p.shape, dtype=dtype, seed=seed + p.numel()))
    return t, mh.from_torch(t)


@pytest.mark.parametrize("shape,H", [((2, 5, 12), 3), ((7, 8), 2), ((2, 3, 4, 6), 6)])
def test_split_merge_roundtrip_and_naive(shape, H):
    x = randn(*shape)
    s = mh.split_heads(x, H)
    d_h = shape[-1] // H
    assert s.shape == (*shape[:-2], H, shape[-2], d_h)
    assert s.data_ptr() == x.data_ptr()  # a view: no copy
    torch.testing.assert_close(s, mh.split_heads_naive(x, H), atol=0, rtol=0)
    torch.testing.assert_close(mh.merge_heads(s), x, atol=0, rtol=0)
    torch.testing.assert_close(mh.merge_heads_naive(s), x, atol=0, rtol=0)


def test_merge_needs_the_copy():
    s = mh.split_heads(randn(2, 5, 12), 3)
    assert not s.is_contiguous()
    o = s.contiguous()  # like an attention output: a fresh (B, H, T, d_h) tensor
    with pytest.raises(RuntimeError, match="view"):
        o.transpose(1, 2).view(2, 5, 12)  # what merge_heads avoids with .contiguous()
    torch.testing.assert_close(mh.merge_heads(o), mh.merge_heads_naive(o), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch(dtype, bias):
    t, m = torch_pair(bias=bias, dtype=dtype)
    x = randn(3, 6, 16, dtype=dtype, seed=5)
    y, w = m(x)
    y_ref, w_ref = t(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(y, y_ref, atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(w, w_ref, atol=TOL[dtype], rtol=0)


def test_masks_match_torch():
    t, m = torch_pair()
    B, T = 3, 6
    x = randn(B, T, 16, seed=1)
    causal = at.causal_mask(T)
    y, _ = m(x, is_causal=True)
    y_ref, _ = t(x, x, x, attn_mask=~causal)  # torch: True = may NOT attend
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    lengths = [6, 4, 2]
    pad = at.padding_mask(lengths, T)  # (B, 1, T)
    y, w = m(x, mask=pad)
    y_ref, w_ref = t(x, x, x, key_padding_mask=~pad[:, 0], average_attn_weights=False)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, w_ref, atol=1e-12, rtol=0)
    assert float(w[2, :, :, 2:].detach().abs().max()) == 0.0


def test_cross_attention_matches_torch_and_naive():
    t, m = torch_pair(kdim=10)
    x_q, x_kv = randn(2, 5, 16, seed=2), randn(2, 9, 10, seed=3)
    y, w = m(x_q, x_kv)
    assert y.shape == (2, 5, 16) and w.shape == (2, 4, 5, 9)
    y_ref, w_ref = t(x_q, x_kv, x_kv, average_attn_weights=False)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, w_ref, atol=1e-12, rtol=0)
    y_n, w_n = mh.multihead_attention_naive(m, x_q, x_kv)
    torch.testing.assert_close(y, y_n, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, w_n, atol=1e-12, rtol=0)


def test_naive_with_per_head_mask():
    _, m = torch_pair()
    x = randn(2, 6, 16, seed=4)
    mask = torch.rand(2, 4, 6, 6, generator=torch.Generator().manual_seed(0)) < 0.6
    mask[..., 0] = True
    y, w = m(x, mask=mask, is_causal=True)
    y_n, w_n = mh.multihead_attention_naive(m, x, mask=mask, is_causal=True)
    torch.testing.assert_close(y, y_n, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, w_n, atol=1e-12, rtol=0)


def test_permutation_equivariance_and_causal_breaks_it():
    _, m = torch_pair()
    x = randn(1, 7, 16, seed=6)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    y = m(x)[0]
    torch.testing.assert_close(m(x[:, perm])[0], y[:, perm], atol=1e-12, rtol=0)
    gap = (m(x[:, perm], is_causal=True)[0] - m(x, is_causal=True)[0][:, perm]).abs().max()
    assert gap > 1e-2


def test_self_attention_input_gradient_is_sum_of_three():
    """eq. 20.5: dL/dx = dL/dx_q + dL/dx_k + dL/dx_v at x_q = x_k = x_v = x."""
    _, m = torch_pair()
    x = randn(2, 5, 16, seed=7, dtype=torch.float64).requires_grad_()
    g = randn(2, 5, 16, seed=8)
    (gx,) = torch.autograd.grad((m(x)[0] * g).sum(), x)
    xs = [x.detach().clone().requires_grad_() for _ in range(3)]
    grads = torch.autograd.grad((m(*xs)[0] * g).sum(), xs)
    torch.testing.assert_close(gx, sum(grads), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "d,H,kdim,bias", [(16, 4, None, True), (24, 3, None, False), (16, 2, 10, True)]
)
def test_param_count_matches_tensors(d, H, kdim, bias):
    t, m = torch_pair(d, H, kdim=kdim, bias=bias)
    n = mh.param_count(d, bias=bias, d_kv=kdim)
    assert sum(p.numel() for p in m.parameters()) == n
    assert sum(p.numel() for p in t.parameters()) == n
    if kdim is None:
        assert n == 4 * d * d + (4 * d if bias else 0)


@pytest.mark.parametrize(
    "B,T_q,T_k,d,H,kdim",
    [(2, 7, None, 16, 4, None), (1, 5, 9, 16, 2, 10), (3, 11, None, 24, 6, None)],
)
def test_flops_match_flop_counter(B, T_q, T_k, d, H, kdim):
    """mha_flops counts 2 FLOPs per multiply-add, as FlopCounterMode does, op by op."""
    _, m = torch_pair(d, H, kdim=kdim)
    x_q = randn(B, T_q, d)
    x_k = randn(B, T_k or T_q, kdim or d, seed=1)
    with FlopCounterMode(display=False) as fc:
        m(x_q, x_k)
    flops = mh.mha_flops(B, T_q, d, T_k=T_k, d_kv=kdim)
    assert fc.get_total_flops() == flops["total"]
    per_op = {str(op).split(".")[-1]: n for op, n in fc.get_flop_counts()["Global"].items()}
    products = flops["scores QK^T"] + flops["weights x V"]
    assert per_op["bmm"] == products and per_op["mm"] == flops["total"] - products
    if T_k is None and kdim is None:
        assert flops["total"] == 2 * (4 * B * T_q * d * d + 2 * B * T_q**2 * d)


def test_bad_inputs():
    x = randn(2, 5, 12)
    with pytest.raises(ValueError, match="num_heads=5 must divide"):
        mh.split_heads(x, 5)
    with pytest.raises(TypeError, match="num_heads"):
        mh.split_heads(x, 2.0)
    with pytest.raises(TypeError, match="floating-point"):
        mh.split_heads(x.long(), 2)
    with pytest.raises(ValueError, match="num_heads=7 must divide"):
        mh.split_heads_naive(x, 7)
    with pytest.raises(ValueError, match="at least 3 axes"):
        mh.merge_heads(randn(5, 4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        mh.merge_heads_naive([1, 2])
    with pytest.raises(ValueError, match="must divide d_model"):
        mh.MultiHeadAttention(10, 3)
    m = mh.MultiHeadAttention(12, 3).double()
    with pytest.raises(ValueError, match="x_q must have 3 axes"):
        m(randn(5, 12))  # no batch axis
    with pytest.raises(ValueError, match="x_k must have shape"):
        m(x, randn(3, 5, 12))  # batch sizes differ
    with pytest.raises(ValueError, match="x_k must have shape"):  # would broadcast silently
        m(x, randn(1, 5, 12))
    with pytest.raises(ValueError, match="x_v must have shape"):
        m(x, randn(2, 5, 12), randn(2, 4, 12))  # T_k of keys and values differ
    with pytest.raises(TypeError, match="mask must be a bool"):
        m(x, mask=[[True]])
    with pytest.raises(ValueError, match="only kdim == vdim"):
        mh.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="d_model"):
        mh.param_count(0)
    with pytest.raises(ValueError, match="T_q"):
        mh.mha_flops(1, 0, 8)
    with pytest.raises(TypeError, match="T_k"):
        mh.mha_flops(1, 4, 8, T_k=2.5)
