"""Checks of the exercises of chapter 22 (the transformer block).

The parameter count is checked against the tensors of ``transformers``' ``GPT2Block``, the
break-even context against FLOPs measured by ``torch.utils.flop_counter.FlopCounterMode`` (both on
the ``meta`` device, so that large widths cost no memory), and the zeroed blocks against the
package's own ``DecoderBlock`` and ``PostNormDecoderBlock`` run on random inputs.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ...models import decoder
from ...models.config import DecoderConfig
from . import attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _gpt2_block_numel(d: int, h: int) -> int:
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    with torch.device("meta"):
        block = GPT2Block(GPT2Config(n_embd=d, n_inner=h, n_head=1), layer_idx=0)
    return sum(p.numel() for p in block.parameters())


@exercise("22.1", "gpt2_block_parameters")
def gpt2_block_parameters(answer) -> str:
    """The count against the tensors of transformers' GPT2Block for four (d, h)."""
    for d, h in ((96, 384), (64, 100), (768, 3072), (8, 1)):
        want = _gpt2_block_numel(d, h)
        expect_answer(
            attempt(answer, d, h),
            want,
            f"gpt2_block_parameters({d}, {h})",
            wrong={
                "the biases are missing: every linear layer of GPT-2 has one (4d in attention, "
                "h + d in the FFN)": want - (4 * d + h + d),
                "a LayerNorm has a gain and a bias: 2d parameters each, 4d for the two": want
                - 2 * d,
                "the two LayerNorms (4d parameters) are missing": want - 4 * d,
                "the FFN's size depends on h: 2dh weights and h + d biases (12d² + 13d holds "
                "only for h = 4d)": 12 * d * d + 13 * d,
                "a GELU FFN has two matrices, not three (there is no SwiGLU gate)": want + d * h,
            },
            atol=0.5,
            rtol=0,
        )
    return (
        "matches the tensors of transformers' GPT2Block for (d, h) = (96, 384), (64, 100), "
        "(768, 3072), (8, 1)"
    )


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


@exercise("22.2", "break_even_context")
def break_even_context(answer) -> str:
    """T* against FlopCounterMode on a DecoderBlock at two lengths, for four (d, h)."""
    for d, h in ((128, 341), (96, 256), (4096, 11008), (64, 176)):
        want = _measured_break_even(d, h)
        expect_answer(
            attempt(answer, d, h),
            want,
            f"break_even_context({d}, {h})",
            wrong={
                "T = 6d holds only for h = 8d/3: count the FFN's 3dh weights with the given h": 6
                * d,
                "Q K^T and A V cost 2Td FLOPs each per token, 4Td for the pair": 2 * want,
                "a weight costs 2 FLOPs per token (a multiply and an add), like the attention "
                "products": want / 2,
                "the weights include the FFN's 3dh, not only attention's 4d²": 2 * d,
            },
            atol=1e-9,
            rtol=1e-12,
        )
    return (
        "matches the FLOPs measured by FlopCounterMode on DecoderBlock for (d, h) = "
        "(128, 341), (96, 256), (4096, 11008), (64, 176)"
    )


def _rms(v: torch.Tensor, gain, eps: float) -> torch.Tensor:
    return gain * v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps)


def _layer(v: torch.Tensor, gain, eps: float) -> torch.Tensor:
    c = v - v.mean(-1, keepdim=True)
    return gain * c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)


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
        attn_only = x + original.attn(original.attn_norm(x))
        ffn_only = x + original.ffn(original.ffn_norm(x))
        untouched = original(x)
    expect_answer(
        out,
        x,
        "block(x) after zero_output_projections",
        wrong={
            "the block is unchanged: set W_O and W_d to zero in place (under "
            "torch.no_grad())": untouched,
            "the attention branch still adds its output: zero W_O (block.attn.Wo) too": attn_only,
            "the FFN branch still adds its output: zero W_d (block.ffn.W2) too": ffn_only,
        },
        atol=0,
        rtol=0,
    )
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
            wrong={
                "the post-norm block is not the identity: each residual sum still passes "
                "through its norm": xs,
                "two norms act in turn: the FFN norm normalises the attention norm's output "
                "again": _rms(xs, g_ffn, eps),
                "only the attention norm: the FFN norm (gain g_ffn) then normalises its output "
                "again": _rms(xs, g_attn, eps),
                "the gains are swapped: the attention norm, with g_attn, acts first": _rms(
                    _rms(xs, g_ffn, eps), g_attn, eps
                ),
                "eps is missing: RMSNorm divides by sqrt(mean(v²) + eps)": _rms(
                    _rms(xs, g_attn, 0.0), g_ffn, 0.0
                ),
                "the gains are missing: each norm multiplies by its gain": _rms(
                    _rms(xs, 1.0, eps), 1.0, eps
                ),
                "RMSNorm subtracts no mean (that is LayerNorm)": _layer(
                    _layer(xs, g_attn, eps), g_ffn, eps
                ),
            },
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "with W_O = W_d = 0 the pre-norm block returns x exactly and only those two "
        "matrices changed; the post-norm formula matches PostNormDecoderBlock at eps = 1e-6 "
        "and 0.5"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


def params_without_biases(d, h):
    return 4 * d * d + 2 * d * h + 4 * d


def params_layernorm_gain_only(d, h):
    return 4 * d * d + 4 * d + 2 * d * h + h + d + 2 * d


def params_fixed_h(d, h):
    return 12 * d * d + 13 * d


def params_three_ffn_matrices(d, h):
    return 4 * d * d + 4 * d + 3 * d * h + h + d + 4 * d


def break_even_six_d(d, h):
    return 6.0 * d


def break_even_half_attention(d, h):
    return 2 * (4 * d * d + 3 * d * h) / (2 * d)


def break_even_one_flop_per_weight(d, h):
    return (4 * d * d + 3 * d * h) / (4 * d)


def break_even_attention_weights_only(d, h):
    return 2 * 4 * d * d / (4 * d)


def _post(x, g_attn, g_ffn, eps):
    return _ref("22.3", "zeroed_post_norm")(x, g_attn, g_ffn, eps)


def _zero(block):
    return _ref("22.3", "zero_output_projections")(block)


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
    _zero(block)


def post_identity(x, g_attn, g_ffn, eps):
    return x


def post_one_norm(x, g_attn, g_ffn, eps):
    return F.rms_norm(x, (x.shape[-1],), g_ffn, eps)


def post_swapped_gains(x, g_attn, g_ffn, eps):
    return _post(x, g_ffn, g_attn, eps)


def post_without_eps(x, g_attn, g_ffn, eps):
    return _post(x, g_attn, g_ffn, 0.0)


def post_layer_norm(x, g_attn, g_ffn, eps):
    d = x.shape[-1]
    return F.layer_norm(F.layer_norm(x, (d,), g_attn, None, eps), (d,), g_ffn, None, eps)


MISTAKES = {
    "22.1": [
        (params_without_biases, "the biases are missing"),
        (params_layernorm_gain_only, "a gain and a bias"),
        (params_fixed_h, "depends on h"),
        (params_three_ffn_matrices, "two matrices, not three"),
    ],
    "22.2": [
        (break_even_six_d, "T = 6d holds only for h = 8d/3"),
        (break_even_half_attention, "4Td for the pair"),
        (break_even_one_flop_per_weight, "2 FLOPs per token"),
        (break_even_attention_weights_only, "not only attention's 4d²"),
    ],
    "22.3": [
        ((zero_only_ffn, _post), "zero W_O (block.attn.Wo) too"),
        ((zero_only_attention, _post), "zero W_d (block.ffn.W2) too"),
        ((zero_values_and_gate, _post), "`attn.Wo` should be zero"),
        ((zero_without_return, _post), "should return the block"),
        ((_zero, post_identity), "not the identity"),
        ((_zero, post_one_norm), "two norms act in turn"),
        ((_zero, post_swapped_gains), "the gains are swapped"),
        ((_zero, post_without_eps), "eps is missing"),
        ((_zero, post_layer_norm), "subtracts no mean"),
    ],
}
