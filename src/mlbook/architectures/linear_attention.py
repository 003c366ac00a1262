"""Kernelised (linear) attention and the delta rule (chapter 28).

Shape legend
    T sequence length;  D query/key width;  F feature width (F = D for elu + 1);  Dv value width
    (...)  leading batch axes (batch, heads), kept as they are
    q, k   (..., T, D);  v (..., T, Dv);  beta (..., T) write strengths of the delta rule
    S, c   (..., F, Dv) running state sum_j phi(k_j) v_j^T;  (..., F) normaliser sum_j phi(k_j)

The normalised forms divide by max(phi(q)^T c, eps), eps = 1e-6 by default: with positive features
the quotient is a weighted average of values, and a query whose features all but vanish (elu + 1
of a very negative score underflows to 0) reads zeros instead of 0 / 0 = NaN.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..validation import float_tensor, number, positive_int, same_shape, shape_is

__all__ = [
    "elu_plus_one",
    "feature_kernel",
    "exp_kernel",
    "kernel_attention",
    "linear_attention_quadratic",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "delta_rule_recurrent",
    "flops_quadratic",
    "flops_recurrent",
]

FeatureMap = Callable[[torch.Tensor], torch.Tensor]
EPS = 1e-6  # the smallest normaliser a query divides by


def _normalise(num: torch.Tensor, den: torch.Tensor, eps: float) -> torch.Tensor:
    """num / max(den, eps): num (..., Dv), den (..., 1)."""
    return num / den.clamp_min(eps)


def _features(x: torch.Tensor, feature_map: FeatureMap | None) -> torch.Tensor:
    return x if feature_map is None else feature_map(x)


# --- eq. 28.1: the kernel ------------------------------------------------------------------------


def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    """The feature map phi(x) = elu(x) + 1 > 0 (Katharopoulos et al., 2020); any shape."""
    return F.elu(x) + 1.0


def feature_kernel(
    q: torch.Tensor, k: torch.Tensor, feature_map: FeatureMap | None = elu_plus_one
) -> torch.Tensor:
    """K(q_i, k_j) = phi(q_i)^T phi(k_j). Implements eq. 28.1.

    q: (..., T, D); k: (..., S, D); feature_map: phi, or None (identity). Returns (..., T, S).
    """
    return _features(q, feature_map) @ _features(k, feature_map).transpose(-1, -2)


def exp_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The softmax kernel exp(q_i^T k_j / sqrt(D)): (..., T, D), (..., S, D) -> (..., T, S)."""
    return torch.exp(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))


# --- eqs. 28.2-28.3: three ways to compute the same outputs -------------------------------------


def kernel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    causal: bool = True,
    normalize: bool = True,
    eps: float = EPS,
) -> torch.Tensor:
    """y_i = sum_{j<=i} K(q_i, k_j) v_j / sum_{j<=i} K(q_i, k_j), in O(T^2). Implements eq. 28.3.

    q, k: (..., T, D); v: (..., T, Dv); kernel: (q, k) -> (..., T, T); causal: mask j > i;
    normalize: divide by the sum of the weights, or by eps where that is smaller (eps >= 0).
    Returns y: (..., T, Dv).
    """
    number(eps, "eps", 0.0)
    float_tensor(q, "q", min_ndim=2, not_empty=True)
    same_shape(k, q, ("k", "q"))
    shape_is(v, "v", (*q.shape[:-1], None))
    w = kernel(q, k)  # (..., T, T)
    t = q.shape[-2]
    shape_is(w, "kernel(q, k)", (*q.shape[:-2], t, t))
    if causal:
        w = w * torch.ones(t, t, dtype=torch.bool, device=w.device).tril()
    num = w @ v  # (..., T, Dv)
    if not normalize:
        return num
    return _normalise(num, w.sum(-1, keepdim=True), eps)


def linear_attention_quadratic(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    feature_map: FeatureMap | None = elu_plus_one,
    causal: bool = True,
    normalize: bool = True,
    eps: float = EPS,
) -> torch.Tensor:
    """Linear attention with phi(Q) phi(K)^T materialised (the reference); as
    :func:`kernel_attention`.
    """
    kernel = functools.partial(feature_kernel, feature_map=feature_map)  # (q, k) -> (..., T, T)
    return kernel_attention(q, k, v, kernel, causal=causal, normalize=normalize, eps=eps)


def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    feature_map: FeatureMap | None = elu_plus_one,
    normalize: bool = True,
    return_state: bool = False,
    eps: float = EPS,
):
    """Causal linear attention with a fixed-size state S, c. Implements eqs. 28.2-28.3.

    q, k: (..., T, D); v: (..., T, Dv); feature_map: phi or None; eps: the smallest normaliser.
    Returns y: (..., T, Dv), and (S (..., F, Dv), c (..., F)) if ``return_state``.
    """
    number(eps, "eps", 0.0)
    float_tensor(q, "q", min_ndim=2, not_empty=True)
    same_shape(k, q, ("k", "q"))
    shape_is(v, "v", (*q.shape[:-1], None))
    fq, fk = _features(q, feature_map), _features(k, feature_map)  # (..., T, F)
    batch, n_feat, dv = fk.shape[:-2], fk.shape[-1], v.shape[-1]
    S = fk.new_zeros(*batch, n_feat, dv)
    c = fk.new_zeros(*batch, n_feat)
    ys = []
    for t in range(q.shape[-2]):
        S = S + fk[..., t, :, None] * v[..., t, None, :]  # outer, (..., F, Dv)
        c = c + fk[..., t, :]
        num = (fq[..., t, :, None] * S).sum(-2)  # phi(q)^T S, (..., Dv)
        if normalize:
            num = _normalise(num, (fq[..., t, :] * c).sum(-1, keepdim=True), eps)
        ys.append(num)
    y = torch.stack(ys, dim=-2)  # (..., T, Dv)
    return (y, (S, c)) if return_state else y


def linear_attention_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    feature_map: FeatureMap | None = elu_plus_one,
    chunk: int = 64,
    normalize: bool = True,
    eps: float = EPS,
) -> torch.Tensor:
    """Causal linear attention by chunks: quadratic inside, the state S, c across them.

    As :func:`linear_attention_recurrent`; chunk >= 1 (the last chunk may be short).
    """
    number(eps, "eps", 0.0)
    float_tensor(q, "q", min_ndim=2, not_empty=True)
    same_shape(k, q, ("k", "q"))
    shape_is(v, "v", (*q.shape[:-1], None))
    positive_int(chunk, "chunk")
    fq, fk = _features(q, feature_map), _features(k, feature_map)  # (..., T, F)
    batch, n_feat, dv = fk.shape[:-2], fk.shape[-1], v.shape[-1]
    S = fk.new_zeros(*batch, n_feat, dv)
    c = fk.new_zeros(*batch, n_feat)
    outs = []
    for s in range(0, q.shape[-2], chunk):
        qc, kc, vc = fq[..., s : s + chunk, :], fk[..., s : s + chunk, :], v[..., s : s + chunk, :]
        w = (qc @ kc.transpose(-1, -2)).tril()  # (..., C, C), j <= i
        num = w @ vc + qc @ S  # (..., C, Dv)
        if normalize:
            den = w.sum(-1) + (qc * c[..., None, :]).sum(-1)  # (..., C)
            num = _normalise(num, den[..., None], eps)
        outs.append(num)
        S = S + kc.transpose(-1, -2) @ vc  # (..., F, Dv)
        c = c + kc.sum(-2)
    return torch.cat(outs, dim=-2)


# --- eq. 28.4: the delta rule --------------------------------------------------------------------


def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    feature_map: FeatureMap | None = None,
    return_state: bool = False,
):
    """S_t = S_{t-1} + beta_t phi(k_t) (v_t - phi(k_t)^T S_{t-1})^T, y_t = phi(q_t)^T S_t. Eq. 28.4.

    q, k: (..., T, D); v: (..., T, Dv); beta: (..., T), stable for 0 <= beta_t |phi(k_t)|^2 <= 2.
    Returns y: (..., T, Dv), and S_T (..., F, Dv) if ``return_state``.
    """
    float_tensor(q, "q", min_ndim=2, not_empty=True)
    same_shape(k, q, ("k", "q"))
    shape_is(v, "v", (*q.shape[:-1], None))
    shape_is(beta, "beta", q.shape[:-1])
    fq, fk = _features(q, feature_map), _features(k, feature_map)  # (..., T, F)
    S = fk.new_zeros(*fk.shape[:-2], fk.shape[-1], v.shape[-1])  # (..., F, Dv)
    ys = []
    for t in range(q.shape[-2]):
        kt = fk[..., t, :]  # (..., F)
        pred = (kt[..., :, None] * S).sum(-2)  # phi(k_t)^T S, (..., Dv)
        err = v[..., t, :] - pred
        S = S + beta[..., t, None, None] * kt[..., :, None] * err[..., None, :]
        ys.append((fq[..., t, :, None] * S).sum(-2))  # (..., Dv)
    y = torch.stack(ys, dim=-2)
    return (y, S) if return_state else y


# --- cost: O(T^2) against O(T) ----------------------------------------------------------------


def flops_quadratic(T: int, D: int, Dv: int, matmul_only: bool = False) -> int:
    """FLOPs (one per multiply or add) of the quadratic form: 2 T^2 (D + Dv) + T^2 + T Dv.

    ``matmul_only`` drops the row sums and divisions.
    """
    for name, n in (("T", T), ("D", D), ("Dv", Dv)):
        positive_int(n, name)
    mm = 2 * T * T * D + 2 * T * T * Dv
    return mm if matmul_only else mm + T * T + T * Dv


def flops_recurrent(T: int, D: int, Dv: int) -> int:
    """FLOPs of eqs. 28.2-28.3 (one per multiply or add): T (4 D Dv + 3 D + Dv)."""
    for name, n in (("T", T), ("D", D), ("Dv", Dv)):
        positive_int(n, name)
    return T * (4 * D * Dv + 3 * D + Dv)
