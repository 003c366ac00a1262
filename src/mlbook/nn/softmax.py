"""Softmax, log-sum-exp and cross-entropy, done stably (chapter 12), along any class axis ``dim``.

Shape legend
    K      number of classes: the size of ``logits`` along ``dim``
    (...)  any other axes (batch, sequence, heads), kept as they are
    z      logits, shape (..., K, ...) with K at ``dim``; p = softmax(z), same shape
    y      target: class indices, shape of z without ``dim``; or probabilities, shape of z

float16 and bfloat16 logits are computed in float32 and the result is returned in their dtype,
as real kernels do: the sum of K terms exp(z_j - m) <= 1 can exceed float16's largest number,
65504 (for uniform logits as soon as K does, up to rounding), and bfloat16 keeps 8 bits of it.
"""

from __future__ import annotations

import torch

from ..validation import (
    float_tensor,
    index_tensor,
    number,
    one_of,
    positive,
    positive_int,
    probability,
    same_shape,
    shape_is,
)

__all__ = [
    "softmax_naive",
    "softmax",
    "logsumexp",
    "log_softmax",
    "softmax_jacobian",
    "softmax_vjp",
    "smooth_labels",
    "cross_entropy",
    "cross_entropy_grad",
    "z_loss",
    "z_loss_grad",
]

_REDUCTIONS = ("mean", "sum", "none")
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _reduce(loss: torch.Tensor, reduction: str, count=None) -> torch.Tensor:
    if one_of(reduction, "reduction", _REDUCTIONS) == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if count is not None and int(count) == 0:  # the mean of no positions would be NaN
        raise ValueError("target: every position is ignore_index, nothing to average")
    return loss.sum() / (loss.numel() if count is None else count)


def _wide(z: torch.Tensor) -> torch.Tensor:
    """z in float32 if it is float16 or bfloat16 (its sums of exponentials overflow), else z."""
    return z.float() if z.dtype in _LOW_PRECISION else z


def _shift(z: torch.Tensor, dim: int) -> torch.Tensor:
    """m = max_j z_j along dim (keepdim), detached, 0 where not finite (all -inf rows stay 0)."""
    m = z.detach().amax(dim=dim, keepdim=True)  # (..., 1, ...)
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


# --- eq. 12.1: softmax with temperature ----------------------------------------------------------


def softmax_naive(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """p_i = exp(z_i / T) / sum_j exp(z_j / T) literally (overflows). Implements eq. 12.1.

    z: (..., K, ...); temperature: T > 0. Returns p, same shape."""
    e = torch.exp(z / positive(temperature, "temperature"))
    return e / e.sum(dim=dim, keepdim=True)


def softmax(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """Stable softmax exp(z/T - m) / sum_j exp(z_j/T - m), m = max z/T. Implements eq. 12.1.

    z: (..., K, ...); temperature: T > 0. Returns p, same shape (nan for an all -inf slice)."""
    s = _wide(z) / positive(temperature, "temperature")  # float16/bfloat16: in float32
    e = torch.exp(s - _shift(s, dim))  # every exponent <= 0
    return (e / e.sum(dim=dim, keepdim=True)).to(z.dtype)


# --- eq. 12.2: log-sum-exp and log-softmax --------------------------------------------------------


def logsumexp(z: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """log sum_j exp(z_j) = m + log sum_j exp(z_j - m), m = max z. Implements eq. 12.2.

    z: (..., K, ...). Returns log Z, ``dim`` removed unless ``keepdim``."""
    w = _wide(z)  # float16/bfloat16: in float32
    m = _shift(w, dim)  # (..., 1, ...)
    out = (m + torch.log(torch.exp(w - m).sum(dim=dim, keepdim=True))).to(z.dtype)
    return out if keepdim else out.squeeze(dim)


def log_softmax(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """log p = s - m - log sum_j exp(s_j - m), s = z/T, without forming p. Implements eq. 12.2.

    z: (..., K, ...); temperature: T > 0. Returns log p, same shape."""
    s = _wide(z) / positive(temperature, "temperature")  # float16/bfloat16: in float32
    m = _shift(s, dim)  # (..., 1, ...)
    return (s - m - torch.log(torch.exp(s - m).sum(dim=dim, keepdim=True))).to(z.dtype)


# --- eq. 12.3: the Jacobian -----------------------------------------------------------------------


def softmax_jacobian(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """J = (diag(p) - p p^T) / T for every slice along ``dim``: the naive reference (eq. 12.3).

    z: (..., K, ...). Returns (*batch, K, K), the other axes of z first, in order."""
    t = positive(temperature, "temperature")
    p = softmax(z, dim=dim, temperature=t).movedim(dim, -1)  # (*batch, K)
    return (torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)) / t  # (*batch, K, K)


def softmax_vjp(p: torch.Tensor, grad_p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Backward pass of softmax J^T g = p * (g - sum_j g_j p_j), in O(K). Implements eq. 12.3.

    p: (..., K, ...) softmax output; grad_p: dL/dp, same shape. Returns dL/dz."""
    same_shape(grad_p, p, ("grad_p", "p"))
    return p * (grad_p - (grad_p * p).sum(dim=dim, keepdim=True))


# --- eq. 12.4 and 12.5: cross-entropy, label smoothing, z-loss ------------------------------------


def smooth_labels(
    target: torch.Tensor,
    num_classes: int | None = None,
    eps: float = 0.1,
    dim: int = -1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """y^eps = (1 - eps) y + eps / K. Implements eq. 12.5 (left).

    target: class indices (...) with ``num_classes`` = K, or probabilities (..., K, ...) with K
    along ``dim``; eps in [0, 1]; dtype: of the result for indices. Returns (..., K, ...)."""
    e = probability(eps, "eps")
    if target.is_floating_point():
        k = target.shape[dim]
        if num_classes not in (None, k):
            raise ValueError(f"num_classes={num_classes} but target has {k} classes along {dim=}")
        y = target
    else:
        k = positive_int(num_classes, "num_classes")
        index_tensor(target, "target", high=k)
        y = torch.nn.functional.one_hot(target.long(), k).to(dtype or torch.get_default_dtype())
        y = y.movedim(-1, dim)  # (..., K) -> class axis at dim
    return (1 - e) * y + e / k


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    dim: int = -1,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    ignore_index: int | None = None,
) -> torch.Tensor:
    """L = -sum_i y_i log p_i, p = softmax(z) along ``dim``. Implements eqs. 12.4 and 12.5.

    logits: (..., K, ...); target: class indices (logits' shape minus ``dim``) or probabilities
    (logits' shape); label_smoothing: eps in [0, 1]; reduction: "mean" (over non-ignored
    positions), "sum" or "none"; ignore_index: a class index that contributes nothing.
    float16/bfloat16 logits: computed in float32, the loss returned in their dtype.
    """
    dim %= float_tensor(logits, "logits", min_ndim=1, not_empty=True).ndim
    e = probability(label_smoothing, "label_smoothing")
    logp = log_softmax(_wide(logits), dim=dim)  # (..., K, ...), float32 for float16/bfloat16
    if target.is_floating_point():
        if ignore_index is not None:
            raise ValueError("ignore_index applies to class-index targets only")
        same_shape(target, logits, ("target", "logits"))
        y = smooth_labels(target, eps=e, dim=dim) if e > 0 else target
        return _reduce(-(y * logp).sum(dim=dim), reduction).to(logits.dtype)
    shape_is(target, "target", logits.shape[:dim] + logits.shape[dim + 1 :])
    keep = (
        torch.ones_like(target, dtype=torch.bool)
        if ignore_index is None
        else target != ignore_index
    )
    index_tensor(target[keep], "target", high=logits.shape[dim])
    safe = torch.where(keep, target, torch.zeros_like(target)).long()
    nll = -logp.gather(dim, safe.unsqueeze(dim)).squeeze(dim)  # (...): -log p_y
    loss = (1 - e) * nll - e * logp.mean(dim=dim) if e > 0 else nll
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    count = keep.sum() if ignore_index is not None else None
    return _reduce(loss, reduction, count=count).to(logits.dtype)


def cross_entropy_grad(
    logits: torch.Tensor, target: torch.Tensor, dim: int = -1, label_smoothing: float = 0.0
) -> torch.Tensor:
    """dL/dz = p - y (eq. 12.4), or p - y^eps with smoothing (eq. 12.5), per position.

    logits: (..., K, ...); target as in :func:`cross_entropy`. Returns logits' shape."""
    dim %= float_tensor(logits, "logits", min_ndim=1).ndim
    e = probability(label_smoothing, "label_smoothing")
    if target.is_floating_point():
        same_shape(target, logits, ("target", "logits"))
        y = smooth_labels(target, eps=e, dim=dim)
    else:
        shape_is(target, "target", logits.shape[:dim] + logits.shape[dim + 1 :])
        y = smooth_labels(target, logits.shape[dim], eps=e, dim=dim, dtype=logits.dtype)
    return (softmax(_wide(logits), dim=dim) - y).to(logits.dtype)


def z_loss(
    logits: torch.Tensor, weight: float = 1e-4, dim: int = -1, reduction: str = "mean"
) -> torch.Tensor:
    """The z-loss lambda (log Z)^2, log Z = logsumexp(z) along ``dim``. Implements eq. 12.5.

    logits: (..., K, ...); weight: lambda >= 0. Returns the reduced penalty or one per position."""
    float_tensor(logits, "logits", min_ndim=1, not_empty=True)  # an empty batch would be NaN
    weight = number(weight, "weight", 0.0)
    return _reduce(weight * logsumexp(logits, dim=dim) ** 2, reduction)


def z_loss_grad(logits: torch.Tensor, weight: float = 1e-4, dim: int = -1) -> torch.Tensor:
    """d/dz lambda (log Z)^2 = 2 lambda log Z p, per position (eq. 12.5). Returns logits' shape."""
    weight = number(weight, "weight", 0.0)
    return 2 * weight * logsumexp(logits, dim=dim, keepdim=True) * softmax(logits, dim=dim)
