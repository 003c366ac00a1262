"""Unit tests of mlbook.attention.kv_cache against torch built-ins and explicit loops (the decoder
that uses the caches is tested against full forward passes in test_decoder.py)."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.attention import kv_cache as kc

# float64: cached and full passes differ only in summation order (a few ulps of O(1) logits).
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
HAS_ENABLE_GQA = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")  # torch >= 2.5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny problems: one thread is faster (no synchronisation) and sums in a fixed order."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --- eq. 24.3: head map and grouped attention -----------------------------------------------


@pytest.mark.parametrize("H,G", [(8, 8), (8, 4), (8, 2), (8, 1), (6, 4), (5, 3), (1, 1)])
def test_head_map_formula_and_group_sizes(H, G):
    g = kc.head_map(H, G)
    assert g.tolist() == [math.floor(h * G / H) for h in range(H)]
    sizes = torch.bincount(g, minlength=G)
    assert sizes.sum() == H and (sizes >= 1).all() and sizes.max() - sizes.min() <= 1
    assert (g[1:] >= g[:-1]).all()  # contiguous groups
    if H % G == 0:
        assert torch.equal(g, torch.arange(G).repeat_interleave(H // G))


def test_attention_kind():
    assert [kc.attention_kind(8, G) for G in (8, 2, 1)] == ["MHA", "GQA", "MQA"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("H,G", [(8, 8), (8, 2), (8, 1)])
def test_grouped_attention_matches_torch_enable_gqa(H, G, dtype):
    q, k, v = (
        randn(2, H, 5, 16, dtype=dtype),
        randn(2, G, 7, 16, dtype=dtype, seed=1),
        randn(2, G, 7, 16, dtype=dtype, seed=2),
    )
    out, w = kc.grouped_attention(q, k, v, is_causal=True)
    mask = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)  # bottom-right causal
    if HAS_ENABLE_GQA:
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        torch.testing.assert_close(out, ref, atol=TOL[dtype], rtol=0)
    rep = F.scaled_dot_product_attention(
        q, k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1), attn_mask=mask
    )
    torch.testing.assert_close(out, rep, atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 5, dtype=dtype), atol=TOL[dtype], rtol=0)


def test_grouped_attention_uneven_groups_and_naive():
    q, k, v = randn(1, 6, 3, 8), randn(1, 4, 3, 8, seed=1), randn(1, 4, 3, 8, seed=2)
    out, _ = kc.grouped_attention(q, k, v)
    g = kc.head_map(6, 4)
    ref = F.scaled_dot_product_attention(q, k[:, g], v[:, g])
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    q2, k2 = randn(2, 8, 4, 8), randn(2, 2, 4, 8, seed=3)
    torch.testing.assert_close(
        kc.grouped_attention(q2, k2, k2)[0],
        kc.grouped_attention_naive(q2, k2, k2)[0],
        atol=1e-12,
        rtol=0,
    )


def test_grouped_attention_4d_mask():
    q, k, v = randn(2, 4, 3, 8), randn(2, 2, 5, 8, seed=1), randn(2, 2, 5, 8, seed=2)
    mask = torch.rand(2, 1, 3, 5, generator=torch.Generator().manual_seed(0)) < 0.7
    mask[..., 0] = True
    out, _ = kc.grouped_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask
    )
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    head_mask = torch.rand(2, 4, 3, 5, generator=torch.Generator().manual_seed(1)) < 0.7
    head_mask[..., 0] = True  # a different mask for every sequence and head
    out, _ = kc.grouped_attention(q, k, v, mask=head_mask)
    ref = F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=head_mask
    )
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"mask must have shape \(T_q, T_k\)"):
        kc.grouped_attention(q, k, v, mask=head_mask[0])  # 3-D: ambiguous batch axis
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        kc.grouped_attention(q, k, v, mask=[[True]])


# --- eq. 24.1: one decoding step -------------------------------------------------------------


@pytest.mark.parametrize("H,G", [(4, 4), (4, 2), (4, 1), (6, 4)])
def test_decode_attention_naive_matches_grouped(H, G):
    q, k, v = randn(H, 8), randn(G, 6, 8, seed=1), randn(G, 6, 8, seed=2)
    naive = kc.decode_attention_naive(q, k, v)
    fast, _ = kc.grouped_attention(q[None, :, None], k[None], v[None])
    torch.testing.assert_close(naive, fast[0, :, 0], atol=1e-12, rtol=0)


# --- eq. 24.4: sliding window ------------------------------------------------------------------


@pytest.mark.parametrize("W,S", [(1, 0), (3, 0), (3, 2), (5, 1), (20, 0)])
def test_sliding_window_mask_matches_loops(W, S):
    T = 9
    m = kc.sliding_window_mask(T, W, S)
    for t, s in itertools.product(range(T), range(T)):
        assert bool(m[t, s]) == (s <= t and (t - s < W or s < S))
    assert (
        m.sum(1) == torch.tensor([min(t + 1, W + min(S, max(t + 1 - W, 0))) for t in range(T)])
    ).all()
    assert torch.equal(kc.sliding_window_mask(T, None), torch.ones(T, T).tril().bool())
    assert kc.visible(5, 0, 3, 1) and not kc.visible(5, 1, 3, 1) and not kc.visible(2, 3)


# --- caches -------------------------------------------------------------------------------------


def test_kv_cache_appends_and_returns_positions():
    cache = kc.KVCache(2, 1, 2, 8, 6, dtype=torch.float64)
    k1, v1 = randn(1, 2, 4, 8), randn(1, 2, 4, 8, seed=1)
    k, v, pos = cache.update(0, k1, v1)
    assert torch.equal(k, k1) and torch.equal(v, v1) and pos.tolist() == [0, 1, 2, 3]
    assert cache.seq_len == 0  # layer 1 has seen nothing yet
    cache.update(1, k1, v1)
    k2 = randn(1, 2, 2, 8, seed=2)
    k, _, pos = cache.update(0, k2, k2)
    assert torch.equal(k, torch.cat([k1, k2], 2)) and pos.tolist() == list(range(6))


def test_sliding_window_cache_evicts_and_keeps_sinks():
    ring = kc.SlidingWindowCache(1, 1, 1, 2, window=4, sinks=2, dtype=torch.float64)
    history = []
    for t in range(12):
        _, _, pos = ring.update(0, torch.full((1, 1, 1, 2), float(t), dtype=torch.float64),
                                torch.zeros(1, 1, 1, 2, dtype=torch.float64))  # fmt: skip
        history.append(ring.slot_pos[0].tolist())
        assert pos[-1] == t and set(pos.tolist()) <= {0, 1} | set(range(t - 4, t + 1))
    assert history[-1] == [0, 1, 10, 11, 8, 9]
    assert ring.k[0, 0, 0, :, 0].tolist() == [0.0, 1.0, 10.0, 11.0, 8.0, 9.0]


# --- eq. 24.2: memory -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("G", [8, 2, 1])
def test_cache_bytes_formula(dtype, G):
    c = kc.KVCache(3, 2, G, 16, 10, dtype=dtype)
    b = torch.tensor([], dtype=dtype).element_size()
    assert c.nbytes == kc.kv_cache_bytes(3, G, 16, 10, b, batch=2) == 2 * 3 * G * 16 * 10 * b * 2


# --- bad input ------------------------------------------------------------------------------


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"G \(key/value heads\) must be in \[1, 4\], got 5"):
        kc.head_map(4, 5)
    with pytest.raises(TypeError, match=r"H \(query heads\) must be an int"):
        kc.head_map(4.0, 2)
    with pytest.raises(ValueError, match=r"G \(key/value heads\) must be in"):
        kc.attention_kind(2, 0)
    with pytest.raises(ValueError, match="x must have 4 axes"):
        kc.expand_kv(randn(2, 3, 8), 4)
    with pytest.raises(ValueError, match=r"G \(key/value heads\) must be in \[1, 2\]"):
        kc.expand_kv(randn(1, 4, 2, 8), 2)
    with pytest.raises(ValueError, match=r"G \(key/value heads\) must be in \[1, 2\]"):  # G > H
        kc.grouped_attention(randn(1, 2, 3, 8), randn(1, 4, 3, 8), randn(1, 4, 3, 8))
    with pytest.raises(
        ValueError, match=r"v must have shape \(1, 2, 3, \*\)"
    ):  # k and v head counts differ
        kc.grouped_attention_naive(randn(1, 4, 3, 8), randn(1, 2, 3, 8), randn(1, 1, 3, 8))
    with pytest.raises(TypeError, match="k must be a floating-point tensor"):
        kc.grouped_attention(
            randn(1, 4, 3, 8), torch.ones(1, 2, 3, 8, dtype=torch.long), randn(1, 2, 3, 8)
        )
    with pytest.raises(ValueError, match=r"k_cache must have shape \(\*, \*, 8\)"):
        kc.decode_attention_naive(randn(4, 8), randn(2, 5, 6), randn(2, 5, 8))
    with pytest.raises(ValueError, match="window must be in"):
        kc.visible(3, 2, window=0)
    with pytest.raises(ValueError, match="T must be in"):
        kc.sliding_window_mask(0, 2)
    with pytest.raises(ValueError, match="sinks must be in"):
        kc.sliding_window_mask(4, 2, sinks=-1)
    cache = kc.KVCache(1, 1, 2, 8, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="cache full"):
        cache.update(0, randn(1, 2, 4, 8), randn(1, 2, 4, 8))  # over max_len
    with pytest.raises(ValueError, match=r"k_new must have shape \(1, 2, \*, 8\)"):
        cache.update(0, randn(1, 3, 1, 8), randn(1, 3, 1, 8))  # wrong G
    with pytest.raises(TypeError, match="the cache holds torch.float64"):
        cache.update(0, randn(1, 2, 1, 8, dtype=torch.float32), randn(1, 2, 1, 8))
    with pytest.raises(ValueError, match=r"layer must be in \[0, 0\]"):
        cache.update(1, randn(1, 2, 1, 8), randn(1, 2, 1, 8))  # no such layer
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        kc.KVCache(1, 1, 2, 8, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="window must be in"):
        kc.SlidingWindowCache(1, 1, 2, 8, window=0)
    with pytest.raises(ValueError, match="seq_len must be in"):
        kc.kv_cache_bytes(1, 1, 8, 0, 2)
