"""Kernelised (linear) attention and the delta rule (formula sheet, chapter 28).

Softmax attention weighs value ``v_j`` by ``exp(q_i . k_j / sqrt(D))``. Replacing the exponential
by a kernel that factors through a feature map, ``K(q, k) = phi(q) . phi(k)`` (eq. 28.1), lets the
sum over keys be reassociated: the past is summarised by a fixed-size state ``S_t`` (a ``(F, Dv)``
matrix) and a normaliser ``c_t`` (an ``F``-vector), updated once per token (eqs. 28.2, 28.3).
The delta rule (eq. 28.4) replaces the pure sum by an error-correcting write.

Shape legend
    T      sequence length (time)
    D      query/key width; F the width of the features phi(q), phi(k) (F = D for elu+1)
    Dv     value width
    (...)  any leading batch axes (batch, heads), kept as they are
    q, k   queries and keys, (..., T, D)
    v      values, (..., T, Dv)
    S      the running state sum_j phi(k_j) v_j^T, (..., F, Dv)
    c      the running normaliser sum_j phi(k_j), (..., F)
    beta   the delta rule's write strengths, (..., T)

Every fast form sits beside its reference: :func:`linear_attention_recurrent` (O(T F Dv), a
fixed-size state) and :func:`linear_attention_chunked` (matrix products over chunks) beside the
quadratic :func:`linear_attention_quadratic` (O(T^2), the (T, T) weight matrix materialised),
which is :func:`kernel_attention` with the kernel of eq. 28.1. Bad input raises ``TypeError`` or
``ValueError`` naming the offending shapes or values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

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


# --- validation ----------------------------------------------------------------------------------


def _check_tensor(x, name: str, min_ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes, got shape {tuple(x.shape)}")


def _check_qkv(q, k, v) -> None:
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(x, name, 2)
    if q.shape != k.shape:
        raise ValueError(
            f"q and k must have the same shape (..., T, D), got {tuple(q.shape)} "
            f"and {tuple(k.shape)}"
        )
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(
            f"v must have shape (..., T, Dv) with k's (..., T) = "
            f"{tuple(k.shape[:-1])}, got {tuple(v.shape)}"
        )
    if q.shape[-2] == 0:
        raise ValueError(f"empty sequence: q has shape {tuple(q.shape)}")


def _features(x: torch.Tensor, feature_map: FeatureMap | None) -> torch.Tensor:
    if feature_map is None:
        return x
    if not callable(feature_map):
        raise TypeError(f"feature_map must be callable or None, got {type(feature_map).__name__}")
    return feature_map(x)


# --- eq. 28.1: the kernel ------------------------------------------------------------------------


def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    """The feature map phi(x) = elu(x) + 1 of Katharopoulos et al. (2020): positive, smooth.

    Args:
        x: any shape. Returns the same shape, every entry > 0 (so the normaliser of eq. 28.3 is
        positive).
    """
    _check_tensor(x, "x", 0)
    return F.elu(x) + 1.0


def feature_kernel(
    q: torch.Tensor, k: torch.Tensor, feature_map: FeatureMap | None = elu_plus_one
) -> torch.Tensor:
    """All pairwise kernel values K(q_i, k_j) = phi(q_i)^T phi(k_j). Implements eq. 28.1.

    Args:
        q: (..., T, D); k: (..., S, D); feature_map: phi, or None for the identity.

    Returns:
        (..., T, S) kernel matrix.
    """
    _check_tensor(q, "q", 2)
    _check_tensor(k, "k", 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k need the same width D, got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    return _features(q, feature_map) @ _features(k, feature_map).transpose(-1, -2)


def exp_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The softmax kernel exp(q_i^T k_j / sqrt(D)): (..., T, D), (..., S, D) -> (..., T, S).

    It has no finite feature map, so softmax attention has no fixed-size recurrent state.
    """
    _check_tensor(q, "q", 2)
    _check_tensor(k, "k", 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k need the same width D, got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    return torch.exp(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))


# --- eqs. 28.2-28.3: three ways to compute the same outputs -------------------------------------


def kernel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    causal: bool = True,
    normalize: bool = True,
) -> torch.Tensor:
    """Attention with a general non-negative kernel, the quadratic form: O(T^2) time and memory.

    ``y_i = sum_{j<=i} K(q_i, k_j) v_j / sum_{j<=i} K(q_i, k_j)`` (``j <= i`` only when causal).
    With :func:`exp_kernel` this is softmax attention; with :func:`feature_kernel` it is linear
    attention written without the reassociation.

    Args:
        q, k: (..., T, D); v: (..., T, Dv); kernel: (q, k) -> (..., T, T) weights.
        causal: mask out j > i. normalize: divide by the sum of the weights (eq. 28.3);
            if False, return the plain weighted sum.

    Returns:
        (..., T, Dv).
    """
    _check_qkv(q, k, v)
    w = kernel(q, k)  # (..., T, T)
    t = q.shape[-2]
    if w.shape[-2:] != (t, t):
        raise ValueError(f"kernel must return (..., T, T) = (..., {t}, {t}), got {tuple(w.shape)}")
    if causal:
        w = w * torch.ones(t, t, dtype=torch.bool, device=w.device).tril()
    num = w @ v  # (..., T, Dv)
    if not normalize:
        return num
    return num / w.sum(-1, keepdim=True)


def linear_attention_quadratic(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    feature_map: FeatureMap | None = elu_plus_one,
    causal: bool = True,
    normalize: bool = True,
) -> torch.Tensor:
    """Linear attention in its quadratic form: the (T, T) matrix phi(Q) phi(K)^T, masked.

    The reference for :func:`linear_attention_recurrent` and :func:`linear_attention_chunked`.
    Shapes as in :func:`kernel_attention`.
    """
    return kernel_attention(
        q, k, v, lambda a, b: feature_kernel(a, b, feature_map), causal=causal, normalize=normalize
    )


def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    feature_map: FeatureMap | None = elu_plus_one,
    normalize: bool = True,
    return_state: bool = False,
):
    """Causal linear attention as a recurrence with a fixed-size state. Implements eqs. 28.2-28.3.

    ``S_t = S_{t-1} + phi(k_t) v_t^T``, ``c_t = c_{t-1} + phi(k_t)`` and
    ``y_t = phi(q_t)^T S_t / phi(q_t)^T c_t``: O(T F Dv) time, O(F Dv) memory per sequence.

    Args:
        q, k: (..., T, D); v: (..., T, Dv); feature_map: phi, or None for the identity.
        normalize: divide by phi(q_t)^T c_t (eq. 28.3); if False return phi(q_t)^T S_t.
        return_state: also return the final (S_T, c_T).

    Returns:
        y: (..., T, Dv), and (S: (..., F, Dv), c: (..., F)) if ``return_state``.
    """
    _check_qkv(q, k, v)
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
            num = num / (fq[..., t, :] * c).sum(-1, keepdim=True)
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
) -> torch.Tensor:
    """Causal linear attention by chunks: quadratic inside a chunk, the state across chunks.

    Inside a chunk of length C the masked (C, C) matrix is used; the chunks before it enter
    through the state (S, c) of eq. 28.2, updated once per chunk with one matrix product. The cost
    is O(T C F + T F Dv): linear in T, and made of matrix products (what hardware is fast at).
    Shapes as in :func:`linear_attention_recurrent`; ``chunk`` >= 1 (the last chunk may be short).
    """
    _check_qkv(q, k, v)
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
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
            num = num / den[..., None]
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
    """The delta rule: write only the error of the current prediction. Implements eq. 28.4.

    ``S_t = S_{t-1} + beta_t phi(k_t) (v_t - phi(k_t)^T S_{t-1})^T`` and ``y_t = phi(q_t)^T S_t``
    (no normaliser). This is one gradient step, with step size ``beta_t``, on
    ``0.5 * ||S^T phi(k_t) - v_t||^2``: with a unit-norm key and beta_t = 1 the old value stored
    under ``phi(k_t)`` is replaced by ``v_t`` instead of being added to.

    Args:
        q, k: (..., T, D); v: (..., T, Dv); beta: (..., T) write strengths (stable for
            0 <= beta_t * ||phi(k_t)||^2 <= 2); feature_map: phi, or None (identity, the default:
            keys are usually L2-normalised instead).
        return_state: also return the final S_T, (..., F, Dv).

    Returns:
        y: (..., T, Dv), and S_T if ``return_state``.
    """
    _check_qkv(q, k, v)
    _check_tensor(beta, "beta", 1)
    if beta.shape != k.shape[:-1]:
        raise ValueError(
            f"beta must have shape (..., T) = {tuple(k.shape[:-1])}, got {tuple(beta.shape)}"
        )
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


def _check_sizes(**sizes) -> None:
    for name, n in sizes.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")


def flops_quadratic(T: int, D: int, Dv: int, matmul_only: bool = False) -> int:
    """FLOPs (one multiply or one add = 1) of the quadratic form, computed densely.

    Scores phi(Q) phi(K)^T: 2 T^2 D; weights times values: 2 T^2 Dv; and, unless
    ``matmul_only``, the row sums (T^2) and the divisions (T Dv). Feature maps are not counted.
    """
    _check_sizes(T=T, D=D, Dv=Dv)
    mm = 2 * T * T * D + 2 * T * T * Dv
    return mm if matmul_only else mm + T * T + T * Dv


def flops_recurrent(T: int, D: int, Dv: int) -> int:
    """FLOPs of the recurrence of eqs. 28.2-28.3 (one multiply or one add = 1).

    Per token: the outer-product update of S (2 D Dv), of c (D), the read-out phi(q)^T S
    (2 D Dv), the normaliser phi(q)^T c (2 D) and the division (Dv): T (4 D Dv + 3 D + Dv).
    """
    _check_sizes(T=T, D=D, Dv=Dv)
    return T * (4 * D * Dv + 3 * D + Dv)
