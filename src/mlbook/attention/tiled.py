"""Tiled attention in plain torch: FlashAttention's algorithm without a custom kernel (chapter 26).

:func:`tiled_attention` walks over (block_q, block_k) tiles of the score matrix with the online
softmax (eqs. 26.1-26.4); :func:`tiled_attention_naive` materialises the whole matrix.
:func:`largest_intermediate_bytes` measures the largest tensor a function allocates.

Shape legend
    q  (..., T_q, d)   k  (..., T_k, d)   v  (..., T_k, d_v)   out  (..., T_q, d_v)
    b_q, b_k  queries and keys per tile;  lse  (..., T_q) log-sum-exp m + log l of each query

Causal masks are bottom-right aligned (query i sees keys j <= i + T_k - T_q; needs T_q <= T_k).
"""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from ..validation import float_tensor, positive, positive_int

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
    """Reference for :func:`tiled_attention`: softmax(scale q k^T) v with the full score matrix.

    Args:
        q: (..., T_q, d);  k: (..., T_k, d);  v: (..., T_k, d_v).
        causal: bottom-right causal mask (needs T_q <= T_k).
        scale: score multiplier, default 1/sqrt(d).

    Returns:
        out: (..., T_q, d_v).
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

    Args:
        q: (..., T_q, d);  k: (..., T_k, d);  v: (..., T_k, d_v); leading axes equal.
        causal: bottom-right causal mask (needs T_q <= T_k); skips tiles right of the diagonal.
        scale: score multiplier, default 1/sqrt(d).
        block_q: queries per tile; ``None`` takes all queries at once.
        block_k: keys per tile (need not divide T_k).
        return_lse: also return the log-sum-exp m + log l of every query.

    Returns:
        out: (..., T_q, d_v), and ``lse`` (..., T_q) if ``return_lse``.
    """
    q, k, v, c = _inputs(q, k, v, causal, scale)
    block_q = None if block_q is None else positive_int(block_q, "block_q")
    block_k = positive_int(block_k, "block_k")
    T_q, T_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    b_q = T_q if block_q is None else block_q
    offset = T_k - T_q  # causal: j visible iff j <= i + offset
    batch = q.shape[:-2]
    out = q.new_empty(batch + (T_q, d_v))
    lse = q.new_empty(batch + (T_q,)) if return_lse else None
    for i0 in range(0, T_q, b_q):
        i1 = min(i0 + b_q, T_q)
        q_blk = q[..., i0:i1, :] * c  # (..., b_q, d), scaled once per block
        m = q.new_full(batch + (i1 - i0,), float("-inf"))  # running max         (..., b_q)
        l = q.new_zeros(batch + (i1 - i0,))  # running sum         (..., b_q)
        acc = q.new_zeros(batch + (i1 - i0, d_v))  # running numerator   (..., b_q, d_v)
        # Causal: the last query of this block sees keys up to i1 - 1 + offset; stop there.
        k_end = min(T_k, i1 + offset) if causal else T_k
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, T_k)
            s = q_blk @ k[..., j0:j1, :].transpose(-2, -1)  # (..., b_q, d) @ (..., d, b_k)
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
            acc = alpha[..., None] * acc + p @ v[..., j0:j1, :]  # eq. 26.3: (b_q, b_k) @ (b_k, d_v)
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]  # eq. 26.4
        if return_lse:
            lse[..., i0:i1] = m + torch.log(l)
    return (out, lse) if return_lse else out


# --- memory accounting ---------------------------------------------------------------------------


class _LargestTensor(TorchFunctionMode):
    """Watches every torch call and remembers the largest freshly allocated tensor it returns."""

    def __init__(self):
        super().__init__()
        self.nbytes, self.what = 0, "nothing"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        outs = result if isinstance(result, (tuple, list)) else (result,)
        for t in outs:
            # Views (slices, transposes) share memory with their base: they allocate nothing.
            if isinstance(t, torch.Tensor) and not t._is_view():
                nbytes = t.numel() * t.element_size()
                if nbytes > self.nbytes:
                    name = getattr(func, "__name__", str(func))
                    self.nbytes, self.what = nbytes, f"{name} -> {tuple(t.shape)} {t.dtype}"
        return result


def largest_intermediate_bytes(fn, *args, **kwargs) -> tuple[int, str]:
    """Run ``fn(*args, **kwargs)``; return the bytes of the largest tensor it allocated.

    Every torch call inside ``fn`` is intercepted; results that own memory (not views) are
    measured, the output included, the inputs not. Works on ``device="meta"`` tensors.

    Returns:
        (nbytes, description), e.g. ``(262144, "matmul -> (256, 256) ...")``.
    """
    mode = _LargestTensor()
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
    """The largest tensor of :func:`tiled_attention_naive` (no blocks) or :func:`tiled_attention`.

    naive: batch * max(T_q T_k, T_q d_v) numbers; tiled: batch * max(b_q b_k, b_q d, T_q d_v),
    with b_q = min(block_q, T_q) (T_q for ``None``) and b_k = min(block_k, T_k).

    Args:
        T_q, T_k, d, d_v: the attention's sizes;  itemsize: bytes per number.
        block_q, block_k: ``None`` for both means naive; tiled needs block_k.
        batch: product of the leading axes.

    Returns:
        bytes.
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
    return batch * itemsize * max(b_q * b_k, b_q * d, T_q * d_v)
