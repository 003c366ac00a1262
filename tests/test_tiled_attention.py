"""Unit tests of mlbook.attention.tiled against torch's SDPA and the naive reference (ch. 26)."""

import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.attention import tiled as ta

TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(T_q, T_k, d=16, d_v=12, batch=(2, 3), dtype=torch.float64, seed=0):
    return (
        randn(*batch, T_q, d, dtype=dtype, seed=seed),
        randn(*batch, T_k, d, dtype=dtype, seed=seed + 1),
        randn(*batch, T_k, d_v, dtype=dtype, seed=seed + 2),
    )


def sdpa(q, k, v, causal, scale=None):
    T_q, T_k = q.shape[-2], k.shape[-2]
    mask = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T_q, T_k", [(1, 1), (17, 17), (45, 45), (13, 45), (1, 30)])
def test_naive_matches_sdpa(dtype, causal, T_q, T_k):
    q, k, v = qkv(T_q, T_k, dtype=dtype)
    torch.testing.assert_close(
        ta.tiled_attention_naive(q, k, v, causal), sdpa(q, k, v, causal), atol=TOL[dtype], rtol=0
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T_q, T_k", [(1, 1), (17, 17), (45, 45), (13, 45), (1, 30), (30, 31)])
@pytest.mark.parametrize("block_q, block_k", [(None, 7), (5, 7), (64, 3), (1, 1)])
def test_tiled_matches_naive_and_sdpa(causal, T_q, T_k, block_q, block_k):
    q, k, v = qkv(T_q, T_k)
    out, lse = ta.tiled_attention(
        q, k, v, causal, block_q=block_q, block_k=block_k, return_lse=True
    )
    torch.testing.assert_close(out, ta.tiled_attention_naive(q, k, v, causal), atol=1e-12, rtol=0)
    torch.testing.assert_close(out, sdpa(q, k, v, causal), atol=1e-12, rtol=0)
    s = (q @ k.transpose(-2, -1)) / 4.0
    if causal:
        s = s.masked_fill(~torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), atol=1e-12, rtol=0)


def test_float32_scale_and_large_scores():
    q, k, v = qkv(33, 40, dtype=torch.float32, seed=3)
    out = ta.tiled_attention(q * 10, k, v, block_q=8, block_k=11, scale=0.5)
    torch.testing.assert_close(out, sdpa(q * 10, k, v, False, scale=0.5), atol=1e-5, rtol=0)


def test_negative_control_wrong_causal_alignment_differs():
    q, k, v = qkv(13, 45)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # torch's alignment
    assert (ta.tiled_attention(q, k, v, True, block_k=8) - top_left).abs().max() > 0.1


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_memory_accounting_matches_prediction(device):
    for T, bq, bk in [(64, None, 16), (64, 16, 16), (100, 32, 24), (50, 8, 64)]:
        q = torch.randn(2, T, 32).to(device)
        v = torch.randn(2, T, 8).to(device)
        naive, what = ta.largest_intermediate_bytes(ta.tiled_attention_naive, q, q, v, True)
        assert naive == ta.predicted_largest_bytes(T, T, 32, 8, batch=2), what
        tiled, what = ta.largest_intermediate_bytes(
            ta.tiled_attention, q, q, v, True, block_q=bq, block_k=bk
        )
        assert tiled == ta.predicted_largest_bytes(T, T, 32, 8, block_q=bq, block_k=bk, batch=2), (
            what
        )
    q16 = torch.randn(128, 16, dtype=torch.float16, device="meta")
    assert (
        ta.largest_intermediate_bytes(ta.tiled_attention_naive, q16, q16, q16)[0] == 128 * 128 * 2
    )


def test_meta_accounting_at_8192_is_at_most_one_sixteenth():
    T, d = 8192, 64
    q = torch.empty(T, d, device="meta")
    naive = ta.largest_intermediate_bytes(ta.tiled_attention_naive, q, q, q, True)[0]
    tiled = ta.largest_intermediate_bytes(
        ta.tiled_attention, q, q, q, True, block_q=None, block_k=T // 16
    )[0]
    assert naive == T * T * 4 and tiled * 16 <= naive


def test_bad_input_raises():
    q, k, v = qkv(5, 6)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        ta.tiled_attention_naive(q.numpy(), k, v)
    with pytest.raises(TypeError, match="floating-point"):
        ta.tiled_attention_naive(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match="at least 2 axes"):
        ta.tiled_attention(q[0, 0, 0], k, v)
    with pytest.raises(ValueError, match="q must not be empty"):
        ta.tiled_attention_naive(q[..., :0, :], k, v)
    with pytest.raises(ValueError, match="T_q <= T_k"):  # a query without keys: nan
        ta.tiled_attention(k, q, q, causal=True)  # T_q = 6 > T_k = 5
    with pytest.raises(ValueError, match="scale"):
        ta.tiled_attention(q, k, v, scale=-1.0)
    with pytest.raises(TypeError, match="scale"):
        ta.tiled_attention(q, k, v, scale="big")
    with pytest.raises(ValueError, match="block_q"):
        ta.tiled_attention(q, k, v, block_q=0)
    with pytest.raises(TypeError, match="block_k"):
        ta.tiled_attention(q, k, v, block_k=None)
    with pytest.raises(ValueError, match="T_q"):
        ta.predicted_largest_bytes(0, 5, 4, 4)
    with pytest.raises(ValueError, match="block_q without block_k"):
        ta.predicted_largest_bytes(5, 5, 4, 4, block_q=4)
    with pytest.raises(ValueError, match="block_k"):
        ta.predicted_largest_bytes(5, 5, 4, 4, block_k=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_state_is_float32(dtype):
    # 70,000 keys with equal scores: l = 70,000 overflows float16 (max 65504); the state is float32
    # as in FlashAttention, the output in the input dtype.
    n = 70_000
    q = torch.randn(1, 2, 8, generator=torch.Generator().manual_seed(0)).to(dtype)
    k = torch.zeros(1, n, 8, dtype=dtype)
    v = torch.randn(1, n, 4, generator=torch.Generator().manual_seed(1)).to(dtype)
    out, lse = ta.tiled_attention(q, k, v, block_q=None, block_k=4096, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert (out.double() - v.double().mean(1, keepdim=True)).abs().max() < 2e-3
    torch.testing.assert_close(lse, torch.full_like(lse, math.log(n)), atol=1e-5, rtol=0)
    q, k, v = qkv(45, 45)  # ordinary lengths: no worse than naive attention in the same dtype
    exact = ta.tiled_attention_naive(*(x.to(dtype).double() for x in (q, k, v)), True)
    tiled = ta.tiled_attention(*(x.to(dtype) for x in (q, k, v)), True, block_q=16, block_k=16)
    naive = ta.tiled_attention_naive(*(x.to(dtype) for x in (q, k, v)), True)
    assert (tiled.double() - exact).abs().max() <= (naive.double() - exact).abs().max()


def test_memory_accounting_sees_views_of_fresh_tensors_but_not_of_inputs():
    x = torch.randn(2, 4, 8, 16)
    # repeat_interleave returns a view of a tensor it allocated: the copy counts
    copy, what = ta.largest_intermediate_bytes(lambda t: t.repeat_interleave(3, 1), x)
    assert copy == 3 * x.numel() * x.element_size(), what
    # slices and transposes of the input allocate nothing
    assert ta.largest_intermediate_bytes(lambda t: t[:, 1:].transpose(-2, -1), x)[0] == 0
