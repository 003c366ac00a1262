"""KV caches for MHA, MQA and GQA, sliding windows with sink tokens, and their memory (chapter 24).

Autoregressive decoding produces one token at a time. The keys and values of earlier tokens do
not change when a new token arrives (causal attention: token s never looks at t > s), so a
decoder stores them once, in a *KV cache*, and each step computes only the new token's query, key
and value (eq. 24.1). The cache is what limits long contexts: it holds 2 L G d_h T b bytes per
sequence (eq. 24.2). Grouped-query attention shrinks it by letting the H query heads share
G <= H key/value heads through the head map g(h) = floor(h G / H) (eq. 24.3): G = H is
multi-head attention (MHA), G = 1 multi-query attention (MQA), anything between GQA. A sliding
window keeps only the last W positions, plus S "sink" tokens at the start (eq. 24.4).

Shape legend
    B      batch size
    H      query heads;  G  key/value heads (1 <= G <= H);  R = H / G query heads per group
    d_h    head width;  D = H d_h  model width;  F  feed-forward width;  V  vocabulary size
    L      layers;  T  sequence (or cached) length;  T_q new queries;  T_k keys
    W      window length;  S  number of sink tokens
    q      (B, H, T_q, d_h) queries          k, v  (B, G, T_k, d_h) keys and values
    cache  (L, B, G, T_max, d_h) one buffer for keys and one for values

Naive references beside the fast versions: :func:`grouped_attention_naive` (expand K/V to H heads
with the head map, then ordinary attention) beside :func:`grouped_attention` (a reshape that
never copies K/V); :func:`decode_attention_naive` (eq. 24.1 with Python loops) beside both;
recomputing the whole prefix (``generate(..., use_cache=False)``) beside cached decoding.
Attention itself is :func:`mlbook.attention.dot_product.scaled_dot_product_attention` and RoPE is
:func:`mlbook.attention.rope.apply_rope`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.normalization import rms_norm
from .dot_product import scaled_dot_product_attention
from .rope import apply_rope, rope_frequencies

__all__ = [
    "head_map",
    "attention_kind",
    "expand_kv",
    "grouped_attention",
    "grouped_attention_naive",
    "decode_attention_naive",
    "visible",
    "sliding_window_mask",
    "KVCache",
    "SlidingWindowCache",
    "kv_cache_bytes",
    "DecoderConfig",
    "LLAMA2_7B",
    "LLAMA2_70B",
    "MISTRAL_7B",
    "cache_bytes",
    "param_count",
    "TinyDecoder",
    "generate",
    "forward_flops",
    "generation_flops",
    "decode_step_seconds",
]


# --- validation ----------------------------------------------------------------------------------


def _check_int(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def _check_heads(H: int, G: int) -> None:
    _check_int(H, "H (query heads)")
    _check_int(G, "G (key/value heads)")
    if G > H:
        raise ValueError(f"need 1 <= G <= H, got G={G} key/value heads for H={H} query heads")


def _check_4d(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"{name} must have shape (B, heads, T, d_h), got {tuple(x.shape)}")


def _check_gqa(q, k, v) -> tuple[int, int]:
    """Validate grouped q (B, H, T_q, d), k (B, G, T_k, d), v (B, G, T_k, d_v); return H, G."""
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_4d(x, name)
    H, G = q.shape[1], k.shape[1]
    if v.shape[1] != G:
        raise ValueError(
            f"k and v must have the same number of heads G: k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(
            f"q, k, v must share the batch size: {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if G < 1 or G > H:
        raise ValueError(f"need 1 <= G <= H: q has H={H} heads, k and v have G={G}")
    return H, G


def _check_gqa_mask(mask, H: int) -> None:
    """A GQA mask is None, (T_q, T_k) or (B or 1, 1 or H, T_q, T_k); dtype checked later."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.ndim == 2 or (mask.ndim == 4 and mask.shape[1] in (1, H)):
        return
    raise ValueError(
        f"mask must have shape (T_q, T_k) or (B, 1 or H={H}, T_q, T_k), got {tuple(mask.shape)}"
    )


# --- eq. 24.3: the head map ------------------------------------------------------------------


def head_map(H: int, G: int, device=None) -> torch.Tensor:
    """The key/value head that each query head reads, g(h) = floor(h G / H).

    Implements eq. 24.3. G = H gives the identity (MHA), G = 1 all zeros (MQA). When G divides H
    it is ``h // (H / G)``: consecutive blocks of R = H / G query heads share a K/V head, the
    layout of ``repeat_interleave`` and of torch's ``enable_gqa``. Otherwise the groups differ in
    size by at most one.

    Args:
        H: number of query heads (>= 1).
        G: number of key/value heads, 1 <= G <= H.

    Returns:
        (H,) int64 tensor with values in [0, G).
    """
    _check_heads(H, G)
    return torch.arange(H, device=device) * G // H


def attention_kind(H: int, G: int) -> str:
    """``"MHA"`` for G = H, ``"MQA"`` for G = 1 (and H > 1), else ``"GQA"``."""
    _check_heads(H, G)
    return "MHA" if G == H else "MQA" if G == 1 else "GQA"


def expand_kv(x: torch.Tensor, H: int) -> torch.Tensor:
    """Copy the G key (or value) heads out to H query heads with the head map: x[:, g(h)].

    Args:
        x: (B, G, T, d_h) keys or values.
        H: number of query heads, H >= G.

    Returns:
        (B, H, T, d_h): head h of the result is head g(h) of x.
    """
    _check_4d(x, "x")
    G = x.shape[1]
    _check_heads(H, G)
    return x.index_select(1, head_map(H, G, device=x.device))  # (B, G, T, d) -> (B, H, T, d)


# --- grouped attention (eq. 24.1 for many queries at once) ------------------------------------


def grouped_attention_naive(q, k, v, mask=None, is_causal=False, scale=None):
    """Reference GQA: expand K/V to H heads with :func:`expand_kv`, then ordinary attention.

    Args and returns as :func:`grouped_attention`.
    """
    H, _ = _check_gqa(q, k, v)
    return scaled_dot_product_attention(
        q, expand_kv(k, H), expand_kv(v, H), mask=mask, is_causal=is_causal, scale=scale
    )


def grouped_attention(q, k, v, mask=None, is_causal=False, scale=None):
    """Attention of H query heads over G shared key/value heads (MHA, MQA and GQA alike).

    When G divides H, the query heads are viewed as (G, R) with R = H / G, so that each group of
    R queries meets its one K/V head by broadcasting: K and V are never copied H / G times.
    Otherwise it falls back to :func:`grouped_attention_naive`.

    Args:
        q: (B, H, T_q, d_h) queries.
        k: (B, G, T_k, d_h) keys;  v: (B, G, T_k, d_v) values;  1 <= G <= H.
        mask: optional bool tensor of shape (T_q, T_k), or (B or 1, 1 or H, T_q, T_k) for
            masks that differ between sequences or heads; True = may attend.
        is_causal: bottom-right aligned causal mask (queries are the last T_q positions).
        scale: score multiplier, default 1/sqrt(d_h).

    Returns:
        out: (B, H, T_q, d_v);  weights: (B, H, T_q, T_k).
    """
    H, G = _check_gqa(q, k, v)
    _check_gqa_mask(mask, H)
    if H % G:
        return grouped_attention_naive(q, k, v, mask=mask, is_causal=is_causal, scale=scale)
    B, _, T_q, d = q.shape
    R = H // G
    qg = q.reshape(B, G, R, T_q, d)  # (B, H, T_q, d) -> (B, G, R, T_q, d): h = g R + r
    kg, vg = k[:, :, None], v[:, :, None]  # (B, G, 1, T_k, d): broadcast over the R heads
    if mask is not None and mask.ndim == 4:
        if mask.shape[1] == 1:
            mask = mask[:, :, None]  # (B, 1, T_q, T_k) -> (B, 1, 1, T_q, T_k)
        else:  # (B, H, T_q, T_k) -> (B, G, R, T_q, T_k)
            mask = mask.reshape(mask.shape[0], G, R, *mask.shape[2:])
    out, w = scaled_dot_product_attention(qg, kg, vg, mask=mask, is_causal=is_causal, scale=scale)
    # (B, G, R, T_q, .) -> (B, H, T_q, .)
    return out.reshape(B, H, T_q, v.shape[-1]), w.reshape(B, H, T_q, k.shape[2])


def decode_attention_naive(
    q_t: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """One decoding step of eq. 24.1 written out with loops, for one sequence.

    a_{t,h} = sum_{s <= t} softmax_s(q_{t,h}^T k_{s,g(h)} / sqrt(d_h)) v_{s,g(h)}: the cache holds
    exactly the keys and values of positions s = 0..t (the new token's included), so every
    cached key is visible.

    Args:
        q_t: (H, d_h) the new token's query, one row per head.
        k_cache: (G, t + 1, d_h) cached keys;  v_cache: (G, t + 1, d_v) cached values.

    Returns:
        (H, d_v) the attention output of every head.
    """
    for x, name, nd in ((q_t, "q_t", 2), (k_cache, "k_cache", 3), (v_cache, "v_cache", 3)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.ndim != nd:
            raise ValueError(f"{name} must be a floating tensor with {nd} axes")
    H, d = q_t.shape
    G, T = k_cache.shape[:2]
    if k_cache.shape[2] != d or v_cache.shape[:2] != (G, T):
        raise ValueError(
            f"shapes do not fit: q_t {tuple(q_t.shape)} (H, d_h), k_cache "
            f"{tuple(k_cache.shape)} (G, T, d_h), v_cache {tuple(v_cache.shape)}"
        )
    _check_heads(H, G)
    out = q_t.new_zeros(H, v_cache.shape[2])
    for h in range(H):
        g = h * G // H  # eq. 24.3
        scores = [float(q_t[h] @ k_cache[g, s]) / math.sqrt(d) for s in range(T)]
        m = max(scores)
        e = [math.exp(x - m) for x in scores]
        z = sum(e)
        for s in range(T):
            out[h] += (e[s] / z) * v_cache[g, s]
    return out


# --- eq. 24.4: sliding window with sink tokens ----------------------------------------------


def visible(t, s, window: int | None = None, sinks: int = 0):
    """May the query at position t attend to the key at position s? (eq. 24.4)

    visible(t, s) = (s <= t) and (s >= t - W + 1 or s < S). ``window=None`` is plain causal
    attention (W = infinity). Works elementwise on broadcasting tensors or on ints.

    Args:
        t: query position(s), int or int tensor.
        s: key position(s), int or int tensor broadcastable with t.
        window: W >= 1, the number of most recent positions kept (the query's own included).
        sinks: S >= 0, the number of first positions that stay visible forever.

    Returns:
        bool (tensor) of the broadcast shape.
    """
    if window is not None:
        _check_int(window, "window")
    _check_int(sinks, "sinks", 0)
    if window is None:
        return s <= t
    return (s <= t) & ((s >= t - window + 1) | (s < sinks))


def sliding_window_mask(T: int, window: int | None, sinks: int = 0, device=None) -> torch.Tensor:
    """The (T, T) mask of eq. 24.4 for positions 0..T-1; True = may attend.

    Row t allows the keys min(t+1, S) sinks and the last min(t+1, W) positions (their union).
    """
    _check_int(T, "T")
    pos = torch.arange(T, device=device)
    return visible(pos[:, None], pos[None, :], window, sinks)  # (T, 1) vs (1, T) -> (T, T)


# --- caches ------------------------------------------------------------------------------------


def _check_kv_new(k_new, v_new, shape) -> None:
    """k_new, v_new must be (B, G, T_new, d_h) with the cache's B, G, d_h and dtype."""
    B, G, d, dtype = shape
    for x, name in ((k_new, "k_new"), (v_new, "v_new")):
        _check_4d(x, name)
        if (x.shape[0], x.shape[1], x.shape[3]) != (B, G, d):
            raise ValueError(
                f"{name} must have shape (B={B}, G={G}, T_new, d_h={d}), got {tuple(x.shape)}"
            )
        if x.dtype != dtype:
            raise TypeError(f"{name} has dtype {x.dtype}, the cache holds {dtype}")
    if k_new.shape[2] != v_new.shape[2]:
        raise ValueError(
            f"k_new and v_new differ in T_new: {tuple(k_new.shape)}, {tuple(v_new.shape)}"
        )


class KVCache:
    """A preallocated cache of keys and values for all layers: (L, B, G, T_max, d_h) each.

    ``update(layer, k_new, v_new)`` appends the new tokens of one layer and returns every cached
    key and value of that layer with their positions. The buffers are allocated once (as in
    static caches for compiled decoding), so :attr:`nbytes` is eq. 24.2 with T = T_max times B.
    G = H is an MHA cache, G = 1 an MQA cache, anything between a GQA cache.
    """

    window = None
    sinks = 0

    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device=None,
    ):
        for n, name in (
            (n_layers, "n_layers"),
            (batch, "batch"),
            (n_kv_heads, "n_kv_heads"),
            (head_dim, "head_dim"),
            (max_len, "max_len"),
        ):
            _check_int(n, name)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self._lengths = [0] * n_layers

    @property
    def seq_len(self) -> int:
        """Number of positions whose keys and values every layer holds."""
        return min(self._lengths)

    @property
    def nbytes(self) -> int:
        """Bytes the cache's tensors hold: element_size * numel, summed over K and V."""
        return sum(x.element_size() * x.numel() for x in (self.k, self.v))

    def _layer(self, layer) -> int:
        _check_int(layer, "layer", 0)
        if layer >= len(self._lengths):
            raise ValueError(f"layer must be < {len(self._lengths)}, got {layer}")
        return layer

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor):
        """Append T_new positions to one layer's cache.

        Args:
            layer: layer index in [0, L).
            k_new, v_new: (B, G, T_new, d_h) keys and values of the new positions.

        Returns:
            k: (B, G, T, d_h), v: (B, G, T, d_h) all cached positions (views, no copy), and
            positions: (T,) int64 their positions 0..T-1.
        """
        layer = self._layer(layer)
        _, B, G, _, d = self.k.shape
        _check_kv_new(k_new, v_new, (B, G, d, self.k.dtype))
        start, n = self._lengths[layer], k_new.shape[2]
        if start + n > self.max_len:
            raise ValueError(f"cache full: {start} cached + {n} new > max_len {self.max_len}")
        self.k[layer, :, :, start : start + n] = k_new
        self.v[layer, :, :, start : start + n] = v_new
        self._lengths[layer] = start + n
        pos = torch.arange(start + n, device=self.k.device)
        return self.k[layer, :, :, : start + n], self.v[layer, :, :, : start + n], pos


class SlidingWindowCache:
    """A rolling cache: S sink slots kept forever plus a ring of W slots (eq. 24.4).

    Position p goes to slot p if p < S, else to slot S + (p - S) mod W, overwriting (evicting)
    the position W earlier. Keys are stored after RoPE at their absolute positions, so the order
    of the slots does not matter: attention is a weighted sum over a set of keys. ``update``
    attends the new tokens against the old slots *and* the new tokens themselves, and only then
    evicts, so a chunk of any length (a long prompt) sees every key it is allowed to see.
    Memory: (S + W) slots, whatever the length of the sequence.
    """

    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        head_dim: int,
        window: int,
        sinks: int = 0,
        dtype: torch.dtype = torch.float32,
        device=None,
    ):
        for n, name in (
            (n_layers, "n_layers"),
            (batch, "batch"),
            (n_kv_heads, "n_kv_heads"),
            (head_dim, "head_dim"),
            (window, "window"),
        ):
            _check_int(n, name)
        _check_int(sinks, "sinks", 0)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.window, self.sinks = window, sinks
        shape = (n_layers, batch, n_kv_heads, sinks + window, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # Position held by each slot of each layer; -1 = empty.
        self.slot_pos = torch.full((n_layers, sinks + window), -1, dtype=torch.long, device=device)
        self._lengths = [0] * n_layers

    seq_len = KVCache.seq_len
    nbytes = KVCache.nbytes
    _layer = KVCache._layer

    def slot(self, p: torch.Tensor) -> torch.Tensor:
        """Slot index of position(s) p: p for sinks, S + (p - S) mod W for the rest."""
        S, W = self.sinks, self.window
        return torch.where(p < S, p, S + (p - S) % W)

    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor):
        """Attend-then-evict update of one layer.

        Args:
            layer: layer index in [0, L).
            k_new, v_new: (B, G, T_new, d_h) keys and values of the next T_new positions.

        Returns:
            k, v: (B, G, n_old + T_new, d_h) the occupied old slots followed by the new tokens,
            positions: (n_old + T_new,) their positions (old slots in slot order, not sorted).
            Use :func:`visible` with these positions as the mask.
        """
        layer = self._layer(layer)
        _, B, G, _, d = self.k.shape
        _check_kv_new(k_new, v_new, (B, G, d, self.k.dtype))
        start, n = self._lengths[layer], k_new.shape[2]
        held = (self.slot_pos[layer] >= 0).nonzero().squeeze(1)  # (n_old,) occupied slots
        new_pos = torch.arange(start, start + n, device=self.k.device)  # (T_new,)
        k = torch.cat([self.k[layer][:, :, held], k_new], dim=2)  # (B, G, n_old + T_new, d)
        v = torch.cat([self.v[layer][:, :, held], v_new], dim=2)
        pos = torch.cat([self.slot_pos[layer, held], new_pos])
        # Evict: write the new positions that survive (sinks and the last W), one per slot.
        end = start + n
        keep = (new_pos < self.sinks) | (new_pos >= end - self.window)
        slots = self.slot(new_pos[keep])
        self.k[layer][:, :, slots] = k_new[:, :, keep]
        self.v[layer][:, :, slots] = v_new[:, :, keep]
        self.slot_pos[layer, slots] = new_pos[keep]
        self._lengths[layer] = end
        return k, v, pos


# --- eq. 24.2: memory ------------------------------------------------------------------------


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    head_dim: int,
    seq_len: int,
    bytes_per_element: int,
    batch: int = 1,
) -> int:
    """M_KV = 2 L G d_h T b bytes per sequence, times the batch size (eq. 24.2).

    The 2 counts keys and values; b is the size of one element (2 for fp16/bf16, 1 for fp8).
    """
    for n, name in (
        (n_layers, "n_layers"),
        (n_kv_heads, "n_kv_heads"),
        (head_dim, "head_dim"),
        (seq_len, "seq_len"),
        (bytes_per_element, "bytes_per_element"),
        (batch, "batch"),
    ):
        _check_int(n, name)
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch


@dataclass(frozen=True)
class DecoderConfig:
    """Shape of a Llama-style decoder: RMSNorm, RoPE, GQA attention, SwiGLU feed-forward.

    Attributes:
        vocab_size: V;  d_model: D = H d_h;  n_layers: L;  n_heads: H;  n_kv_heads: G;
        d_ff: F, the SwiGLU hidden width;  window: W (None: full causal attention);
        sinks: S, tokens always visible under a window;  rope_base: RoPE's base b;
        name: a label for tables.
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    window: int | None = None
    sinks: int = 0
    rope_base: float = 10000.0
    name: str = ""

    def __post_init__(self):
        for n in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            _check_int(getattr(self, n), n)
        _check_heads(self.n_heads, self.n_kv_heads)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model={self.d_model} must be n_heads={self.n_heads} times an "
                "even head width (RoPE rotates pairs)"
            )
        if self.window is not None:
            _check_int(self.window, "window")
        _check_int(self.sinks, "sinks", 0)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


# Published configurations (the models' config.json files on the Hugging Face Hub).
LLAMA2_7B = DecoderConfig(32000, 4096, 32, 32, 32, 11008, name="Llama-2-7B")
LLAMA2_70B = DecoderConfig(32000, 8192, 80, 64, 8, 28672, name="Llama-2-70B")
MISTRAL_7B = DecoderConfig(32000, 4096, 32, 32, 8, 14336, window=4096, name="Mistral-7B")


def cache_bytes(
    cfg: DecoderConfig, seq_len: int, batch: int = 1, bytes_per_element: int = 2
) -> int:
    """Eq. 24.2 for a model: the cache holds min(T, S + W) positions under a sliding window."""
    _check_int(seq_len, "seq_len")
    T = seq_len if cfg.window is None else min(seq_len, cfg.window + cfg.sinks)
    return kv_cache_bytes(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, T, bytes_per_element, batch)


def param_count(cfg: DecoderConfig) -> int:
    """Number of parameters of :class:`TinyDecoder` (and of Llama/Mistral) with this shape.

    Embedding and output head V D each (untied); per layer W_q, W_o (D x D), W_k, W_v
    (D x G d_h), three SwiGLU matrices (D x F) and two RMSNorm gains; a final RMSNorm gain.
    """
    D, F_, V, dh = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    per_layer = 2 * D * D + 2 * D * cfg.n_kv_heads * dh + 3 * D * F_ + 2 * D
    return 2 * V * D + cfg.n_layers * per_layer + D


# --- a tiny decoder that uses the caches --------------------------------------------------------


class TinyDecoder(nn.Module):
    """A Llama-style decoder (pre-RMSNorm, RoPE, GQA, SwiGLU) that can decode with a KV cache.

    ``forward(tokens)`` runs the whole sequence at once; ``forward(tokens, cache)`` continues a
    cached sequence: the new tokens get positions cache.seq_len, cache.seq_len + 1, ... (RoPE
    needs them), their keys and values are appended, and attention uses the mask of
    :func:`visible` on the cached positions. With ``cfg.window`` set, both paths use the
    sliding-window mask of eq. 24.4 and :meth:`new_cache` returns a :class:`SlidingWindowCache`.
    """

    def __init__(self, cfg: DecoderConfig, generator: torch.Generator | None = None):
        super().__init__()
        if not isinstance(cfg, DecoderConfig):
            raise TypeError(f"cfg must be a DecoderConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        D, dh, G, F_ = cfg.d_model, cfg.head_dim, cfg.n_kv_heads, cfg.d_ff

        def w(rows, cols, std):
            return nn.Parameter(torch.randn(rows, cols, generator=generator) * std)

        self.embed = w(cfg.vocab_size, D, 1.0)
        self.layers = nn.ModuleList()
        for _ in range(cfg.n_layers):
            layer = nn.Module()
            layer.wq, layer.wo = w(D, D, D**-0.5), w(D, D, D**-0.5)
            layer.wk, layer.wv = w(D, G * dh, D**-0.5), w(D, G * dh, D**-0.5)
            layer.w1, layer.w3 = w(D, F_, D**-0.5), w(D, F_, D**-0.5)
            layer.w2 = w(F_, D, F_**-0.5)
            layer.g_attn, layer.g_ffn = nn.Parameter(torch.ones(D)), nn.Parameter(torch.ones(D))
            self.layers.append(layer)
        self.g_out = nn.Parameter(torch.ones(D))
        self.head = w(D, cfg.vocab_size, D**-0.5)
        self.register_buffer("freqs", rope_frequencies(dh, cfg.rope_base), persistent=False)

    def new_cache(self, batch: int, max_len: int):
        """An empty cache of this model's shape, dtype and device (sliding if cfg.window)."""
        c, p = self.cfg, self.embed
        if c.window is not None:
            return SlidingWindowCache(
                c.n_layers,
                batch,
                c.n_kv_heads,
                c.head_dim,
                c.window,
                c.sinks,
                dtype=p.dtype,
                device=p.device,
            )
        return KVCache(
            c.n_layers, batch, c.n_kv_heads, c.head_dim, max_len, dtype=p.dtype, device=p.device
        )

    def hidden(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        """Final normalised hidden states (B, T_new, D) of the tokens (B, T_new)."""
        c = self.cfg
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long or tokens.ndim != 2:
            raise ValueError("tokens must be an int64 tensor of shape (B, T)")
        if tokens.numel() == 0 or tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ValueError(f"tokens must be non-empty ids in [0, {c.vocab_size})")
        if cache is not None and not isinstance(cache, (KVCache, SlidingWindowCache)):
            raise TypeError(
                f"cache must be a KVCache or SlidingWindowCache, got {type(cache).__name__}"
            )
        B, T = tokens.shape
        H, G, dh = c.n_heads, c.n_kv_heads, c.head_dim
        start = 0 if cache is None else cache.seq_len
        q_pos = torch.arange(start, start + T, device=tokens.device)  # (T,) positions
        x = self.embed[tokens]  # (B, T, D)
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.g_attn)
            q = (h @ layer.wq).view(B, T, H, dh).transpose(1, 2)  # (B, T, D) -> (B, H, T, dh)
            k = (h @ layer.wk).view(B, T, G, dh).transpose(1, 2)  # -> (B, G, T, dh)
            v = (h @ layer.wv).view(B, T, G, dh).transpose(1, 2)  # -> (B, G, T, dh)
            q, k = apply_rope(q, q_pos, self.freqs), apply_rope(k, q_pos, self.freqs)
            if cache is None:
                k_pos = q_pos
            else:
                k, v, k_pos = cache.update(i, k, v)  # (B, G, T_k, dh), (T_k,)
            mask = visible(q_pos[:, None], k_pos[None, :], c.window, c.sinks)  # (T, T_k)
            a, _ = grouped_attention(q, k, v, mask=mask)  # (B, H, T, dh)
            x = x + a.transpose(1, 2).reshape(B, T, H * dh) @ layer.wo  # (B, T, D)
            h = rms_norm(x, layer.g_ffn)
            x = x + (F.silu(h @ layer.w1) * (h @ layer.w3)) @ layer.w2
        return rms_norm(x, self.g_out)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Output head: (..., D) hidden states -> (..., V) logits."""
        return h @ self.head

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        """Logits (B, T_new, V) of every new token; see the class docstring for ``cache``."""
        return self.logits(self.hidden(tokens, cache))


@torch.no_grad()
def generate(
    model: TinyDecoder, prompt: torch.Tensor, n_new: int, use_cache: bool = True
) -> torch.Tensor:
    """Greedy decoding of ``n_new`` tokens, with a KV cache or by recomputing the prefix.

    With the cache: one forward pass over the prompt (prefill), then one token per step. Without:
    every step runs the model over the whole sequence so far and keeps the last position. Both
    apply the output head to the last position only.

    Args:
        model: a :class:`TinyDecoder`.
        prompt: (B, P) int64 token ids, P >= 1.
        n_new: number of tokens to generate (>= 1).

    Returns:
        (B, P + n_new) the prompt followed by the generated tokens.
    """
    if not isinstance(model, TinyDecoder):
        raise TypeError(f"model must be a TinyDecoder, got {type(model).__name__}")
    _check_int(n_new, "n_new")
    if not isinstance(prompt, torch.Tensor) or prompt.dtype != torch.long or prompt.ndim != 2:
        raise ValueError("prompt must be an int64 tensor of shape (B, P)")
    tokens = prompt
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + n_new) if use_cache else None
    step_input = prompt
    for _ in range(n_new):
        h = model.hidden(step_input if use_cache else tokens, cache)  # (B, T_new, D)
        nxt = model.logits(h[:, -1]).argmax(-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        step_input = nxt
    return tokens


def forward_flops(
    cfg: DecoderConfig, n_tokens: int, n_keys: int, n_head_tokens: int, batch: int = 1
) -> int:
    """Matrix-multiply FLOPs (2 per multiply-add) of one :meth:`TinyDecoder.hidden` call.

    n_tokens new tokens attend to n_keys keys each (the full score matrix is computed, then
    masked); n_head_tokens positions go through the output head. Elementwise work (norms, RoPE,
    softmax) is not counted, as in ``torch.utils.flop_counter``.
    """
    for n, name in ((n_tokens, "n_tokens"), (n_keys, "n_keys"), (batch, "batch")):
        _check_int(n, name)
    _check_int(n_head_tokens, "n_head_tokens", 0)
    D, H, G, dh, F_ = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    proj = 2 * n_tokens * (D * H * dh + 2 * D * G * dh + H * dh * D)  # W_q, W_k, W_v, W_o
    ffn = 2 * n_tokens * 3 * D * F_
    attn = 2 * 2 * H * n_tokens * n_keys * dh  # q k^T and A v
    return batch * (cfg.n_layers * (proj + ffn + attn) + 2 * n_head_tokens * D * cfg.vocab_size)


def generation_flops(
    cfg: DecoderConfig, prompt_len: int, n_new: int, use_cache: bool, batch: int = 1
) -> int:
    """Matrix-multiply FLOPs of :func:`generate` (eq. 24.1's saving, counted exactly).

    Cached: a prefill over the P prompt tokens, then n_new - 1 single-token steps against
    P + i keys (under a window, the occupied slots, at most S + W, plus the new token).
    Recomputed: n_new full passes over P + i tokens, i = 0..n_new-1.
    """
    _check_int(prompt_len, "prompt_len")
    _check_int(n_new, "n_new")
    P = prompt_len
    if not use_cache:
        return sum(forward_flops(cfg, P + i, P + i, 1, batch) for i in range(n_new))
    cap = None if cfg.window is None else cfg.window + cfg.sinks
    total = forward_flops(cfg, P, P, 1, batch)
    for i in range(1, n_new):
        old = P + i - 1
        keys = (old if cap is None else min(old, cap)) + 1
        total += forward_flops(cfg, 1, keys, 1, batch)
    return total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def decode_step_seconds(
    model: TinyDecoder,
    context_len: int,
    use_cache: bool,
    reps: int = 3,
    generator: torch.Generator | None = None,
) -> float:
    """Wall-clock seconds of one decoding step at a given context length (median of ``reps``).

    With the cache the step is one token against ``context_len - 1`` cached positions (the
    prefill is not timed); without it, a forward pass over all ``context_len`` tokens and the
    output head on the last one. Synchronises CUDA before reading the clock.
    """
    _check_int(context_len, "context_len", 2)
    _check_int(reps, "reps")
    dev = model.embed.device
    tokens = torch.randint(0, model.cfg.vocab_size, (1, context_len), generator=generator)
    tokens = tokens.to(dev)
    times = []
    for _ in range(reps + 1):  # the first run warms up and is discarded
        if use_cache:
            cache = model.new_cache(1, context_len)
            model.hidden(tokens[:, :-1], cache)
            _sync(dev)
            t0 = time.perf_counter()
            model.logits(model.hidden(tokens[:, -1:], cache)[:, -1])
        else:
            _sync(dev)
            t0 = time.perf_counter()
            model.logits(model.hidden(tokens)[:, -1])
        _sync(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])
