"""Tiled attention in plain torch: FlashAttention's algorithm without a custom kernel (chapter 26).

:func:`tiled_attention` (online softmax over tiles, eqs. 26.1-26.4) beside
:func:`tiled_attention_naive` (the whole score matrix); :func:`largest_intermediate_bytes`.

For float16 and bfloat16 inputs the tile products run in the input dtype and the running state
(m, l, acc) is float32, as in FlashAttention's kernels.

Shape legend
    q  (..., T_q, d)   k  (..., T_k, d)   v  (..., T_k, d_v)   out  (..., T_q, d_v)
    b_q, b_k  queries and keys per tile;  lse  (..., T_q) log-sum-exp of each query
"""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from ..validation import float_tensor, positive, positive_int
from .online_softmax import state_dtype

__all__ = [
    "tiled_attention_naive",
    "tiled_attention",
    "largest_intermediate_bytes",
    "predicted_largest_bytes",
]


def _inputs(q, k, v, causal, scale):
    """Checked q, k, v and the scale; causal attention needs a key for every query."""
    q, k, v = (
        float_tensor(x, n, min_ndim=2, not_empty=True)
        for x, n in zip((q, k, v), "qkv", strict=True)
    )
    if causal and q.shape[-2] > k.shape[-2]:  # a query without any key: 0/0 = nan
        raise ValueError(f"causal attention needs T_q <= T_k, got {q.shape[-2]} > {k.shape[-2]}")
    return q, k, v, 1.0 / math.sqrt(q.shape[-1]) if scale is None else positive(scale, "scale")


def tiled_attention_naive(
    q, k, v, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Reference for :func:`tiled_attention`: softmax(scale q k^T) v with the whole score matrix.

    q: (..., T_q, d);  k: (..., T_k, d);  v: (..., T_k, d_v). Returns (..., T_q, d_v).
    """
    q, k, v, c = _inputs(q, k, v, causal, scale)
    T_q, T_k = q.shape[-2], k.shape[-2]
    s = c * (q @ k.transpose(-2, -1))  # (..., T_q, d) @ (..., d, T_k)
    if causal:
        i = torch.arange(T_q, device=q.device)[:, None]
        j = torch.arange(T_k, device=q.device)[None, :]
        s = s.masked_fill(j > i + (T_k - T_q), float("-inf"))
    return torch.softmax(s, dim=-1) @ v  # (..., T_q, T_k) @ (..., T_k, d_v)


# --- FlashAttention's algorithm, tile by tile ----------------------------------------------------


def tiled_attention(
    q,
    k,
    v,
    causal: bool = False,
    scale: float | None = None,
    block_q: int | None = 64,
    block_k: int = 64,
    return_lse: bool = False,
):
    """Attention over (block_q, block_k) tiles with the online softmax. Implements eqs. 26.1-26.4.

    q: (..., T_q, d);  k: (..., T_k, d);  v: (..., T_k, d_v);  causal: skips tiles right of the
    diagonal;  block_q: None for all queries at once.
    Returns out (..., T_q, d_v) in q's dtype, and ``lse`` (..., T_q) if ``return_lse`` (float32
    for float16/bfloat16 inputs).
    """
    q, k, v, c = _inputs(q, k, v, causal, scale)
    block_q = None if block_q is None else positive_int(block_q, "block_q")
    block_k = positive_int(block_k, "block_k")
    T_q, T_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    b_q = T_q if block_q is None else block_q
    offset = T_k - T_q  # causal: j visible iff j <= i + offset
    batch, w = q.shape[:-2], state_dtype(q.dtype)  # w: float32 for float16/bfloat16 inputs
    out = q.new_empty(batch + (T_q, d_v))
    lse = q.new_empty(batch + (T_q,), dtype=w) if return_lse else None
    for i0 in range(0, T_q, b_q):
        i1 = min(i0 + b_q, T_q)
        q_blk = q[..., i0:i1, :]  # (..., b_q, d)
        m = q.new_full(batch + (i1 - i0,), float("-inf"), dtype=w)  # running max  (..., b_q)
        l = q.new_zeros(batch + (i1 - i0,), dtype=w)  # running sum                (..., b_q)
        acc = q.new_zeros(batch + (i1 - i0, d_v), dtype=w)  # running numerator (..., b_q, d_v)
        # Causal: the last query of this block sees keys up to i1 - 1 + offset; stop there.
        k_end = min(T_k, i1 + offset) if causal else T_k
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, T_k)
            s = c * (q_blk @ k[..., j0:j1, :].transpose(-2, -1)).to(w)  # (..., b_q, b_k)
            if causal and j1 - 1 > i0 + offset:  # the tile straddles the diagonal
                i = torch.arange(i0, i1, device=q.device)[:, None]
                j = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(j > i + offset, float("-inf"))
            # Every row has a visible key in its first tile (key 0), so m_new is finite from the
            # first tile on and e^(m - m_new) = e^(-inf) = 0 wipes the empty initial state.
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., b_q)
            alpha = torch.exp(m - m_new)  # eq. 26.2's e^(m_old - m_new)
            p = torch.exp(s - m_new[..., None])  # (..., b_q, b_k), masked entries -> 0
            l = alpha * l + p.sum(dim=-1)  # eq. 26.2
            pv = p.to(v.dtype) @ v[..., j0:j1, :]  # (..., b_q, b_k) @ (..., b_k, d_v)
            acc = alpha[..., None] * acc + pv.to(w)  # eq. 26.3
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]  # eq. 26.4
        if return_lse:
            lse[..., i0:i1] = m + torch.log(l)
    return (out, lse) if return_lse else out


# --- memory accounting ---------------------------------------------------------------------------


class _LargestTensor(TorchFunctionMode):
    """Watches every torch call and remembers the largest freshly allocated tensor it returns.

    A view (slice, transpose) allocates nothing, but some calls return a view of a tensor that
    they allocated themselves (``repeat_interleave``): a view counts with its base, unless the base
    is one of the inputs.
    """

    def __init__(self, inputs=()):
        super().__init__()
        self.nbytes, self.what = 0, "nothing"
        self.inputs = {id(x._base if x._is_view() else x) for x in inputs}  # kept alive by the call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        outs = result if isinstance(result, (tuple, list)) else (result,)
        for t in outs:
            if not isinstance(t, torch.Tensor):
                continue
            base = t._base if t._is_view() else t  # the tensor that owns the memory
            if id(base) in self.inputs:
                continue
            nbytes = base.numel() * base.element_size()
            if nbytes > self.nbytes:
                name = getattr(func, "__name__", str(func))
                self.nbytes, self.what = nbytes, f"{name} -> {tuple(base.shape)} {base.dtype}"
        return result


def largest_intermediate_bytes(fn, *args, **kwargs) -> tuple[int, str]:
    """Run ``fn(*args, **kwargs)``; return the bytes of the largest tensor it allocated.

    Returns (nbytes, description), e.g. ``(262144, "matmul -> (256, 256) ...")``.
    """
    inputs = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
    mode = _LargestTensor(inputs)
    with mode:
        fn(*args, **kwargs)
    return mode.nbytes, mode.what


def predicted_largest_bytes(
    T_q: int,
    T_k: int,
    d: int,
    d_v: int,
    itemsize: int = 4,
    block_q: int | None = None,
    block_k: int | None = None,
    batch: int = 1,
) -> int:
    """Bytes of the largest tensor of :func:`tiled_attention` (or naive, without blocks).

    The tiles and the running state have ``max(itemsize, 4)`` bytes an entry (float32 for
    float16/bfloat16 inputs); the output has ``itemsize``.
    """
    for val, name in zip(
        (T_q, T_k, d, d_v, itemsize, batch),
        ("T_q", "T_k", "d", "d_v", "itemsize", "batch"),
        strict=True,
    ):
        positive_int(val, name)
    if block_k is None:
        if block_q is not None:
            raise ValueError("block_q without block_k: give block_k for the tiled algorithm")
        return batch * itemsize * max(T_q * T_k, T_q * d_v)
    b_q = T_q if block_q is None else min(positive_int(block_q, "block_q"), T_q)
    b_k = min(positive_int(block_k, "block_k"), T_k)
    w = max(itemsize, 4)  # the tiles and the state: float32 for 2-byte inputs
    return batch * max(w * b_q * b_k, w * b_q * d_v, itemsize * T_q * d_v)
