"""The decoder-only transformer block: pre-norm, RMSNorm, RoPE attention, SwiGLU (chapter 22).

One block maps the residual stream x_l to x_{l+1} in two residual steps (eqs. 22.1-22.2):
causal self-attention with rotary positions, then the SwiGLU feed-forward network (eq. 22.3),
each applied to an RMSNorm-ed copy of the stream and *added* to it. The residual path itself is
never normalised. :class:`PostNormDecoderBlock` puts the norms after the additions instead (the
original 2017 arrangement) for comparison. The module also counts parameters (eq. 22.4) and
matmul FLOPs (eq. 22.5), and measures the latter with ``torch.utils.flop_counter``.

The pieces come from earlier chapters: :func:`mlbook.nn.normalization.rms_norm` (16),
:class:`mlbook.nn.activations.SwiGLUFFN` (11), :func:`mlbook.attention.dot_product.scaled_dot_product_attention`
(19) and :func:`mlbook.attention.rope.apply_rope` (21, half-split pairing as in Hugging Face Llama).

Shape legend
    B      batch size;  T  sequence length (<= config.max_seq_len)
    d      model width, config.d_model;  H  number of heads;  d_h = d / H  head width
    h      hidden width of the SwiGLU FFN, config.d_ff
    L      number of blocks;  V  vocabulary size
    x      (B, T, d) residual stream;  tokens  (B, T) integer ids
    positions  (T,) or (B, T) integer positions (default 0..T-1)

Weights are stored in the row-vector layout of the formula sheet: a projection is ``x @ W`` with
``W`` of shape (in, out), like :class:`mlbook.nn.activations.SwiGLUFFN`. Every weight matrix is
initialised N(0, 1/fan_in); RMSNorm gains start at 1. There are no biases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..attention.dot_product import scaled_dot_product_attention
from ..attention.rope import apply_rope, rope_frequencies
from ..nn.activations import SwiGLUFFN, swiglu_hidden_dim
from ..nn.normalization import rms_norm
from ..validation import positive_int as _positive_int

__all__ = [
    "TransformerConfig",
    "RMSNorm",
    "CausalSelfAttention",
    "DecoderBlock",
    "PostNormDecoderBlock",
    "TransformerLM",
    "block_parameters",
    "count_parameters",
    "forward_flops",
    "training_flops",
    "approx_training_flops",
    "measure_training_flops",
]


# --- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of a decoder-only transformer (one source of truth for chapters 22-23).

    Attributes:
        d_model: width d of the residual stream.
        n_heads: number of attention heads H; d_model must be divisible by it and the head
            width d_h = d_model / n_heads must be even (RoPE rotates pairs).
        d_ff: hidden width h of the SwiGLU FFN; None means ``swiglu_hidden_dim(d_model)``,
            about 8d/3 (chapter 11).
        n_layers: number of blocks L.
        vocab_size: vocabulary size V (used by :class:`TransformerLM` and the counts).
        max_seq_len: the longest sequence the model accepts.
        rope_base: the RoPE base b of eq. 21.3.
        norm_eps: the eps inside RMSNorm's square root.
        tie_embeddings: whether the output head reuses the embedding matrix (chapter 17).
    """

    d_model: int
    n_heads: int
    d_ff: int | None = None
    n_layers: int = 1
    vocab_size: int = 256
    max_seq_len: int = 512
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers", "vocab_size", "max_seq_len"):
            _positive_int(getattr(self, name), name)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", swiglu_hidden_dim(self.d_model))
        _positive_int(self.d_ff, "d_ff")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"the head width d_model/n_heads = {self.d_model // self.n_heads} "
                "must be even for RoPE"
            )
        for name in ("rope_base", "norm_eps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must be a number, got {type(v).__name__}")
        if not (math.isfinite(self.rope_base) and self.rope_base > 1):
            raise ValueError(f"rope_base must be a finite number > 1, got {self.rope_base}")
        if not (math.isfinite(self.norm_eps) and self.norm_eps >= 0):
            raise ValueError(f"norm_eps must be finite and >= 0, got {self.norm_eps}")
        if not isinstance(self.tie_embeddings, bool):
            raise TypeError("tie_embeddings must be a bool")

    @property
    def head_dim(self) -> int:
        """The head width d_h = d_model / n_heads."""
        return self.d_model // self.n_heads


def _check_config(config) -> TransformerConfig:
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    return config


def _matrix(rows: int, cols: int, generator, dtype) -> nn.Parameter:
    """A (rows, cols) weight with N(0, 1/rows) entries."""
    return nn.Parameter(torch.randn(rows, cols, generator=generator, dtype=dtype) / math.sqrt(rows))


def _check_stream(x, config: TransformerConfig) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim != 3 or x.shape[-1] != config.d_model:
        raise ValueError(
            f"x must have shape (B, T, d_model={config.d_model}), got {tuple(x.shape)}"
        )
    if x.shape[1] > config.max_seq_len:
        raise ValueError(f"sequence length T={x.shape[1]} exceeds max_seq_len={config.max_seq_len}")


def _positions(positions, B: int, T: int, device) -> torch.Tensor:
    """Validate positions; return them broadcastable to (B, H, T): (T,) or (B, 1, T)."""
    if positions is None:
        return torch.arange(T, device=device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor or None, got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be integers, got dtype {positions.dtype}")
    if positions.shape == (T,):
        return positions
    if positions.shape == (B, T):
        return positions[:, None, :]  # (B, T) -> (B, 1, T): broadcast over the heads
    raise ValueError(
        f"positions must have shape (T,) = ({T},) or (B, T) = ({B}, {T}), "
        f"got {tuple(positions.shape)}"
    )


# --- the sublayers -----------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain (eq. 16.2): a parameter holder around ``rms_norm``.

    Args:
        d: width of the normalised axis.
        eps: added to the mean square.
        dtype: parameter dtype.
    """

    def __init__(self, d: int, eps: float = 1e-6, *, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        _positive_int(d, "d")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return rms_norm(x, self.weight, self.eps)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE on queries and keys, no biases.

    Parameters ``Wq, Wk, Wv, Wo``, each (d, d): the 4d^2 of eq. 22.4. The scores of head j are
    ``apply_rope(q_j) apply_rope(k_j)^T / sqrt(d_h)``, causally masked.

    Args:
        config: a :class:`TransformerConfig`.
        generator: seeds the N(0, 1/d) initialisation.
        dtype: parameter dtype.
    """

    def __init__(
        self,
        config: TransformerConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = _check_config(config)
        d = config.d_model
        self.Wq = _matrix(d, d, generator, dtype)
        self.Wk = _matrix(d, d, generator, dtype)
        self.Wv = _matrix(d, d, generator, dtype)
        self.Wo = _matrix(d, d, generator, dtype)
        self.register_buffer(
            "freqs", rope_frequencies(config.head_dim, config.rope_base), persistent=False
        )  # (d_h/2,) float64

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor | None = None, return_weights: bool = False
    ):
        """x: (B, T, d) -> (B, T, d); with ``return_weights`` also the (B, H, T, T) weights."""
        _check_stream(x, self.config)
        B, T, d = x.shape
        H, dh = self.config.n_heads, self.config.head_dim
        pos = _positions(positions, B, T, x.device)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, H, dh).transpose(1, 2)  # (B, T, d) -> (B, H, T, d_h)

        q = apply_rope(heads(x @ self.Wq), pos, self.freqs)
        k = apply_rope(heads(x @ self.Wk), pos, self.freqs)
        v = heads(x @ self.Wv)
        out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d_h)
        out = out.transpose(1, 2).reshape(B, T, d)  # (B, H, T, d_h) -> (B, T, d)
        out = out @ self.Wo
        return (out, weights) if return_weights else out


class DecoderBlock(nn.Module):
    """The pre-norm decoder block of LLaMA-style models (eqs. 22.1-22.3).

    ``u = x + Attn(RMSNorm(x))`` (eq. 22.1), then ``x' = u + FFN(RMSNorm(u))`` (eq. 22.2) with
    the SwiGLU FFN of eq. 22.3. Submodules: ``attn_norm``, ``attn``, ``ffn_norm``, ``ffn``
    (a :class:`mlbook.nn.activations.SwiGLUFFN` with ``W`` = W_g, ``V`` = W_u, ``W2`` = W_d).

    Args:
        config: a :class:`TransformerConfig`.
        generator: seeds the initialisation (attention weights first, then the FFN's).
        dtype: parameter dtype.
    """

    def __init__(
        self,
        config: TransformerConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = _check_config(config)
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps, dtype=dtype)
        self.attn = CausalSelfAttention(config, generator=generator, dtype=dtype)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps, dtype=dtype)
        self.ffn = SwiGLUFFN(config.d_model, config.d_ff, generator=generator, dtype=dtype)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d); positions (T,) or (B, T), default 0..T-1."""
        u = x + self.attn(self.attn_norm(x), positions)  # eq. 22.1
        return u + self.ffn(self.ffn_norm(u))  # eq. 22.2


class PostNormDecoderBlock(DecoderBlock):
    """The post-norm arrangement of the original transformer, for comparison with eq. 22.1-22.2.

    ``u = RMSNorm(x + Attn(x))``, ``x' = RMSNorm(u + FFN(u))``: the same sublayers and
    parameters as :class:`DecoderBlock`, but every residual sum passes through a norm, so the
    residual path is no longer an identity.
    """

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d)."""
        u = self.attn_norm(x + self.attn(x, positions))
        return self.ffn_norm(u + self.ffn(u))


class TransformerLM(nn.Module):
    """A decoder-only language model: embedding, L blocks, (final RMSNorm), output head.

    With ``post_norm=False`` (default) the blocks are :class:`DecoderBlock` and a final RMSNorm
    follows the last one (its input is the un-normalised residual stream); with
    ``post_norm=True`` they are :class:`PostNormDecoderBlock` and there is no final norm. The
    head is the embedding matrix (``config.tie_embeddings``, logits = h E^T) or a separate
    (d, V) matrix.

    Args:
        config: a :class:`TransformerConfig`.
        post_norm: use post-norm blocks.
        generator: seeds the initialisation (embedding N(0, 1/d), weights N(0, 1/fan_in)).
        dtype: parameter dtype.
    """

    def __init__(
        self,
        config: TransformerConfig,
        *,
        post_norm: bool = False,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = _check_config(config)
        if not isinstance(post_norm, bool):
            raise TypeError("post_norm must be a bool")
        self.post_norm = post_norm
        d, V = config.d_model, config.vocab_size
        # N(0, 1/d) entries: unit-norm embedding rows, so tied logits h E^T start with std ~1.
        self.embedding = nn.Parameter(
            torch.randn(V, d, generator=generator, dtype=dtype) / math.sqrt(d)
        )
        block = PostNormDecoderBlock if post_norm else DecoderBlock
        self.blocks = nn.ModuleList(
            block(config, generator=generator, dtype=dtype) for _ in range(config.n_layers)
        )
        self.final_norm = None if post_norm else RMSNorm(d, config.norm_eps, dtype=dtype)
        self.head = None if config.tie_embeddings else _matrix(d, V, generator, dtype)

    def hidden_states(
        self, tokens: torch.Tensor, positions: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The residual stream before every block and after the last: L + 1 tensors (B, T, d)."""
        if (
            not isinstance(tokens, torch.Tensor)
            or tokens.is_floating_point()
            or tokens.dtype == torch.bool
            or tokens.ndim != 2
        ):
            raise TypeError("tokens must be a (B, T) integer tensor")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size})")
        x = self.embedding[tokens]  # (B, T) -> (B, T, d)
        states = [x]
        for block in self.blocks:
            x = block(x, positions)
            states.append(x)
        return states

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: (B, T) integer ids -> logits (B, T, V)."""
        x = self.hidden_states(tokens, positions)[-1]
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x @ (self.embedding.T if self.head is None else self.head)  # (B, T, V)


# --- eq. 22.4: parameter counts -------------------------------------------------------------


def block_parameters(d: int, h: int, *, norms: bool = False) -> int:
    """Parameters of one block: 4 d^2 (W_q, W_k, W_v, W_o) + 3 d h (W_g, W_u, W_d).

    Implements eq. 22.4; with ``norms=True`` adds the 2d gains of the two RMSNorms, which
    makes the count exact for :class:`DecoderBlock`.
    """
    _positive_int(d, "d")
    _positive_int(h, "h")
    return 4 * d * d + 3 * d * h + (2 * d if norms else 0)


def count_parameters(
    config: TransformerConfig, *, embeddings: bool = True, post_norm: bool = False
) -> int:
    """The exact parameter count of ``TransformerLM(config, post_norm=post_norm)``.

    L blocks (eq. 22.4 with norms), the final norm (d, pre-norm only), the embedding V d and,
    untied, the head d V. ``embeddings=False`` gives the non-embedding count N of the
    scaling-law literature: the blocks and the final norm only.
    """
    c = _check_config(config)
    d, V = c.d_model, c.vocab_size
    n = c.n_layers * block_parameters(d, c.d_ff, norms=True) + (0 if post_norm else d)
    if embeddings:
        n += V * d * (1 if c.tie_embeddings else 2)
    return n


# --- eq. 22.5: FLOPs ----------------------------------------------------------------------------


def forward_flops(config: TransformerConfig, seq_len: int, batch: int = 1) -> int:
    """Matmul FLOPs of one forward pass of :class:`TransformerLM` (2 per multiply-add).

    Per token and block: 2 (4 d^2 + 3 d h) for the weight matmuls plus 4 T d for the two
    attention matmuls Q K^T and A V (computed in full, T x T, before the causal mask); per
    token, 2 d V for the output head. The embedding lookup, norms, softmax and SiLU are not
    matmuls: O(d) per token, not counted here (nor by ``FlopCounterMode``).
    """
    c = _check_config(config)
    T, B = _positive_int(seq_len, "seq_len"), _positive_int(batch, "batch")
    d = c.d_model
    per_token = c.n_layers * (2 * block_parameters(d, c.d_ff) + 4 * T * d) + 2 * d * c.vocab_size
    return B * T * per_token


def training_flops(config: TransformerConfig, seq_len: int, batch: int = 1) -> int:
    """Matmul FLOPs of one training step (forward + backward) = 3 x :func:`forward_flops`.

    The backward pass of ``Y = X W`` computes ``dX = dY W^T`` and ``dW = X^T dY``: two matmuls
    of the forward's size, hence the factor 3 (and 6 = 3 x 2 in eq. 22.5).
    """
    return 3 * forward_flops(config, seq_len, batch)


def approx_training_flops(n_params: int, n_tokens: int) -> int:
    """C ~ 6 N D: training compute for N parameters and D tokens (eq. 22.5)."""
    return 6 * _positive_int(n_params, "n_params") * _positive_int(n_tokens, "n_tokens")


def measure_training_flops(model: nn.Module, tokens: torch.Tensor) -> int:
    """Count the FLOPs of forward + backward of a next-token loss with ``FlopCounterMode``.

    The loss is the cross-entropy of ``model(tokens)`` against the tokens shifted by one (the
    last position predicts token 0: the targets are only there to give a scalar loss). Only
    matmul-like operations are counted, 2 FLOPs per multiply-add.

    Args:
        model: maps (B, T) tokens to (B, T, V) logits.
        tokens: (B, T) integer ids.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2:
        raise ValueError("tokens must be a (B, T) integer tensor")
    model.zero_grad(set_to_none=True)
    counter = FlopCounterMode(display=False)
    with counter:
        logits = model(tokens)  # (B, T, V)
        targets = tokens.roll(-1, dims=1)  # (B, T)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())
