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
    d_h    head width;  L  layers;  T  sequence (or cached) length;  T_q new queries;  T_k keys
    W      window length;  S  number of sink tokens
    q      (B, H, T_q, d_h) queries          k, v  (B, G, T_k, d_h) keys and values
    cache  (L, B, G, T_max, d_h) one buffer for keys and one for values

Naive references beside the fast versions: :func:`grouped_attention_naive` (expand K/V to H heads
with the head map, then ordinary attention) beside :func:`grouped_attention` (a reshape that
never copies K/V); :func:`decode_attention_naive` (eq. 24.1 with Python loops) beside both.
Attention itself is :func:`mlbook.attention.dot_product.scaled_dot_product_attention`. The model
that decodes with these caches, and recomputes the prefix as their reference, is
:class:`mlbook.models.decoder.Decoder` (:func:`mlbook.models.generate.generate`); its cache
bytes are :func:`mlbook.models.counting.cache_bytes`.
"""

from __future__ import annotations

import math

import torch

from ..validation import bool_tensor, float_tensor, integer, shape_is
from .dot_product import scaled_dot_product_attention

__all__ = [
    "LayerCache",
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
]


def _heads(H, G) -> tuple[int, int]:
    """H query heads and G key/value heads, 1 <= G <= H (eq. 24.3's range)."""
    H = integer(H, "H (query heads)", low=1)
    return H, integer(G, "G (key/value heads)", low=1, high=H)


def _gqa_shapes(q, k, v) -> tuple[int, int]:
    """(H, G) of queries (B, H, T_q, d), keys (B, G, T_k, d) and values (B, G, T_k, d_v)."""
    B, H, _, d = float_tensor(q, "q", ndim=4).shape
    _, G, T_k, _ = shape_is(float_tensor(k, "k", ndim=4), "k", (B, None, None, d)).shape
    shape_is(float_tensor(v, "v", ndim=4), "v", (B, G, T_k, None))
    return _heads(H, G)


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
    H, G = _heads(H, G)
    return torch.arange(H, device=device) * G // H


def attention_kind(H: int, G: int) -> str:
    """``"MHA"`` for G = H, ``"MQA"`` for G = 1 (and H > 1), else ``"GQA"``."""
    H, G = _heads(H, G)
    return "MHA" if G == H else "MQA" if G == 1 else "GQA"


def expand_kv(x: torch.Tensor, H: int) -> torch.Tensor:
    """Copy the G key (or value) heads out to H query heads with the head map: x[:, g(h)].

    Args:
        x: (B, G, T, d_h) keys or values.
        H: number of query heads, H >= G.

    Returns:
        (B, H, T, d_h): head h of the result is head g(h) of x.
    """
    H, G = _heads(H, float_tensor(x, "x", ndim=4).shape[1])
    return x.index_select(1, head_map(H, G, device=x.device))  # (B, G, T, d) -> (B, H, T, d)


# --- grouped attention (eq. 24.1 for many queries at once) ------------------------------------


def grouped_attention_naive(q, k, v, mask=None, is_causal=False, scale=None):
    """Reference GQA: expand K/V to H heads with :func:`expand_kv`, then ordinary attention.

    Args and returns as :func:`grouped_attention`.
    """
    H, _ = _gqa_shapes(q, k, v)
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
    H, G = _gqa_shapes(q, k, v)
    if mask is not None and not (
        bool_tensor(mask, "mask").ndim == 2 or (mask.ndim == 4 and mask.shape[1] in (1, H))
    ):
        raise ValueError(
            f"mask must have shape (T_q, T_k) or (B, 1 or H={H}, T_q, T_k), got {tuple(mask.shape)}"
        )
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
    H, d = float_tensor(q_t, "q_t", ndim=2).shape
    G, T, _ = shape_is(float_tensor(k_cache, "k_cache", ndim=3), "k_cache", (None, None, d)).shape
    shape_is(float_tensor(v_cache, "v_cache", ndim=3), "v_cache", (G, T, None))
    H, G = _heads(H, G)
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
        integer(window, "window", low=1)
    integer(sinks, "sinks", low=0)
    if window is None:
        return s <= t
    return (s <= t) & ((s >= t - window + 1) | (s < sinks))


def sliding_window_mask(T: int, window: int | None, sinks: int = 0, device=None) -> torch.Tensor:
    """The (T, T) mask of eq. 24.4 for positions 0..T-1; True = may attend.

    Row t allows the keys min(t+1, S) sinks and the last min(t+1, W) positions (their union).
    """
    integer(T, "T", low=1)
    pos = torch.arange(T, device=device)
    return visible(pos[:, None], pos[None, :], window, sinks)  # (T, 1) vs (1, T) -> (T, T)


# --- caches ------------------------------------------------------------------------------------


def _new_entries(k_new, v_new, buffer: torch.Tensor) -> None:
    """k_new, v_new (B, G, T_new, d_h) with the B, G, d_h, dtype of a (L, B, G, ., d_h) buffer."""
    _, B, G, _, d = buffer.shape
    shape_is(float_tensor(k_new, "k_new", ndim=4), "k_new", (B, G, None, d))
    shape_is(float_tensor(v_new, "v_new", ndim=4), "v_new", (B, G, k_new.shape[2], d))
    if k_new.dtype != buffer.dtype or v_new.dtype != buffer.dtype:
        raise TypeError(
            f"k_new, v_new have dtype {k_new.dtype}, {v_new.dtype}; the cache holds {buffer.dtype}"
        )


class LayerCache:
    """What every per-layer decoding cache shares: lengths per layer, the state's bytes."""

    _state: tuple[str, ...] = ("k", "v")  # names of the state tensors

    @property
    def seq_len(self) -> int:
        """Number of positions every layer has consumed."""
        return min(self._lengths)

    @property
    def nbytes(self) -> int:
        """Bytes the cache's state tensors hold: element_size * numel, summed."""
        return sum(getattr(self, n).element_size() * getattr(self, n).numel() for n in self._state)

    def _layer(self, layer) -> int:
        return integer(layer, "layer", low=0, high=len(self._lengths) - 1)


class KVCache(LayerCache):
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
            integer(n, name, low=1)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self._lengths = [0] * n_layers

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
        _new_entries(k_new, v_new, self.k)
        start, n = self._lengths[layer], k_new.shape[2]
        if start + n > self.max_len:
            raise ValueError(f"cache full: {start} cached + {n} new > max_len {self.max_len}")
        self.k[layer, :, :, start : start + n] = k_new
        self.v[layer, :, :, start : start + n] = v_new
        self._lengths[layer] = start + n
        pos = torch.arange(start + n, device=self.k.device)
        return self.k[layer, :, :, : start + n], self.v[layer, :, :, : start + n], pos


class SlidingWindowCache(LayerCache):
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
            integer(n, name, low=1)
        integer(sinks, "sinks", low=0)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.window, self.sinks = window, sinks
        shape = (n_layers, batch, n_kv_heads, sinks + window, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # Position held by each slot of each layer; -1 = empty.
        self.slot_pos = torch.full((n_layers, sinks + window), -1, dtype=torch.long, device=device)
        self._lengths = [0] * n_layers

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
        _new_entries(k_new, v_new, self.k)
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
        integer(n, name, low=1)
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element * batch
