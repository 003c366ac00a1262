"""Generalisation (chapter 49): bias and variance, minimum-norm interpolation, ridge, early
stopping as a spectral filter, random-feature double descent, Hoeffding plus a union bound.

Least squares here minimises ``0.5 * ||X theta - y||^2`` (no 1/n), so that the ridge solution is
``(X^T X + lam I)^{-1} X^T y`` and a gradient step is ``theta - lr * X^T (X theta - y)``. Every
solution below is a *spectral filter*: with the thin SVD ``X = U diag(s) V^T`` (r = min(n, p)
singular values), ``theta = V diag(g(s^2) / s) U^T y`` for a filter g with values in [0, 1].

Shape legend
    n training points;  p parameters (features);  m test points;  d input dimension
    R independent training sets;  K hypotheses (thresholds);  r = min(n, p)
    X     (n, p) design (feature) matrix;  y (n,) targets;  theta (p,) coefficients
    s     (r,) singular values of X, descending;  s2 = s**2
    x     (n, d) inputs;  W (d, p) random projection;  b (p,) random offsets
    preds (R, m) predictions of R fitted models at m test points;  f_true (m,) noise-free targets
    z     (n,) one-dimensional inputs;  labels (n,) 0/1;  thresholds (K,)
"""

from __future__ import annotations

import math

import torch

from ..validation import (
    float_tensor,
    integer,
    number,
    positive,
    positive_int,
    probability,
    same_shape,
    shape_is,
)


def _design(X, y) -> tuple[torch.Tensor, torch.Tensor]:
    """The checks shared by the solvers: X (n, p), y (n,), finite, same n."""
    X = float_tensor(X, "X", ndim=2, all_finite=True, not_empty=True)
    y = float_tensor(y, "y", ndim=1, all_finite=True)
    shape_is(y, "y", (X.shape[0],))
    return X, y


def _thin_svd(X: torch.Tensor, y: torch.Tensor, rcond: float = 1e-12):
    """Thin SVD of X, the coordinates U^T y of y, and 1/s with the singular values below
    rcond * s_max counted as zero (their directions are left out): (r,), (p, r), (r,), (r,)."""
    U, s, Vh = torch.linalg.svd(X, full_matrices=False)  # (n, r), (r,), (r, p)
    keep = s > rcond * s[0]
    inv_s = torch.where(keep, 1 / torch.where(keep, s, 1.0), 0.0)  # (r,) no 1/0 anywhere
    return s, Vh.T, U.T @ y, inv_s


# --- filters and solutions ------------------------------------------------------------------------


def ridge_filter(s2: torch.Tensor, lam: float) -> torch.Tensor:
    """The ridge filter g(s^2) = s^2 / (s^2 + lam), 0 where s^2 = lam = 0 (the pseudo-inverse
    leaves a zero singular value out). Implements eq. 49.3."""
    lam = number(lam, "lam", 0.0)
    return s2 / (s2 + lam).clamp_min(torch.finfo(s2.dtype).tiny)


def gd_filter(s2: torch.Tensor, lr: float, t: int) -> torch.Tensor:
    """The filter of t gradient steps from zero, g(s^2) = 1 - (1 - lr s^2)^t (eq. 49.4)."""
    lr = positive(lr, "lr")
    t = integer(t, "t", 0)
    return 1 - (1 - lr * s2) ** t


def min_norm_solution(X: torch.Tensor, y: torch.Tensor, rcond: float = 1e-12) -> torch.Tensor:
    """The minimum-norm least-squares solution X^+ y by the SVD. Implements eq. 49.2.

    X: (n, p); y: (n,). Singular values below ``rcond * s_max`` count as zero (the pseudo-inverse
    leaves their directions out). Returns theta: (p,).
    """
    X, y = _design(X, y)
    rcond = number(rcond, "rcond", 0.0, 1.0)
    s, V, uy, inv_s = _thin_svd(X, y, rcond)
    return V @ (inv_s * uy)


def min_norm_solution_naive(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """X^+ y from the normal equations: X^T (X X^T)^{-1} y when p >= n (X of full row rank),
    (X^T X)^{-1} X^T y when p < n (full column rank). Reference for :func:`min_norm_solution`."""
    X, y = _design(X, y)
    n, p = X.shape
    if p >= n:
        return X.T @ torch.linalg.solve(X @ X.T, y)
    return torch.linalg.solve(X.T @ X, X.T @ y)


def ridge_solution(X: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """Ridge regression (X^T X + lam I)^{-1} X^T y through the SVD. Implements eq. 49.3.

    X: (n, p); y: (n,); lam >= 0 (lam = 0 gives the minimum-norm solution X^+ y for an X of full
    rank). Returns theta: (p,).
    """
    X, y = _design(X, y)
    lam = number(lam, "lam", 0.0)
    s, V, uy, inv_s = _thin_svd(X, y)
    return V @ (ridge_filter(s**2, lam) * inv_s * uy)


def ridge_path(X: torch.Tensor, y: torch.Tensor, lams) -> torch.Tensor:
    """Ridge solutions for several lam from one SVD (eq. 49.3; lam = 0: eq. 49.2 for an X of
    full rank). X: (n, p); y: (n,); lams: L numbers >= 0. Returns thetas: (L, p)."""
    X, y = _design(X, y)
    lams = [number(lam, "lams[i]", 0.0) for lam in lams]
    s, V, uy, inv_s = _thin_svd(X, y)
    g = torch.stack([ridge_filter(s**2, lam) for lam in lams])  # (L, r) one filter per lam
    return (g * inv_s * uy) @ V.T  # (L, p)


def ridge_solution_naive(X: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """Ridge by solving the (p, p) normal equations (X^T X + lam I) theta = X^T y; lam > 0."""
    X, y = _design(X, y)
    lam = positive(lam, "lam")
    eye = torch.eye(X.shape[1], dtype=X.dtype)
    return torch.linalg.solve(X.T @ X + lam * eye, X.T @ y)


def gd_solution(X: torch.Tensor, y: torch.Tensor, lr: float, t: int) -> torch.Tensor:
    """theta_t of t gradient-descent steps on 0.5 ||X theta - y||^2 from theta_0 = 0, in closed
    form through the SVD. Implements eq. 49.4.

    X: (n, p); y: (n,); lr: step size (converges for lr < 2 / s_max^2); t >= 0 steps.
    Returns theta_t: (p,).
    """
    X, y = _design(X, y)
    s, V, uy, inv_s = _thin_svd(X, y)
    return V @ (gd_filter(s**2, lr, t) * inv_s * uy)


def gd_solution_naive(X: torch.Tensor, y: torch.Tensor, lr: float, t: int) -> torch.Tensor:
    """t explicit gradient steps theta <- theta - lr X^T (X theta - y) from zero; reference for
    :func:`gd_solution`."""
    X, y = _design(X, y)
    lr = positive(lr, "lr")
    t = integer(t, "t", 0)
    theta = X.new_zeros(X.shape[1])
    for _ in range(t):
        theta = theta - lr * X.T @ (X @ theta - y)
    return theta


# --- random features ------------------------------------------------------------------------------


def relu_features(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Random ReLU features phi(x) = relu(x W + b) / sqrt(p).

    x: (n, d) inputs; W: (d, p) fixed random weights; b: (p,) offsets. Returns (n, p).
    """
    x = float_tensor(x, "x", ndim=2)
    W = float_tensor(W, "W", ndim=2)
    shape_is(W, "W", (x.shape[1], None))
    shape_is(b, "b", (W.shape[1],))  # a (p, 1) offset would broadcast to (n, p, p) silently
    return torch.relu(x @ W + b) / math.sqrt(W.shape[1])


# --- bias and variance ----------------------------------------------------------------------------


def bias_variance(preds: torch.Tensor, f_true: torch.Tensor) -> tuple[float, float]:
    """The squared bias and the variance of R fitted models, averaged over m test points.
    Implements eq. 49.1 (the noise term sigma^2 is known and added by the caller).

    preds: (R, m) predictions of models trained on R independent training sets; f_true: (m,)
    the noise-free targets. Returns (bias^2, variance), the variance over the R models with 1/R
    (so that bias^2 + variance is exactly the mean squared error against f_true).
    """
    preds = float_tensor(preds, "preds", ndim=2, all_finite=True, not_empty=True)
    f_true = shape_is(float_tensor(f_true, "f_true", ndim=1), "f_true", (preds.shape[1],))
    mean = preds.mean(0)  # (m,) the average model f-bar
    bias2 = ((mean - f_true) ** 2).mean()
    var = ((preds - mean) ** 2).mean()
    return float(bias2), float(var)


# --- a finite class: thresholds -------------------------------------------------------------------


def threshold_risks(z: torch.Tensor, labels: torch.Tensor, thresholds: torch.Tensor):
    """Empirical 0-1 risks of the classifiers h_c(z) = 1[z > c], one per threshold c.

    z: (..., n) inputs; labels: (..., n) 0/1 (float or int); thresholds: (K,), in any order.
    Returns (..., K): the fraction of the n points that h_c misclassifies. h_c errs on a point
    with label 1 and z <= c, and on a point with label 0 and z > c; both counts are cumulative
    sums over the bins of the sorted thresholds, so the cost is O(n + K) per data set.
    """
    z = float_tensor(z, "z", min_ndim=1, not_empty=True)
    same_shape(z, labels, ("z", "labels"))
    thresholds = float_tensor(thresholds, "thresholds", ndim=1, not_empty=True)
    c, order = thresholds.sort()
    K, pos = c.shape[0], (labels > 0.5).to(z.dtype)  # pos: (..., n) 1 for label 1
    bins = torch.bucketize(z, c)  # (..., n) number of thresholds below z, 0..K
    n_pos = z.new_zeros(*z.shape[:-1], K + 1).scatter_add_(-1, bins, pos)  # (..., K+1)
    n_neg = z.new_zeros(*z.shape[:-1], K + 1).scatter_add_(-1, bins, 1 - pos)  # (..., K+1)
    pos_below = n_pos.cumsum(-1)[..., :K]  # label 1, z <= c_k: h_k says 0
    neg_above = n_neg.sum(-1, keepdim=True) - n_neg.cumsum(-1)[..., :K]  # label 0, z > c_k
    risks = torch.empty_like(pos_below)
    risks[..., order] = (pos_below + neg_above) / z.shape[-1]  # back to the given order
    return risks


def threshold_risks_naive(z: torch.Tensor, labels: torch.Tensor, thresholds: torch.Tensor):
    """The same risks for one data set z, labels: (n,), one threshold at a time (reference)."""
    out = []
    for c in thresholds.tolist():
        pred = [1.0 if zi > c else 0.0 for zi in z.tolist()]
        out.append(sum(p != yi for p, yi in zip(pred, labels.tolist(), strict=True)) / len(pred))
    return torch.tensor(out, dtype=z.dtype)


def union_bound_epsilon(n: int, n_hypotheses: int, delta: float) -> float:
    """The epsilon of Hoeffding plus a union bound over K hypotheses: with probability at least
    1 - delta, every h of the class has |R(h) - R_hat(h)| <= sqrt((ln K + ln(2 / delta)) / (2n)).
    Implements eq. 49.5 (for a loss in [0, 1] and n i.i.d. points)."""
    n = positive_int(n, "n")
    n_hypotheses = positive_int(n_hypotheses, "n_hypotheses")
    delta = probability(delta, "delta")
    if delta == 0:
        raise ValueError("delta must be in (0, 1], got 0 (no finite bound holds surely)")
    return math.sqrt((math.log(n_hypotheses) + math.log(2 / delta)) / (2 * n))
