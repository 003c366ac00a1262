"""Scaled dot-product attention: forward, masks and the hand-written backward (chapter 19).

Pure functions of torch tensors. Later chapters (multi-head attention, the transformer block,
GPT, the KV cache, FlashAttention) build on :func:`scaled_dot_product_attention` and judge their
optimised kernels against :func:`attention_naive`.

Shape legend
    (...)  leading batch axes (batch B, heads H, ...); those of q, k and v must broadcast
    T_q    number of queries;  T_k  number of keys (= number of values)
    d_k    width of a query or key vector;  d_v  width of a value vector
    q      (..., T_q, d_k) queries        k  (..., T_k, d_k) keys        v  (..., T_k, d_v) values
    S      (..., T_q, T_k) scores  S = scale * q k^T, scale = 1/sqrt(d_k) by default (eq. 19.1)
    A      (..., T_q, T_k) attention weights, each row a probability distribution over keys
    O      (..., T_q, d_v) outputs  O = A v
    mask   bool, broadcastable to (..., T_q, T_k); True = the query may attend to that key

Masking convention. A masked score is set to -inf before the softmax, so its weight is exactly 0.
A query row whose keys are *all* masked has no distribution to normalise: the textbook formula
gives 0/0 = nan. Here such a row gets weights 0 and output 0 (the choice of
``torch.nn.functional.scaled_dot_product_attention`` since torch 2.5 and of FlashAttention),
and its gradients are 0.

Causal masks are aligned bottom-right: with T_q queries and T_k >= T_q keys the queries are
the *last* T_q positions, so query i may attend to keys j <= i + (T_k - T_q). For T_q = T_k this
is the usual lower-triangular mask; for T_q = 1 (one new token against a KV cache) it allows
every key. (``torch``'s ``is_causal=True`` aligns top-left instead; the two agree for T_q = T_k.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "causal_mask",
    "padding_mask",
    "attention_naive",
    "scaled_dot_product_attention",
    "attention_backward",
]


# --- validation ----------------------------------------------------------------------------------


def _check_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape (..., T, d), got {tuple(x.shape)}")


def _check_qkv(q, k, v) -> torch.Size:
    """Validate q, k, v; return the broadcast leading shape (...)."""
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(x, name)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last axis d_k: q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys T_k: k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if min(q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]) == 0:
        raise ValueError(
            f"empty attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    try:
        return torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"leading (batch) axes of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast"
        ) from None


def _check_scale(scale, d_k: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d_k)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    return float(scale)


def _combined_mask(mask, is_causal: bool, score_shape: torch.Size, device):
    """The effective boolean mask (True = may attend), or None when nothing is masked."""
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__}")
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
        if mask.dtype != torch.bool:
            raise TypeError(
                f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
                "additive float biases are not supported"
            )
        try:
            shape = torch.broadcast_shapes(mask.shape, score_shape)
        except RuntimeError:
            shape = None
        if shape != score_shape:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                f"{tuple(score_shape)} (..., T_q, T_k)"
            )
        mask = mask.to(device)
    if is_causal:
        causal = causal_mask(score_shape[-2], score_shape[-1], device=device)  # (T_q, T_k)
        mask = causal if mask is None else mask & causal
    return mask


# --- masks ---------------------------------------------------------------------------------------


def causal_mask(T_q: int, T_k: int | None = None, device=None) -> torch.Tensor:
    """Causal mask, True where query i may attend to key j: j <= i + (T_k - T_q).

    Bottom-right aligned: the T_q queries are the last T_q of T_k positions. With T_k = T_q (the
    default) it is the lower triangle including the diagonal; with T_q = 1 it allows all keys;
    with T_q > T_k the first T_q - T_k rows allow no key at all.

    Args:
        T_q: number of queries (>= 1).
        T_k: number of keys (>= 1); defaults to T_q.
        device: where to create the mask.

    Returns:
        (T_q, T_k) bool tensor.
    """
    T_k = T_q if T_k is None else T_k
    for n, name in ((T_q, "T_q"), (T_k, "T_k")):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"{name} must be >= 1, got {n}")
    i = torch.arange(T_q, device=device)[:, None]  # (T_q, 1) query positions
    j = torch.arange(T_k, device=device)[None, :]  # (1, T_k) key positions
    return j <= i + (T_k - T_q)


def padding_mask(lengths, T: int) -> torch.Tensor:
    """Key-padding mask: sequence b has ``lengths[b]`` real tokens followed by padding.

    Args:
        lengths: (B,) integer lengths in [0, T] (a tensor or a sequence of ints).
        T: padded length (number of keys), >= 1.

    Returns:
        (B, 1, T) bool tensor, True at the real keys; it broadcasts over the queries of
        (B, T_q, T) scores. For per-head scores (B, H, T_q, T) use ``mask[:, None]``:
        (B, 1, 1, T).
    """
    if isinstance(T, bool) or not isinstance(T, int):
        raise TypeError(f"T must be an int, got {type(T).__name__}")
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    if isinstance(lengths, torch.Tensor):
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must be integers, got dtype {lengths.dtype}")
        lens = lengths
    elif isinstance(lengths, Sequence) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in lengths
    ):
        lens = torch.tensor(list(lengths), dtype=torch.long)
    else:
        raise TypeError("lengths must be an integer tensor or a sequence of ints")
    if lens.ndim != 1 or lens.numel() == 0:
        raise ValueError(f"lengths must have shape (B,) with B >= 1, got {tuple(lens.shape)}")
    if (lens < 0).any() or (lens > T).any():
        raise ValueError(f"lengths must lie in [0, T={T}], got {lens.tolist()}")
    pos = torch.arange(T, device=lens.device)  # (T,)
    return (pos[None, :] < lens[:, None])[:, None, :]  # (B, T) -> (B, 1, T)


# --- eq. 19.1: the forward pass ------------------------------------------------------------------


def attention_naive(q, k, v, mask=None, is_causal=False, scale=None):
    """Scaled dot-product attention with explicit loops over queries and keys (eq. 19.1).

    The reference for every faster version: for each query i, score every key j by a dot
    product, s_ij = scale * sum_l q_il k_jl, turn the allowed scores into weights by a softmax
    that subtracts the row maximum, and average the values, o_i = sum_j a_ij v_j. A row with no
    allowed key gets weights 0 and output 0. Slow (Python loops): use it on small inputs.

    Args and returns as :func:`scaled_dot_product_attention`.
    """
    batch = _check_qkv(q, k, v)
    T_q, T_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    c = _check_scale(scale, d_k)
    allowed = _combined_mask(mask, is_causal, batch + (T_q, T_k), q.device)
    if allowed is None:
        allowed = torch.ones((T_q, T_k), dtype=torch.bool, device=q.device)
    # Flatten the leading axes: (..., T, d) -> (N, T, d), N = prod(...).
    qf = q.expand(batch + q.shape[-2:]).reshape(-1, T_q, d_k)
    kf = k.expand(batch + k.shape[-2:]).reshape(-1, T_k, d_k)
    vf = v.expand(batch + v.shape[-2:]).reshape(-1, T_k, d_v)
    mf = allowed.expand(batch + (T_q, T_k)).reshape(-1, T_q, T_k)
    outs, weights = [], []
    for n in range(qf.shape[0]):
        for i in range(T_q):
            keys = [j for j in range(T_k) if mf[n, i, j]]
            w = q.new_zeros(T_k)
            o = q.new_zeros(d_v)
            if keys:
                s = {j: c * torch.dot(qf[n, i], kf[n, j]) for j in keys}
                m = max(s[j] for j in keys)  # subtract the row maximum: no overflow
                e = {j: torch.exp(s[j] - m) for j in keys}
                z = sum(e.values())
                w = torch.stack([e[j] / z if j in e else q.new_zeros(()) for j in range(T_k)])
                o = sum(w[j] * vf[n, j] for j in keys)
            weights.append(w)
            outs.append(o)
    out = torch.stack(outs).reshape(batch + (T_q, d_v))
    return out, torch.stack(weights).reshape(batch + (T_q, T_k))


def scaled_dot_product_attention(q, k, v, mask=None, is_causal=False, scale=None):
    """O = softmax(scale * q k^T) v with optional masks; returns (O, A) (eq. 19.1).

    Args:
        q: (..., T_q, d_k) queries.
        k: (..., T_k, d_k) keys.
        v: (..., T_k, d_v) values; the leading axes of q, k, v broadcast.
        mask: optional bool tensor broadcastable to (..., T_q, T_k); True = may attend.
        is_causal: also apply :func:`causal_mask` (bottom-right aligned); combines with
            ``mask`` by logical and.
        scale: multiplier of the scores; default 1/sqrt(d_k) (eq. 19.2 says why).

    Returns:
        out: (..., T_q, d_v) outputs.
        weights: (..., T_q, T_k) attention weights; each row sums to 1, except rows whose keys
            are all masked, which are 0 (and so is their output).
    """
    batch = _check_qkv(q, k, v)
    T_q, T_k = q.shape[-2], k.shape[-2]
    c = _check_scale(scale, q.shape[-1])
    allowed = _combined_mask(mask, is_causal, batch + (T_q, T_k), q.device)
    scores = c * (q @ k.transpose(-2, -1))  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    if allowed is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        any_key = allowed.any(dim=-1, keepdim=True)  # (..., T_q, 1): has the row a key at all?
        scores = scores.masked_fill(~allowed, float("-inf"))
        # Rows with no allowed key: finite dummy scores (no nan, not even in the backward pass),
        # then weights 0.
        scores = torch.where(any_key, scores, torch.zeros_like(scores))
        weights = torch.where(any_key, torch.softmax(scores, dim=-1), torch.zeros_like(scores))
    return weights @ v, weights  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)


# --- eqs. 19.3-19.5: the backward pass -----------------------------------------------------------


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum a gradient over the axes that broadcasting added or expanded, back to ``shape``."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(dim=tuple(range(extra))) if extra > 0 else grad
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


def attention_backward(q, k, v, weights, grad_out, scale=None):
    """Gradients of a loss L with respect to q, k, v, given A and dL/dO (eqs. 19.3-19.5).

    With S = scale * q k^T, A = softmax(S) row-wise and O = A v, and bars for dL/d(.):

        V_bar = A^T O_bar,  A_bar = O_bar v^T                     (eq. 19.3)
        S_bar = A * (A_bar - rowsum(A_bar * A))                   (eq. 19.4, * elementwise)
        Q_bar = scale * S_bar k,  K_bar = scale * S_bar^T q       (eq. 19.5; scale = 1/sqrt(d_k))

    Masked entries have A = 0, so S_bar = 0 there: the same formulas serve every mask, and a
    fully masked row (A = 0) passes no gradient.

    Args:
        q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v) the forward inputs.
        weights: (..., T_q, T_k) the attention weights A returned by the forward pass.
        grad_out: (..., T_q, d_v) the upstream gradient O_bar = dL/dO.
        scale: the forward pass's scale; default 1/sqrt(d_k).

    Returns:
        (dq, dk, dv) with the shapes of q, k, v (summed over broadcast leading axes).
    """
    batch = _check_qkv(q, k, v)
    T_q, T_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    c = _check_scale(scale, q.shape[-1])
    for x, name, shape in ((weights, "weights", (T_q, T_k)), (grad_out, "grad_out", (T_q, d_v))):
        _check_tensor(x, name)
        if tuple(x.shape) != tuple(batch) + shape:
            raise ValueError(
                f"{name} must have shape {tuple(batch) + shape} (..., "
                f"{'T_q, T_k' if name == 'weights' else 'T_q, d_v'}), got {tuple(x.shape)}"
            )
    A, dO = weights, grad_out
    dV = A.transpose(-2, -1) @ dO  # (..., T_k, T_q) @ (..., T_q, d_v) -> (..., T_k, d_v)
    dA = dO @ v.transpose(-2, -1)  # (..., T_q, d_v) @ (..., d_v, T_k) -> (..., T_q, T_k)
    dS = A * (dA - (dA * A).sum(dim=-1, keepdim=True))  # (..., T_q, T_k); rowsum: (..., T_q, 1)
    dQ = c * (dS @ k)  # (..., T_q, T_k) @ (..., T_k, d_k) -> (..., T_q, d_k)
    dK = c * (dS.transpose(-2, -1) @ q)  # (..., T_k, T_q) @ (..., T_q, d_k) -> (..., T_k, d_k)
    return _sum_to(dQ, q.shape), _sum_to(dK, k.shape), _sum_to(dV, v.shape)
