"""The book's one decoder-only language model: its blocks, caches and :class:`Decoder`.

A block adds two branches to the residual stream (eqs. 22.1-22.2): a token mixer reads a
normalised copy, either causal attention with RoPE, grouped key/value heads and a KV cache
(eqs. 24.1, 24.3, 24.4) or a Mamba-style selective SSM (eq. 28.5); then a feed-forward branch,
SwiGLU (eq. 22.3), GELU, or a routed mixture of experts (eq. 27.2). :class:`PostNormDecoderBlock`
moves the norms after the additions (the 2017 arrangement) for comparison. The pieces are the
book's own: norms from :mod:`mlbook.nn.normalization`, activations from
:mod:`mlbook.nn.activations`, RoPE from :mod:`mlbook.attention.rope`, grouped attention and the
caches from :mod:`mlbook.attention.kv_cache`, experts from :mod:`mlbook.architectures.moe`, the
selective scan from :mod:`mlbook.architectures.ssm`.

Shape legend
    B batch;  T new tokens;  T_k keys (cached and new);  d = d_model;  V vocabulary
    H, G query and key/value heads;  d_h head width;  h feed-forward width
    E SSM channels;  n SSM state size;  K SSM convolution width
    tokens (B, T) int;  x (B, T, d) residual stream;  positions (T,) or (B, T) int
    q (B, H, T, d_h);  k, v (B, G, T_k, d_h);  logits (B, T, V)

Weights use the row-vector layout ``x @ W``, W of shape (in, out), like GPT-2's ``Conv1D``;
``nn.Linear`` (Llama) stores (out, in): :mod:`mlbook.models.hf` converts.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..architectures.moe import init_experts, moe_routed, topk_route
from ..architectures.ssm import scan_hillis_steele, selective_discretize, selective_params
from ..attention.kv_cache import KVCache, LayerCache, SlidingWindowCache, grouped_attention, visible
from ..attention.rope import apply_rope, rope_frequencies
from ..nn.activations import gelu_tanh, silu, swiglu_ffn
from ..nn.normalization import layer_norm, rms_norm
from ..validation import float_tensor, index_tensor, nonempty, one_of, positive_int, shape_is
from .config import DecoderConfig

__all__ = [
    "Norm",
    "Attention",
    "selective_ssm",
    "SSMMixer",
    "FeedForward",
    "MoEFeedForward",
    "DecoderBlock",
    "PostNormDecoderBlock",
    "SSMCache",
    "DecoderCache",
    "Decoder",
]


# --- initialisation and small helpers ----------------------------------------------------------


def _draw(rows: int, cols: int, config: DecoderConfig, generator, dtype, residual=False):
    """A (rows, cols) tensor: N(0, 1/rows), or N(0, init_std^2) (/ 2L for residual outputs)."""
    w = torch.randn(rows, cols, generator=generator, dtype=dtype)
    if config.init_std is None:
        return w / math.sqrt(rows)
    return w * (config.init_std / math.sqrt(2 * config.n_layers) if residual else config.init_std)


def _weight(rows, cols, config, generator, dtype, residual=False) -> nn.Parameter:
    return nn.Parameter(_draw(rows, cols, config, generator, dtype, residual))


def _bias(n: int, config: DecoderConfig, dtype) -> nn.Parameter | None:
    return nn.Parameter(torch.zeros(n, dtype=dtype)) if config.bias else None


def _affine(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x @ W (+ b): (..., in) -> (..., out)."""
    return x @ W if b is None else x @ W + b


def _rope_positions(positions, B: int, T: int) -> torch.Tensor:
    """Integer position ids (T,) or (B, T), as (T,) or (B, 1, T) to broadcast over the heads."""
    index_tensor(positions, "positions")
    if positions.ndim == 2:
        return shape_is(positions, "positions", (B, T))[:, None, :]  # (B, T) -> (B, 1, T)
    return shape_is(positions, "positions", (T,))


# --- the sublayers -----------------------------------------------------------------------------


class Norm(nn.Module):
    """RMSNorm (eq. 16.2, gain ``weight``) or LayerNorm (eq. 16.1, ``weight`` and ``bias``)."""

    def __init__(self, config: DecoderConfig, *, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.eps = config.norm_eps
        self.weight = nn.Parameter(torch.ones(config.d_model, dtype=dtype))
        layer = config.norm == "layer"
        self.bias = nn.Parameter(torch.zeros(config.d_model, dtype=dtype)) if layer else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        if self.bias is None:
            return rms_norm(x, self.weight, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)


class Attention(nn.Module):
    """Causal self-attention: H query heads over G shared key/value heads, RoPE, KV cache.

    Weights ``Wq`` (d, H d_h), ``Wk``, ``Wv`` (d, G d_h), ``Wo`` (H d_h, d), biases ``bq``, ``bk``,
    ``bv``, ``bo`` with ``config.bias``. Query head j reads key/value head floor(j G / H)
    (eq. 24.3). With a cache the new keys and values are appended and the queries attend to every
    cached position (eq. 24.1). ``index`` is the layer's slot in the cache.
    """

    def __init__(
        self,
        config: DecoderConfig,
        *,
        index: int = 0,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config, self.index = config, index
        d, q_width, kv_width = config.d_model, config.d_model, config.n_kv_heads * config.head_dim
        widths = [q_width, kv_width, kv_width]
        if config.init_std is None:  # one N(0, 1/d) matrix after the other (Llama form)
            qkv = [_draw(d, w, config, generator, dtype) for w in widths]
        else:  # GPT-2 draws its fused c_attn = [W_q | W_k | W_v] at once
            qkv = _draw(d, sum(widths), config, generator, dtype).split(widths, dim=1)
        self.Wq, self.Wk, self.Wv = (nn.Parameter(w.contiguous()) for w in qkv)
        self.Wo = _weight(q_width, d, config, generator, dtype, residual=True)
        self.bq, self.bk, self.bv = (_bias(w, config, dtype) for w in widths)
        self.bo = _bias(d, config, dtype)
        if config.positions == "rope":  # (d_h/2,) float64 frequencies of eq. 21.3
            freqs = rope_frequencies(config.head_dim, config.rope_base)
            self.register_buffer("freqs", freqs, persistent=False)
        else:
            self.freqs = None

    def forward(self, x, positions=None, cache=None, causal=True, return_weights=False):
        """x: (B, T, d) -> (B, T, d); with ``return_weights`` also the (B, H, T, T_k) weights.

        The new tokens sit at sequence positions cache.seq_len, ... (0, ... without a cache); RoPE
        rotates by ``positions`` if given, else by these. ``causal=False`` drops the mask.
        """
        c = self.config
        B, T, _ = x.shape
        start = 0 if cache is None else cache.seq_len
        idx = torch.arange(start, start + T, device=x.device)  # (T,) sequence positions

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(B, T, n, c.head_dim).transpose(1, 2)  # (B, T, n d_h) -> (B, n, T, d_h)

        q = heads(_affine(x, self.Wq, self.bq), c.n_heads)
        k = heads(_affine(x, self.Wk, self.bk), c.n_kv_heads)
        v = heads(_affine(x, self.Wv, self.bv), c.n_kv_heads)
        if self.freqs is not None:
            pos = idx if positions is None else _rope_positions(positions, B, T)
            q, k = apply_rope(q, pos, self.freqs), apply_rope(k, pos, self.freqs)
        k_idx = idx
        if cache is not None:
            k, v, k_idx = cache.update(self.index, k, v)  # (B, G, T_k, d_h), (T_k,) positions
        mask = None
        if causal and (c.window is not None or isinstance(cache, SlidingWindowCache)):
            mask = visible(idx[:, None], k_idx[None, :], c.window, c.sinks)  # (T, T_k), eq. 24.4
        plain_causal = causal and mask is None  # key j visible to query i iff j <= start + i
        out, weights = grouped_attention(q, k, v, mask=mask, is_causal=plain_causal)
        out = _affine(out.transpose(1, 2).reshape(B, T, -1), self.Wo, self.bo)  # (B, T, H d_h)
        return (out, weights) if return_weights else out


def selective_ssm(u, delta, A, B, C, h0=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched selective scan from a state h0: h_t = Abar_t h_{t-1} + Bbar_t u_t, y_t = C_t^T h_t.

    Implements eq. 28.5 with :func:`~mlbook.architectures.ssm.selective_discretize` and a
    Hillis-Steele scan over time; :func:`~mlbook.architectures.ssm.selective_scan_sequential` is
    its reference. u, delta: (B, T, E); A: (E, n); B, C: (B, T, n); h0: (B, E, n) or None (0).
    Returns y (B, T, E) and the last state h_T (B, E, n).
    """
    Bsz, T, E = u.shape
    n = A.shape[1]
    Abar, Bbar = selective_discretize(delta.reshape(-1, E), A, B.reshape(-1, n))  # (B T, E, n)
    a = Abar.view(Bsz, T, E, n).transpose(0, 1)  # (B T, E, n) -> (T, B, E, n)
    b = (Bbar * u.reshape(-1, E, 1)).view(Bsz, T, E, n).transpose(0, 1)  # (T, B, E, n)
    if h0 is not None:
        b = torch.cat([b[:1] + a[:1] * h0, b[1:]])  # fold the carried state into step 1
    h = scan_hillis_steele(a, b)  # (T, B, E, n): h_t for every step
    y = (h @ C.transpose(0, 1)[..., None])[..., 0]  # (T, B, E, n) @ (T, B, n, 1) -> (T, B, E)
    return y.transpose(0, 1), h[-1]


class SSMMixer(nn.Module):
    """A Mamba-style selective state-space layer, the token mixer of an "S" layer (eq. 28.5).

    [u | z] = x W_in; u passes a causal depthwise convolution of width K (``conv``,
    ``conv_bias``; elementwise products, no matmul) and SiLU; Delta_t, B_t, C_t come from u
    (``W_delta``, ``b_delta``, ``W_B``, ``W_C``); y = :func:`selective_ssm` + D u;
    out = (y * SiLU(z)) W_out. A = -exp(A_log) starts
    at -(1..n) in every channel (S4D-real) and softplus(b_delta) spans steps 1e-3 to 1e-1. With a
    cache the convolution window and the state h carry over to the next call.
    """

    def __init__(
        self,
        config: DecoderConfig,
        *,
        index: int = 0,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config, self.index = config, index
        d, E, n, K = config.d_model, config.d_inner, config.ssm_state, config.ssm_conv
        self.W_in = _weight(d, 2 * E, config, generator, dtype)
        conv = torch.randn(E, K, generator=generator, dtype=dtype) / math.sqrt(K)
        self.conv = nn.Parameter(conv)  # (E, K) one filter per channel
        self.conv_bias = nn.Parameter(torch.zeros(E, dtype=dtype))
        self.W_delta = _weight(E, E, config, generator, dtype)
        step = torch.logspace(-3, -1, E, dtype=torch.float64)  # softplus(b_delta) = step
        self.b_delta = nn.Parameter(torch.log(torch.expm1(step)).to(dtype))
        self.W_B = _weight(E, n, config, generator, dtype)
        self.W_C = _weight(E, n, config, generator, dtype)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=dtype)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E, dtype=dtype))
        self.W_out = _weight(E, d, config, generator, dtype, residual=True)

    def forward(self, x: torch.Tensor, cache: SSMCache | None = None) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d); ``cache`` (an :class:`SSMCache`) is read and advanced."""
        B, T, _ = x.shape
        E, K = self.config.d_inner, self.config.ssm_conv
        u, z = (x @ self.W_in).chunk(2, dim=-1)  # (B, T, 2E) -> 2 x (B, T, E)
        past = u.new_zeros(B, K - 1, E) if cache is None else cache.conv[self.index]
        window = torch.cat([past, u], dim=1)  # (B, K - 1 + T, E): the last K - 1 inputs first
        taps = window.unfold(1, K, 1)  # (B, T, E, K): the K inputs u_{t-K+1..t} of each step
        u = silu((taps * self.conv).sum(-1) + self.conv_bias)  # depthwise: O(E K) per token
        delta, Bt, Ct = selective_params(
            u.reshape(-1, E), self.W_delta, self.b_delta, self.W_B, self.W_C
        )
        h0 = None if cache is None else cache.h[self.index]
        y, h_last = selective_ssm(
            u, delta.view(B, T, E), -torch.exp(self.A_log), Bt.view(B, T, -1), Ct.view(B, T, -1), h0
        )
        if cache is not None:
            cache.update(self.index, window[:, window.shape[1] - (K - 1) :], h_last, T)
        return ((y + u * self.D) * silu(z)) @ self.W_out


class FeedForward(nn.Module):
    """The feed-forward branch: SwiGLU (SiLU(x W) * x V) W2 (eq. 22.3) or GELU(x W) W2.

    ``W`` (d, h) is W_g (GPT-2's c_fc), ``V`` (d, h) W_u (SwiGLU only), ``W2`` (h, d) W_d;
    with ``config.bias`` the biases ``bW``, ``bV``, ``bW2``. GELU is the tanh form (``gelu_new``).
    """

    def __init__(
        self,
        config: DecoderConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        d, h, swiglu = config.d_model, config.d_ff, config.mlp == "swiglu"
        self.W = _weight(d, h, config, generator, dtype)
        self.V = _weight(d, h, config, generator, dtype) if swiglu else None
        self.W2 = _weight(h, d, config, generator, dtype, residual=True)
        self.bW, self.bV, self.bW2 = _bias(h, config, dtype), None, _bias(d, config, dtype)
        if swiglu:
            self.bV = _bias(h, config, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        if self.V is None:
            return _affine(gelu_tanh(_affine(x, self.W, self.bW)), self.W2, self.bW2)
        if self.bW is None:
            return swiglu_ffn(x, self.W, self.V, self.W2)
        return _affine(
            silu(_affine(x, self.W, self.bW)) * _affine(x, self.V, self.bV), self.W2, self.bW2
        )


class MoEFeedForward(nn.Module):
    """A routed mixture of N SwiGLU experts, top_k per token with renormalised gates (eq. 27.2).

    ``W_r`` (d, N) router, ``W``, ``V`` (N, d, h) and ``W2`` (N, h, d) experts, drawn by
    :func:`~mlbook.architectures.moe.init_experts`; the tokens go through
    :func:`~mlbook.architectures.moe.moe_routed`, each to its k experts only.
    """

    def __init__(
        self,
        config: DecoderConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.top_k = config.top_k
        p = init_experts(
            config.n_experts, config.d_model, config.d_ff, generator=generator, dtype=dtype
        )
        self.W_r, self.W, self.V, self.W2 = (nn.Parameter(p[k]) for k in ("W_r", "W", "V", "W2"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        flat = x.reshape(-1, x.shape[-1])  # (..., d) -> (tokens, d)
        route = topk_route(flat @ self.W_r, self.top_k)  # eq. 27.1: probabilities, top k, gates
        return moe_routed(flat, route.idx, route.gates, self.W, self.V, self.W2).view(x.shape)


# --- the blocks ----------------------------------------------------------------------------------


class DecoderBlock(nn.Module):
    """A pre-norm block: u = x + Mix(Norm(x)) (eq. 22.1), then x' = u + FFN(Norm(u)) (eq. 22.2).

    Mix is :class:`Attention` (``attn``) or, for ``kind="ssm"``, :class:`SSMMixer` (``ssm``);
    FFN is :class:`FeedForward` or :class:`MoEFeedForward` (``ffn``); the norms are ``attn_norm``
    and ``ffn_norm``. Initialised in that order; ``index`` is the slot in its kind's cache.
    """

    def __init__(
        self,
        config: DecoderConfig,
        kind: str = "attention",
        *,
        index: int = 0,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        self.config, self.kind = config, one_of(kind, "kind", ("attention", "ssm"))
        self.attn_norm = Norm(config, dtype=dtype)
        if kind == "attention":
            self.attn = Attention(config, index=index, generator=generator, dtype=dtype)
        else:
            self.ssm = SSMMixer(config, index=index, generator=generator, dtype=dtype)
        self.ffn_norm = Norm(config, dtype=dtype)
        ffn = MoEFeedForward if config.n_experts else FeedForward
        self.ffn = ffn(config, generator=generator, dtype=dtype)

    def mix(self, x, positions=None, cache=None, causal=True) -> torch.Tensor:
        """The token mixer alone: attention (eq. 19.1 with RoPE and cache) or the SSM."""
        if self.kind == "attention":
            return self.attn(x, positions, cache, causal)
        return self.ssm(x, cache)

    def forward(self, x, positions=None, cache=None, causal=True) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d); positions, cache and causal as :meth:`Attention.forward`."""
        shape_is(float_tensor(x, "x", ndim=3), "x", (None, None, self.config.d_model))
        u = x + self.mix(self.attn_norm(x), positions, cache, causal)  # eq. 22.1
        return u + self.ffn(self.ffn_norm(u))  # eq. 22.2


class PostNormDecoderBlock(DecoderBlock):
    """The post-norm arrangement of 2017: u = Norm(x + Mix(x)), x' = Norm(u + FFN(u)).

    The same sublayers and parameters as :class:`DecoderBlock`; every residual sum passes
    through a norm, so the residual path is no longer an identity.
    """

    def forward(self, x, positions=None, cache=None, causal=True) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d)."""
        shape_is(float_tensor(x, "x", ndim=3), "x", (None, None, self.config.d_model))
        u = self.attn_norm(x + self.mix(x, positions, cache, causal))
        return self.ffn_norm(u + self.ffn(u))


# --- the recurrent state of SSM layers ---------------------------------------------------------


class SSMCache(LayerCache):
    """The state that SSM layers carry between decoding steps: fixed size, whatever T is.

    ``conv`` (L_s, B, K - 1, E) holds each layer's last K - 1 convolution inputs, ``h``
    (L_s, B, E, n) its scan state; L_s is the number of SSM layers.
    """

    _state = ("conv", "h")

    def __init__(self, n_layers, batch, d_inner, d_state, d_conv, dtype=torch.float32, device=None):
        for v, name in ((n_layers, "n_layers"), (batch, "batch"), (d_inner, "d_inner")):
            positive_int(v, name)
        self.conv = torch.zeros(n_layers, batch, d_conv - 1, d_inner, dtype=dtype, device=device)
        self.h = torch.zeros(n_layers, batch, d_inner, d_state, dtype=dtype, device=device)
        self._lengths = [0] * n_layers

    def update(self, layer: int, conv: torch.Tensor, h: torch.Tensor, n_new: int) -> None:
        """Store layer ``layer``'s new conv window (B, K - 1, E) and state (B, E, n)."""
        self.conv[layer], self.h[layer] = conv, h
        self._lengths[layer] += n_new


class DecoderCache:
    """The cache of a model with SSM layers: ``kv`` for its attention layers (or None), ``ssm``."""

    def __init__(self, kv: KVCache | SlidingWindowCache | None, ssm: SSMCache) -> None:
        self.kv, self.ssm = kv, ssm

    @property
    def seq_len(self) -> int:
        """Number of cached positions."""
        return (self.ssm if self.kv is None else self.kv).seq_len

    @property
    def nbytes(self) -> int:
        """Bytes of the KV cache and the SSM state together."""
        return self.ssm.nbytes + (0 if self.kv is None else self.kv.nbytes)


# --- the model -----------------------------------------------------------------------------------


class Decoder(nn.Module):
    """The decoder-only language model: embedding, L blocks, final norm, output head.

    Parameters, initialised in this order: ``embedding`` E (V, d), ``pos_embedding``
    (max_seq_len, d) with learned positions, ``blocks``, ``final_norm`` (none after post-norm
    blocks), ``head`` (d, V) unless tied: then the logits are h E^T (eq. 23.2).

    Args:
        config: a :class:`~mlbook.models.config.DecoderConfig`.
        generator: seeds the initialisation.
        dtype: parameter dtype.
    """

    def __init__(
        self,
        config: DecoderConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        self.config = c = config

        def table(rows: int) -> nn.Parameter:  # N(0, 1/d) rows have unit norm; GPT-2: N(0, std^2)
            w = torch.randn(rows, c.d_model, generator=generator, dtype=dtype)
            return nn.Parameter(w / math.sqrt(c.d_model) if c.init_std is None else w * c.init_std)

        self.embedding = table(c.vocab_size)
        self.pos_embedding = table(c.max_seq_len) if c.positions == "learned" else None
        block = PostNormDecoderBlock if c.post_norm else DecoderBlock
        kinds = c.layer_kinds
        self.blocks = nn.ModuleList(
            block(c, kind, index=kinds[:i].count(kind), generator=generator, dtype=dtype)
            for i, kind in enumerate(kinds)
        )
        self.final_norm = None if c.post_norm else Norm(c, dtype=dtype)
        self.head = (
            None if c.tie_embeddings else _weight(c.d_model, c.vocab_size, c, generator, dtype)
        )

    def new_cache(self, batch: int, max_len: int | None = None):
        """An empty cache for ``batch`` sequences of up to ``max_len`` tokens (default max_seq_len).

        A :class:`~mlbook.attention.kv_cache.KVCache` (a ``SlidingWindowCache`` with a window)
        for the attention layers; with SSM layers, a :class:`DecoderCache` holding it and an
        :class:`SSMCache`.
        """
        c, p = self.config, self.embedding
        kinds = c.layer_kinds
        n_attn, n_ssm = kinds.count("attention"), kinds.count("ssm")
        kv = None
        if n_attn and c.window is not None:
            kv = SlidingWindowCache(
                n_attn,
                batch,
                c.n_kv_heads,
                c.head_dim,
                c.window,
                c.sinks,
                dtype=p.dtype,
                device=p.device,
            )
        elif n_attn:
            T = c.max_seq_len if max_len is None else max_len
            kv = KVCache(n_attn, batch, c.n_kv_heads, c.head_dim, T, dtype=p.dtype, device=p.device)
        if not n_ssm:
            return kv
        ssm = SSMCache(
            n_ssm, batch, c.d_inner, c.ssm_state, c.ssm_conv, dtype=p.dtype, device=p.device
        )
        return DecoderCache(kv, ssm)

    def _cache_parts(self, cache):
        """(KV cache, SSM cache) of a cache from :meth:`new_cache`, checked against the model."""
        if cache is None:
            return None, None
        kv, ssm = (cache.kv, cache.ssm) if isinstance(cache, DecoderCache) else (cache, None)
        kinds = self.config.layer_kinds
        if ("ssm" in kinds and ssm is None) or (
            "attention" in kinds and not isinstance(kv, (KVCache, SlidingWindowCache))
        ):
            raise TypeError(
                f"cache must come from the model's new_cache(), got {type(cache).__name__}"
            )
        if kv is not None and (kv.window, kv.sinks) != (self.config.window, self.config.sinks):
            raise ValueError(
                f"the cache's window and sinks {(kv.window, kv.sinks)} differ from the model's "
                f"{(self.config.window, self.config.sinks)}"
            )
        return kv, ssm

    def hidden_states(
        self, tokens=None, cache=None, positions=None, causal=True, *, embeddings=None
    ) -> list[torch.Tensor]:
        """The residual stream before every block and after the last: L + 1 tensors (B, T, d).

        tokens: (B, T) ids, the continuation of the cached sequence when a ``cache`` (from
        :meth:`new_cache`) is given; or instead ``embeddings`` (B, T, d), input vectors that take
        the place of the token embeddings (image tokens spliced into text, chapter 32); positions:
        (T,) or (B, T) position ids for RoPE or the learned table (default: the sequence
        positions); causal=False: no attention mask.
        """
        c = self.config
        if (tokens is None) == (embeddings is None):
            raise ValueError("give either tokens or embeddings, not both or neither")
        if tokens is not None:
            nonempty(index_tensor(tokens, "tokens", c.vocab_size, ndim=2), "tokens")
            x = self.embedding[tokens]  # (B, T) -> (B, T, d)
        else:
            x = float_tensor(embeddings, "embeddings", ndim=3, not_empty=True)
            shape_is(x, "embeddings", (None, None, c.d_model))
        kv, ssm = self._cache_parts(cache)
        start, T = (0 if cache is None else cache.seq_len), x.shape[1]
        if start + T > c.max_seq_len:
            raise ValueError(f"{start} cached + {T} new tokens exceed max_seq_len={c.max_seq_len}")
        if self.pos_embedding is not None:
            ids = (
                torch.arange(start, start + T, device=x.device) if positions is None else positions
            )
            x = (
                x + self.pos_embedding[index_tensor(ids, "positions", c.max_seq_len)]
            )  # + (.., T, d)
        states = [x]
        for block in self.blocks:
            x = block(x, positions, kv if block.kind == "attention" else ssm, causal)
            states.append(x)
        return states

    def hidden(self, tokens=None, cache=None, positions=None, causal=True, *, embeddings=None):
        """The final normalised hidden states h (B, T, d); arguments as :meth:`hidden_states`."""
        x = self.hidden_states(tokens, cache, positions, causal, embeddings=embeddings)[-1]
        return x if self.final_norm is None else self.final_norm(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The output head: h (..., d) -> logits (..., V), h E^T when tied (eq. 23.2)."""
        return h @ (self.embedding.T if self.head is None else self.head)

    def forward(self, tokens=None, cache=None, positions=None, causal=True, *, embeddings=None):
        """tokens (B, T) -> logits (B, T, V): row t scores the token at position t + 1.

        ``embeddings`` (B, T, d) instead of tokens: see :meth:`hidden_states`."""
        return self.logits(self.hidden(tokens, cache, positions, causal, embeddings=embeddings))
