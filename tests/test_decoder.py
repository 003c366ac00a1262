"""Unit tests of the one decoder (mlbook.models) against independent references: transformers'
LlamaForCausalLM, LlamaDecoderLayer and GPT2LMHeadModel (same weights, built from a config), a
straight-line re-computation with torch built-ins, full forward passes for the caches, the SSM
and MoE references of mlbook.architectures, parameter tensors and torch's FlopCounterMode."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mlbook.architectures import moe, ssm
from mlbook.attention import kv_cache as kc
from mlbook.models import counting, decoder, hf, training
from mlbook.models.config import (
    LLAMA2_7B,
    LLAMA2_70B,
    MISTRAL_7B,
    DecoderConfig,
    gpt2_config,
    llama_config,
)
from mlbook.models.generate import (
    decode_step_seconds,
    generate,
    sampling_probs,
    top_k_filter,
    top_k_filter_naive,
    top_p_filter,
    top_p_filter_naive,
)
from mlbook.nn.schedules import linear_warmup

F64 = torch.float64
ATOL = {torch.float64: 1e-12, torch.float32: 2e-5}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny problems: one thread is faster and sums in a fixed order."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def config(**kw) -> DecoderConfig:
    base = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_seq_len=32)
    return DecoderConfig(**{**base, **kw})


def build(cfg: DecoderConfig, dtype=F64, seed=0) -> decoder.Decoder:
    return decoder.Decoder(cfg, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def tokens(B, T, V=50, seed=1) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def perturb_vectors(module: nn.Module, seed=0, scale=0.3) -> None:
    """Gains of 1 and biases of 0 would hide a missing gain or bias: perturb every vector."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and not name.endswith(("b_delta", "D")):
                p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


# Configurations that together switch every option on once.
GRID = {
    "llama": config(),
    "gqa-untied": config(n_kv_heads=2, tie_embeddings=False),
    "mqa-bias": config(n_kv_heads=1, bias=True, rope_base=500.0),
    "gpt2": gpt2_config(50, 32, 2, 4, 32),
    "post-norm-layer": config(post_norm=True, norm="layer"),
    "learned-swiglu-bias": config(positions="learned", bias=True),
    "window-sinks": config(window=3, sinks=1, n_kv_heads=2),
    "moe": config(n_experts=4, top_k=2, n_kv_heads=2),
    "hybrid": config(n_layers=3, layer_pattern="AS", ssm_state=4, ssm_conv=3),
    "ssm-moe": config(layer_pattern="S", n_experts=3, top_k=1, ssm_expand=1, ssm_conv=1),
}


# --- config ------------------------------------------------------------------------------------


def test_config_defaults_presets_and_frozen():
    c = DecoderConfig(256, 96, n_heads=6)
    assert (c.d_ff, c.head_dim, c.n_kv_heads, c.layer_kinds) == (256, 16, 6, ("attention",))
    assert gpt2_config(29, 64, 2, 4, 32).d_ff == 256
    g = gpt2_config()
    assert (g.d_model, g.n_layers, g.max_seq_len, g.norm, g.positions, g.mlp, g.bias) == (
        768, 12, 1024, "layer", "learned", "gelu", True
    )  # fmt: skip
    assert not LLAMA2_7B.tie_embeddings and LLAMA2_70B.n_kv_heads == 8 and MISTRAL_7B.window
    assert config(n_layers=5, layer_pattern="SSA").layer_kinds == (
        "ssm", "ssm", "attention", "ssm", "ssm"
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError, match="d_model"):
        c.d_model = 4
    assert dataclasses.replace(c, n_kv_heads=2).n_kv_heads == 2


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        (dict(d_model=30), ValueError, "n_heads=4 must divide d_model=30"),
        (dict(d_model=12), ValueError, "RoPE rotates pairs"),
        (dict(d_model=0), ValueError, "d_model must be a positive int"),
        (dict(d_model=32.0), TypeError, "d_model must be a positive int"),
        (dict(n_kv_heads=3), ValueError, "n_kv_heads=3 must divide n_heads=4"),
        (dict(norm="batch"), ValueError, "norm must be one of"),
        (dict(positions="alibi"), ValueError, "positions must be one of"),
        (dict(mlp="relu"), ValueError, "mlp must be one of"),
        (dict(rope_base=1.0), ValueError, "rope_base must be a finite number"),
        (dict(norm_eps=-1.0), ValueError, "norm_eps must be a finite number"),
        (dict(init_std=0.0), ValueError, "init_std must be a finite number"),
        (dict(window=0), ValueError, "window must be a positive int"),
        (dict(sinks=-1), ValueError, "sinks must be in"),
        (dict(n_experts=4, top_k=5), ValueError, "top_k must be in"),
        (dict(n_experts=4, mlp="gelu"), ValueError, "needs mlp='swiglu'"),
        (dict(layer_pattern="AX"), ValueError, "layer_pattern must be letters A and S"),
        (dict(bias="yes"), ValueError, "bias must be one of"),
    ],
)
def test_config_rejects_bad_fields(kw, error, match):
    with pytest.raises(error, match=match):
        config(**kw)


# --- eq. 22.4: parameters, exact over the grid ---------------------------------------------------


@pytest.mark.parametrize("name", GRID)
def test_count_parameters_exact(name):
    cfg = GRID[name]
    model = build(cfg, torch.float32)
    assert counting.count_parameters(cfg) == sum(p.numel() for p in model.parameters())
    embedding = {"embedding", "pos_embedding", "head"}
    non_emb = sum(p.numel() for n, p in model.named_parameters() if n not in embedding)
    assert counting.count_parameters(cfg, embeddings=False) == non_emb


def test_block_parameters_is_eq_22_4():
    cfg = config(n_layers=3)
    blk = build(cfg).blocks[0]
    d, h = cfg.d_model, cfg.d_ff
    assert counting.block_parameters(d, h) == 4 * d * d + 3 * d * h
    assert counting.block_parameters(d, h, norms=True) == sum(p.numel() for p in blk.parameters())


def test_published_shapes():
    # transformers' LlamaForCausalLM of these shapes, counted on the meta device
    assert counting.count_parameters(LLAMA2_7B) == 6_738_415_616
    assert counting.count_parameters(LLAMA2_70B) == 68_976_648_192
    assert counting.count_parameters(MISTRAL_7B) == 7_241_732_096
    assert counting.cache_bytes(LLAMA2_7B, 4096) == 2 * 2**30  # 0.5 MiB per token
    assert counting.cache_bytes(LLAMA2_70B, 4096) == 1.25 * 2**30
    assert counting.cache_bytes(MISTRAL_7B, 32768) == counting.cache_bytes(MISTRAL_7B, 4096)


# --- the block: a functional reference and Llama's layer -------------------------------------


def reference_rope(t: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """Half-split RoPE from its definition, frequencies base^(-2i/d_h) built here."""
    dh = t.shape[-1]
    inv = base ** (-torch.arange(0, dh, 2, dtype=F64) / dh)  # (d_h/2,)
    ang = pos.to(F64)[..., None] * inv  # (..., T, d_h/2)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    t1, t2 = t[..., : dh // 2], t[..., dh // 2 :]
    return t * cos.to(t.dtype) + torch.cat([-t2, t1], -1) * sin.to(t.dtype)


def reference_block(blk, x: torch.Tensor, pos: torch.Tensor, post: bool = False) -> torch.Tensor:
    """Eqs. 22.1-22.3 with GQA written straight through with torch built-ins."""
    c = blk.config
    B, T, d = x.shape
    H, G, dh = c.n_heads, c.n_kv_heads, c.head_dim
    a = blk.attn

    def attn(z):
        q = F.linear(z, a.Wq.T).view(B, T, H, dh).transpose(1, 2)
        k, v = (F.linear(z, W.T).view(B, T, G, dh).transpose(1, 2) for W in (a.Wk, a.Wv))
        q, k = reference_rope(q, pos, c.rope_base), reference_rope(k, pos, c.rope_base)
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
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
@pytest.mark.parametrize("G", [4, 2])
def test_block_matches_functional_reference(dtype, post, G):
    gen = torch.Generator().manual_seed(0)
    cfg = config(n_kv_heads=G)
    cls = decoder.PostNormDecoderBlock if post else decoder.DecoderBlock
    blk = cls(cfg, generator=gen, dtype=dtype)
    perturb_vectors(blk)
    x = torch.randn(3, 10, 32, generator=gen, dtype=dtype)
    pos = torch.arange(5, 15)
    with torch.no_grad():
        out = blk(x, pos)
        ref = reference_block(blk, x, pos, post=post)
    torch.testing.assert_close(out, ref, atol=ATOL[dtype], rtol=0)


def test_block_matches_llama_decoder_layer_float64():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    gen = torch.Generator().manual_seed(1)
    cfg = config(n_kv_heads=2)
    blk = decoder.DecoderBlock(cfg, generator=gen, dtype=F64)
    perturb_vectors(blk)
    lc = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=50,
        rms_norm_eps=cfg.norm_eps,
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
    blk = decoder.DecoderBlock(config(), generator=gen, dtype=F64)
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
        # without the mask the past sees the future (a negative control)
        leaky = blk(y, causal=False)
        assert (leaky[:, :5] - ox[:, :5]).abs().max() > 1e-3


def test_attention_weights_and_lm_hidden_states():
    cfg = config()
    model = build(cfg)
    x = tokens(2, 7)
    h = model.hidden_states(x)
    assert len(h) == cfg.n_layers + 1 and all(s.shape == (2, 7, 32) for s in h)
    ref = F.rms_norm(h[-1], (32,), model.final_norm.weight, cfg.norm_eps) @ model.embedding.T
    torch.testing.assert_close(model(x), ref, atol=1e-12, rtol=0)
    _, w = model.blocks[0].attn(h[0], return_weights=True)
    assert w.shape == (2, 4, 7, 7) and torch.triu(w, 1).abs().max() == 0
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 7, dtype=F64), atol=1e-12, rtol=0)


# --- whole models against transformers --------------------------------------------------------


def _llama_error(cfg, dtype=torch.float32) -> float:
    model = build(cfg, dtype, seed=3)
    perturb_vectors(model, seed=4)
    x = tokens(3, cfg.max_seq_len, cfg.vocab_size)
    with torch.no_grad():
        return (model(x) - hf.to_hf(model)(x).logits).abs().max().item()


@pytest.mark.parametrize("G", [4, 2, 1])
@pytest.mark.parametrize("tie", [True, False])
def test_logits_match_llama_for_causal_lm_float32(G, tie):
    pytest.importorskip("transformers")
    cfg = llama_config(64, 32, 2, 4, n_kv_heads=G, d_ff=48, max_seq_len=24, tie_embeddings=tie)
    assert _llama_error(cfg) < 1e-5
    assert _llama_error(dataclasses.replace(cfg, bias=True, rope_base=500.0)) < 1e-5


def test_llama_negative_control_rope_base():
    """A wrong RoPE base in transformers' model must break the agreement."""
    pytest.importorskip("transformers")
    cfg = llama_config(64, 32, 2, 4, d_ff=48, max_seq_len=24)
    model = build(cfg, torch.float32, seed=3)
    x = tokens(2, 24, 64)
    with torch.no_grad():
        gap = (model(x) - hf.to_hf(model, rope_theta=500.0)(x).logits).abs().max().item()
    assert gap > 1e-3


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_logits_match_gpt2_lm_head_model(dtype):
    pytest.importorskip("transformers")
    cfg = gpt2_config(29, 32, 2, 4, 16, init_std=0.1)
    model = build(cfg, dtype)
    perturb_vectors(model, seed=5, scale=0.1)
    x = tokens(3, 16, 29)
    with torch.no_grad():
        ours, theirs = model(x), hf.to_hf(model)(x).logits
        erf = hf.to_hf(model, activation_function="gelu")(x).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5 if dtype == torch.float32 else 1e-12, rtol=0)
    assert (erf - ours).abs().max() > 1e-5  # negative control: the exact-erf GELU differs
    with pytest.raises(TypeError, match="model must be a Decoder"):
        hf.to_hf_state_dict(nn.Linear(2, 2))


@pytest.mark.parametrize("name", ["llama", "gqa-untied", "mqa-bias", "gpt2"])
def test_hf_round_trip(name):
    pytest.importorskip("transformers")
    model = build(GRID[name], torch.float32)
    back = hf.from_hf(hf.to_hf(model))
    assert back.config == dataclasses.replace(GRID[name], init_std=back.config.init_std)
    for (n, a), b in zip(model.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b), n


def test_hf_family_rejects_other_forms():
    with pytest.raises(ValueError, match="no transformers twin"):
        hf.hf_family(GRID["hybrid"])
    with pytest.raises(ValueError, match="no transformers twin"):
        hf.hf_family(GRID["window-sinks"])
    with pytest.raises(ValueError, match="GPT-2 has no grouped-query attention"):
        hf.hf_family(gpt2_config(50, 32, 2, 4, 32, n_kv_heads=2))


def test_tied_head_is_embedding():
    model = build(gpt2_config(11, 16, 2, 2, 8, init_std=0.3))
    x = tokens(2, 6, 11)
    torch.testing.assert_close(model(x), model.hidden(x) @ model.embedding.T, atol=0, rtol=0)
    assert model.head is None


# --- eq. 23.1: causality and normalisation ---------------------------------------------------


def test_one_pass_equals_per_prefix():
    model = build(gpt2_config(11, 16, 2, 2, 8, init_std=0.3))
    x = tokens(4, 8, 11)
    torch.testing.assert_close(
        training.sequence_log_prob(model, x),
        training.sequence_log_prob_naive(model, x),
        atol=1e-10,
        rtol=0,
    )
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 11  # a later token must not change earlier logits
    torch.testing.assert_close(model(x)[:, :-1], model(y)[:, :-1], atol=0, rtol=0)
    with pytest.raises(ValueError, match="T >= 2"):
        training.sequence_log_prob(model, x[:, :1])
    with pytest.raises(ValueError, match="T >= 2"):
        training.sequence_log_prob_naive(model, x[:, :1])


@pytest.mark.parametrize("name", ["gpt2", "hybrid"])
def test_sequence_probabilities_sum_to_one(name):
    cfg = dataclasses.replace(GRID[name], vocab_size=3, init_std=0.5)
    model = build(cfg)
    seqs = torch.tensor([(1, *r) for r in itertools.product(range(3), repeat=4)])
    assert abs(training.sequence_log_prob(model, seqs).exp().sum().item() - 1) < 1e-12
    if name == "gpt2":
        leaky = training.sequence_log_prob(model, seqs, causal=False).exp().sum().item()
        assert abs(leaky - 1) > 1e-3  # negative control: no mask, no distribution


# --- caches: cached decoding equals the full forward pass ------------------------------------


@pytest.mark.parametrize("name", list(GRID))
def test_cached_decoding_equals_full_forward(name):
    cfg = GRID[name]
    model = build(cfg)
    x = tokens(2, 11)
    full = model(x)
    cache = model.new_cache(2, 11)
    steps = torch.cat([model(x[:, i : i + 1], cache) for i in range(11)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=0)
    cache = model.new_cache(2, 11)
    chunks = [model(x[:, :4], cache), model(x[:, 4:7], cache), model(x[:, 7:], cache)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-12, rtol=0)
    assert cache.seq_len == 11 and cache.nbytes == counting.cache_bytes(cfg, 11, 2, 8)


def test_cache_at_the_wrong_position_changes_the_output():
    model = build(config(n_kv_heads=2))
    x = tokens(2, 11)
    full = model(x)
    cache = model.new_cache(2, 11)
    model(x[:, :5], cache)
    assert (model(x[:, 5:6])[:, 0] - full[:, 5]).abs().max() > 1e-3  # position 0, not 5


def test_float32_cached_decoding_close():
    model = build(config(n_kv_heads=2), torch.float32)
    x = tokens(1, 9)
    cache = model.new_cache(1, 9)
    steps = torch.cat([model(x[:, i : i + 1], cache) for i in range(9)], dim=1)
    torch.testing.assert_close(steps, model(x), atol=ATOL[torch.float32], rtol=0)


@pytest.mark.parametrize(("W", "S"), [(4, 0), (3, 1), (1, 1), (30, 2)])
def test_sliding_cache_equals_masked_full_attention(W, S):
    model = build(config(n_kv_heads=2, window=W, sinks=S))
    x = tokens(2, 13)
    full = model(x)  # full attention under the mask of eq. 24.4
    cache = model.new_cache(2, 13)
    steps = torch.cat([model(x[:, i : i + 1], cache) for i in range(13)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=0)
    held = sorted(cache.slot_pos[0][cache.slot_pos[0] >= 0].tolist())
    assert held == sorted(set(range(min(S, 13))) | set(range(max(0, 13 - W), 13)))
    assert cache.nbytes == kc.kv_cache_bytes(2, 2, 8, S + W, 8, 2)


def test_sliding_window_changes_output_beyond_window():
    x = tokens(1, 10)
    full = build(config(n_kv_heads=2))(x)
    win = build(config(n_kv_heads=2, window=3))(x)
    torch.testing.assert_close(win[:, :3], full[:, :3], atol=1e-12, rtol=0)
    assert (win[:, 3:] - full[:, 3:]).abs().max() > 1e-3


def test_gqa_shrinks_the_cache_and_mqa_has_one_head():
    caches = {G: build(config(n_kv_heads=G)).new_cache(2, 16) for G in (4, 2, 1)}
    assert caches[4].nbytes == 2 * caches[2].nbytes == 4 * caches[1].nbytes
    assert caches[1].k.shape == (2, 2, 1, 16, 8)  # (L, B, G, T_max, d_h)
    assert kc.attention_kind(4, 1) == "MQA"


def test_ssm_state_is_fixed_size():
    model = build(GRID["ssm-moe"])
    cache = model.new_cache(2)
    before = cache.nbytes
    model(tokens(2, 20), cache)
    assert cache.nbytes == before == counting.cache_bytes(GRID["ssm-moe"], 500, 2, 8)


# --- the SSM and MoE layers --------------------------------------------------------------------


def test_selective_ssm_matches_sequential_reference_and_carries_state():
    gen = torch.Generator().manual_seed(0)
    B, T, E, n = 3, 9, 5, 4
    u = torch.randn(B, T, E, generator=gen, dtype=F64)
    delta = F.softplus(torch.randn(B, T, E, generator=gen, dtype=F64))
    A = -torch.rand(E, n, generator=gen, dtype=F64) - 0.1
    Bt, Ct = (torch.randn(B, T, n, generator=gen, dtype=F64) for _ in range(2))
    y, h = decoder.selective_ssm(u, delta, A, Bt, Ct)
    for b in range(B):
        ref = ssm.selective_scan_sequential(u[b], delta[b], A, Bt[b], Ct[b])
        torch.testing.assert_close(y[b], ref, atol=1e-12, rtol=0)
    y1, h1 = decoder.selective_ssm(u[:, :4], delta[:, :4], A, Bt[:, :4], Ct[:, :4])
    y2, h2 = decoder.selective_ssm(u[:, 4:], delta[:, 4:], A, Bt[:, 4:], Ct[:, 4:], h1)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, atol=1e-12, rtol=0)
    torch.testing.assert_close(h2, h, atol=1e-12, rtol=0)


def test_moe_layer_matches_dense_reference():
    cfg = GRID["moe"]
    ffn = build(cfg).blocks[0].ffn
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0), dtype=F64)
    flat = x.reshape(-1, 32)
    route = moe.topk_route(flat @ ffn.W_r, cfg.top_k)
    G = moe.gate_matrix(route.idx, route.gates, cfg.n_experts)
    ref = moe.moe_dense(flat, G, ffn.W, ffn.V, ffn.W2)
    torch.testing.assert_close(ffn(x), ref.view(2, 5, 32), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["moe", "hybrid", "ssm-moe"])
def test_moe_and_ssm_layers_run_and_learn(name):
    cfg = GRID[name]
    model = build(cfg, torch.float32)
    x = tokens(2, 12)
    logits = model(x)
    assert logits.shape == (2, 12, 50) and torch.isfinite(logits).all()
    training.lm_loss(logits[:, :-1], x[:, 1:]).backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        if not n.endswith("W_r") or cfg.top_k < cfg.n_experts:  # the router needs a choice
            assert p.grad.abs().max() > 0, n
    kinds = [b.kind for b in model.blocks]
    assert kinds == list(cfg.layer_kinds)
    for b in model.blocks:
        assert hasattr(b, "attn" if b.kind == "attention" else "ssm")


# --- eq. 22.5 and decoding: FLOPs against FlopCounterMode --------------------------------------


@pytest.mark.parametrize("name", list(GRID))
def test_flop_formula_matches_flop_counter(name):
    cfg = GRID[name]
    model = build(cfg, torch.float32)
    x = tokens(2, 12)
    assert counting.measure_training_flops(model, x) == counting.training_flops(cfg, 12, 2)
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(x)
    assert fc.get_total_flops() == counting.forward_flops(cfg, 12, 2)


def test_flop_formula_is_6nd_plus_attention_and_head():
    cfg = config()
    n = counting.count_parameters(cfg, embeddings=False)
    assert counting.approx_training_flops(n, 24) == 6 * n * 24
    n_matmul = cfg.n_layers * counting.block_parameters(cfg.d_model, cfg.d_ff)
    extra = 3 * 24 * (cfg.n_layers * 4 * 12 * cfg.d_model + 2 * cfg.d_model * cfg.vocab_size)
    assert counting.training_flops(cfg, 12, batch=2) == 6 * n_matmul * 24 + extra


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", ["gqa-untied", "window-sinks", "hybrid"])
def test_generation_flops_match_flop_counter(use_cache, name):
    cfg = dataclasses.replace(GRID[name], max_seq_len=8)  # 3 + 7 tokens: the last are cropped
    model = build(cfg, torch.float32)
    with FlopCounterMode(display=False) as fc:
        generate(model, tokens(2, 3), 7, use_cache=use_cache)
    assert fc.get_total_flops() == counting.generation_flops(cfg, 3, 7, use_cache, batch=2)


# --- generate: one function, with and without the cache ---------------------------------------


@pytest.mark.parametrize("name", list(GRID))
def test_generate_same_tokens_with_and_without_cache(name):
    cfg = dataclasses.replace(GRID[name], max_seq_len=12)  # 4 + 12 tokens: past the context
    model = build(cfg, F64)
    p = tokens(2, 4)
    for kw in (dict(), dict(temperature=1.0, top_k=5), dict(temperature=0.8, top_p=0.9)):
        a = generate(model, p, 12, torch.Generator().manual_seed(3), use_cache=True, **kw)
        b = generate(model, p, 12, torch.Generator().manual_seed(3), use_cache=False, **kw)
        assert a.shape == (2, 16) and torch.equal(a, b) and torch.equal(a[:, :4], p), kw


def test_generate_greedy_equals_argmax_loop_and_top_k_1():
    model = build(gpt2_config(11, 16, 2, 2, 8, init_std=0.3), torch.float32)
    prompt = tokens(2, 3, 11)
    greedy = generate(model, prompt, 12)
    out = prompt.clone()
    with torch.no_grad():
        for _ in range(12):  # crop to the last max_seq_len tokens, argmax of the last position
            out = torch.cat([out, model(out[:, -8:])[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(greedy, out)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(generate(model, prompt, 12, g, temperature=2.0, top_k=1), greedy)
    assert torch.equal(generate(model, prompt, 0), prompt)


def test_generate_sampling_frequencies():
    model = build(gpt2_config(11, 16, 2, 2, 8, init_std=0.3), torch.float32)
    prompt = tokens(1, 3, 11)
    n = 4000
    draws = generate(model, prompt.expand(n, -1), 1, torch.Generator().manual_seed(0), 0.8, 4)
    with torch.no_grad():
        p = sampling_probs(model(prompt)[0, -1].double(), 0.8, 4)
    freq = torch.bincount(draws[:, -1], minlength=11).double() / n
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12).all()  # 5 standard errors
    a = generate(model, prompt, 9, torch.Generator().manual_seed(5), 1.0, top_p=0.7)
    b = generate(model, prompt, 9, torch.Generator().manual_seed(5), 1.0, top_p=0.7)
    assert torch.equal(a, b)


def test_generate_bad_input():
    model = build(gpt2_config(11, 16, 2, 2, 8))
    p = tokens(2, 3, 11)
    with pytest.raises(ValueError, match="n_new must be in"):
        generate(model, p, -1)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        generate(model, p, 1, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k must be in"):
        generate(model, p, 1, top_k=12)
    with pytest.raises(ValueError, match="top_p must be a finite number"):
        generate(model, p, 1, top_p=0.0)
    with pytest.raises(ValueError, match="prompt must not be empty"):
        generate(model, p[:, :0], 1)
    with pytest.raises(TypeError, match="prompt must be an integer tensor"):
        generate(model, p.float(), 1)
    with pytest.raises(TypeError, match="model must be a Decoder"):
        generate("model", p, 1)
    with pytest.raises(ValueError, match="context_len must be in"):
        decode_step_seconds(model, 1, True)


def test_decode_step_seconds_runs():
    model = build(config(n_kv_heads=2), torch.float32)
    for use_cache in (True, False):
        assert decode_step_seconds(model, 6, use_cache, reps=1) > 0


# --- eq. 23.5: sampling filters ------------------------------------------------------------------


def test_top_k_top_p_filters_and_sampling_probs():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 9, generator=g, dtype=F64)
    for k in (1, 3, 9, None):
        torch.testing.assert_close(top_k_filter(z, k), top_k_filter_naive(z, k), atol=0, rtol=0)
    for p in (0.05, 0.5, 0.9, 1.0, None):
        torch.testing.assert_close(top_p_filter(z, p), top_p_filter_naive(z, p), atol=0, rtol=0)
    assert (top_p_filter(z, 1e-9) > -math.inf).sum(-1).tolist() == [1] * 4  # at least one
    tau, k = 0.7, 3
    keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, z.argsort(-1, True)[:, :k], True)
    ref = torch.softmax(torch.where(keep, z / tau, -torch.inf), -1)
    torch.testing.assert_close(sampling_probs(z, tau, k), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(sampling_probs(z), torch.softmax(z, -1), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        sampling_probs(z, 0.0)
    with pytest.raises(ValueError, match="top_k must be in"):
        top_k_filter(z, 10)
    with pytest.raises(ValueError, match="top_k must be in"):
        top_k_filter_naive(z, 0)
    with pytest.raises(ValueError, match="top_p must be a finite number"):
        top_p_filter(z, 1.5)
    with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
        top_k_filter(z.long(), 2)
    with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
        top_p_filter_naive(z.long(), 0.5)


def test_sampling_probs_against_transformers_warpers():
    lp = pytest.importorskip("transformers.generation.logits_process")
    z = torch.randn(3, 12, generator=torch.Generator().manual_seed(3), dtype=F64)
    hf_z = lp.TemperatureLogitsWarper(1.7)(None, z)
    hf_z = lp.TopPLogitsWarper(0.8)(None, lp.TopKLogitsWarper(6)(None, hf_z))
    ours = sampling_probs(z, 1.7, 6, 0.8)
    torch.testing.assert_close(ours, torch.softmax(hf_z, -1), atol=1e-12, rtol=0)
    assert ((ours > 0).sum(-1) < 6).all()  # top-p cut into the top 6


# --- eq. 23.3 and the training loop --------------------------------------------------------------


def test_lm_loss_against_torch():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, 7, generator=g, dtype=F64)
    y = torch.randint(0, 7, (3, 5), generator=g)
    ref = F.cross_entropy(z.reshape(-1, 7), y.reshape(-1))
    torch.testing.assert_close(training.lm_loss(z, y), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(training.lm_loss_naive(z, y), ref, atol=1e-12, rtol=0)
    for fn in (training.lm_loss, training.lm_loss_naive):
        with pytest.raises(ValueError, match="targets must have shape"):
            fn(z, y[:, :-1])
        with pytest.raises(ValueError, match="logits must have 3 axes"):
            fn(z[0], y[0])
        with pytest.raises(TypeError, match="logits must be a floating-point tensor"):
            fn(z.long(), y)
        with pytest.raises(ValueError, match="targets must hold indices"):
            fn(z, y + 7)


def test_initial_loss_near_log_v():
    model = build(gpt2_config(29, 64, 2, 4, 16), torch.float32)
    x = tokens(8, 17, 29)
    with torch.no_grad():
        loss = training.lm_loss(model(x[:, :-1]), x[:, 1:]).item()
    assert abs(loss - math.log(29)) < 0.1


def test_get_batch_and_evaluate():
    data = torch.arange(100) % 13
    x, y = training.get_batch(data, 6, 9, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (6, 9)
    torch.testing.assert_close(y, (x + 1) % 13)
    with pytest.raises(ValueError, match="need more than block_size"):
        training.get_batch(data[:9], 2, 9, torch.Generator())
    with pytest.raises(ValueError, match="data must have 1 axes"):
        training.get_batch(data[None], 2, 9, torch.Generator())
    model = build(gpt2_config(13, 16, 2, 2, 9, init_std=0.3))
    n = (len(data) - 1) // 9  # evaluate = mean loss over the non-overlapping windows
    xs, ys = data[: n * 9].view(n, 9), data[1 : n * 9 + 1].view(n, 9)
    with torch.no_grad():
        ref = F.cross_entropy(model(xs).reshape(-1, 13), ys.reshape(-1)).item()
    assert abs(training.evaluate(model, data, batch_size=4) - ref) < 1e-10
    with pytest.raises(ValueError, match="need more than max_seq_len"):
        training.evaluate(model, data[:5])


def test_train_overfits_and_warms_up():
    text = torch.tensor([0, 1, 2, 3, 4, 5, 6] * 40)
    model = build(gpt2_config(7, 16, 1, 2, 8), torch.float32)
    hist = training.train(
        model,
        text,
        steps=60,
        batch_size=8,
        peak_lr=1e-2,
        warmup_steps=10,
        generator=torch.Generator().manual_seed(0),
        val_data=text,
        eval_every=30,
    )
    # eq. 23.4: eta_s = eta_max min(1, s / W) for update s = 1, 2, ..., as torch's LinearLR
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-2)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / 10, total_iters=9)
    for s in range(1, 11):
        assert abs(hist["lr"][s - 1] - opt.param_groups[0]["lr"]) < 1e-15
        assert abs(hist["lr"][s - 1] - linear_warmup(s, peak_lr=1e-2, warmup_steps=10)) < 1e-15
        opt.step()
        sched.step()
    assert abs(hist["lr"][-1] - 1e-3) < 1e-12  # cosine decay ends at peak / 10
    assert hist["eval_step"] == [30, 60]
    assert hist["val_eval"][-1] < 0.1  # a deterministic cycle is learnt
    kw = dict(batch_size=2, peak_lr=1e-2, generator=torch.Generator())
    with pytest.raises(ValueError, match="warmup_steps=5 must be < steps=5"):
        training.train(model, text, steps=5, warmup_steps=5, **kw)
    with pytest.raises(ValueError, match="eval_every > 0 needs val_data"):
        training.train(model, text, steps=5, warmup_steps=1, eval_every=2, **kw)
    with pytest.raises(ValueError, match="peak_lr must be a finite number"):
        training.train(model, text, steps=5, warmup_steps=1, **{**kw, "peak_lr": -1.0})


# --- bad input ------------------------------------------------------------------------------------


def test_model_bad_input():
    model = build(config())
    with pytest.raises(ValueError, match="tokens must hold indices"):
        model(torch.tensor([[0, 50]]))
    with pytest.raises(TypeError, match="tokens must be an integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="tokens must not be empty"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="exceed max_seq_len=32"):
        model(tokens(1, 33))
    with pytest.raises(TypeError, match="cache must come from the model's new_cache"):
        model(tokens(1, 3), cache="cache")
    with pytest.raises(TypeError, match="cache must come from the model's new_cache"):
        build(GRID["hybrid"])(tokens(1, 3), cache=model.new_cache(1))
    with pytest.raises(ValueError, match="differ from the model's"):
        model(tokens(1, 3), build(config(window=3)).new_cache(1))
    with pytest.raises(TypeError, match="config must be a DecoderConfig"):
        decoder.Decoder({"d_model": 8})
    blk = decoder.DecoderBlock(config())
    with pytest.raises(ValueError, match="x must have shape"):
        blk(torch.zeros(2, 5, 31))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        blk(torch.zeros(1, 5, 32, dtype=torch.long))
    with pytest.raises(ValueError, match="positions must have shape"):
        blk(torch.zeros(2, 5, 32), torch.arange(4))
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        blk(torch.zeros(2, 5, 32), torch.arange(5.0))
    with pytest.raises(ValueError, match="kind must be one of"):
        decoder.DecoderBlock(config(), "mlp")


def test_counting_bad_input():
    cfg = config()
    with pytest.raises(ValueError, match="d must be a positive int"):
        counting.block_parameters(0, 4)
    with pytest.raises(TypeError, match="config must be a DecoderConfig"):
        counting.count_parameters(None)
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        counting.forward_flops(cfg, 0)
    with pytest.raises(ValueError, match="batch must be a positive int"):
        counting.training_flops(cfg, 4, batch=0)
    with pytest.raises(ValueError, match="n_params must be a positive int"):
        counting.approx_training_flops(0, 10)
    with pytest.raises(ValueError, match="n_new must be in"):
        counting.generation_flops(cfg, 3, -1)
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        counting.cache_bytes(LLAMA2_7B, 0)
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        counting.measure_training_flops(lambda t: t, tokens(1, 3))
    with pytest.raises(ValueError, match="tokens must have 2 axes"):
        counting.measure_training_flops(build(cfg), torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_norm_of_float16_activations_above_256_matches_float32(norm):
    # Residual streams reach |x| in the hundreds; float16 squares overflow from |x| = 256 on, so
    # the norm accumulates in float32 (a same-dtype computation returned zero rows).
    cfg = config(norm=norm, d_model=32)
    n16, n32 = decoder.Norm(cfg, dtype=torch.float16), decoder.Norm(cfg, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n in (n16, n32):
            n.weight.fill_(1.5)
            if n.bias is not None:
                n.bias.fill_(0.25)
    x = (torch.randn(2, 3, 32, generator=gen) * 600).half()
    out = n16(x)
    assert out.dtype == torch.float16
    ref = n32(x.float())
    assert ref.abs().max() > 1
    torch.testing.assert_close(out.float(), ref, atol=1e-5, rtol=2**-10)
