"""Loss functions and divergences: where the losses come from, and how to compute them safely.

Formula sheet, chapter 13. Every loss is the negative log-likelihood of some noise model or a
divergence between distributions; this module implements the ones of the sheet, each in a
numerically safe form beside the naive formula it must agree with.

Shape legend
    N      number of examples (residuals, logits, targets)
    D      number of parameters of a linear model (columns of the design matrix)
    K      number of classes of a categorical distribution
    B      batch size (rows of a (B, K) logit matrix)
    X      number of points of a 1-D integration grid
    M, S   numbers of candidate means and standard deviations of a grid search
    ...    any leading batch shape

Elementwise losses return one value per element (no reduction); the caller takes the mean or
the sum. Inputs are torch tensors of a floating dtype; bad input raises ``ValueError`` or
``TypeError`` naming the offending shape or value. The Gaussian negative log-likelihood lives in
:mod:`mlbook.foundations.probability` (``gaussian_nll``, chapter 6) and is not repeated here.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "squared_error",
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


# --- validation helpers ---------------------------------------------------------------------------


def _float_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    return x


def _same_shape(a: torch.Tensor, b: torch.Tensor, na: str, nb: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{na} and {nb} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def _positive(value: float, name: str) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def _check_targets01(y: torch.Tensor, binary: bool) -> None:
    if binary:
        if not torch.all((y == 0) | (y == 1)):
            raise ValueError("targets must be 0 or 1 for this loss")
    elif y.numel() and (y.min() < 0 or y.max() > 1):
        raise ValueError(
            f"targets must lie in [0, 1], got range [{float(y.min())}, {float(y.max())}]"
        )


def _check_probs(p: torch.Tensor, name: str) -> None:
    if p.ndim < 1 or p.shape[-1] < 2:
        raise ValueError(f"{name} must be (..., K) with K >= 2, got shape {tuple(p.shape)}")
    if not torch.all(torch.isfinite(p)) or p.min() < 0:
        raise ValueError(f"{name} must be finite and non-negative")
    tol = 1e-5 if p.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-10
    worst = float((p.sum(-1) - 1).abs().max())
    if worst > tol:
        raise ValueError(f"{name} rows must sum to 1 over the last axis; off by up to {worst:.3g}")


# --- eq. 13.1: squared and absolute error from Gaussian and Laplace likelihoods -------------------


def squared_error(residual: torch.Tensor) -> torch.Tensor:
    """r^2 per element: the Gaussian negative log-likelihood up to scale and shift (eq. 13.1).

    -log N(y; y_hat, sigma^2) = r^2 / (2 sigma^2) + log(sigma sqrt(2 pi)) with r = y - y_hat.

    Args:
        residual: (...) residuals r = y - y_hat.
    """
    r = _float_tensor(residual, "residual")
    return r * r


def absolute_error(residual: torch.Tensor) -> torch.Tensor:
    """|r| per element: the Laplace negative log-likelihood up to scale and shift (eq. 13.1).

    -log Laplace(y; y_hat, b) = |r| / b + log(2 b) with r = y - y_hat.

    Args:
        residual: (...) residuals r = y - y_hat.
    """
    r = _float_tensor(residual, "residual")
    return r.abs()


def laplace_nll(y: torch.Tensor, mean: torch.Tensor, b: float | torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of y under Laplace(mean, b) (eq. 13.1).

    The Laplace density is exp(-|y - mean| / b) / (2 b), so the average NLL is
    mean(|r|) / b + log(2 b): with b fixed, minimising it is minimising the mean absolute error.
    Its maximiser in b is b = mean(|r|).

    Args:
        y, mean: (N,) targets and predicted locations.
        b: scale, a positive scalar or (N,).
    """
    _float_tensor(y, "y")
    _float_tensor(mean, "mean")
    if y.shape != mean.shape or y.ndim != 1:
        raise ValueError(f"y and mean must both be (N,), got {tuple(y.shape)}, {tuple(mean.shape)}")
    bb = torch.as_tensor(b, dtype=y.dtype)
    if torch.any(bb <= 0) or not torch.all(torch.isfinite(bb)):
        raise ValueError("b must be positive and finite")
    return ((y - mean).abs() / bb + torch.log(2 * bb)).mean()


# --- eq. 13.2: the Huber loss ---------------------------------------------------------------------


def huber_loss(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Huber loss per element in branch-free form (eq. 13.2).

    With a = min(|r|, delta), the loss is a (|r| - a/2): for |r| <= delta that is r^2/2, for
    |r| > delta it is delta (|r| - delta/2). Quadratic near zero, linear in the tails, with value
    and slope continuous at |r| = delta. Equals ``F.huber_loss(r, 0, delta=delta)`` and
    ``delta * F.smooth_l1_loss(r, 0, beta=delta)``.

    Args:
        residual: (...) residuals r.
        delta: the threshold between the quadratic and the linear part, > 0.
    """
    r = _float_tensor(residual, "residual")
    d = _positive(delta, "delta")
    abs_r = r.abs()
    a = abs_r.clamp(max=d)
    return a * (abs_r - 0.5 * a)


def huber_loss_naive(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Huber loss per element, the two cases of eq. 13.2 written out (the reference)."""
    r = _float_tensor(residual, "residual")
    d = _positive(delta, "delta")
    return torch.where(r.abs() <= d, 0.5 * r**2, d * (r.abs() - 0.5 * d))


def huber_grad(residual: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """d ell_delta / dr per element: clip(r, -delta, delta), the bounded influence of eq. 13.2."""
    r = _float_tensor(residual, "residual")
    d = _positive(delta, "delta")
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
    """Fit theta = argmin sum_i rho(y_i - x_i theta) by iteratively reweighted least squares.

    Each step solves a weighted least-squares problem with weights w_i = psi(r_i) / r_i of the
    current residuals: 1 for ``"l2"`` (eq. 13.1, one step is exact), 1/|r_i| for ``"l1"``
    (eq. 13.1, the Laplace MLE; |r_i| floored at ``eps``) and min(1, delta/|r_i|) for ``"huber"``
    (eq. 13.2). The weights come from a quadratic upper bound of rho that touches it at the
    current residuals, so the objective never increases (a majorise-minimise step).

    Args:
        X: (N, D) design matrix (include a column of ones for an intercept).
        y: (N,) targets.
        loss: ``"l2"``, ``"l1"`` or ``"huber"``.
        delta: the Huber threshold (only for ``"huber"``).
        n_iter: maximum number of reweighting steps.
        eps: floor of |r| in the weights, so a residual of exactly 0 does not divide by 0.
        tol: stop when no parameter moves by more than ``tol`` (times 1 + |theta|).

    Returns:
        (D,) fitted parameters, in the dtype of X.
    """
    _float_tensor(X, "X")
    _float_tensor(y, "y")
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"need X (N, D) and y (N,), got {tuple(X.shape)} and {tuple(y.shape)}")
    if X.shape[0] < X.shape[1]:
        raise ValueError(f"need at least as many rows as columns, got X {tuple(X.shape)}")
    if loss not in ("l2", "l1", "huber"):
        raise ValueError(f"loss must be 'l2', 'l1' or 'huber', got {loss!r}")
    d = _positive(delta, "delta")
    if n_iter < 1:
        raise ValueError(f"n_iter must be positive, got {n_iter}")
    _positive(eps, "eps")
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
    """Binary cross-entropy per element from logits, in the stable form of eq. 13.3.

    -[y log sigma(z) + (1 - y) log(1 - sigma(z))] = softplus(z) - z y
    = max(z, 0) - z y + log(1 + exp(-|z|)). The exponent -|z| is never positive, so nothing
    overflows, and log1p keeps the last term accurate when exp(-|z|) is tiny.

    Args:
        logits: (...) logits z.
        targets: (...) targets y in [0, 1] (soft labels allowed).
    """
    z = _float_tensor(logits, "logits")
    y = _float_tensor(targets, "targets")
    _same_shape(z, y, "logits", "targets")
    _check_targets01(y, binary=False)
    return z.clamp(min=0) - z * y + torch.log1p(torch.exp(-z.abs()))


def bce_naive(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy through sigma(z) = 1/(1 + exp(-z)) (the textbook formula, unsafe).

    For large |z| sigma(z) rounds to exactly 0 or 1 and a logarithm of 0 appears: the result is
    inf, or nan where it is multiplied by a zero target weight. Kept to show why eq. 13.3 exists.
    """
    z = _float_tensor(logits, "logits")
    y = _float_tensor(targets, "targets")
    _same_shape(z, y, "logits", "targets")
    _check_targets01(y, binary=False)
    p = 1.0 / (1.0 + torch.exp(-z))
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p))


def bce_grad(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """dL/dz = sigma(z) - y per element (eq. 13.3): prediction minus target."""
    z = _float_tensor(logits, "logits")
    y = _float_tensor(targets, "targets")
    _same_shape(z, y, "logits", "targets")
    _check_targets01(y, binary=False)
    return torch.sigmoid(z) - y


# --- eq. 13.4: the focal loss ---------------------------------------------------------------------


def _alpha_t(y: torch.Tensor, alpha: float | None) -> torch.Tensor | float:
    if alpha is None:
        return 1.0
    a = float(alpha)
    if not 0 <= a <= 1:
        raise ValueError(f"alpha must lie in [0, 1] (or be None), got {alpha!r}")
    return torch.where(y == 1, y.new_tensor(a), y.new_tensor(1 - a))


def focal_loss(
    logits: torch.Tensor, targets: torch.Tensor, gamma: float = 2.0, alpha: float | None = None
) -> torch.Tensor:
    """Focal loss per element, -alpha_t (1 - p_t)^gamma log p_t, computed from logits (eq. 13.4).

    With p = sigma(z), p_t = p for y = 1 and 1 - p for y = 0, which is sigma(z_t) for the signed
    logit z_t = z (y = 1) or -z (y = 0). Both logarithms come from the stable eq. 13.3:
    log p_t = -bce(z_t, 1) and log(1 - p_t) = log sigma(-z_t) = -bce(-z_t, 1), and the modulating
    factor is (1 - p_t)^gamma = exp(gamma log(1 - p_t)). gamma = 0 and alpha = None give BCE.

    Args:
        logits: (...) logits z.
        targets: (...) binary targets y in {0, 1}.
        gamma: focusing parameter, >= 0.
        alpha: weight of the positive class (alpha_t = alpha for y = 1, 1 - alpha for y = 0);
            None for no class weighting (alpha_t = 1).
    """
    z = _float_tensor(logits, "logits")
    y = _float_tensor(targets, "targets")
    _same_shape(z, y, "logits", "targets")
    _check_targets01(y, binary=True)
    g = float(gamma)
    if not (math.isfinite(g) and g >= 0):
        raise ValueError(f"gamma must be finite and >= 0, got {gamma!r}")
    zt = torch.where(y == 1, z, -z)  # signed logit: p_t = sigma(z_t)
    ones = torch.ones_like(zt)
    log_pt = -bce_with_logits(zt, ones)
    log_1m_pt = -bce_with_logits(-zt, ones)
    return -_alpha_t(y, alpha) * torch.exp(g * log_1m_pt) * log_pt


def focal_loss_naive(
    logits: torch.Tensor, targets: torch.Tensor, gamma: float = 2.0, alpha: float | None = None
) -> torch.Tensor:
    """Focal loss per element, eq. 13.4 written literally through p = sigmoid(z) (the reference)."""
    z = _float_tensor(logits, "logits")
    y = _float_tensor(targets, "targets")
    _same_shape(z, y, "logits", "targets")
    _check_targets01(y, binary=True)
    if not float(gamma) >= 0:
        raise ValueError(f"gamma must be >= 0, got {gamma!r}")
    p = torch.sigmoid(z)
    pt = torch.where(y == 1, p, 1 - p)
    return -_alpha_t(y, alpha) * (1 - pt) ** gamma * torch.log(pt)


# --- eq. 13.5: KL divergence and distillation -----------------------------------------------------


def kl_categorical(p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p || softmax(z)) per row, with the log-softmax computed stably (eq. 13.5).

    KL(p || q) = sum_k p_k (log p_k - log q_k), with 0 log 0 = 0 (``torch.xlogy``) so that
    classes with p_k = 0 contribute nothing, and log q = log_softmax(z) never underflows.

    Args:
        p: (..., K) target probabilities (each row sums to 1).
        logits: (..., K) logits z of the model distribution q = softmax(z).

    Returns:
        (...) divergences, >= 0.
    """
    _float_tensor(p, "p")
    z = _float_tensor(logits, "logits")
    _same_shape(p, z, "p", "logits")
    _check_probs(p, "p")
    log_q = torch.log_softmax(z, dim=-1)
    return (torch.xlogy(p, p) - p * log_q).sum(dim=-1)


def kl_categorical_naive(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum_k p_k log(p_k / q_k) per row, literally (the reference; needs p, q > 0)."""
    _float_tensor(p, "p")
    _float_tensor(q, "q")
    _same_shape(p, q, "p", "q")
    _check_probs(p, "p")
    _check_probs(q, "q")
    return (p * torch.log(p / q)).sum(dim=-1)


def kl_grad_logits(p: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """grad_z KL(p || softmax(z)) = softmax(z) - p (eq. 13.5, first part).

    Only -sum_k p_k log q_k depends on z, and grad_z log q_k = e_k - q, so the gradient is
    -sum_k p_k (e_k - q) = q sum_k p_k - p = q - p because the rows of p sum to 1.

    Args:
        p: (..., K) target probabilities.
        logits: (..., K) logits z.
    """
    _float_tensor(p, "p")
    z = _float_tensor(logits, "logits")
    _same_shape(p, z, "p", "logits")
    _check_probs(p, "p")
    return torch.softmax(z, dim=-1) - p


def _check_distill(student: torch.Tensor, teacher: torch.Tensor, T: float) -> float:
    _float_tensor(student, "student_logits")
    _float_tensor(teacher, "teacher_logits")
    _same_shape(student, teacher, "student_logits", "teacher_logits")
    if student.ndim < 1 or student.shape[-1] < 2:
        raise ValueError(f"logits must be (..., K) with K >= 2, got {tuple(student.shape)}")
    return _positive(T, "temperature T")


def distillation_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, T: float
) -> torch.Tensor:
    """L_KD = T^2 KL(p_T || q_T) per row, p_T = softmax(v / T), q_T = softmax(z / T) (eq. 13.5).

    The factor T^2 (Hinton et al., 2015) undoes the 1/T^2 by which the gradient of the
    softened KL shrinks, so the distillation term keeps its weight when T changes; with it the
    gradient with respect to the student logits z is exactly T (q_T - p_T).

    Args:
        student_logits: (..., K) student logits z.
        teacher_logits: (..., K) teacher logits v (treated as constants).
        T: temperature, > 0.

    Returns:
        (...) losses.
    """
    t = _check_distill(student_logits, teacher_logits, T)
    p_t = torch.softmax(teacher_logits / t, dim=-1)
    return t * t * kl_categorical(p_t, student_logits / t)


def distillation_grad(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, T: float
) -> torch.Tensor:
    """grad_z L_KD = T (q_T - p_T) (eq. 13.5, second part).

    Chain rule: grad_z KL(p_T || softmax(z/T)) = (1/T)(q_T - p_T) by the first part of eq. 13.5
    applied to the logits z/T; multiplying by T^2 leaves T (q_T - p_T).

    Args:
        student_logits: (..., K) student logits z.
        teacher_logits: (..., K) teacher logits v.
        T: temperature, > 0.
    """
    t = _check_distill(student_logits, teacher_logits, T)
    q_t = torch.softmax(student_logits / t, dim=-1)
    p_t = torch.softmax(teacher_logits / t, dim=-1)
    return t * (q_t - p_t)


# --- forward and reverse KL between densities on a grid -------------------------------------------


def gaussian_log_density(x: torch.Tensor, mu, sigma) -> torch.Tensor:
    """log N(x; mu, sigma^2) elementwise; x, mu, sigma broadcast together (sigma > 0)."""
    _float_tensor(x, "x")
    mu_t = torch.as_tensor(mu, dtype=x.dtype)
    s = torch.as_tensor(sigma, dtype=x.dtype)
    if torch.any(s <= 0):
        raise ValueError("sigma must be positive")
    return -0.5 * ((x - mu_t) / s) ** 2 - torch.log(s) - 0.5 * math.log(2 * math.pi)


def kl_on_grid(log_p: torch.Tensor, log_q: torch.Tensor, dx: float) -> torch.Tensor:
    """KL(p || q) = integral p (log p - log q) dx as a Riemann sum on a uniform grid.

    Takes log-densities so that nothing is computed as 0 * log 0: where p underflows to 0 the
    term is exactly 0, and log q stays finite. On a grid that covers both densities' mass, the
    sum is as accurate as the trapezoidal rule (the end terms are negligible).

    Args:
        log_p, log_q: (..., X) log-densities on the same uniform grid (broadcastable).
        dx: grid spacing, > 0.

    Returns:
        (...) the divergences.
    """
    _float_tensor(log_p, "log_p")
    _float_tensor(log_q, "log_q")
    h = _positive(dx, "dx")
    try:
        torch.broadcast_shapes(log_p.shape, log_q.shape)
    except RuntimeError:
        raise ValueError(
            f"log_p {tuple(log_p.shape)} and log_q {tuple(log_q.shape)} do not broadcast"
        ) from None
    return (torch.exp(log_p) * (log_p - log_q)).sum(dim=-1) * h


def fit_gaussian_kl(
    x: torch.Tensor, log_p: torch.Tensor, mus: torch.Tensor, sigmas: torch.Tensor, direction: str
):
    """Fit N(mu, sigma^2) to a density p by grid search, minimising a KL divergence.

    ``"forward"`` minimises KL(p || q): q is punished wherever p has mass and q has little, so
    it spreads to cover all of p (mass-covering; for Gaussian q the minimiser matches p's mean
    and variance). ``"reverse"`` minimises KL(q || p): q is punished wherever it puts mass
    that p lacks, so it settles inside one mode (mode-seeking).

    Args:
        x: (X,) uniform grid.
        log_p: (X,) log-density of the target on the grid.
        mus: (M,) candidate means.
        sigmas: (S,) candidate standard deviations, > 0.
        direction: ``"forward"`` or ``"reverse"``.

    Returns:
        (mu, sigma, table): the best pair as floats and the (S, M) table of divergences.
    """
    for t, name in ((x, "x"), (log_p, "log_p"), (mus, "mus"), (sigmas, "sigmas")):
        _float_tensor(t, name)
        if t.ndim != 1 or t.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 1-D tensor, got {tuple(t.shape)}")
    if x.shape != log_p.shape or x.numel() < 3:
        raise ValueError(
            f"x and log_p must be (X,) with X >= 3, got {tuple(x.shape)}, {tuple(log_p.shape)}"
        )
    steps = x.diff()
    dx = float(steps.mean())
    if dx <= 0 or float((steps - dx).abs().max()) > 1e-9 * (1 + abs(dx)):
        raise ValueError("x must be an increasing uniform grid")
    if direction not in ("forward", "reverse"):
        raise ValueError(f"direction must be 'forward' or 'reverse', got {direction!r}")
    if torch.any(sigmas <= 0):
        raise ValueError("sigmas must be positive")
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
