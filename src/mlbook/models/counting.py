"""Parameters, FLOPs and cache bytes of the decoder, in closed form (chapters 22 and 24).

:func:`count_parameters` is exact for every :class:`~mlbook.models.config.DecoderConfig` (it equals
``sum(p.numel())`` of the built model); eq. 22.4 is its core. One FLOP convention throughout: a
multiply-add is 2 FLOPs, and only matrix products count, as in ``C ~ 6ND`` (eq. 22.5) and in
``torch.utils.flop_counter.FlopCounterMode``, the reference of :func:`measure_training_flops`.
:func:`cache_bytes` applies eq. 24.2 (:func:`mlbook.attention.kv_cache.kv_cache_bytes`) to a model.

Shape legend
    V vocabulary;  d model width;  L layers;  H, G query and key/value heads;  d_h head width
    h feed-forward width;  N experts, k per token;  E SSM channels;  n SSM state;  K conv width
    T tokens per sequence;  B batch;  P prompt length
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..attention.kv_cache import kv_cache_bytes
from ..validation import index_tensor, integer, positive_int
from .config import DecoderConfig

__all__ = [
    "block_parameters",
    "mixer_parameters",
    "ffn_parameters",
    "count_parameters",
    "layer_flops",
    "forward_flops",
    "training_flops",
    "approx_training_flops",
    "measure_training_flops",
    "generation_flops",
    "cache_bytes",
]


def _config(config) -> DecoderConfig:
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
    return config


# --- eq. 22.4: parameters ------------------------------------------------------------------------


def block_parameters(d: int, h: int, *, norms: bool = False) -> int:
    """4 d^2 (W_q, W_k, W_v, W_o) + 3 d h (W_g, W_u, W_d), + 2d RMSNorm gains with ``norms``.

    Implements eq. 22.4: the Llama-form block with H = G heads.
    """
    positive_int(d, "d")
    positive_int(h, "h")
    return 4 * d * d + 3 * d * h + (2 * d if norms else 0)


def mixer_parameters(config: DecoderConfig, kind: str = "attention") -> int:
    """The token mixer of one layer: attention (d^2 + 2 d G d_h + d^2, + biases) or the SSM."""
    c = _config(config)
    d, kv = c.d_model, c.n_kv_heads * c.head_dim
    if kind == "attention":
        return 2 * d * d + 2 * d * kv + (2 * d + 2 * kv if c.bias else 0)
    E, n, K = c.d_inner, c.ssm_state, c.ssm_conv
    # W_in, conv + bias, W_delta + b_delta, W_B, W_C, A_log, D, W_out
    return 2 * d * E + (K + 1) * E + (E + 1) * E + 3 * E * n + E + E * d


def ffn_parameters(config: DecoderConfig) -> int:
    """The feed-forward branch of one layer: SwiGLU 3dh, GELU 2dh (+ biases), MoE N (d + 3dh)."""
    c = _config(config)
    d, h = c.d_model, c.d_ff
    if c.n_experts:
        return c.n_experts * (d + 3 * d * h)  # router column + one SwiGLU expert each
    if c.mlp == "swiglu":
        return 3 * d * h + (2 * h + d if c.bias else 0)
    return 2 * d * h + (h + d if c.bias else 0)


def count_parameters(config: DecoderConfig, *, embeddings: bool = True) -> int:
    """The exact number of parameters of ``Decoder(config)``.

    Per layer its mixer, its feed-forward branch and two norms (d gains, + d biases for
    LayerNorm); a final norm unless post-norm. ``embeddings=False`` leaves out the token
    embedding, the learned position table and an untied head: the non-embedding N of eq. 22.5.
    """
    c = _config(config)
    norm = c.d_model * (2 if c.norm == "layer" else 1)
    n = sum(mixer_parameters(c, kind) + ffn_parameters(c) + 2 * norm for kind in c.layer_kinds)
    n += 0 if c.post_norm else norm
    if embeddings:
        n += c.vocab_size * c.d_model * (1 if c.tie_embeddings else 2)
        n += c.max_seq_len * c.d_model if c.positions == "learned" else 0
    return n


# --- eq. 22.5: FLOPs -----------------------------------------------------------------------------


def layer_flops(config: DecoderConfig, kind: str, n_tokens: int, n_keys: int) -> int:
    """Matrix-product FLOPs of one layer (2 per multiply-add), n_tokens tokens x n_keys keys.

    Attention: the projections, 2 (2 d^2 + 2 d G d_h) per token, and Q K^T, A V, 4 n_keys d per
    token (the full score matrix, masked entries included). SSM: W_in, Delta, B, C, the read-out
    C_t^T h_t and W_out (its depthwise convolution is O(E K) elementwise work). Feed-forward:
    2 d h per matrix (MoE: the router and k experts per token).
    """
    c = _config(config)
    d, h, kv = c.d_model, c.d_ff, c.n_kv_heads * c.head_dim
    if kind == "attention":
        mixer = 2 * n_tokens * (2 * d * d + 2 * d * kv) + 4 * n_tokens * n_keys * d
    else:
        E, n = c.d_inner, c.ssm_state
        mixer = 2 * n_tokens * (2 * d * E + E * E + 3 * E * n + E * d)
    if c.n_experts:
        ffn = 2 * n_tokens * (d * c.n_experts + c.top_k * 3 * d * h)
    else:
        ffn = 2 * n_tokens * (3 if c.mlp == "swiglu" else 2) * d * h
    return mixer + ffn


def forward_flops(
    config: DecoderConfig,
    seq_len: int,
    batch: int = 1,
    *,
    n_keys: int | None = None,
    head_tokens: int | None = None,
) -> int:
    """Matrix-product FLOPs of a forward pass (2 per multiply-add), seq_len tokens a sequence.

    Each token attends to ``n_keys`` keys (default seq_len: a pass without cache) and the head
    runs on ``head_tokens`` positions (default all), 2 d V each. Norms, softmax, activations,
    RoPE and the scan's elementwise steps are not matmuls: O(d) per token, not counted here
    (nor by ``FlopCounterMode``).
    """
    c = _config(config)
    T, B = positive_int(seq_len, "seq_len"), positive_int(batch, "batch")
    keys = T if n_keys is None else positive_int(n_keys, "n_keys")
    head = T if head_tokens is None else integer(head_tokens, "head_tokens", low=0)
    per_sequence = sum(layer_flops(c, kind, T, keys) for kind in c.layer_kinds)
    return B * (per_sequence + 2 * head * c.d_model * c.vocab_size)


def training_flops(config: DecoderConfig, seq_len: int, batch: int = 1) -> int:
    """Matrix-product FLOPs of one training step (2 per multiply-add): 3 x :func:`forward_flops`.

    Eq. 22.5's 6 = 3 x 2: the backward pass of Y = X W computes dX = dY W^T and dW = X^T dY,
    two products of the forward's size.
    """
    return 3 * forward_flops(config, seq_len, batch)


def approx_training_flops(n_params: int, n_tokens: int) -> int:
    """C ~ 6 N D FLOPs (2 per multiply-add): training compute for N parameters, D tokens (eq. 22.5).

    Leaves out the attention products and the output head; :func:`training_flops` counts them.
    """
    return 6 * positive_int(n_params, "n_params") * positive_int(n_tokens, "n_tokens")


def measure_training_flops(model: nn.Module, tokens: torch.Tensor) -> int:
    """FLOPs of forward + backward of a next-token loss, as ``FlopCounterMode`` counts them.

    FlopCounterMode adds 2 FLOPs per multiply-add of every matrix product that runs. model maps
    tokens (B, T) to logits (B, T, V); the targets are the tokens shifted by one (the last
    position predicts token 0: they only make a scalar loss). Gradients are cleared after.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    index_tensor(tokens, "tokens", ndim=2)
    model.zero_grad(set_to_none=True)
    counter = FlopCounterMode(display=False)
    with counter:
        logits = model(tokens)  # (B, T, V)
        targets = tokens.roll(-1, dims=1)  # (B, T)
        nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


# --- eqs. 24.1-24.2: decoding ------------------------------------------------------------------


def generation_flops(
    config: DecoderConfig, prompt_len: int, n_new: int, use_cache: bool = True, batch: int = 1
) -> int:
    """Matrix-product FLOPs of :func:`~mlbook.models.generate.generate` (2 per multiply-add).

    Eq. 24.1's saving, exactly. Step i sees P + i tokens. With the cache, while they fit in
    max_seq_len: step 0 is a prefill over the prompt, step i > 0 one token against the cached
    keys (at most S + W under a window) and itself. Without the cache, or beyond max_seq_len: a
    full pass over the last min(P + i, max_seq_len) tokens. The head runs on the last position
    only.
    """
    c = _config(config)
    P, n = positive_int(prompt_len, "prompt_len"), integer(n_new, "n_new", low=0)
    cap = None if c.window is None else c.window + c.sinks
    total = 0
    for i in range(n):
        context = P + i
        if use_cache and context <= c.max_seq_len and i > 0:
            old = context - 1  # tokens already in the cache
            keys = (old if cap is None else min(old, cap)) + 1
            total += forward_flops(c, 1, batch, n_keys=keys, head_tokens=1)
        else:  # a prefill, or a pass over the whole (cropped) context
            T = min(context, c.max_seq_len)
            total += forward_flops(c, T, batch, head_tokens=1)
    return total


def cache_bytes(
    config: DecoderConfig, seq_len: int, batch: int = 1, bytes_per_element: int = 2
) -> int:
    """Bytes to decode ``seq_len`` tokens: eq. 24.2 over the attention layers, + the SSM state.

    Under a sliding window the KV cache holds min(T, S + W) positions; an SSM layer holds a
    fixed (K - 1) E + E n numbers per sequence, whatever T is.
    """
    c = _config(config)
    T, b = positive_int(seq_len, "seq_len"), positive_int(bytes_per_element, "bytes_per_element")
    n_attn = c.layer_kinds.count("attention")
    n_ssm = c.n_layers - n_attn
    kept = T if c.window is None else min(T, c.window + c.sinks)
    kv = kv_cache_bytes(n_attn, c.n_kv_heads, c.head_dim, kept, b, batch) if n_attn else 0
    return kv + n_ssm * batch * ((c.ssm_conv - 1) * c.d_inner + c.d_inner * c.ssm_state) * b
