"""Loss functions and divergences (chapter 13), each in a safe form beside its naive formula.

Shape legend
    N      number of examples (residuals, logits, targets)
    D      number of parameters of a linear model (columns of the design matrix)
    K      number of classes of a categorical distribution
    B      batch size (rows of a (B, K) logit matrix)
    X      number of points of a 1-D integration grid
    M, S   numbers of candidate means and standard deviations of a grid search
    ...    any leading batch shape

Elementwise losses return one value per element (no reduction). The Gaussian NLL is
:func:`mlbook.foundations.probability.gaussian_nll` and its elementwise loss, the squared error
(pred - y)^2, is :func:`mlbook.foundations.linear_models.squared_error`. Every loss refuses an
empty batch (its mean would be NaN) and a NumPy array (``TypeError`` naming the argument).
"""

from __future__ import annotations

import math

import torch

from ..validation import (
    binary,
    distribution,
    finite,
    float_tensor,
    number,
    one_of,
    positive,
    positive_entries,
    positive_int,
    probability,
    same_shape,
    shape_is,
    unit_interval,
)

__all__ = [
    "absolute_error",
    "laplace_nll",
    "huber_loss",
    "huber_loss_naive",
    "huber_grad",
    "fit_linear_irls",
    "bce_with_logits",
    "bce_naive",
    "bce_grad",
    "focal_loss",
    "focal_loss_naive",
    "kl_categorical",
    "kl_categorical_naive",
    "kl_grad_logits",
    "distillation_loss",
    "distillation_grad",
    "gaussian_log_density",
    "kl_on_grid",
    "fit_gaussian_kl",
]


# --- eq. 13.1: squared and absolute error from Gaussian and Laplace likelihoods -------------------


def absolute_error(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """|pred - y| per element, the Laplace NLL up to scale and shift (eq. 13.1).

    pred, y: (...) of one shape. The Gaussian twin is ``linear_models.squared_error``."""
    same_shape(float_tensor(pred, "pred", not_empty=True), y, ("pred", "y"))
    return (pred - y).abs()


def laplace_nll(y: torch.Tensor, mean: torch.Tensor, b: float | torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood mean(|y - mean|) / b + log(2 b) under Laplace. Eq. 13.1.

    y, mean: (N,); b: scale > 0, a scalar or (N,). Returns ()."""
    float_tensor(y, "y", not_empty=True)
    same_shape(y, float_tensor(mean, "mean"), ("y", "mean"))
    bb = finite(positive_entries(torch.as_tensor(b, dtype=y.dtype), "b"), "b")
    return ((y - mean).abs() / bb + torch.log(2 * bb)).mean()


# --- eq. 13.2: the Huber loss ---------------------------------------------------------------------


def huber_loss(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Huber loss a (|r| - a/2), a = min(|r|, delta), per element. Implements eq. 13.2.

    residual: (...); delta > 0. Returns (...)."""
    float_tensor(residual, "residual", not_empty=True)
    r, d = residual, positive(delta, "delta")
    abs_r = r.abs()
    a = abs_r.clamp(max=d)
    return a * (abs_r - 0.5 * a)


def huber_loss_naive(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Huber loss per element, the two cases of eq. 13.2 written out (the reference)."""
    float_tensor(residual, "residual", not_empty=True)
    r, d = residual, positive(delta, "delta")
    return torch.where(r.abs() <= d, 0.5 * r**2, d * (r.abs() - 0.5 * d))


def huber_grad(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """d ell_delta / dr = clip(r, -delta, delta) per element (eq. 13.2)."""
    float_tensor(residual, "residual", not_empty=True)
    r, d = residual, positive(delta, "delta")
    return r.clamp(-d, d)


def fit_linear_irls(
    X: torch.Tensor,
    y: torch.Tensor,
    loss: str = "l2",
    delta: float = 1.0,
    n_iter: int = 200,
    eps: float = 1e-9,
    tol: float = 1e-13,
) -> torch.Tensor:
    """argmin_theta sum_i rho(y_i - x_i theta) by iteratively reweighted least squares.

    Weights w_i = psi(r_i) / r_i: 1 for "l2", 1/max(|r_i|, eps) for "l1" (eq. 13.1),
    min(1, delta/|r_i|) for "huber" (eq. 13.2). X: (N, D), N >= D; y: (N,); stops after ``n_iter``
    steps or when no parameter moves by more than tol (1 + |theta|). Returns (D,)."""
    n, dim = float_tensor(X, "X", ndim=2).shape
    shape_is(y, "y", (n,))
    if n < dim:
        raise ValueError(f"X must have at least as many rows as columns, got {tuple(X.shape)}")
    one_of(loss, "loss", ("l2", "l1", "huber"))
    d, eps = positive(delta, "delta"), positive(eps, "eps")
    positive_int(n_iter, "n_iter")
    theta = torch.linalg.lstsq(X, y[:, None]).solution[:, 0]  # (D,): the least-squares start
    if loss == "l2":
        return theta
    for _ in range(n_iter):
        abs_r = (y - X @ theta).abs().clamp(min=eps)  # (N,)
        w = 1.0 / abs_r if loss == "l1" else (d / abs_r).clamp(max=1.0)
        sw = w.sqrt()
        new = torch.linalg.lstsq(sw[:, None] * X, (sw * y)[:, None]).solution[:, 0]  # (D,)
        done = torch.all((new - theta).abs() <= tol * (1 + theta.abs()))
        theta = new
        if done:
            break
    return theta


# --- eq. 13.3: binary cross-entropy with logits ---------------------------------------------------


def bce_with_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """BCE per element max(z, 0) - z y + log1p(exp(-|z|)), never overflowing. Eq. 13.3.

    logits, targets: (...), targets in [0, 1]."""
    same_shape(float_tensor(logits, "logits", not_empty=True), targets, ("logits", "targets"))
    unit_interval(float_tensor(targets, "targets"), "targets")
    z, y = logits, targets
    return z.clamp(min=0) - z * y + torch.log1p(torch.exp(-z.abs()))


def bce_naive(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """BCE through sigma(z) literally: inf or nan for large |z| (the reference for eq. 13.3)."""
    same_shape(float_tensor(logits, "logits", not_empty=True), targets, ("logits", "targets"))
    unit_interval(float_tensor(targets, "targets"), "targets")
    z, y = logits, targets
    p = 1.0 / (1.0 + torch.exp(-z))
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p))


def bce_grad(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """dL/dz = sigma(z) - y per element (eq. 13.3). logits, targets: (...)."""
    same_shape(float_tensor(logits, "logits", not_empty=True), targets, ("logits", "targets"))
    unit_interval(float_tensor(targets, "targets"), "targets")
    z, y = logits, targets
    return torch.sigmoid(z) - y


# --- eq. 13.4: the focal loss ---------------------------------------------------------------------


def _alpha_t(y: torch.Tensor, alpha: float | None) -> torch.Tensor | float:
    """alpha_t = alpha for y = 1, 1 - alpha for y = 0; 1 for alpha None."""
    if alpha is None:
        return 1.0
    a = probability(alpha, "alpha")
    return torch.where(y == 1, y.new_tensor(a), y.new_tensor(1 - a))


def focal_loss(
    logits: torch.Tensor, targets: torch.Tensor, gamma: float = 2.0, alpha: float | None = None
) -> torch.Tensor:
    """Focal loss -alpha_t (1 - p_t)^gamma log p_t per element, from logits. Implements eq. 13.4.

    logits, targets: (...), targets in {0, 1}; gamma >= 0; alpha in [0, 1] or None."""
    same_shape(float_tensor(logits, "logits", not_empty=True), targets, ("logits", "targets"))
    binary(float_tensor(targets, "targets"), "targets")
    z, y = logits, targets
    g = number(gamma, "gamma", 0.0)
    zt = torch.where(y == 1, z, -z)  # signed logit: p_t = sigma(z_t)
    ones = torch.ones_like(zt)
    log_pt = -bce_with_logits(zt, ones)
    log_1m_pt = -bce_with_logits(-zt, ones)
    return -_alpha_t(y, alpha) * torch.exp(g * log_1m_pt) * log_pt


def focal_loss_naive(
    logits: torch.Tensor, targets: torch.Tensor, gamma: float = 2.0, alpha: float | None = None
) -> torch.Tensor:
    """Focal loss per element, eq. 13.4 literally through p = sigmoid(z) (the reference)."""
    same_shape(float_tensor(logits, "logits", not_empty=True), targets, ("logits", "targets"))
    binary(float_tensor(targets, "targets"), "targets")
    z, y = logits, targets
    number(gamma, "gamma", 0.0)
    p = torch.sigmoid(z)
    pt = torch.where(y == 1, p, 1 - p)
    return -_alpha_t(y, alpha) * (1 - pt) ** gamma * torch.log(pt)


# --- eq. 13.5: KL divergence and distillation -----------------------------------------------------


def kl_categorical(p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p || softmax(z)) per row, with a stable log-softmax and 0 log 0 = 0. Eq. 13.5.

    p: (..., K) rows summing to 1; logits: (..., K). Returns (...) >= 0."""
    float_tensor(logits, "logits", not_empty=True)
    same_shape(distribution(p, "p", atol=1e-5), logits, ("p", "logits"))
    z = logits
    log_q = torch.log_softmax(z, dim=-1)
    return (torch.xlogy(p, p) - p * log_q).sum(dim=-1)


def kl_categorical_naive(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum_k p_k log(p_k / q_k) per row, literally (needs p, q > 0). (..., K)."""
    same_shape(distribution(p, "p", atol=1e-5), distribution(q, "q", atol=1e-5), ("p", "q"))
    return (p * torch.log(p / q)).sum(dim=-1)


def kl_grad_logits(p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """grad_z KL(p || softmax(z)) = softmax(z) - p (eq. 13.5). p, logits: (..., K)."""
    float_tensor(logits, "logits", not_empty=True)
    same_shape(distribution(p, "p", atol=1e-5), logits, ("p", "logits"))
    z = logits
    return torch.softmax(z, dim=-1) - p


def distillation_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, T: float
) -> torch.Tensor:
    """L_KD = T^2 KL(p_T || q_T), p_T = softmax(v/T), q_T = softmax(z/T). Implements eq. 13.5.

    student_logits, teacher_logits: (..., K); T > 0. Returns (...)."""
    float_tensor(student_logits, "student_logits", not_empty=True)
    float_tensor(teacher_logits, "teacher_logits")
    same_shape(student_logits, teacher_logits, ("student_logits", "teacher_logits"))
    t = positive(T, "T")
    p_t = torch.softmax(teacher_logits / t, dim=-1)
    return t * t * kl_categorical(p_t, student_logits / t)


def distillation_grad(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, T: float
) -> torch.Tensor:
    """grad_z L_KD = T (q_T - p_T) (eq. 13.5). Logits: (..., K); T > 0."""
    float_tensor(student_logits, "student_logits", not_empty=True)
    float_tensor(teacher_logits, "teacher_logits")
    same_shape(student_logits, teacher_logits, ("student_logits", "teacher_logits"))
    t = positive(T, "T")
    q_t = torch.softmax(student_logits / t, dim=-1)
    p_t = torch.softmax(teacher_logits / t, dim=-1)
    return t * (q_t - p_t)


# --- forward and reverse KL between densities on a grid -------------------------------------------


def gaussian_log_density(x: torch.Tensor, mu, sigma) -> torch.Tensor:
    """log N(x; mu, sigma^2) elementwise; x, mu, sigma broadcast (sigma > 0)."""
    float_tensor(x, "x")  # its dtype is the result's (a NumPy array has none torch knows)
    mu_t = torch.as_tensor(mu, dtype=x.dtype)
    s = positive_entries(torch.as_tensor(sigma, dtype=x.dtype), "sigma")
    return -0.5 * ((x - mu_t) / s) ** 2 - torch.log(s) - 0.5 * math.log(2 * math.pi)


def kl_on_grid(log_p: torch.Tensor, log_q: torch.Tensor, dx: float) -> torch.Tensor:
    """KL(p || q) = integral p (log p - log q) dx as a Riemann sum, from log-densities.

    log_p, log_q: (..., X) on one uniform grid (broadcastable); dx > 0. Returns (...)."""
    float_tensor(log_p, "log_p", not_empty=True)
    float_tensor(log_q, "log_q", not_empty=True)
    h = positive(dx, "dx")
    return (torch.exp(log_p) * (log_p - log_q)).sum(dim=-1) * h


def fit_gaussian_kl(
    x: torch.Tensor, log_p: torch.Tensor, mus: torch.Tensor, sigmas: torch.Tensor, direction: str
):
    """Fit N(mu, sigma^2) to p by grid search on KL: "forward" KL(p || q) or "reverse" KL(q || p).

    x, log_p: (X,) uniform grid; mus: (M,); sigmas: (S,) > 0. Returns (mu, sigma, (S, M) table)."""
    float_tensor(x, "x", ndim=1, not_empty=True)
    same_shape(x, log_p, ("x", "log_p"))
    float_tensor(mus, "mus", ndim=1, not_empty=True)
    positive_entries(float_tensor(sigmas, "sigmas", ndim=1, not_empty=True), "sigmas")
    one_of(direction, "direction", ("forward", "reverse"))
    steps = x.diff()
    dx = float(steps.mean())
    if dx <= 0 or float((steps - dx).abs().max()) > 1e-9 * (1 + abs(dx)):
        raise ValueError("x must be an increasing uniform grid")
    rows = []
    for s in sigmas:  # one (M, X) slab at a time keeps memory small
        log_q = gaussian_log_density(x[None, :], mus[:, None], s)  # (M, X)
        if direction == "forward":
            rows.append(kl_on_grid(log_p[None, :], log_q, dx))  # (M,)
        else:
            rows.append(kl_on_grid(log_q, log_p[None, :], dx))
    table = torch.stack(rows)  # (S, M)
    i_s, i_m = divmod(int(torch.argmin(table)), table.shape[1])
    return float(mus[i_m]), float(sigmas[i_s]), table
