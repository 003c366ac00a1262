"""Unit tests of mlbook.attention.kv_cache against torch built-ins, explicit loops and full forward passes."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

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


def small_cfg(G=2, **kw):
    return kc.DecoderConfig(
        vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=G, d_ff=48, **kw
    )


def model(cfg, dtype=torch.float64):
    return kc.TinyDecoder(cfg, torch.Generator().manual_seed(0)).to(dtype)


def tokens(B, T, V=40, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


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
    with pytest.raises(ValueError):
        kc.grouped_attention(q, k, v, mask=head_mask[0])  # 3-D: ambiguous batch axis
    with pytest.raises(TypeError):
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


# --- caches: cached decoding equals the full forward pass -----------------------------------


@pytest.mark.parametrize("G", [4, 2, 1])
def test_cached_decoding_equals_full_forward(G):
    m = model(small_cfg(G))
    x = tokens(2, 11)
    full = m(x)
    cache = m.new_cache(2, 11)
    steps = torch.cat([m(x[:, i : i + 1], cache) for i in range(11)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=0)
    cache = m.new_cache(2, 11)
    chunks = torch.cat([m(x[:, :4], cache), m(x[:, 4:7], cache), m(x[:, 7:], cache)], dim=1)
    torch.testing.assert_close(chunks, full, atol=1e-12, rtol=0)
    # Negative control: a wrong position (cache length ignored) changes the output.
    cache = m.new_cache(2, 11)
    m(x[:, :5], cache)
    assert (m(x[:, 5:6])[:, 0] - full[:, 5]).abs().max() > 1e-3


def test_float32_cached_decoding_close():
    m = model(small_cfg(2), torch.float32)
    x = tokens(1, 9)
    cache = m.new_cache(1, 9)
    steps = torch.cat([m(x[:, i : i + 1], cache) for i in range(9)], dim=1)
    torch.testing.assert_close(steps, m(x), atol=TOL[torch.float32], rtol=0)


@pytest.mark.parametrize("W,S", [(4, 0), (3, 1), (1, 1), (30, 2)])
def test_sliding_cache_equals_masked_full_attention(W, S):
    m = model(small_cfg(2, window=W, sinks=S))
    x = tokens(2, 13)
    full = m(x)  # full attention under the mask of eq. 24.4
    cache = m.new_cache(2, 13)
    steps = torch.cat([m(x[:, i : i + 1], cache) for i in range(13)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=0)
    cache = m.new_cache(2, 13)
    chunks = torch.cat([m(x[:, :6], cache), m(x[:, 6:8], cache), m(x[:, 8:], cache)], dim=1)
    torch.testing.assert_close(chunks, full, atol=1e-12, rtol=0)
    held = sorted(cache.slot_pos[0][cache.slot_pos[0] >= 0].tolist())
    assert held == sorted(set(range(min(S, 13))) | set(range(max(0, 13 - W), 13)))
    assert cache.nbytes == kc.kv_cache_bytes(2, 2, 8, S + W, 8, 2)


def test_sliding_window_changes_output_beyond_window():
    x = tokens(1, 10)
    full = model(small_cfg(2))(x)
    win = model(small_cfg(2, window=3))(x)
    torch.testing.assert_close(win[:, :3], full[:, :3], atol=1e-12, rtol=0)
    assert (win[:, 3:] - full[:, 3:]).abs().max() > 1e-3


def test_generate_same_tokens_with_and_without_cache():
    m = model(small_cfg(1), torch.float32)
    p = tokens(2, 4)
    a = kc.generate(m, p, 12, use_cache=True)
    b = kc.generate(m, p, 12, use_cache=False)
    assert a.shape == (2, 16) and torch.equal(a, b) and torch.equal(a[:, :4], p)


# --- eq. 24.2: memory and FLOPs -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("G", [8, 2, 1])
def test_cache_bytes_formula(dtype, G):
    c = kc.KVCache(3, 2, G, 16, 10, dtype=dtype)
    b = torch.tensor([], dtype=dtype).element_size()
    assert c.nbytes == kc.kv_cache_bytes(3, G, 16, 10, b, batch=2) == 2 * 3 * G * 16 * 10 * b * 2


def test_published_shapes():
    assert kc.param_count(kc.LLAMA2_7B) == 6_738_415_616
    assert kc.param_count(kc.LLAMA2_70B) == 68_976_648_192
    assert kc.param_count(kc.MISTRAL_7B) == 7_241_732_096
    assert kc.cache_bytes(kc.LLAMA2_7B, 4096) == 2 * 2**30  # 0.5 MiB per token
    assert kc.cache_bytes(kc.LLAMA2_70B, 4096) == 1.25 * 2**30
    assert kc.cache_bytes(kc.MISTRAL_7B, 32768) == kc.cache_bytes(kc.MISTRAL_7B, 4096)


def test_param_count_matches_module():
    cfg = small_cfg(2)
    assert kc.param_count(cfg) == sum(p.numel() for p in model(cfg).parameters())


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("window", [None, 3])
def test_generation_flops_match_flop_counter(use_cache, window):
    cfg = small_cfg(2, window=window, sinks=1 if window else 0)
    m = model(cfg, torch.float32)
    with FlopCounterMode(display=False) as fc:
        kc.generate(m, tokens(2, 3), 7, use_cache=use_cache)
    assert fc.get_total_flops() == kc.generation_flops(cfg, 3, 7, use_cache, batch=2)


def test_decode_step_seconds_runs():
    m = model(small_cfg(2), torch.float32)
    for use_cache in (True, False):
        assert kc.decode_step_seconds(m, 6, use_cache, reps=1) > 0


# --- bad input ------------------------------------------------------------------------------


def test_bad_input_raises():
    with pytest.raises(ValueError):
        kc.head_map(4, 5)
    with pytest.raises(TypeError):
        kc.head_map(4.0, 2)
    with pytest.raises(ValueError):
        kc.attention_kind(2, 0)
    with pytest.raises(ValueError):
        kc.expand_kv(randn(2, 3, 8), 4)
    with pytest.raises(ValueError):
        kc.expand_kv(randn(1, 4, 2, 8), 2)
    with pytest.raises(ValueError):  # G > H
        kc.grouped_attention(randn(1, 2, 3, 8), randn(1, 4, 3, 8), randn(1, 4, 3, 8))
    with pytest.raises(ValueError):  # k and v head counts differ
        kc.grouped_attention_naive(randn(1, 4, 3, 8), randn(1, 2, 3, 8), randn(1, 1, 3, 8))
    with pytest.raises(TypeError):
        kc.grouped_attention(
            randn(1, 4, 3, 8), torch.ones(1, 2, 3, 8, dtype=torch.long), randn(1, 2, 3, 8)
        )
    with pytest.raises(ValueError):
        kc.decode_attention_naive(randn(4, 8), randn(2, 5, 6), randn(2, 5, 8))
    with pytest.raises(ValueError):
        kc.visible(3, 2, window=0)
    with pytest.raises(ValueError):
        kc.sliding_window_mask(0, 2)
    with pytest.raises(ValueError):
        kc.sliding_window_mask(4, 2, sinks=-1)
    cache = kc.KVCache(1, 1, 2, 8, 3, dtype=torch.float64)
    with pytest.raises(ValueError):
        cache.update(0, randn(1, 2, 4, 8), randn(1, 2, 4, 8))  # over max_len
    with pytest.raises(ValueError):
        cache.update(0, randn(1, 3, 1, 8), randn(1, 3, 1, 8))  # wrong G
    with pytest.raises(TypeError):
        cache.update(0, randn(1, 2, 1, 8, dtype=torch.float32), randn(1, 2, 1, 8))
    with pytest.raises(ValueError):
        cache.update(1, randn(1, 2, 1, 8), randn(1, 2, 1, 8))  # no such layer
    with pytest.raises(TypeError):
        kc.KVCache(1, 1, 2, 8, 3, dtype=torch.int64)
    with pytest.raises(ValueError):
        kc.SlidingWindowCache(1, 1, 2, 8, window=0)
    with pytest.raises(ValueError):
        kc.kv_cache_bytes(1, 1, 8, 0, 2)
    with pytest.raises(ValueError):
        kc.DecoderConfig(10, 30, 1, 4, 2, 8)  # d_model not a multiple of n_heads
    with pytest.raises(ValueError):
        kc.DecoderConfig(10, 32, 1, 4, 8, 8)  # G > H
    with pytest.raises(ValueError):
        kc.cache_bytes(kc.LLAMA2_7B, 0)
    m = model(small_cfg(2))
    with pytest.raises(ValueError):
        m(tokens(1, 3, V=200))  # ids out of range
    with pytest.raises(TypeError):
        m(tokens(1, 3), cache="cache")
    with pytest.raises(TypeError):
        kc.TinyDecoder({"d_model": 8})
    with pytest.raises(ValueError):
        kc.generate(m, tokens(1, 3), 0)
    with pytest.raises(ValueError):
        kc.generate(m, torch.zeros(3, dtype=torch.long), 2)
    with pytest.raises(TypeError):
        kc.generate("model", tokens(1, 3), 2)
    with pytest.raises(ValueError):
        kc.forward_flops(small_cfg(), 0, 1, 1)
    with pytest.raises(ValueError):
        kc.generation_flops(small_cfg(), 3, 0, True)
    with pytest.raises(ValueError):
        kc.decode_step_seconds(m, 1, True)
