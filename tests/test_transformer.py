"""Unit tests of mlbook.models.transformer against independent references: a straight-line functional
re-computation with torch built-ins (F.rms_norm, F.scaled_dot_product_attention, F.silu),
transformers' LlamaDecoderLayer, exact parameter tensors and torch's FlopCounterMode."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlbook.models import transformer as tfm

F64 = torch.float64
ATOL = {torch.float64: 1e-12, torch.float32: 2e-5}


def small_config(**kw) -> tfm.TransformerConfig:
    base = dict(d_model=32, n_heads=4, d_ff=48, n_layers=2, vocab_size=50, max_seq_len=32)
    base.update(kw)
    return tfm.TransformerConfig(**base)


def randomise_gains(module: nn.Module, gen: torch.Generator) -> None:
    """Gains of 1 would hide a missing gain: perturb every RMSNorm weight."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, tfm.RMSNorm):
                noise = torch.randn(m.weight.shape, generator=gen, dtype=m.weight.dtype)
                m.weight.add_(0.2 * noise)


def reference_rope(t: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """Half-split RoPE from its definition, frequencies base^(-2i/d_h) built here."""
    dh = t.shape[-1]
    inv = base ** (-torch.arange(0, dh, 2, dtype=F64) / dh)  # (d_h/2,)
    ang = pos.to(F64)[..., None] * inv  # (..., T, d_h/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    t1, t2 = t[..., : dh // 2], t[..., dh // 2 :]
    return t * cos.to(t.dtype) + torch.cat([-t2, t1], -1) * sin.to(t.dtype)


def reference_block(
    blk: tfm.DecoderBlock, x: torch.Tensor, pos: torch.Tensor, post: bool = False
) -> torch.Tensor:
    """Eqs. 22.1-22.3 written straight through with torch built-ins."""
    c = blk.config
    B, T, d = x.shape
    H, dh = c.n_heads, c.head_dim
    a = blk.attn

    def attn(z):
        q, k, v = (F.linear(z, W.T).view(B, T, H, dh).transpose(1, 2) for W in (a.Wq, a.Wk, a.Wv))
        q, k = reference_rope(q, pos, c.rope_base), reference_rope(k, pos, c.rope_base)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(o.transpose(1, 2).reshape(B, T, d), a.Wo.T)

    def ffn(z):
        f = blk.ffn
        return F.linear(F.silu(F.linear(z, f.W.T)) * F.linear(z, f.V.T), f.W2.T)

    def norm(z, m):
        return F.rms_norm(z, (d,), m.weight, c.norm_eps)

    if post:
        u = norm(x + attn(x), blk.attn_norm)
        return norm(u + ffn(u), blk.ffn_norm)
    u = x + attn(norm(x, blk.attn_norm))
    return u + ffn(norm(u, blk.ffn_norm))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("post", [False, True])
def test_block_matches_functional_reference(dtype, post):
    gen = torch.Generator().manual_seed(0)
    cfg = small_config()
    cls = tfm.PostNormDecoderBlock if post else tfm.DecoderBlock
    blk = cls(cfg, generator=gen, dtype=dtype)
    randomise_gains(blk, gen)
    x = torch.randn(3, 10, 32, generator=gen, dtype=dtype)
    pos = torch.arange(5, 15)
    with torch.no_grad():
        out = blk(x, pos)
        ref = reference_block(blk, x, pos, post=post)
    torch.testing.assert_close(out, ref, atol=ATOL[dtype], rtol=0)


def test_block_matches_llama_decoder_layer_float64():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    gen = torch.Generator().manual_seed(1)
    cfg = small_config()
    blk = tfm.DecoderBlock(cfg, generator=gen, dtype=F64)
    randomise_gains(blk, gen)
    lc = LlamaConfig(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=1,
        vocab_size=50,
        rms_norm_eps=cfg.norm_eps,
        attention_bias=False,
        mlp_bias=False,
    )
    lc._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(lc, layer_idx=0).to(F64).eval()
    # LlamaRMSNorm computes in float32; torch's RMSNorm keeps float64 (same formula).
    layer.input_layernorm = nn.RMSNorm(32, eps=cfg.norm_eps, dtype=F64)
    layer.post_attention_layernorm = nn.RMSNorm(32, eps=cfg.norm_eps, dtype=F64)
    pairs = [
        (layer.self_attn.q_proj, blk.attn.Wq),
        (layer.self_attn.k_proj, blk.attn.Wk),
        (layer.self_attn.v_proj, blk.attn.Wv),
        (layer.self_attn.o_proj, blk.attn.Wo),
        (layer.mlp.gate_proj, blk.ffn.W),
        (layer.mlp.up_proj, blk.ffn.V),
        (layer.mlp.down_proj, blk.ffn.W2),
    ]
    with torch.no_grad():
        for lin, W in pairs:
            lin.weight.copy_(W.T)  # nn.Linear stores (out, in)
        layer.input_layernorm.weight.copy_(blk.attn_norm.weight)
        layer.post_attention_layernorm.weight.copy_(blk.ffn_norm.weight)
    x = torch.randn(2, 12, 32, generator=gen, dtype=F64)
    pos = torch.arange(12)
    ang = pos[:, None].to(F64) * (cfg.rope_base ** (-torch.arange(0, 8, 2, dtype=F64) / 8))
    cos = torch.cat([ang.cos()] * 2, -1)[None].expand(2, -1, -1)
    sin = torch.cat([ang.sin()] * 2, -1)[None].expand(2, -1, -1)
    with torch.no_grad():
        ref = layer(x, position_ids=pos[None].expand(2, -1), position_embeddings=(cos, sin))
        out = blk(x)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_block_is_causal_and_positions_batched():
    gen = torch.Generator().manual_seed(2)
    blk = tfm.DecoderBlock(small_config(), generator=gen, dtype=F64)
    x = torch.randn(2, 8, 32, generator=gen, dtype=F64)
    y = x.clone()
    y[:, 5:] += torch.randn(2, 3, 32, generator=gen, dtype=F64)
    with torch.no_grad():
        ox, oy = blk(x), blk(y)
        torch.testing.assert_close(ox[:, :5], oy[:, :5], atol=1e-13, rtol=0)
        assert (ox[:, 5:] - oy[:, 5:]).abs().max() > 1e-3  # the future does matter there
        # (T,) positions and the same positions per batch row as (B, T) agree
        p = torch.arange(3, 11)
        torch.testing.assert_close(blk(x, p), blk(x, p.expand(2, -1)), atol=1e-13, rtol=0)
        # RoPE: shifting all positions by a constant leaves the output unchanged
        torch.testing.assert_close(blk(x, p), blk(x), atol=1e-10, rtol=0)


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("post", [False, True])
def test_parameter_counts_match_tensors(tie, post):
    cfg = small_config(tie_embeddings=tie, n_layers=3)
    model = tfm.TransformerLM(cfg, post_norm=post)
    assert tfm.count_parameters(cfg, post_norm=post) == sum(p.numel() for p in model.parameters())
    blk = model.blocks[0]
    d, h = cfg.d_model, cfg.d_ff
    assert tfm.block_parameters(d, h, norms=True) == sum(p.numel() for p in blk.parameters())
    assert tfm.block_parameters(d, h) == 4 * d * d + 3 * d * h
    non_emb = sum(p.numel() for n, p in model.named_parameters() if n not in ("embedding", "head"))
    assert tfm.count_parameters(cfg, embeddings=False, post_norm=post) == non_emb


def test_default_d_ff_and_head_dim():
    cfg = tfm.TransformerConfig(d_model=96, n_heads=6)
    assert cfg.d_ff == 256 and cfg.head_dim == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 4


@pytest.mark.parametrize("tie", [True, False])
def test_flop_formula_matches_flop_counter(tie):
    cfg = small_config(tie_embeddings=tie)
    model = tfm.TransformerLM(cfg, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    assert tfm.measure_training_flops(model, tokens) == tfm.training_flops(cfg, 12, batch=2)
    n = tfm.count_parameters(cfg, embeddings=False)
    assert tfm.approx_training_flops(n, 24) == 6 * n * 24
    # without the attention and head terms the exact count is 6 N_matmul D
    n_matmul = cfg.n_layers * tfm.block_parameters(cfg.d_model, cfg.d_ff)
    extra = 3 * 24 * (cfg.n_layers * 4 * 12 * cfg.d_model + 2 * cfg.d_model * cfg.vocab_size)
    assert tfm.training_flops(cfg, 12, batch=2) == 6 * n_matmul * 24 + extra


def test_lm_forward_shapes_and_tied_logits():
    cfg = small_config()
    model = tfm.TransformerLM(cfg, generator=torch.Generator().manual_seed(0), dtype=F64)
    tokens = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    assert logits.shape == (2, 7, 50)
    h = model.hidden_states(tokens)
    assert len(h) == cfg.n_layers + 1
    ref = F.rms_norm(h[-1], (32,), model.final_norm.weight, cfg.norm_eps) @ model.embedding.T
    torch.testing.assert_close(logits, ref, atol=1e-12, rtol=0)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="divisible"):
        tfm.TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="even"):
        tfm.TransformerConfig(d_model=12, n_heads=4)
    with pytest.raises(ValueError, match="d_model"):
        tfm.TransformerConfig(d_model=0, n_heads=1)
    with pytest.raises(TypeError):
        tfm.TransformerConfig(d_model=32.0, n_heads=4)
    with pytest.raises(ValueError, match="rope_base"):
        tfm.TransformerConfig(d_model=32, n_heads=4, rope_base=1.0)
    with pytest.raises(ValueError, match="norm_eps"):
        tfm.TransformerConfig(d_model=32, n_heads=4, norm_eps=-1.0)
    with pytest.raises(TypeError):
        tfm.DecoderBlock({"d_model": 32})
    blk = tfm.DecoderBlock(small_config())
    with pytest.raises(ValueError, match="shape"):
        blk(torch.zeros(2, 5, 31))
    with pytest.raises(ValueError, match="max_seq_len"):
        blk(torch.zeros(1, 33, 32))
    with pytest.raises(TypeError):
        blk(torch.zeros(1, 5, 32, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        blk(torch.zeros(2, 5, 32), torch.arange(4))
    with pytest.raises(TypeError, match="integers"):
        blk(torch.zeros(2, 5, 32), torch.arange(5.0))
    with pytest.raises(ValueError):
        tfm.RMSNorm(0)
    with pytest.raises(ValueError):
        tfm.block_parameters(0, 4)
    with pytest.raises(TypeError):
        tfm.count_parameters(None)
    with pytest.raises(ValueError):
        tfm.forward_flops(small_config(), 0)
    with pytest.raises(ValueError):
        tfm.training_flops(small_config(), 4, batch=0)
    with pytest.raises(ValueError):
        tfm.approx_training_flops(0, 10)
    model = tfm.TransformerLM(small_config())
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[0, 50]]))
    with pytest.raises(TypeError):
        model(torch.zeros(1, 3))
    with pytest.raises(TypeError):
        tfm.TransformerLM(small_config(), post_norm=1)
    with pytest.raises(TypeError):
        tfm.measure_training_flops(lambda t: t, torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError):
        tfm.measure_training_flops(model, torch.zeros(3, dtype=torch.long))
