"""Tests of mlbook.attention.mla against independent references (loops, float64, built-ins)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from mlbook.attention import mla
from mlbook.attention.rope import rope_rotation_matrix

CFG = mla.MLAConfig(d_model=24, n_heads=3, d_head=8, d_latent=10, d_rope=4, d_q_latent=12)


def _layer(dtype=torch.float64, seed=0):
    return mla.MultiHeadLatentAttention(
        CFG, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )


def _x(B=2, T=7, dtype=torch.float64, seed=1):
    return torch.randn(
        B, T, CFG.d_model, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )


def _reference_layer(layer, x):
    """Token-by-token, head-by-head MLA with explicit rotation matrices and torch's softmax."""
    B, T, _ = x.shape
    cfg = layer.config
    out = torch.zeros(B, T, cfg.d_model, dtype=torch.float64)
    W = {n: p.detach().double() for n, p in layer.named_parameters()}
    R = [rope_rotation_matrix(t, layer.freqs) for t in range(T)]
    for b in range(B):
        for t in range(T):
            cq = x[b, t] @ W["w_dq"]
            for h in range(cfg.n_heads):
                q = torch.cat([cq @ W["w_uq"][h], R[t] @ (cq @ W["w_qr"][h])])
                scores, values = [], []
                for s in range(t + 1):
                    c = x[b, s] @ W["w_dkv"]
                    k = torch.cat([c @ W["w_uk"][h], R[s] @ (x[b, s] @ W["w_kr"])])
                    scores.append(q @ k / math.sqrt(cfg.d_head + cfg.d_rope))
                    values.append(c @ W["w_uv"][h])
                a = torch.softmax(torch.stack(scores), 0)
                out[b, t] += (a @ torch.stack(values)) @ W["w_o"][h]
    return out


@pytest.mark.parametrize("form", ["naive", "absorbed"])
def test_layer_matches_loop_reference(form):
    layer, x = _layer(), _x()
    with torch.no_grad():
        check = _reference_layer(layer, x)
        got = layer(x, form=form)
    torch.testing.assert_close(got, check, atol=1e-12, rtol=0)


def test_naive_and_absorbed_agree_float32():
    layer, x = _layer(torch.float32), _x(dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(
            layer(x, form="naive"), layer(x, form="absorbed"), atol=1e-5, rtol=0
        )


def test_naive_attention_matches_torch_sdpa():
    layer, x = _layer(), _x()
    pos = torch.arange(x.shape[1])
    with torch.no_grad():
        q_nope, q_rope = layer.queries(x, pos)
        c, k_rope = layer.keys(x, pos)
        out, _ = mla.mla_attention_naive(
            q_nope, q_rope, c, k_rope, layer.w_uk, layer.w_uv, scale=CFG.scale
        )
        k, v = mla.up_project(c, layer.w_uk, layer.w_uv)
        q = torch.cat([q_nope, q_rope], -1)
        k = torch.cat([k, k_rope[:, None].expand(-1, CFG.n_heads, -1, -1)], -1)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=CFG.scale)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_absorption_identities():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)
    c = torch.randn(2, 6, 10, generator=g, dtype=torch.float64)
    w_uk = torch.randn(3, 10, 8, generator=g, dtype=torch.float64)
    w_uv = torch.randn(3, 10, 8, generator=g, dtype=torch.float64)
    w_o = torch.randn(3, 8, 24, generator=g, dtype=torch.float64)
    k, v = mla.up_project(c, w_uk, w_uv)
    torch.testing.assert_close(
        mla.absorb_query(q, w_uk) @ c[:, None].transpose(-2, -1),
        q @ k.transpose(-2, -1),
        atol=1e-12,
        rtol=0,
    )
    a = torch.softmax(torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64), -1)
    naive = torch.einsum("bhts,bhsd,hdo->bto", a, v, w_o)
    absorbed = torch.einsum("bhts,bsc,hco->bto", a, c, mla.absorb_output(w_uv, w_o))
    torch.testing.assert_close(absorbed, naive, atol=1e-12, rtol=0)


@pytest.mark.parametrize("form", ["naive", "absorbed"])
def test_cached_decoding_equals_full_pass(form):
    layer, x = _layer(), _x(T=9)
    cache = mla.LatentCache(2, 9, CFG, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x, form="naive")
        steps = [layer(x[:, :4], cache, form=form)]
        steps += [layer(x[:, t : t + 1], cache, form=form) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-12, rtol=0)
    assert cache.length == 9


def test_cache_bytes_and_formulas():
    cache = mla.LatentCache(3, 11, CFG, dtype=torch.bfloat16)
    assert cache.nbytes == mla.mla_cache_bytes(1, CFG.d_latent, 11, d_rope=CFG.d_rope, batch=3)
    assert mla.mla_cache_bytes(61, 512, 1000) == 61 * 1000 * 512 * 2
    assert mla.gqa_cache_bytes(61, 8, 128, 1000) == 2 * 61 * 8 * 128 * 1000 * 2
    with pytest.raises(ValueError, match="overflow"):
        cache.append(torch.zeros(3, 12, 10), torch.zeros(3, 12, 4))


@pytest.mark.parametrize("form", ["naive", "absorbed"])
def test_decode_flops_match_flop_counter(form):
    layer, x = _layer(), _x(T=6)
    cache = mla.LatentCache(2, 6, CFG, dtype=torch.float64)
    with torch.no_grad():
        layer(x[:, :5], cache, form=form)
        with FlopCounterMode(display=False) as counter:
            layer(x[:, 5:], cache, form=form)
    assert counter.get_total_flops() == mla.mla_decode_flops(CFG, 6, form, batch=2)["total"]


def test_bad_input():
    layer = _layer()
    with pytest.raises(ValueError, match="even"):
        mla.MLAConfig(d_model=8, n_heads=2, d_head=4, d_latent=4, d_rope=3, d_q_latent=4)
    with pytest.raises(TypeError, match="d_model"):
        mla.MLAConfig(d_model=8.0, n_heads=2, d_head=4, d_latent=4, d_rope=2, d_q_latent=4)
    with pytest.raises(ValueError, match="rope_base"):
        mla.MLAConfig(
            d_model=8, n_heads=2, d_head=4, d_latent=4, d_rope=2, d_q_latent=4, rope_base=1
        )
    with pytest.raises(TypeError, match="floating-point"):
        mla.latent(torch.zeros(1, 2, 4, dtype=torch.int64), torch.zeros(4, 3))
    with pytest.raises(ValueError, match="w_uk must have shape"):
        mla.up_project(torch.zeros(1, 2, 5), torch.zeros(2, 4, 3), torch.zeros(2, 5, 3))
    with pytest.raises(ValueError, match="w_uk must have shape"):
        mla.absorb_query(torch.zeros(1, 2, 3, 4), torch.zeros(3, 5, 4))
    with pytest.raises(ValueError, match="w_uk must have shape"):  # one head would broadcast
        mla.absorb_query(torch.zeros(1, 2, 3, 4), torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match="w_o must have shape"):
        mla.absorb_output(torch.zeros(2, 5, 4), torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match="q_rope must have shape"):
        mla.mla_attention_absorbed(
            torch.zeros(1, 3, 4, 8),
            torch.zeros(1, 3, 5, 4),
            torch.zeros(1, 6, 10),
            torch.zeros(1, 6, 4),
            layer.w_uk,
            layer.w_uv,
            scale=1.0,
        )
    with pytest.raises(ValueError, match="k_rope must have shape"):
        mla.mla_attention_naive(
            torch.zeros(1, 3, 4, 8),
            torch.zeros(1, 3, 4, 4),
            torch.zeros(1, 6, 10),
            torch.zeros(1, 5, 4),
            layer.w_uk.double(),
            layer.w_uv.double(),
            scale=1.0,
        )
    with pytest.raises(ValueError, match="c must have shape"):  # a batch of 1 would broadcast
        mla.mla_attention_naive(
            torch.zeros(2, 3, 4, 8),
            torch.zeros(2, 3, 4, 4),
            torch.zeros(1, 6, 10),
            torch.zeros(1, 6, 4),
            layer.w_uk.double(),
            layer.w_uv.double(),
            scale=1.0,
        )
    with pytest.raises(ValueError, match="form"):
        layer(_x(), form="fast")
    with pytest.raises(ValueError, match="batch"):
        mla.LatentCache(0, 4, CFG)
    with pytest.raises(ValueError, match="c_new must have shape"):
        mla.LatentCache(1, 4, CFG).append(torch.zeros(1, 2, 9), torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="k_rope_new must have shape"):
        mla.LatentCache(1, 4, CFG).append(torch.zeros(1, 2, 10), torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="n_layers"):
        mla.mla_cache_bytes(0, 512, 10)
    with pytest.raises(ValueError, match="d_rope"):
        mla.mla_cache_bytes(1, 512, 10, d_rope=-2)
    with pytest.raises(TypeError, match="seq_len"):
        mla.gqa_cache_bytes(1, 8, 128, 10.5)
    with pytest.raises(ValueError, match="form"):
        mla.mla_decode_flops(CFG, 10, "fast")
