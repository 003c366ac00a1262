"""Scaling laws: power-law fits, the parametric loss, its compute-optimal allocation (ch. 29).

Training compute is counted in :mod:`mlbook.models.counting`: C ~ 6ND (eq. 29.1) is
:func:`~mlbook.models.counting.approx_training_flops`, the exact matrix-product count
:func:`~mlbook.models.counting.training_flops`. This module adds what a scaling study builds on
them: the power-law fit in log space (eq. 29.2); the parametric loss
L(N, D) = E + A/N^alpha + B/D^beta, its least-squares fit in log space and a bootstrap of that fit
(eq. 29.3); the compute-optimal allocation under C = 6ND in closed form beside a brute-force
search (eqs. 29.4-29.5); and the cost-aware selection score N^alpha exp(-beta Cost).
Published constants: :data:`HOFFMANN_2022`, :data:`BESIROGLU_2024`, :data:`KAPLAN_2020`.

One FLOP convention: a multiply-add is 2 FLOPs. Everything here is float64 NumPy.

Shape legend
    K  points of a fit (runs of a sweep);  M  budgets or sizes asked about;  S  bootstrap resamples
    n, d, loss  (K,) parameters N, tokens D and final losses L of the runs
    c  (M,) compute budgets C in FLOPs;  params  a LossParams (E, A, B, alpha, beta)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares

from ..validation import (
    float_array,
    integer,
    number,
    positive,
    positive_entries,
    positive_int,
    same_shape,
)

__all__ = [
    "LossParams",
    "HOFFMANN_2022",
    "BESIROGLU_2024",
    "KAPLAN_2020",
    "power_law",
    "fit_power_law",
    "parametric_loss",
    "fit_parametric_loss",
    "bootstrap_fit",
    "compute_optimal",
    "compute_optimal_naive",
    "tokens_per_parameter",
    "frontier_exponent",
    "log_selection_score",
    "best_size",
]


class LossParams(NamedTuple):
    """The five constants of L(N, D) = E + A / N^alpha + B / D^beta (eq. 29.3)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float


#: Hoffmann et al. (2022), approach 3: the fit of their >400 runs (loss in nats per token).
HOFFMANN_2022 = LossParams(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
#: Besiroglu et al. (2024): the same law refitted to data read off Hoffmann et al.'s figure.
BESIROGLU_2024 = LossParams(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658)
#: Kaplan et al. (2020): L(N) = (N_c / N)^alpha_N, L(D) = (D_c / D)^alpha_D (N without
#: embeddings), the compute frontier L ~ C^-alpha_C, and N_opt ~ C^a_N along it.
KAPLAN_2020 = {
    "alpha_N": 0.076,
    "alpha_D": 0.095,
    "alpha_C": 0.050,
    "N_c": 8.8e13,
    "D_c": 5.4e13,
    "a_N": 0.73,
}


def _params(params) -> LossParams:
    if not isinstance(params, LossParams):
        raise TypeError(f"params must be a LossParams, got {type(params).__name__}")
    for name, value in params._asdict().items():
        number(value, f"params.{name}", 0.0, open_low=name != "E")
    return params


def _positive_array(x, name: str) -> np.ndarray:
    """x as a float64 array of positive finite numbers (their logarithms are taken)."""
    return positive_entries(float_array(x, name, all_finite=True, not_empty=True), name)


# --- eq. 29.2: a power law is a line in log space ----------------------------------------------


def power_law(x, a: float, alpha: float) -> np.ndarray:
    """y = a x^-alpha, i.e. log y = log a - alpha log x (eq. 29.2). x: (K,) positive."""
    return positive(a, "a") * _positive_array(x, "x") ** -number(alpha, "alpha")


def fit_power_law(x, y) -> tuple[float, float, np.ndarray]:
    """Least squares of log y on log x: the line of eq. 29.2. Implements eq. 29.2.

    x, y: (K,) positive, K >= 3. Returns (a, alpha, cov): y ~ a x^-alpha, and the (2, 2)
    covariance of (log a, alpha) from the residual variance (K - 2 degrees of freedom).
    """
    x, y = _positive_array(x, "x"), _positive_array(y, "y")
    same_shape(x, y, ("x", "y"))
    integer(x.size, "the number of points (for a fit with an error)", low=3)
    X = np.stack([np.ones_like(x), -np.log(x)], axis=1)  # (K, 2) columns: log a, alpha
    coef, *_ = np.linalg.lstsq(X, np.log(y), rcond=None)
    resid = np.log(y) - X @ coef
    cov = resid @ resid / (x.size - 2) * np.linalg.inv(X.T @ X)  # (2, 2)
    return float(np.exp(coef[0])), float(coef[1]), cov


# --- eq. 29.3: the parametric loss and its fit --------------------------------------------------


def parametric_loss(n, d, params: LossParams) -> np.ndarray:
    """L(N, D) = E + A / N^alpha + B / D^beta. Implements eq. 29.3. n, d: broadcastable, > 0."""
    E, A, B, alpha, beta = _params(params)
    n, d = _positive_array(n, "n"), _positive_array(d, "d")
    return E + A * n**-alpha + B * d**-beta


def _log_terms(theta, cn, cd):
    """The log-terms (a - alpha cn, b - beta cd[, e]) of each point, cn, cd centred logs: (K, 3),
    or (K, 2) for a theta of four entries (no floor: E = 0)."""
    a, b, alpha, beta = theta[-4:]
    terms = [a - alpha * cn, b - beta * cd] + (
        [np.full_like(cn, theta[0])] if len(theta) == 5 else []
    )
    return np.stack(terms, axis=1)


def _residuals(theta, cn, cd, log_loss):
    """log(A N^-alpha + B D^-beta + E) - log L at every point, by a stable log-sum-exp: (K,)."""
    u = _log_terms(theta, cn, cd)  # (K, 3)
    top = u.max(axis=1)
    return top + np.log(np.exp(u - top[:, None]).sum(axis=1)) - log_loss


def _jacobian(theta, cn, cd, log_loss):
    """d residual / d ([e,] a, b, alpha, beta): the softmax weights of the terms, (K, 5 or 4)."""
    u = _log_terms(theta, cn, cd)
    w = np.exp(u - u.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)  # (K, 3) or (K, 2)
    cols = [w[:, 0], w[:, 1], -w[:, 0] * cn, -w[:, 1] * cd]
    return np.stack(([w[:, 2]] if len(theta) == 5 else []) + cols, axis=1)


def _logs(n, d, loss):
    n, d, loss = (_positive_array(v, k) for v, k in ((n, "n"), (d, "d"), (loss, "loss")))
    same_shape(n, d, ("n", "d"))
    same_shape(n, loss, ("n", "loss"))
    integer(n.size, "the number of runs (for five constants)", low=5)
    return np.log(n), np.log(d), np.log(loss)


def _least_squares(theta0, cn, cd, log_loss):
    return least_squares(
        _residuals,
        theta0,
        jac=_jacobian,
        args=(cn, cd, log_loss),
        method="lm",
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
    )


def _unpack(theta, mn: float, md: float) -> LossParams:
    """Constants from the centred parameters: A N^-alpha = exp(a - alpha (log N - mn))."""
    a, b, alpha, beta = theta[-4:]
    E = math.exp(theta[0]) if len(theta) == 5 else 0.0
    return LossParams(
        E, math.exp(a + alpha * mn), math.exp(b + beta * md), float(alpha), float(beta)
    )


def fit_parametric_loss(n, d, loss, *, floor: bool = True) -> LossParams:
    """Fit eq. 29.3 in log space: least squares of log(E + A N^-alpha + B D^-beta) - log L.

    Implements eq. 29.3. The unknowns are e = log E and, with log N and log D centred at their
    means mn, md, a = log A - alpha mn, b = log B - beta md, alpha, beta (centring decouples A
    from alpha); Levenberg-Marquardt runs from 18 starts and the best fit is kept.
    n, d, loss: (K,) positive, K >= 5 (five constants). floor=False fixes E = 0: two pure
    power laws, the fit without an irreducible loss.
    """
    log_n, log_d, log_loss = _logs(n, d, loss)
    mn, md = log_n.mean(), log_d.mean()
    low = log_loss.min()
    starts = [
        np.array([e, low - 1.0, low - 1.0, alpha, beta])
        for e in (low - 2.0, low - 0.3)
        for alpha in (0.2, 0.6, 1.2)
        for beta in (0.2, 0.6, 1.2)
    ]
    if not floor:
        starts = [s[1:] for s in starts[:9]]  # the nine (alpha, beta) starts, no e
    fits = [_least_squares(s, log_n - mn, log_d - md, log_loss) for s in starts]
    return _unpack(min(fits, key=lambda r: r.cost).x, mn, md)


def bootstrap_fit(n, d, loss, n_boot: int = 200, *, seed: int = 0) -> np.ndarray:
    """The fit of eq. 29.3 on ``n_boot`` resamples of the runs, drawn with replacement.

    Each refit starts from the fit to all runs. Returns (S, 5) float64, S = n_boot, rows
    (E, A, B, alpha, beta); the percentiles of a column are its bootstrap confidence interval.
    """
    log_n, log_d, log_loss = _logs(n, d, loss)
    positive_int(n_boot, "n_boot")
    mn, md = log_n.mean(), log_d.mean()
    full = fit_parametric_loss(n, d, loss)
    start = np.array(
        [
            math.log(full.E),
            math.log(full.A) - full.alpha * mn,
            math.log(full.B) - full.beta * md,
            full.alpha,
            full.beta,
        ]
    )
    rng = np.random.default_rng(seed)
    draws = np.empty((n_boot, 5))
    for s in range(n_boot):
        i = rng.integers(0, log_n.size, log_n.size)  # (K,) runs drawn with replacement
        fit = _least_squares(start, log_n[i] - mn, log_d[i] - md, log_loss[i])
        draws[s] = _unpack(fit.x, mn, md)
    return draws


# --- eqs. 29.4-29.5: the compute-optimal allocation ---------------------------------------------


def compute_optimal(c, params: LossParams) -> tuple[np.ndarray, np.ndarray]:
    """N_opt and D_opt minimising L(N, D) under 6 N D = C, in closed form. Implements eq. 29.4.

    alpha A N^-alpha = beta B D^-beta and N D = C / 6 give N_opt = G (C/6)^(beta/(alpha+beta)),
    D_opt = (C/6)^(alpha/(alpha+beta)) / G with G = (alpha A / (beta B))^(1/(alpha+beta)).
    c: (M,) budgets in FLOPs. Returns two (M,) arrays.
    """
    _, A, B, alpha, beta = _params(params)
    budget = _positive_array(c, "c") / 6  # N D
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    return G * budget ** (beta / (alpha + beta)), budget ** (alpha / (alpha + beta)) / G


def compute_optimal_naive(c, params: LossParams, points: int = 4001) -> tuple[np.ndarray, ...]:
    """The reference of :func:`compute_optimal`: L(N, C / (6N)) on a log grid of N, refined.

    For each budget, the grid minimum over N from 1 to C/6, then 60 golden-section steps in
    the bracket around it. The floor E does not move the minimum and is left out, so that the
    small reducible loss keeps its digits. Returns (N_opt, D_opt), two (M,) arrays.
    """
    budgets = _positive_array(c, "c")
    points = integer(points, "points", low=3)
    params = _params(params)._replace(E=0.0)  # A N^-alpha + B D^-beta: same argmin
    out = []
    for C in budgets:
        log_n = np.linspace(0.0, math.log(C / 6), points)
        loss = parametric_loss(np.exp(log_n), C / 6 / np.exp(log_n), params)
        i = int(np.clip(np.argmin(loss), 1, points - 2))
        lo, hi = log_n[i - 1], log_n[i + 1]
        g = (math.sqrt(5) - 1) / 2
        for _ in range(60):  # golden section on log N
            m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
            f1, f2 = (parametric_loss(math.exp(m), C / 6 / math.exp(m), params) for m in (m1, m2))
            lo, hi = (lo, m2) if f1 < f2 else (m1, hi)
        out.append(math.exp((lo + hi) / 2))
    n_opt = np.array(out)
    return n_opt, budgets / 6 / n_opt


def tokens_per_parameter(c, params: LossParams) -> np.ndarray:
    """D_opt / N_opt at the budgets c: (M,). Implements eq. 29.5, whose rule of thumb is 20."""
    n_opt, d_opt = compute_optimal(c, params)
    return d_opt / n_opt


def frontier_exponent(params: LossParams) -> float:
    """gamma = alpha beta / (alpha + beta): along the optimum, L - E falls as C^-gamma."""
    _, _, _, alpha, beta = _params(params)
    return alpha * beta / (alpha + beta)


# --- a cost-aware choice: Score = N^alpha exp(-beta Cost) ---------------------------------------


def log_selection_score(n, cost, alpha: float, beta: float) -> np.ndarray:
    """log Score = alpha log N - beta Cost, the log of N^alpha exp(-beta Cost).

    n, cost: (M,) candidate sizes and their costs (same shape); beta >= 0: the price of a unit
    of cost in units of log-quality. Returns (M,).
    """
    n, cost = _positive_array(n, "n"), float_array(cost, "cost", all_finite=True)
    same_shape(n, cost, ("n", "cost"))
    return positive(alpha, "alpha") * np.log(n) - number(beta, "beta", 0.0) * cost


def best_size(alpha: float, beta: float, cost_per_param: float) -> float:
    """The N maximising alpha log N - beta c N for Cost = c N: N* = alpha / (beta c)."""
    return positive(alpha, "alpha") / (positive(beta, "beta") * positive(cost_per_param, "c"))
