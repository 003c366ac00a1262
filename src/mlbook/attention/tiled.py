"""Tiled attention in plain torch: FlashAttention's algorithm without a custom kernel (chapter 26).

:func:`naive_attention` materialises the (T_q, T_k) score matrix; :func:`tiled_attention` walks
over (block_q, block_k) tiles of it with the online softmax of :mod:`mlbook.attention.online_softmax`
(eqs. 26.1-26.4), so that no tensor larger than a tile or the output ever exists. The two agree
to rounding for every block size, including blocks that do not divide the sequence lengths.
:func:`largest_intermediate_bytes` measures (by watching every torch call) the largest tensor an
attention function allocates, and :func:`predicted_largest_bytes` states it in closed form.

Shape legend
    (...)   leading axes (batch B, heads H); q, k and v must share them exactly
    T_q     number of queries;  T_k  number of keys and values
    d       width of queries and keys;  d_v  width of values
    q       (..., T_q, d)     k  (..., T_k, d)     v  (..., T_k, d_v)     out  (..., T_q, d_v)
    b_q     queries per tile (block_q);  b_k  keys per tile (block_k)
    lse     (..., T_q) log-sum-exp of each query's scaled scores, m + log l

Causal masks are aligned bottom-right, as in :mod:`mlbook.attention.dot_product` and FlashAttention 2: query
i may attend to key j iff j <= i + (T_k - T_q); for T_q = T_k this is the lower triangle. Causal
attention requires T_q <= T_k, so that every query sees at least one key.

Precision: both functions compute in the dtype of their inputs (use float32 or float64); the
Triton kernel of :mod:`mlbook.attention.flash_triton` is the mixed-precision (fp16 in, fp32 accumulate)
version.
"""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from .dot_product import _check_tensor

__all__ = [
    "naive_attention",
    "tiled_attention",
    "largest_intermediate_bytes",
    "predicted_largest_bytes",
]


# --- validation ----------------------------------------------------------------------------------


def _check_qkv(q, k, v, causal, scale):
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(x, name)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(
            f"q, k, v must share their leading axes, got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"need q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if min(q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]) == 0:
        raise ValueError(
            f"empty attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(
            f"causal attention needs T_q <= T_k (bottom-right mask), got "
            f"T_q = {q.shape[-2]} > T_k = {k.shape[-2]}"
        )
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    return float(scale)


def _check_block(b, name: str, allow_none: bool) -> None:
    if b is None and allow_none:
        return
    if isinstance(b, bool) or not isinstance(b, int) or b < 1:
        raise ValueError(
            f"{name} must be a positive int{' or None' if allow_none else ''}, got {b!r}"
        )


# --- the reference: the whole score matrix -------------------------------------------------------


def naive_attention(q, k, v, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """softmax(scale * q k^T) v with the full (T_q, T_k) score matrix in memory.

    The reference of this chapter: three lines of torch whose largest tensor is the score
    matrix, (..., T_q, T_k) numbers.

    Args:
        q: (..., T_q, d);  k: (..., T_k, d);  v: (..., T_k, d_v).
        causal: mask keys j > i + (T_k - T_q) (bottom-right aligned; needs T_q <= T_k).
        scale: score multiplier, default 1/sqrt(d).

    Returns:
        out: (..., T_q, d_v).
    """
    c = _check_qkv(q, k, v, causal, scale)
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
    """Attention computed over (block_q, block_k) tiles with the online softmax (eqs. 26.1-26.4).

    For each block of b_q queries, the running state (m, l, acc) starts empty; each block of b_k
    keys contributes its scores s = scale q_blk k_blk^T, the new maximum m_new = max(m, rowmax s),
    the rescale factor alpha = e^(m - m_new) (eq. 26.2) and the update
    acc <- alpha acc + e^(s - m_new) v_blk (eq. 26.3); after the last key block the output is
    acc / l (eq. 26.4). Under a causal mask, key blocks entirely to the right of the diagonal are
    skipped (about half of the work) and only tiles that straddle it are masked.

    Args:
        q: (..., T_q, d);  k: (..., T_k, d);  v: (..., T_k, d_v).
        causal: bottom-right causal mask (needs T_q <= T_k).
        scale: score multiplier, default 1/sqrt(d).
        block_q: queries per tile, any positive int; ``None`` takes all queries at once (the
            largest tile is then (T_q, b_k): memory O(T b_k) instead of O(T^2)).
        block_k: keys per tile, any positive int (need not divide T_k).
        return_lse: also return the log-sum-exp m + log l of every query (what a backward pass
            or a merge with another partial result needs).

    Returns:
        out: (..., T_q, d_v), and ``lse`` (..., T_q) if ``return_lse``.
    """
    c = _check_qkv(q, k, v, causal, scale)
    _check_block(block_q, "block_q", allow_none=True)
    _check_block(block_k, "block_k", allow_none=False)
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")
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
    """Run ``fn(*args, **kwargs)`` and return the bytes of the largest tensor it allocated.

    Every torch function and tensor method called by ``fn`` (not those called inside torch's own
    kernels) is intercepted with a :class:`torch.overrides.TorchFunctionMode`; each result that
    owns its memory (not a view) is measured as numel * element_size. Inputs are not counted;
    the output is (it is allocated by ``fn``). Deterministic, and it works on ``device="meta"``
    tensors, which carry shapes but no data: the accounting of a T = 8192 attention then costs no
    arithmetic at all.

    Returns:
        (nbytes, description) of the largest tensor, e.g. ``(262144, "matmul -> (256, 256) ...")``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
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
    """The largest tensor of :func:`naive_attention` (no blocks) or :func:`tiled_attention`.

    naive: the score matrix, batch * T_q * T_k numbers (or the output if that is larger);
    tiled: the largest of a score tile b_q * b_k, a scaled query block b_q * d and the output
    T_q * d_v, times batch; with b_q = min(block_q, T_q) and b_k = min(block_k, T_k).

    Args:
        T_q, T_k, d, d_v: the attention's sizes.
        itemsize: bytes per number (4 for float32, 2 for float16).
        block_q, block_k: ``None`` for both means naive; for tiled, block_k is required and
            ``block_q=None`` means all queries at once.
        batch: product of the leading axes.

    Returns:
        bytes.
    """
    for val, name in (
        (T_q, "T_q"),
        (T_k, "T_k"),
        (d, "d"),
        (d_v, "d_v"),
        (itemsize, "itemsize"),
        (batch, "batch"),
    ):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    if block_k is None:
        if block_q is not None:
            raise ValueError("block_q without block_k: give block_k for the tiled algorithm")
        return batch * itemsize * max(T_q * T_k, T_q * d_v)
    _check_block(block_q, "block_q", allow_none=True)
    _check_block(block_k, "block_k", allow_none=False)
    b_q = T_q if block_q is None else min(block_q, T_q)
    b_k = min(block_k, T_k)
    return batch * itemsize * max(b_q * b_k, b_q * d, T_q * d_v)
