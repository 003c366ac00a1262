"""Scaled dot-product attention: forward, masks and the hand-written backward (chapter 19).

Fully masked query rows get weights 0 and output 0; causal masks are bottom-right aligned.

Shape legend
    q  (..., T_q, d_k)   k  (..., T_k, d_k)   v  (..., T_k, d_v); leading axes broadcast
    A  (..., T_q, T_k) weights;  O  (..., T_q, d_v);  mask  bool, True = may attend
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..validation import (
    bool_tensor,
    broadcasts_to,
    float_tensor,
    index_tensor,
    nonempty,
    positive,
    positive_int,
    shape_is,
)

__all__ = [
    "causal_mask",
    "padding_mask",
    "attention_naive",
    "scaled_dot_product_attention",
    "attention_backward",
]


def _inputs(q, k, v, scale):
    """Checked q, k, v, their broadcast batch shape (...) and the scale."""
    q, k, v = (
        float_tensor(x, n, min_ndim=2, not_empty=True)
        for x, n in zip((q, k, v), "qkv", strict=True)
    )
    # torch's broadcasting rule, computed by NumPy (torch.broadcast_shapes imports sympy first)
    batch = torch.Size(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    c = 1.0 / math.sqrt(q.shape[-1]) if scale is None else positive(scale, "scale")
    return q, k, v, batch, c


def _allowed(mask, is_causal: bool, shape: torch.Size, device):
    """The effective bool mask (True = may attend), or None when nothing is masked."""
    if mask is not None:
        mask = broadcasts_to(bool_tensor(mask, "mask"), "mask", shape).to(device)
    if is_causal:
        causal = causal_mask(shape[-2], shape[-1], device=device)  # (T_q, T_k)
        mask = causal if mask is None else mask & causal
    return mask


# --- masks ---------------------------------------------------------------------------------------


def causal_mask(T_q: int, T_k: int | None = None, device=None) -> torch.Tensor:
    """Bottom-right causal mask (T_q, T_k), True where key j <= i + (T_k - T_q)."""
    T_q = positive_int(T_q, "T_q")
    T_k = T_q if T_k is None else positive_int(T_k, "T_k")
    i = torch.arange(T_q, device=device)[:, None]  # (T_q, 1) query positions
    j = torch.arange(T_k, device=device)[None, :]  # (1, T_k) key positions
    return j <= i + (T_k - T_q)


def padding_mask(lengths, T: int) -> torch.Tensor:
    """Key-padding mask: sequence b has ``lengths[b]`` real tokens out of T, then padding.

    lengths: (B,) ints in [0, T]. Returns (B, 1, T) bool, True at real keys.
    """
    T = positive_int(T, "T")
    lens = lengths if isinstance(lengths, torch.Tensor) else torch.tensor(list(lengths))
    lens = index_tensor(nonempty(lens, "lengths"), "lengths", T + 1, ndim=1)
    pos = torch.arange(T, device=lens.device)  # (T,)
    return (pos[None, :] < lens[:, None])[:, None, :]  # (B, T) -> (B, 1, T)


# --- eq. 19.1: the forward pass ------------------------------------------------------------------


def attention_naive(q, k, v, mask=None, is_causal=False, scale=None):
    """Reference for :func:`scaled_dot_product_attention`: loops over queries and keys (eq. 19.1).

    Args and returns as :func:`scaled_dot_product_attention`; slow, for small inputs.
    """
    q, k, v, batch, c = _inputs(q, k, v, scale)
    T_q, T_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    allowed = _allowed(mask, is_causal, batch + (T_q, T_k), q.device)
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
    """O = softmax(scale * q k^T) v with optional masks. Implements eq. 19.1.

    q: (..., T_q, d_k);  k: (..., T_k, d_k);  v: (..., T_k, d_v);  mask: bool, broadcastable to
    (..., T_q, T_k);  is_causal: and the causal mask;  scale: default 1/sqrt(d_k) (eq. 19.2).
    Returns out (..., T_q, d_v) and weights (..., T_q, T_k).
    """
    q, k, v, batch, c = _inputs(q, k, v, scale)
    allowed = _allowed(mask, is_causal, batch + (q.shape[-2], k.shape[-2]), q.device)
    scores = c * (q @ k.transpose(-2, -1))  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    if allowed is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        any_key = allowed.any(dim=-1, keepdim=True)  # (..., T_q, 1): has the row a key at all?
        scores = scores.masked_fill(~allowed, float("-inf"))
        # Rows with no allowed key: finite dummy scores (no nan, even backwards), weights 0.
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
    """dL/dq, dL/dk, dL/dv from A and dL/dO. Implements eqs. 19.3-19.5.

    q, k, v, scale: as the forward;  weights: (..., T_q, T_k);  grad_out: (..., T_q, d_v).
    Returns (dq, dk, dv) with the shapes of q, k, v.
    """
    q, k, v, batch, c = _inputs(q, k, v, scale)
    A = shape_is(weights, "weights", batch + (q.shape[-2], k.shape[-2]))
    dO = shape_is(grad_out, "grad_out", batch + (q.shape[-2], v.shape[-1]))
    dV = A.transpose(-2, -1) @ dO  # (..., T_k, T_q) @ (..., T_q, d_v) -> (..., T_k, d_v)
    dA = dO @ v.transpose(-2, -1)  # (..., T_q, d_v) @ (..., d_v, T_k) -> (..., T_q, T_k)
    dS = A * (dA - (dA * A).sum(dim=-1, keepdim=True))  # eq. 19.4; rowsum: (..., T_q, 1)
    dQ = c * (dS @ k)  # (..., T_q, T_k) @ (..., T_k, d_k) -> (..., T_q, d_k)
    dK = c * (dS.transpose(-2, -1) @ q)  # (..., T_k, T_q) @ (..., T_q, d_k) -> (..., T_k, d_k)
    return _sum_to(dQ, q.shape), _sum_to(dK, k.shape), _sum_to(dV, v.shape)
