"""Checks of the exercises of chapter 22 (the transformer block).

The parameter count is checked against the tensors of ``transformers``' ``GPT2Block``, the
break-even context against FLOPs measured by ``torch.utils.flop_counter.FlopCounterMode`` (both on
the ``meta`` device, so that large widths cost no memory), the zeroed blocks against the
package's own ``DecoderBlock`` and ``PostNormDecoderBlock`` run on random inputs, the block
written from raw weights against ``transformers``' ``LlamaDecoderLayer`` holding the same
weights, the predicted ratio against FlopCounterMode on ``transformers``' GPT-2 small, and the
measured ratios to 6ND against the closed form of section 22.5, written here from the widths.

Each typical wrong answer is written once, as a function of the reader's arguments; a check
evaluates the functions of its exercise on every case (:func:`_wrong`), and ``MISTAKES`` lists
the same functions with their feedback.
"""

from __future__ import annotations

import copy
import functools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ...models import decoder
from ...models.config import DecoderConfig
from . import (
    Incorrect,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    paired_mistakes,
    wrong_values,
)
from . import reference_answer as _ref

F64 = torch.float64


# --- 22.1: the parameters of a GPT-2 block -------------------------------------------------------


def _gpt2_block_numel(d: int, h: int) -> int:
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    with torch.device("meta"):
        block = GPT2Block(GPT2Config(n_embd=d, n_inner=h, n_head=1), layer_idx=0)
    return sum(p.numel() for p in block.parameters())


def params_without_biases(d, h):
    return 4 * d * d + 2 * d * h + 4 * d


def params_layernorm_gain_only(d, h):
    return 4 * d * d + 4 * d + 2 * d * h + h + d + 2 * d


def params_without_norms(d, h):
    return 4 * d * d + 4 * d + 2 * d * h + h + d


def params_fixed_h(d, h):
    return 12 * d * d + 13 * d


def params_three_ffn_matrices(d, h):
    return 4 * d * d + 4 * d + 3 * d * h + h + d + 4 * d


_GPT2_WRONG = [
    (
        params_without_biases,
        "the biases are missing: every linear layer of GPT-2 has one (4d in attention, h + d in "
        "the FFN)",
    ),
    (
        params_layernorm_gain_only,
        "a LayerNorm has a gain and a bias: 2d parameters each, 4d for the two",
    ),
    (params_without_norms, "the two LayerNorms (4d parameters) are missing"),
    (
        params_fixed_h,
        "the FFN's size depends on h: 2dh weights and h + d biases (12d² + 13d holds only for "
        "h = 4d)",
    ),
    (
        params_three_ffn_matrices,
        "a GELU FFN has two matrices, not three (there is no SwiGLU gate)",
    ),
]


@exercise("22.1", "gpt2_block_parameters")
def gpt2_block_parameters(answer) -> str:
    """The count against the tensors of transformers' GPT2Block for four (d, h)."""
    for d, h in ((96, 384), (64, 100), (768, 3072), (8, 1)):
        expect_answer(
            attempt(answer, d, h),
            _gpt2_block_numel(d, h),
            f"gpt2_block_parameters({d}, {h})",
            wrong=wrong_values(_GPT2_WRONG, d, h),
            atol=0.5,
            rtol=0,
        )
    return (
        "matches the tensors of transformers' GPT2Block for (d, h) = (96, 384), (64, 100), "
        "(768, 3072), (8, 1)"
    )


# --- 22.2: the break-even context ---------------------------------------------------------------


def _measured_break_even(d: int, h: int) -> float:
    """T at which attention FLOPs equal weight FLOPs, from two measured forward passes."""
    config = DecoderConfig(vocab_size=256, d_model=d, n_heads=1, d_ff=h, max_seq_len=8)
    per_token = {}
    with torch.device("meta"):
        block = decoder.DecoderBlock(config)
        for T in (4, 8):
            x = torch.randn(1, T, d)
            with FlopCounterMode(display=False) as counter:
                block(x)
            per_token[T] = counter.get_total_flops() / T  # = weights + attention_per_key * T
    attention_per_key = (per_token[8] - per_token[4]) / 4
    weights = per_token[4] - 4 * attention_per_key
    return weights / attention_per_key


def break_even_six_d(d, h):
    return 6.0 * d


def break_even_half_attention(d, h):
    return 2 * (4 * d * d + 3 * d * h) / (2 * d)


def break_even_one_flop_per_weight(d, h):
    return (4 * d * d + 3 * d * h) / (4 * d)


def break_even_attention_weights_only(d, h):
    return 2 * 4 * d * d / (4 * d)


_BREAK_EVEN_WRONG = [
    (
        break_even_six_d,
        "T = 6d holds only for h = 8d/3: count the FFN's 3dh weights with the given h",
    ),
    (
        break_even_half_attention,
        "Q K^T and A V cost 2Td FLOPs each per token, 4Td for the pair",
    ),
    (
        break_even_one_flop_per_weight,
        "a weight costs 2 FLOPs per token (a multiply and an add), like the attention products",
    ),
    (
        break_even_attention_weights_only,
        "the weights include the FFN's 3dh, not only attention's 4d²",
    ),
]


@exercise("22.2", "break_even_context")
def break_even_context(answer) -> str:
    """T* against FlopCounterMode on a DecoderBlock at two lengths, for four (d, h)."""
    for d, h in ((128, 341), (96, 256), (4096, 11008), (64, 176)):
        expect_answer(
            attempt(answer, d, h),
            _measured_break_even(d, h),
            f"break_even_context({d}, {h})",
            wrong=wrong_values(_BREAK_EVEN_WRONG, d, h),
            atol=1e-9,
            rtol=1e-12,
        )
    return (
        "matches the FLOPs measured by FlopCounterMode on DecoderBlock for (d, h) = "
        "(128, 341), (96, 256), (4096, 11008), (64, 176)"
    )


# --- 22.3: zero-initialised output projections ----------------------------------------------------


def _rms(v: torch.Tensor, gain, eps: float) -> torch.Tensor:
    return gain * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps)


def _layer(v: torch.Tensor, gain, eps: float) -> torch.Tensor:
    c = v - v.mean(-1, keepdim=True)
    return gain * c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)


def zero_nothing(block):
    return block


def zero_only_ffn(block):
    with torch.no_grad():
        block.ffn.W2.zero_()
    return block


def zero_only_attention(block):
    with torch.no_grad():
        block.attn.Wo.zero_()
    return block


def zero_values_and_gate(block):
    with torch.no_grad():
        block.attn.Wv.zero_()
        block.ffn.W.zero_()
    return block


def zero_without_return(block):
    zero_only_ffn(zero_only_attention(block))


_ZERO_WRONG = [
    (
        zero_nothing,
        "the block is unchanged: set W_O and W_d to zero in place (under torch.no_grad())",
    ),
    (zero_only_ffn, "the attention branch still adds its output: zero W_O (block.attn.Wo) too"),
    (zero_only_attention, "the FFN branch still adds its output: zero W_d (block.ffn.W2) too"),
]


def post_identity(x, g_attn, g_ffn, eps):
    return x


def post_ffn_norm_only(x, g_attn, g_ffn, eps):
    return _rms(x, g_ffn, eps)


def post_attn_norm_only(x, g_attn, g_ffn, eps):
    return _rms(x, g_attn, eps)


def post_swapped_gains(x, g_attn, g_ffn, eps):
    return _rms(_rms(x, g_ffn, eps), g_attn, eps)


def post_without_eps(x, g_attn, g_ffn, eps):
    return _rms(_rms(x, g_attn, 0.0), g_ffn, 0.0)


def post_without_gains(x, g_attn, g_ffn, eps):
    return _rms(_rms(x, 1.0, eps), 1.0, eps)


def post_layer_norm(x, g_attn, g_ffn, eps):
    return _layer(_layer(x, g_attn, eps), g_ffn, eps)


_POST_WRONG = [
    (
        post_identity,
        "the post-norm block is not the identity: each residual sum still passes through its norm",
    ),
    (
        post_ffn_norm_only,
        "two norms act in turn: the FFN norm normalises the attention norm's output again",
    ),
    (
        post_attn_norm_only,
        "only the attention norm: the FFN norm (gain g_ffn) then normalises its output again",
    ),
    (post_swapped_gains, "the gains are swapped: the attention norm, with g_attn, acts first"),
    (post_without_eps, "eps is missing: RMSNorm divides by sqrt(mean(v²) + eps)"),
    (post_without_gains, "the gains are missing: each norm multiplies by its gain"),
    (post_layer_norm, "RMSNorm subtracts no mean (that is LayerNorm)"),
]


@exercise("22.3", "zero_output_projections", "zeroed_post_norm")
def zeroed_blocks(zero, post_formula) -> str:
    """A zeroed pre-norm block is the identity; the post-norm formula against the block."""
    gen = torch.Generator().manual_seed(223)
    config = DecoderConfig(vocab_size=256, d_model=32, n_heads=4, d_ff=64, max_seq_len=16)
    block = decoder.DecoderBlock(config, generator=gen, dtype=F64)
    with torch.no_grad():
        for norm in (block.attn_norm, block.ffn_norm):
            norm.weight.add_(0.3 * torch.randn(config.d_model, generator=gen, dtype=F64))
    original = copy.deepcopy(block)
    before = {name: p.detach().clone() for name, p in block.named_parameters()}
    x = 3.0 * torch.randn(2, 10, config.d_model, generator=gen, dtype=F64)
    returned = attempt(zero, block)
    expect(
        isinstance(returned, nn.Module),
        "zero_output_projections should return the block, got "
        f"{type(returned).__name__} (is a `return` missing?)",
    )
    with torch.no_grad():
        out = attempt(returned, x.clone(), name="the returned block")
        wrong = {fb: fn(copy.deepcopy(original))(x) for fn, fb in _ZERO_WRONG}
    expect_answer(out, x, "block(x) after zero_output_projections", wrong=wrong, atol=0, rtol=0)
    params = dict(returned.named_parameters())
    for name in ("attn.Wo", "ffn.W2"):
        expect(
            name in params and bool((params[name] == 0).all()),
            f"`{name}` should be zero: zero W_O and W_d themselves (other zeros can also "
            "silence a branch, but they change other weights)",
        )
    for name, p in params.items():
        expect(
            name in ("attn.Wo", "ffn.W2")
            or (name in before and torch.equal(p.detach(), before[name])),
            f"`{name}` changed: only W_O (attn.Wo) and W_d (ffn.W2) should be set to zero, "
            "the other weights stay as they are",
        )
    post = decoder.PostNormDecoderBlock(config, dtype=F64)
    post.load_state_dict(returned.state_dict())
    with torch.no_grad():
        gap = (post(x) - x).abs().max().item()
    expect(gap > 1.0, "the post-norm block with the same weights should not be the identity")

    for d, eps in ((16, 1e-6), (8, 0.5)):
        cfg = DecoderConfig(256, d, n_heads=2, d_ff=2 * d, max_seq_len=16, norm_eps=eps)
        ref_block = decoder.PostNormDecoderBlock(cfg, generator=gen, dtype=F64)
        g_attn = 1 + 0.3 * torch.randn(d, generator=gen, dtype=F64)
        g_ffn = 1 + 0.3 * torch.randn(d, generator=gen, dtype=F64)
        with torch.no_grad():
            ref_block.attn.Wo.zero_()
            ref_block.ffn.W2.zero_()
            ref_block.attn_norm.weight.copy_(g_attn)
            ref_block.ffn_norm.weight.copy_(g_ffn)
            xs = 3.0 * torch.randn(2, 5, d, generator=gen, dtype=F64)
            want = ref_block(xs)
        expect_answer(
            attempt(post_formula, xs.clone(), g_attn.clone(), g_ffn.clone(), eps),
            want,
            f"zeroed_post_norm(x, g_attn, g_ffn, eps={eps:g}) for d = {d}",
            wrong=wrong_values(_POST_WRONG, xs, g_attn, g_ffn, eps),
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "with W_O = W_d = 0 the pre-norm block returns x exactly and only those two "
        "matrices changed; the post-norm formula matches PostNormDecoderBlock at eps = 1e-6 "
        "and 0.5"
    )


# --- 22.4: the block from its raw weights ---------------------------------------------------------


def _block(
    x,
    p,
    n_heads,
    eps,
    base,
    *,
    post_norm=False,
    parallel=False,
    causal=True,
    scale_width=None,
    pairing="half",
    rope=True,
    update_normalised=False,
):
    """A Llama-form block written out, with switches for the typical mistakes."""
    B, T, d = x.shape
    d_h = d // n_heads

    def heads(t):  # (B, T, d) -> (B, H, T, d_h)
        return t.view(B, T, n_heads, d_h).transpose(1, 2)

    def rotate(t):  # RoPE with complex numbers, in either pairing
        theta = base ** (-torch.arange(0, d_h, 2, dtype=F64) / d_h)
        turn = torch.polar(torch.ones(T, d_h // 2, dtype=F64), torch.arange(T)[:, None] * theta)
        if pairing == "half":
            z = torch.complex(t[..., : d_h // 2], t[..., d_h // 2 :]) * turn
            return torch.cat([z.real, z.imag], dim=-1)
        z = torch.complex(t[..., 0::2], t[..., 1::2]) * turn
        return torch.stack([z.real, z.imag], dim=-1).flatten(-2)

    def attention(z):
        q, k, v = heads(z @ p["Wq"]), heads(z @ p["Wk"]), heads(z @ p["Wv"])
        if rope:
            q, k = rotate(q), rotate(k)
        s = q @ k.transpose(-2, -1) / math.sqrt(scale_width or d_h)
        if causal:
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, d) @ p["Wo"]

    def ffn(z):
        return (F.silu(z @ p["W_g"]) * (z @ p["W_u"])) @ p["W_d"]

    if post_norm:
        u = _rms(x + attention(x), p["attn_norm"], eps)
        return _rms(u + ffn(u), p["ffn_norm"], eps)
    z = _rms(x, p["attn_norm"], eps)
    u = (z if update_normalised else x) + attention(z)
    z2 = _rms(x if parallel else u, p["ffn_norm"], eps)
    return u + ffn(z2)


def block_post_norm(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, post_norm=True)


def block_parallel(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, parallel=True)


def block_update_normalised(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, update_normalised=True)


def block_not_causal(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, causal=False)


def block_scaled_by_d(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, scale_width=x.shape[-1])


def block_interleaved_rope(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, pairing="interleaved")


def block_without_rope(x, p, n_heads, eps=1e-6, base=10000.0):
    return _block(x, p, n_heads, eps, base, rope=False)


_BLOCK_WRONG = [
    (
        block_post_norm,
        "that is the post-norm arrangement; pre-norm normalises the branch input and adds the "
        "branch to the raw stream: u = x + Attn(RMSNorm(x))",
    ),
    (
        block_parallel,
        "the FFN reads u, the stream after the attention update (eq. 22.2), not the block's "
        "input x (that is GPT-J's parallel block)",
    ),
    (
        block_update_normalised,
        "add the attention update to the raw stream x, not to its normalised copy",
    ),
    (
        block_not_causal,
        "the attention is causal: mask the scores of the later keys with -inf",
    ),
    (block_scaled_by_d, "scale the scores by 1/sqrt(d_h), the head width, not 1/sqrt(d)"),
    (
        block_interleaved_rope,
        "the block pairs the RoPE planes (x_i, x_(i+d_h/2)) (rotate-half), not neighbours",
    ),
    (block_without_rope, "queries and keys are rotated by RoPE (eq. 21.4) before the scores"),
]


def _llama_reference(x, p, n_heads, eps, base) -> torch.Tensor:
    """transformers' LlamaDecoderLayer with the weights copied in, float64 norms and RoPE."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    B, T, d = x.shape
    cfg = LlamaConfig(
        hidden_size=d,
        intermediate_size=p["W_g"].shape[1],
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        num_hidden_layers=1,
        rms_norm_eps=eps,
        attention_bias=False,
        mlp_bias=False,
    )
    cfg._attn_implementation = "sdpa"  # causal without a mask; eager takes its softmax in float32
    layer = LlamaDecoderLayer(cfg, layer_idx=0).to(F64).eval()
    layer.input_layernorm = nn.RMSNorm(d, eps=eps, dtype=F64)  # float64, as the reference
    layer.post_attention_layernorm = nn.RMSNorm(d, eps=eps, dtype=F64)
    pairs = [
        (layer.self_attn.q_proj, "Wq"),
        (layer.self_attn.k_proj, "Wk"),
        (layer.self_attn.v_proj, "Wv"),
        (layer.self_attn.o_proj, "Wo"),
        (layer.mlp.gate_proj, "W_g"),
        (layer.mlp.up_proj, "W_u"),
        (layer.mlp.down_proj, "W_d"),
    ]
    d_h = d // n_heads
    theta = base ** (-torch.arange(0, d_h, 2, dtype=F64) / d_h)
    angles = torch.arange(T, dtype=F64)[:, None] * theta  # (T, d_h/2)
    cos = torch.cat([angles.cos(), angles.cos()], -1).expand(B, T, d_h)
    sin = torch.cat([angles.sin(), angles.sin()], -1).expand(B, T, d_h)
    with torch.no_grad():
        for linear, name in pairs:
            linear.weight.copy_(p[name].T)  # nn.Linear stores (out, in)
        layer.input_layernorm.weight.copy_(p["attn_norm"])
        layer.post_attention_layernorm.weight.copy_(p["ffn_norm"])
        out = layer(x, attention_mask=None, position_embeddings=(cos, sin))
    return out[0] if isinstance(out, tuple) else out


def _block_weights(d: int, h: int, gen: torch.Generator) -> dict:
    def draw(*shape, scale):
        return scale * torch.randn(*shape, generator=gen, dtype=F64)

    p = {name: draw(d, d, scale=d**-0.5) for name in ("Wq", "Wk", "Wv", "Wo")}
    p.update(W_g=draw(d, h, scale=d**-0.5), W_u=draw(d, h, scale=d**-0.5))
    p.update(W_d=draw(h, d, scale=h**-0.5))
    p.update(attn_norm=1 + draw(d, scale=0.3), ffn_norm=1 + draw(d, scale=0.3))
    return p


@exercise("22.4", "prenorm_block")
def prenorm_block(answer) -> str:
    """The block from its raw weights against transformers' LlamaDecoderLayer (float64)."""
    gen = torch.Generator().manual_seed(224)
    cases = [
        (2, 7, 32, 4, 48, 1e-6, 1e4),
        (1, 5, 16, 2, 40, 1e-5, 500.0),
        (2, 9, 24, 3, 64, 0.1, 1e4),
    ]
    for B, T, d, H, h, eps, base in cases:
        p = _block_weights(d, h, gen)
        x = torch.randn(B, T, d, generator=gen, dtype=F64)
        args = (x, p, H, eps, base)
        expect_answer(
            attempt(answer, x.clone(), {k: v.clone() for k, v in p.items()}, H, eps, base),
            _llama_reference(*args),
            f"prenorm_block(x, p, n_heads={H}, eps={eps:g}, base={base:g}) for x of shape "
            f"{(B, T, d)}",
            wrong=wrong_values(_BLOCK_WRONG, *args),
            atol=1e-10,
            rtol=1e-10,
        )
    return (
        "matches transformers' LlamaDecoderLayer with the same weights (float64) for 3 shapes, "
        "two bases and three eps"
    )


# --- 22.5: predict how far GPT-2 small is from 6ND ----------------------------------------------


@functools.cache  # a fixed measurement: made once per process
def _gpt2_ratio() -> tuple[float, dict]:
    """Measured FLOPs of one training step of GPT-2 small on 1024 tokens over 6ND, and parts."""
    from transformers import GPT2Config, GPT2LMHeadModel

    T = 1024
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config())
        tokens = torch.zeros(1, T, dtype=torch.long)
    emb = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    n = sum(p.numel() for p in model.parameters()) - emb  # non-embedding N
    with FlopCounterMode(display=False) as counter:
        logits = model(tokens).logits
        F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    cfg = model.config
    d, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    parts = {"head": d * V / n, "attention": 2 * L * d * T / n}
    return counter.get_total_flops() / (6 * n * T), parts


_PREDICT_TOL = 0.1


@exercise("22.5", "predict_gpt2_flop_ratio")
def gpt2_ratio(predict_gpt2_flop_ratio) -> str:
    """The reader's guess against FlopCounterMode on GPT-2 small."""
    guess = as_tensor(attempt(predict_gpt2_flop_ratio), "predict_gpt2_flop_ratio()")
    if guess.numel() != 1:
        raise Incorrect("predict_gpt2_flop_ratio() should return one number, the ratio")
    guess = float(guess.reshape(()))
    ratio, parts = _gpt2_ratio()
    where = (
        f"the measured ratio is {ratio:.3g}: the output head (the tied d x V embedding, V = "
        f"50,257) adds dV/N = {parts['head']:.2f} and attention's T² products add 2LdT/N = "
        f"{parts['attention']:.2f} at T = 1024"
    )
    if abs(guess - ratio) <= _PREDICT_TOL:
        return f"your guess {guess:.3g} is within {_PREDICT_TOL}; {where}"
    misses = [
        (1.0, "6ND counts only the weights in the blocks"),
        (1 + parts["head"], "that leaves out attention's T² products"),
        (1 + parts["attention"], "that leaves out the output head"),
    ]
    for value, reason in misses:
        if abs(guess - value) <= _PREDICT_TOL:
            raise Incorrect(f"your guess {guess:.3g}: {reason}; {where}")
    raise Incorrect(f"your guess {guess:.3g} is off by more than {_PREDICT_TOL}; {where}")


# --- 22.6: the ratio to 6ND over vocabularies and contexts ----------------------------------------

_EXPLORE = dict(d_model=32, n_layers=2, vocab_sizes=(64, 512, 2048), seq_lens=(8, 32, 128))


def _closed_form(d, L, V, T, per_token=6) -> float:
    """(N_mm + d V)/N + (2 L d / N) T for a tied Llama-form decoder, from the widths alone."""
    h = (8 * d) // 3  # the default SwiGLU width, floor(8d/3)
    n_mm = L * (4 * d * d + 3 * d * h)  # weights in matrix products
    n = n_mm + (2 * L + 1) * d  # + the RMSNorm gains: the non-embedding N
    return (per_token / 6) * ((n_mm + d * V) / n + 2 * L * d * T / n)


def _grid(fn, d_model, n_layers, vocab_sizes, seq_lens) -> torch.Tensor:
    return torch.tensor(
        [[fn(d_model, n_layers, V, T) for T in seq_lens] for V in vocab_sizes], dtype=F64
    )


def _with_embeddings(d, L, V, T):
    n_emb = V * d  # the tied embedding counted into N
    h = (8 * d) // 3
    n = L * (4 * d * d + 3 * d * h) + (2 * L + 1) * d
    return _closed_form(d, L, V, T) * n / (n + n_emb)


def ratios_with_embeddings(d_model, n_layers, vocab_sizes, seq_lens):
    return _grid(_with_embeddings, d_model, n_layers, vocab_sizes, seq_lens)


def ratios_forward_only(d_model, n_layers, vocab_sizes, seq_lens):
    return _grid(
        lambda d, L, V, T: _closed_form(d, L, V, T, per_token=2),
        d_model,
        n_layers,
        vocab_sizes,
        seq_lens,
    )


def ratios_transposed(d_model, n_layers, vocab_sizes, seq_lens):
    return _grid(_closed_form, d_model, n_layers, vocab_sizes, seq_lens).T


_RATIOS_WRONG = [
    (
        ratios_with_embeddings,
        "N in 6ND is the non-embedding count: count_parameters(config, embeddings=False)",
    ),
    (
        ratios_forward_only,
        "that counts the forward pass only; a training step is forward plus backward (measure "
        "both, as counting.measure_training_flops does)",
    ),
    (
        ratios_transposed,
        "rows are the vocabularies, columns the sequence lengths: shape (len(vocab_sizes), "
        "len(seq_lens))",
    ),
]


@exercise("22.6", "flop_ratios")
def flop_ratios(answer) -> str:
    """Measured/6ND on a grid of vocabularies and contexts against the closed form."""
    args = tuple(_EXPLORE.values())
    want = _grid(_closed_form, *args)
    expect_answer(
        attempt(answer, *args),
        want,
        "flop_ratios(d_model=32, n_layers=2, vocab_sizes=[64, 512, 2048], seq_lens=[8, 32, 128])",
        wrong=wrong_values(_RATIOS_WRONG, *args),
        atol=1e-9,
        rtol=1e-9,
    )
    rows = "; ".join(
        f"V = {V}: " + ", ".join(f"{r:.3g}" for r in row)
        for V, row in zip(_EXPLORE["vocab_sizes"], want.tolist(), strict=True)
    )
    return f"matches (N_mm + dV)/N + (2Ld/N) T for d = 32, L = 2 at T = 8, 32, 128: {rows}"


# Typical wrong answers (the tests build each and check that it is rejected with its feedback)


def predict_six_nd():
    return 1.0


def predict_without_attention():
    return 1.45


MISTAKES = {
    "22.1": list(_GPT2_WRONG),
    "22.2": list(_BREAK_EVEN_WRONG),
    "22.3": paired_mistakes(
        _ref("22.3", "zero_output_projections"),
        _ref("22.3", "zeroed_post_norm"),
        _ZERO_WRONG
        + [
            (zero_values_and_gate, "`attn.Wo` should be zero"),
            (zero_without_return, "should return the block"),
        ],
        _POST_WRONG,
    ),
    "22.4": list(_BLOCK_WRONG),
    "22.5": [
        (predict_six_nd, "6ND counts only the weights"),
        (predict_without_attention, "leaves out attention's T² products"),
    ],
    "22.6": list(_RATIOS_WRONG),
}
