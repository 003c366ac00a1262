"""Softmax, log-sum-exp and cross-entropy, done stably (formula sheet, chapter 12).

Every function is a pure function of torch tensors that works along any axis ``dim`` (the class
axis), so the same code serves a classifier's ``(N, K)`` logits, a language model's
``(B, T, V)`` logits and an attention layer's ``(B, H, T, T)`` scores.

Shape legend
    K      number of classes: the size of ``logits`` along ``dim``
    (...)  any other axes (batch, sequence, heads), kept as they are
    z      logits (unnormalised log-probabilities), shape (..., K, ...) with K at ``dim``
    p      probabilities softmax(z), same shape as z
    y      target: class indices, shape of z without ``dim``; or probabilities, shape of z

Every optimised function sits beside its naive reference: :func:`softmax_naive` beside
:func:`softmax`, the full :func:`softmax_jacobian` beside the O(K) :func:`softmax_vjp`, the
closed-form gradients :func:`cross_entropy_grad` and :func:`z_loss_grad` beside the losses
whose autograd gradients they reproduce. Bad input raises ``TypeError`` (not a floating-point
tensor, integer targets of the wrong dtype) or ``ValueError`` (shapes, ranges), naming the
offending shapes or values.
"""

from __future__ import annotations

import math

import torch

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


# --- validation ----------------------------------------------------------------------------------


def _check_logits(z, dim: int, name: str = "logits") -> int:
    """Validate a floating-point tensor with a non-empty axis ``dim``; return ``dim`` >= 0."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if not z.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {z.dtype}")
    if z.ndim == 0:
        raise ValueError(f"{name} must have at least one axis (the class axis), got a scalar")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -z.ndim <= dim < z.ndim:
        raise ValueError(f"dim={dim} is out of range for {name} of shape {tuple(z.shape)}")
    dim %= z.ndim
    if z.shape[dim] == 0:
        raise ValueError(f"{name} of shape {tuple(z.shape)} has no classes along dim={dim}")
    return dim


def _check_temperature(temperature) -> float:
    t = float(temperature)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"temperature must be positive and finite, got {temperature!r}")
    return t


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_eps(eps) -> float:
    e = float(eps)
    if not 0.0 <= e <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], got {eps!r}")
    return e


def _reduce(loss: torch.Tensor, reduction: str, count=None) -> torch.Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (loss.numel() if count is None else count)


def _shift(z: torch.Tensor, dim: int) -> torch.Tensor:
    """m = max_j z_j along dim (keepdim), detached, and 0 where the max is not finite.

    Detaching is exact: every function below is invariant to the shift (eq. 12.1), so m carries
    no gradient. Replacing an infinite max by 0 keeps rows of all -inf (fully masked attention
    rows) at exp(-inf) = 0 instead of producing -inf - (-inf) = nan.
    """
    m = z.detach().amax(dim=dim, keepdim=True)  # (..., 1, ...)
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


# --- eq. 12.1: softmax with temperature ----------------------------------------------------------


def softmax_naive(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """p_i = exp(z_i / T) / sum_j exp(z_j / T), literally as written (eq. 12.1).

    The naive reference: exp overflows to inf once z/T exceeds log(max float) (about 88.7 in
    float32, 709.8 in float64) and the ratio inf/inf is nan; very negative logits underflow to
    0/0 = nan. Use :func:`softmax` in practice.

    Args:
        z: (..., K, ...) logits, K along ``dim``.
        dim: the class axis.
        temperature: T > 0; T < 1 sharpens the distribution, T > 1 flattens it.

    Returns:
        p, same shape and dtype as z.
    """
    dim = _check_logits(z, dim)
    t = _check_temperature(temperature)
    e = torch.exp(z / t)
    return e / e.sum(dim=dim, keepdim=True)


def softmax(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """Stable softmax: p = exp(z/T - m) / sum_j exp(z_j/T - m), m = max_j z_j/T (eq. 12.1).

    Shift invariance, softmax(z + c1) = softmax(z), makes the shift by the maximum free: the
    largest exponent is then exp(0) = 1, so nothing overflows and the denominator is >= 1.

    Args:
        z: (..., K, ...) logits, K along ``dim``.
        dim: the class axis.
        temperature: T > 0.

    Returns:
        p, same shape and dtype as z; each slice along ``dim`` sums to 1. A slice of all -inf
        (nothing allowed) gives nan, as in ``torch.softmax``.
    """
    dim = _check_logits(z, dim)
    t = _check_temperature(temperature)
    s = z / t
    e = torch.exp(s - _shift(s, dim))  # every exponent <= 0
    return e / e.sum(dim=dim, keepdim=True)


# --- eq. 12.2: log-sum-exp and log-softmax --------------------------------------------------------


def logsumexp(z: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """log sum_j exp(z_j) = m + log sum_j exp(z_j - m), m = max_j z_j (eq. 12.2).

    The log of softmax's normaliser, log Z. A smooth maximum: max z <= logsumexp(z) <=
    max z + log K. Its gradient is softmax(z).

    Args:
        z: (..., K, ...) logits.
        dim: the axis summed over.
        keepdim: keep ``dim`` as an axis of size 1.

    Returns:
        (...) log Z, with ``dim`` removed unless ``keepdim``. A slice of all -inf gives -inf.
    """
    dim = _check_logits(z, dim)
    m = _shift(z, dim)  # (..., 1, ...)
    out = m + torch.log(torch.exp(z - m).sum(dim=dim, keepdim=True))
    return out if keepdim else out.squeeze(dim)


def log_softmax(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """log p_i = z_i - m - log sum_j exp(z_j - m), m = max_j z_j (eq. 12.2), of z/T.

    Never forms p, so a class with p_i below the smallest float still gets its exact, finite
    log-probability (log of the naive softmax gives -inf there). This is what cross-entropy uses.

    Args:
        z: (..., K, ...) logits.
        dim: the class axis.
        temperature: T > 0 (the logits are divided by T first).

    Returns:
        log p, same shape and dtype as z; every entry <= 0.
    """
    dim = _check_logits(z, dim)
    t = _check_temperature(temperature)
    s = z / t
    m = _shift(s, dim)  # (..., 1, ...)
    return s - m - torch.log(torch.exp(s - m).sum(dim=dim, keepdim=True))


# --- eq. 12.3: the Jacobian -----------------------------------------------------------------------


def softmax_jacobian(z: torch.Tensor, dim: int = -1, temperature: float = 1.0) -> torch.Tensor:
    """J = d softmax(z/T) / dz = (diag(p) - p p^T) / T, for every slice along ``dim`` (eq. 12.3).

    Entry (i, j) is dp_i/dz_j = p_i (delta_ij - p_j) / T. The sheet's form is T = 1. The full
    K x K matrix is the naive reference; backpropagation uses :func:`softmax_vjp`, which never
    forms it.

    Args:
        z: (..., K, ...) logits, K along ``dim``.
        dim: the class axis.
        temperature: T > 0.

    Returns:
        (*batch, K, K) where *batch are z's other axes in order (``dim`` moved last, then
        expanded into a matrix).
    """
    dim = _check_logits(z, dim)
    t = _check_temperature(temperature)
    p = softmax(z, dim=dim, temperature=t).movedim(dim, -1)  # (*batch, K)
    return (torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)) / t  # (*batch, K, K)


def softmax_vjp(p: torch.Tensor, grad_p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Backward pass of softmax: J^T g = p * (g - sum_j g_j p_j) along ``dim`` (eq. 12.3).

    J is symmetric, so J^T g = diag(p) g - p (p^T g): O(K) work per slice instead of the O(K^2)
    of multiplying by :func:`softmax_jacobian`. Attention's backward pass uses exactly this.

    Args:
        p: (..., K, ...) softmax output (T = 1), K along ``dim``.
        grad_p: dL/dp, same shape as p.
        dim: the class axis.

    Returns:
        dL/dz, same shape as p.
    """
    dim = _check_logits(p, dim, name="p")
    if not isinstance(grad_p, torch.Tensor):
        raise TypeError(f"grad_p must be a torch.Tensor, got {type(grad_p).__name__}")
    if grad_p.shape != p.shape:
        raise ValueError(f"grad_p must have p's shape {tuple(p.shape)}, got {tuple(grad_p.shape)}")
    return p * (grad_p - (grad_p * p).sum(dim=dim, keepdim=True))


# --- eq. 12.4 and 12.5: cross-entropy, label smoothing, z-loss ------------------------------------


def _index_target(target: torch.Tensor, z: torch.Tensor, dim: int, ignore_index) -> torch.Tensor:
    """Validate class-index targets; return the mask of positions that count."""
    if target.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"class-index targets must be an integer tensor, got {target.dtype}")
    expected = z.shape[:dim] + z.shape[dim + 1 :]
    if target.shape != expected:
        raise ValueError(
            f"class-index targets must have logits' shape without dim={dim}, "
            f"{tuple(expected)}, got {tuple(target.shape)}"
        )
    if ignore_index is None:
        keep = torch.ones_like(target, dtype=torch.bool)
    else:
        keep = target != ignore_index
    k = z.shape[dim]
    valid = target[keep]
    if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= k):
        raise ValueError(
            f"class indices must lie in [0, {k}), "
            f"got range [{int(valid.min())}, {int(valid.max())}]"
        )
    return keep


def _prob_target(target: torch.Tensor, z: torch.Tensor, dim: int) -> None:
    if not target.is_floating_point():
        raise TypeError(f"probability targets must be floating point, got {target.dtype}")
    if target.shape != z.shape:
        raise ValueError(
            f"probability targets must have logits' shape {tuple(z.shape)}, "
            f"got {tuple(target.shape)}"
        )


def smooth_labels(
    target: torch.Tensor,
    num_classes: int | None = None,
    eps: float = 0.1,
    dim: int = -1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """y^eps = (1 - eps) y + eps 1 / K (eq. 12.5, left).

    Args:
        target: class indices (...) together with ``num_classes`` = K, or probabilities
            (..., K, ...) with K along ``dim``.
        num_classes: K, required for class indices, must be omitted (or equal) for probabilities.
        eps: the smoothing weight in [0, 1]; eps = 0 returns the (one-hot) target.
        dim: the class axis of the result (and of probability targets).
        dtype: floating dtype of the result for class indices (default: torch's default dtype).

    Returns:
        (..., K, ...) smoothed target distribution; each slice along ``dim`` sums to 1.
    """
    e = _check_eps(eps)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        dim = _check_logits(target, dim, name="target")
        k = target.shape[dim]
        if num_classes is not None and num_classes != k:
            raise ValueError(
                f"num_classes={num_classes} but target has {k} classes along dim={dim}"
            )
        y = target
    else:
        if num_classes is None or num_classes < 1:
            raise ValueError(f"class indices need num_classes >= 1, got {num_classes!r}")
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= num_classes):
            raise ValueError(
                f"class indices must lie in [0, {num_classes}), got range "
                f"[{int(target.min())}, {int(target.max())}]"
            )
        if not -(target.ndim + 1) <= dim <= target.ndim:
            raise ValueError(f"dim={dim} is out of range for a result with {target.ndim + 1} axes")
        k = num_classes
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
    """L = -sum_i y_i log p_i with p = softmax(z) along ``dim`` (eq. 12.4; eq. 12.5 for eps > 0).

    Computed from :func:`log_softmax`, never from log(softmax(z)). With label smoothing the
    target is y^eps; for class indices this is (1 - eps) (-log p_y) + eps * mean_i(-log p_i),
    which needs no one-hot tensor. Same conventions as ``F.cross_entropy``, except that the
    class axis is ``dim`` (default: last) instead of 1.

    Args:
        logits: (..., K, ...) logits, K along ``dim``.
        target: class indices with logits' shape minus ``dim``, or probabilities of logits'
            shape (each slice along ``dim`` should sum to 1 for eq. 12.4's gradient to hold).
        dim: the class axis.
        label_smoothing: eps in [0, 1].
        reduction: "mean" (over positions; over non-ignored ones with ``ignore_index``),
            "sum" or "none".
        ignore_index: a class index whose positions contribute nothing (padding tokens);
            only for class-index targets.

    Returns:
        The reduced loss (scalar), or per-position losses (logits' shape minus ``dim``).
    """
    dim = _check_logits(logits, dim)
    e = _check_eps(label_smoothing)
    _check_reduction(reduction)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    logp = log_softmax(logits, dim=dim)  # (..., K, ...)
    if target.is_floating_point():
        if ignore_index is not None:
            raise ValueError("ignore_index applies to class-index targets only")
        _prob_target(target, logits, dim)
        y = smooth_labels(target, eps=e, dim=dim) if e > 0 else target
        return _reduce(-(y * logp).sum(dim=dim), reduction)
    keep = _index_target(target, logits, dim, ignore_index)
    safe = torch.where(keep, target, torch.zeros_like(target)).long()
    nll = -logp.gather(dim, safe.unsqueeze(dim)).squeeze(dim)  # (...): -log p_y
    loss = (1 - e) * nll - e * logp.mean(dim=dim) if e > 0 else nll
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return _reduce(loss, reduction, count=keep.sum() if ignore_index is not None else None)


def cross_entropy_grad(
    logits: torch.Tensor, target: torch.Tensor, dim: int = -1, label_smoothing: float = 0.0
) -> torch.Tensor:
    """The closed-form gradient dL/dz = p - y (eq. 12.4), or p - y^eps with smoothing (eq. 12.5).

    This is the gradient of each position's own loss (``reduction="sum"``); divide by the number
    of positions for ``"mean"``. It needs sum_i y_i = 1, which class indices and smoothed
    targets satisfy.

    Args:
        logits: (..., K, ...) logits.
        target: class indices (logits' shape minus ``dim``) or probabilities (logits' shape).
        dim: the class axis.
        label_smoothing: eps in [0, 1].

    Returns:
        (..., K, ...) the gradient, same shape as logits.
    """
    dim = _check_logits(logits, dim)
    e = _check_eps(label_smoothing)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        _prob_target(target, logits, dim)
        y = smooth_labels(target, eps=e, dim=dim)
    else:
        _index_target(target, logits, dim, None)
        y = smooth_labels(target, logits.shape[dim], eps=e, dim=dim, dtype=logits.dtype)
    return softmax(logits, dim=dim) - y


def z_loss(
    logits: torch.Tensor, weight: float = 1e-4, dim: int = -1, reduction: str = "mean"
) -> torch.Tensor:
    """The z-loss lambda (log Z)^2 with log Z = logsumexp(z) along ``dim`` (eq. 12.5, right).

    Softmax ignores the overall level of the logits; the z-loss pins it by pulling log Z towards
    0, which keeps the logits (and the exponentials of low-precision softmax) small.

    Args:
        logits: (..., K, ...) logits.
        weight: lambda >= 0.
        dim: the class axis.
        reduction: "mean", "sum" or "none" over the positions.

    Returns:
        The reduced penalty (scalar), or one per position (logits' shape minus ``dim``).
    """
    dim = _check_logits(logits, dim)
    _check_reduction(reduction)
    if not (math.isfinite(float(weight)) and float(weight) >= 0):
        raise ValueError(f"weight must be finite and non-negative, got {weight!r}")
    return _reduce(weight * logsumexp(logits, dim=dim) ** 2, reduction)


def z_loss_grad(logits: torch.Tensor, weight: float = 1e-4, dim: int = -1) -> torch.Tensor:
    """The closed-form gradient d/dz lambda (log Z)^2 = 2 lambda log Z p (eq. 12.5, right).

    Chain rule: d(log Z)/dz = p. Per position (``reduction="sum"``).

    Returns:
        (..., K, ...) the gradient, same shape as logits.
    """
    dim = _check_logits(logits, dim)
    if not (math.isfinite(float(weight)) and float(weight) >= 0):
        raise ValueError(f"weight must be finite and non-negative, got {weight!r}")
    return 2 * weight * logsumexp(logits, dim=dim, keepdim=True) * softmax(logits, dim=dim)
