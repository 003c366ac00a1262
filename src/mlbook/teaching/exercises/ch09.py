"""Checks of the exercises of chapter 9 (learning from data).

The references are independent of :mod:`mlbook.foundations.linear_models` wherever the answer is not
asked to call it: ridge solutions from ``torch.linalg.lstsq`` on the augmented system ``[X; sqrt(N
l2) I]``, the gradient-descent iterates in closed form from ``torch.linalg.eigh``, condition numbers
from the singular values that the check prescribes, logistic losses from
``F.binary_cross_entropy_with_logits`` along a gradient-descent loop written out here, separability
from data built to be separable or not, and the training R^2 of least squares on pure noise from
``torch.linalg.lstsq``. Where the exercise names the package's solvers (the relative errors of
``normal_equations`` and ``least_squares_qr``), the check also verifies the predicted sizes
``kappa^2 eps`` and ``kappa eps``.

Each typical wrong answer is written once, as a function below its check's helpers: the check
computes the wrong value from it, and ``MISTAKES`` lists it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linprog

from ...foundations import linear_models as lm
from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


# --- 9.1 ridge regression with the protocol -------------------------------------------------------


def _ridge_lstsq(X: torch.Tensor, y: torch.Tensor, l2: float) -> torch.Tensor:
    """argmin (1/N)||X theta - y||^2 + l2 ||theta||^2 as the least-squares problem of the stacked
    matrix [X; sqrt(N l2) I]: never forms X^T X, never uses the normal equations."""
    n, d = X.shape
    A = torch.cat([X, math.sqrt(n * l2) * torch.eye(d, dtype=X.dtype)])  # (N + D, D)
    b = torch.cat([y, torch.zeros(d, dtype=X.dtype)])  # (N + D,)
    return torch.linalg.lstsq(A, b[:, None], driver="gelsd").solution[:, 0]


def ridge_without_n(X, y, l2):
    return _ridge_lstsq(X, y, l2 / X.shape[0])  # the system X^T X + l2 I


def ridge_half(X, y, l2):
    return _ridge_lstsq(X, y, l2 / 2)


def ridge_double(X, y, l2):
    return _ridge_lstsq(X, y, 2 * l2)


def ridge_plain(X, y, l2):
    return _ridge_lstsq(X, y, 0.0)  # least squares, no penalty


def ridge_flipped_sign(X, y, l2):
    n, d = X.shape
    return torch.linalg.solve(X.T @ X - n * l2 * torch.eye(d, dtype=X.dtype), X.T @ y)


_RIDGE_MISTAKES = [
    (
        ridge_without_n,
        "the penalty is missing the factor N: with the mean (1/N)||X theta - y||^2 the "
        "system is (X^T X + N l2 I) theta = X^T y",
        True,
    ),
    (
        ridge_half,
        "the factor 2 is off: the gradient is (2/N) X^T (X theta - y) + 2 l2 theta, so "
        "the system has N l2 I, not N l2 I / 2",
        True,
    ),
    (ridge_double, "the factor 2 is off: the system has N l2 I, not 2 N l2 I", True),
    (ridge_plain, "the penalty is missing: that is plain least squares", False),
    (ridge_flipped_sign, "the sign of the penalty is flipped: it adds N l2 I to X^T X", False),
]  # (answer, feedback, applies when N < D)


def _ridge_cases() -> list[tuple[torch.Tensor, torch.Tensor, float, str]]:
    gen = torch.Generator().manual_seed(91)
    cases = []
    for n, d, l2, what in [
        (50, 8, 0.3, "N = 50, D = 8, l2 = 0.3"),
        (50, 8, 0.01, "N = 50, D = 8, l2 = 0.01"),
        (10, 20, 0.1, "N = 10 < D = 20, l2 = 0.1"),
    ]:
        X = torch.randn(n, d, generator=gen, dtype=F64) + 0.5
        y = X @ torch.randn(d, generator=gen, dtype=F64) + torch.randn(n, generator=gen, dtype=F64)
        cases.append((X, y, l2, what))
    return cases


def _diabetes_protocol_data():
    """The diabetes features with their 45 pairwise products, split 60/20/20 by a fixed seed."""
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    X = torch.tensor(data.data, dtype=F64)  # (442, 10)
    pairs = torch.triu_indices(10, 10, offset=1)  # (2, 45)
    X = torch.cat([X, X[:, pairs[0]] * X[:, pairs[1]]], dim=1)  # (442, 55)
    y = torch.tensor(data.target, dtype=F64)
    perm = torch.randperm(442, generator=torch.Generator().manual_seed(911))
    tr, va = perm[:266], perm[266:354]
    return X[tr], y[tr], X[va], y[va]


def _protocol_mse(
    X_tr,
    y_tr,
    X_va,
    y_va,
    grid,
    *,
    leak=False,
    y_shift=None,
    va_shift=None,
    on_training=False,
    ddof=0,
    n_factor=True,
):
    """Validation MSE of ridge for each l2 of grid, with switches for the typical mistakes."""
    rows = torch.cat([X_tr, X_va]) if leak else X_tr
    mean, std = rows.mean(dim=0), rows.std(dim=0, correction=ddof)
    Z_tr, Z_va = (X_tr - mean) / std, (X_va - mean) / std
    mu = y_tr.mean() if y_shift is None else y_shift
    mu_va = mu if va_shift is None else va_shift(y_va)
    t_tr, t_va = y_tr - mu, y_va - mu_va
    out = []
    for l2 in grid:
        theta = _ridge_lstsq(Z_tr, t_tr, l2 if n_factor else l2 / len(y_tr))
        Z, t = (Z_tr, t_tr) if on_training else (Z_va, t_va)
        out.append(((Z @ theta - t) ** 2).mean())
    return torch.stack(out)


def _pick(grid, val_mse, *, index=False):
    """The pair (best, val_mse): the strength with the smallest MSE (or, wrongly, its index)."""
    i = int(torch.argmin(val_mse))
    return (i if index else float(grid[i])), val_mse


def select_leaky(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid, leak=True))


def select_uncentred(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid, y_shift=0.0))


def select_own_mean(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid, va_shift=torch.mean))


def select_on_training(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid, on_training=True))


def select_unbiased_std(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid, ddof=1))


def select_without_n(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid, n_factor=False))


def select_index(X_tr, y_tr, X_va, y_va, grid):
    return _pick(grid, _protocol_mse(X_tr, y_tr, X_va, y_va, grid), index=True)


def select_worst(X_tr, y_tr, X_va, y_va, grid):
    val = _protocol_mse(X_tr, y_tr, X_va, y_va, grid)
    return float(grid[int(torch.argmax(val))]), val


def select_single(X_tr, y_tr, X_va, y_va, grid):
    return _protocol_mse(X_tr, y_tr, X_va, y_va, grid)  # the MSEs alone, not the pair


_SELECT_MISTAKES = [
    (
        select_leaky,
        "the standardisation used the statistics of the training AND validation rows; only the "
        "training rows may set them, or the validation rows leak into the model",
    ),
    (
        select_uncentred,
        "the targets are not centred: the model has no intercept, so centre y_tr and y_va with "
        "the training mean",
    ),
    (
        select_own_mean,
        "the validation targets are centred with their own mean; use the training mean for "
        "both (the validation rows may not set any statistic)",
    ),
    (
        select_on_training,
        "these are training MSEs; the candidates are compared on the validation rows",
    ),
    (
        select_unbiased_std,
        "the standard deviation is the unbiased one (N - 1); lm.standardise divides by N",
    ),
    (select_without_n, "the ridge fits are missing the factor N of the penalty (see ridge)"),
]


@exercise("9.1", "ridge", "select_l2")
def ridge_protocol(ridge, select_l2) -> str:
    """ridge against lstsq of the augmented system; select_l2 against the protocol on diabetes."""
    for X, y, l2, what in _ridge_cases():
        n, d = X.shape
        expect_answer(
            attempt(ridge, X.clone(), y.clone(), l2),
            _ridge_lstsq(X, y, l2),
            f"ridge(X, y, l2) for {what}",
            wrong={fb: m(X, y, l2) for m, fb, wide in _RIDGE_MISTAKES if n >= d or wide},
            atol=1e-9,
            rtol=1e-7,
        )

    X_tr, y_tr, X_va, y_va = _diabetes_protocol_data()
    grid = [0.0] + [float(10.0**e) for e in np.arange(-3, 0.51, 0.5)]
    data = (X_tr, y_tr, X_va, y_va, grid)
    got = attempt(select_l2, X_tr.clone(), y_tr.clone(), X_va.clone(), y_va.clone(), list(grid))
    expect(
        isinstance(got, (tuple, list)) and len(got) == 2,
        "select_l2 should return a pair (best, val_mse)",
    )
    best, val_mse = got
    want = _protocol_mse(*data)
    expect_answer(
        val_mse,
        want,
        "val_mse of select_l2 on the diabetes features with pairwise products",
        wrong={fb: m(*data)[1] for m, fb in _SELECT_MISTAKES},
        atol=1e-6,
        rtol=1e-8,
    )
    expect_answer(
        best,
        _pick(grid, want)[0],
        "best of select_l2",
        wrong={
            "that is the strength with the LARGEST validation MSE": select_worst(*data)[0],
            "that is the index of the best strength in grid, not the strength itself": (
                _pick(grid, want, index=True)[0]
            ),
        },
        atol=1e-12,
        rtol=1e-9,
    )
    return (
        "ridge matches lstsq of the augmented system (N < D included); select_l2 standardises "
        "with training statistics and picks the validation minimum on diabetes"
    )


# --- 9.2 the edge of stability --------------------------------------------------------------------


def _toy_problem():
    """The two-parameter line fit of §9.4: inputs centred at 1.5, so H is tilted."""
    gen = torch.Generator().manual_seed(92)
    x = 1.5 + torch.randn(100, generator=gen, dtype=F64)
    y = 1.0 + 2.0 * x + 0.8 * torch.randn(100, generator=gen, dtype=F64)
    X = torch.stack([torch.ones(100, dtype=F64), x], dim=1)  # (100, 2)
    return X, y


def _hessians() -> list[tuple[torch.Tensor, str]]:
    X, _ = _toy_problem()
    gen = torch.Generator().manual_seed(921)
    A = torch.randn(3, 3, generator=gen, dtype=F64)
    return [
        (2 * X.T @ X / X.shape[0], "the 2 x 2 Hessian of §9.4"),
        (A @ A.T + 0.3 * torch.eye(3, dtype=F64), "a 3 x 3 Hessian"),
    ]


def _cos(u: torch.Tensor, v: torch.Tensor) -> float:
    """|cos| of the angle between two unit vectors (eigenvectors have no sign)."""
    return float((u @ v).abs())


def rho_no_abs(H, eta):
    return float((1 - eta * torch.linalg.eigvalsh(H)).max())


def rho_top_only(H, eta):
    return float((1 - eta * torch.linalg.eigvalsh(H)[-1]).abs())


def rho_bottom_only(H, eta):
    return float((1 - eta * torch.linalg.eigvalsh(H)[0]).abs())


_RHO_MISTAKES = [
    (
        rho_no_abs,
        "the absolute value is missing: a factor 1 - eta lambda below -1 flips sign AND grows",
    ),
    (
        rho_top_only,
        "only lambda_max counts here; rho is the max over ALL eigenvalues (small steps are "
        "limited by lambda_min)",
    ),
    (
        rho_bottom_only,
        "only lambda_min counts here; rho is the max over ALL eigenvalues (near the edge "
        "lambda_max dominates)",
    ),
]


def slowest_row(H, eta):
    lam, Q = torch.linalg.eigh(H)
    return Q[int((1 - eta * lam).abs().argmax())]


def slowest_no_abs(H, eta):
    lam, Q = torch.linalg.eigh(H)
    return Q[:, int((1 - eta * lam).argmax())]


def slowest_always_top(H, eta):
    return torch.linalg.eigh(H)[1][:, -1]


def _closed_distance(X, y, theta0, eta, t):
    """||theta_t - theta_hat|| after t steps of gradient descent, in the eigenbasis of H."""
    lam, Q = torch.linalg.eigh(2 * X.T @ X / X.shape[0])
    theta_hat = torch.linalg.lstsq(X, y[:, None], driver="gelsd").solution[:, 0]
    return float(((1 - eta * lam) ** t * (Q.T @ (theta0 - theta_hat))).norm())


def _closed_ratio(X, y, theta0, eta, steps, window, *, shift=0):
    return _closed_distance(X, y, theta0, eta, steps) / _closed_distance(
        X, y, theta0, eta, steps - window + shift
    )


def ratio_upside_down(X, y, theta0, eta, steps, window):
    return 1 / _closed_ratio(X, y, theta0, eta, steps, window)


def ratio_off_by_one(X, y, theta0, eta, steps, window):
    return _closed_ratio(X, y, theta0, eta, steps, window, shift=1)  # T - window + 1


def ratio_off_by_one_below(X, y, theta0, eta, steps, window):
    return _closed_ratio(X, y, theta0, eta, steps, window, shift=-1)  # T - window - 1


def ratio_squared(X, y, theta0, eta, steps, window):
    return _closed_ratio(X, y, theta0, eta, steps, window) ** 2


_RATIO_MISTAKES = [
    (ratio_upside_down, "the ratio is upside down: the later distance goes on top"),
    (ratio_off_by_one, "the window is off by one: compare step T with step T - window"),
    (
        ratio_off_by_one_below,
        "the window is off by one: compare step T with step T - window, not T - window - 1",
    ),
    (
        ratio_squared,
        "that is the ratio of squared distances (or of excess losses); take the norms",
    ),
]


@exercise("9.2", "contraction_factor", "slowest_direction", "distance_ratio")
def edge_of_stability(contraction_factor, slowest_direction, distance_ratio) -> str:
    """rho(eta) and the slowest eigenvector from eigh; the distance ratio in closed form."""
    for H, what in _hessians():
        lam, Q = torch.linalg.eigh(H)  # ascending
        for mult in (0.5, 0.99, 1.01):
            eta = mult * 2 / float(lam[-1])
            factors = (1 - eta * lam).abs()  # (D,)
            expect_answer(
                attempt(contraction_factor, H.clone(), eta),
                factors.max(),
                f"contraction_factor(H, {mult} x 2/lambda_max) for {what}",
                wrong={fb: m(H, eta) for m, fb in _RHO_MISTAKES},
                atol=1e-12,
                rtol=1e-9,
            )
            label = f"slowest_direction(H, {mult} x 2/lambda_max) for {what}"
            got = as_tensor(attempt(slowest_direction, H.clone(), eta), label, (H.shape[0],))
            expect(
                bool(torch.isfinite(got).all()) and abs(float(got.norm()) - 1) < 1e-8,
                f"{label} should be a unit vector",
            )
            if _cos(got, Q[:, int(factors.argmax())]) < 1 - 1e-8:
                if _cos(got, slowest_row(H, eta)) > 1 - 1e-8:
                    raise Incorrect(
                        f"{label}: that is a ROW of the eigenvector matrix; torch.linalg.eigh "
                        f"returns the eigenvectors as columns, Q[:, i]"
                    )
                if _cos(got, slowest_no_abs(H, eta)) > 1 - 1e-8:
                    raise Incorrect(
                        f"{label}: the factor is |1 - eta lambda_i|; without the absolute "
                        f"value the flipping top direction is missed"
                    )
                raise Incorrect(
                    f"{label} is not the eigenvector with the largest |1 - eta lambda_i|"
                )

    X, y = _toy_problem()
    lam_max = float(torch.linalg.eigvalsh(2 * X.T @ X / X.shape[0])[-1])
    theta0 = torch.tensor([-1.0, 4.5], dtype=F64)
    for mult, steps, window in [(0.99, 300, 100), (1.01, 300, 100), (0.5, 200, 50)]:
        eta = mult * 2 / lam_max
        case = (X, y, theta0, eta, steps, window)
        expect_answer(
            attempt(distance_ratio, X.clone(), y.clone(), theta0.clone(), eta, steps, window),
            _closed_ratio(*case),
            f"distance_ratio at eta = {mult} x 2/lambda_max, {steps} steps, window {window}",
            wrong={fb: m(*case) for m, fb in _RATIO_MISTAKES},
            atol=1e-12,
            rtol=1e-6,
        )
    return (
        "rho(eta) and the slowest eigenvector match eigh for 2 Hessians at 3 step sizes; the "
        "distance ratio matches the closed form at 0.5, 0.99 and 1.01 x 2/lambda_max"
    )


# --- 9.3 normal equations square the condition number ---------------------------------------------


def cond_not_squared(X):
    return float(torch.linalg.cond(X))


def cond_of_gram(X):
    return float(torch.linalg.cond(X.T @ X))


def _solver_error_parts(X, theta_star):
    """(absolute errors, relative errors, relative residuals) of the normal equations and QR."""
    y = X @ theta_star
    sols = [lm.normal_equations(X, y), lm.least_squares_qr(X, y)]
    abs_err = torch.stack([(t - theta_star).norm() for t in sols])
    resid = torch.stack([(X @ t - y).norm() / y.norm() for t in sols])
    return abs_err, abs_err / theta_star.norm(), resid


def errors_absolute(X, theta_star):
    return _solver_error_parts(X, theta_star)[0]


def errors_swapped(X, theta_star):
    return _solver_error_parts(X, theta_star)[1].flip(0)


def errors_of_residual(X, theta_star):
    return _solver_error_parts(X, theta_star)[2]


@exercise("9.3", "with_singular_values", "gram_condition", "solver_errors")
def condition_number(with_singular_values, gram_condition, solver_errors) -> str:
    """Prescribed singular values; cond(X^T X) = cond(X)^2; errors of the order kappa^2 eps and
    kappa eps."""
    eps = torch.finfo(F64).eps
    for kappa in (1e6, 1e8):
        s = torch.logspace(0, -math.log10(kappa), 6, dtype=F64)  # (6,) descending
        what = f"with_singular_values(s, 200, generator) for kappa = 1e{round(math.log10(kappa))}"
        X, X2, X3 = (
            as_tensor(
                attempt(with_singular_values, s.clone(), 200, torch.Generator().manual_seed(seed)),
                what,
                (200, 6),
            )
            for seed in (93, 93, 94)
        )
        expect_answer(
            torch.linalg.svdvals(X),
            s,
            f"the singular values of {what}",
            wrong={
                "the singular values came out squared: X = U diag(s) V^T uses s itself": s**2,
                "the singular values came out as square roots: X = U diag(s) V^T uses s "
                "itself": s.sqrt(),
            },
            atol=1e-14,
            rtol=1e-7,
        )
        expect(
            float((X == 0).double().mean()) < 0.5,
            f"{what} is mostly zeros: rotate diag(s) by random orthonormal factors U and V",
        )
        expect(
            torch.equal(X, X2),
            f"{what}: the same seed must give the same matrix (draw with `generator`)",
        )
        expect(
            not torch.allclose(X, X3),
            f"{what}: another seed must give another matrix (draw "
            f"the random factors with `generator`)",
        )
        expect_answer(
            attempt(gram_condition, X.clone()),
            kappa**2,
            f"gram_condition(X) for kappa = 1e{round(math.log10(kappa))}",
            wrong={
                "that is cond(X); cond(X^T X) is its square, since the singular "
                "values of X^T X = V S^2 V^T are s_i^2": cond_not_squared(X),
                "forming X^T X loses its small eigenvalues to rounding; compute the "
                "condition number from the singular values of X": cond_of_gram(X),
            },
            atol=0.0,
            rtol=1e-6,
        )

    for kappa, seed in ((1e6, 931), (1e7, 932)):
        gen = torch.Generator().manual_seed(seed)
        s = torch.logspace(0, -math.log10(kappa), 6, dtype=F64)
        U, _ = torch.linalg.qr(torch.randn(200, 6, generator=gen, dtype=F64))
        V, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=F64))
        X = U @ torch.diag(s) @ V.T  # (200, 6)
        theta_star = 3 * torch.randn(6, generator=gen, dtype=F64)
        got = expect_answer(
            attempt(solver_errors, X.clone(), theta_star.clone()),
            _solver_error_parts(X, theta_star)[1],
            f"solver_errors(X, theta_star) for kappa = 1e{round(math.log10(kappa))}",
            wrong={
                "the order is swapped: normal equations first, then QR": errors_swapped(
                    X, theta_star
                ),
                "these are absolute errors; divide by ||theta_star||": errors_absolute(
                    X, theta_star
                ),
                "these are relative residuals ||X theta - y|| / ||y||, tiny for both solvers; "
                "the error is measured in theta": errors_of_residual(X, theta_star),
            },
            atol=0.0,
            rtol=1e-6,
        )
        expect(
            1e-3 < float(got[0]) / (kappa**2 * eps) < 10,
            "the normal equations' error should be of the order kappa^2 eps",
        )
        expect(float(got[1]) / (kappa * eps) < 10, "the QR error should be below 10 kappa eps")
    return (
        "singular values as prescribed for kappa = 1e6 and 1e8, cond(X^T X) = kappa^2 without "
        "forming X^T X, errors of the order kappa^2 eps (normal equations) and kappa eps (QR)"
    )


# --- 9.4 early stopping ---------------------------------------------------------------------------


def _logistic_data(seed: int, n_tr: int, n_va: int, d: int):
    """Noisy labels of a linear rule, intercept in column 0; few training rows, so that they are
    separable and the validation loss turns up."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=gen, dtype=F64)
    X = torch.randn(n_tr + n_va, d, generator=gen, dtype=F64)
    X[:, 0] = 1.0
    y = (torch.rand(n_tr + n_va, generator=gen, dtype=F64) < torch.sigmoid(X @ w)).to(F64)
    return X[:n_tr], y[:n_tr], X[n_tr:], y[n_tr:]


def _gd_losses(X_tr, y_tr, X_ev, y_ev, checkpoints, *, lr_scale=1.0, shift=0, reduction="mean"):
    """Cross-entropy on (X_ev, y_ev) after t steps of gradient descent, for each t of checkpoints,
    by a loop written out here; the switches make the typical mistakes."""
    n = X_tr.shape[0]
    lr = lr_scale * 4 * n / float(torch.linalg.eigvalsh(X_tr.T @ X_tr).max())
    w = torch.zeros(X_tr.shape[1], dtype=F64)
    path = [w]
    for _ in range(max(checkpoints)):
        w = w - lr * X_tr.T @ (torch.sigmoid(X_tr @ w) - y_tr) / n
        path.append(w)
    return torch.stack(
        [
            F.binary_cross_entropy_with_logits(X_ev @ path[t + shift], y_ev, reduction=reduction)
            for t in checkpoints
        ]
    )


def _stop(checkpoints, losses, *, index=False):
    """The pair (t_best, losses): the checkpoint with the smallest loss (or, wrongly, its
    position in the list)."""
    i = int(torch.argmin(losses))
    return (i if index else checkpoints[i]), losses


def stop_on_training(X_tr, y_tr, X_va, y_va, checkpoints):
    return _stop(checkpoints, _gd_losses(X_tr, y_tr, X_tr, y_tr, checkpoints))


def stop_one_early(X_tr, y_tr, X_va, y_va, checkpoints):
    return _stop(checkpoints, _gd_losses(X_tr, y_tr, X_va, y_va, checkpoints, shift=-1))


def stop_without_quarter(X_tr, y_tr, X_va, y_va, checkpoints):
    return _stop(checkpoints, _gd_losses(X_tr, y_tr, X_va, y_va, checkpoints, lr_scale=0.25))


def stop_on_sum(X_tr, y_tr, X_va, y_va, checkpoints):
    return _stop(checkpoints, _gd_losses(X_tr, y_tr, X_va, y_va, checkpoints, reduction="sum"))


def stop_index(X_tr, y_tr, X_va, y_va, checkpoints):
    return _stop(checkpoints, _gd_losses(X_tr, y_tr, X_va, y_va, checkpoints), index=True)


_STOP_MISTAKES = [
    (
        stop_on_training,
        "these are the training losses; compare the checkpoints on the validation rows",
    ),
    (
        stop_one_early,
        "the losses are one step early: row t of lm.gradient_descent's path holds the weights "
        "after t steps",
    ),
    (
        stop_without_quarter,
        "the step is 4 times too small: L = lambda_max(X^T X) / (4N), with the 4 from "
        "p(1 - p) <= 1/4",
    ),
    (
        stop_on_sum,
        "that is the sum of the losses; the mean cross-entropy divides by the number of rows",
    ),
]


def _separable_cases():
    gen = torch.Generator().manual_seed(94)
    X = torch.randn(40, 5, generator=gen, dtype=F64)
    w = torch.tensor([-2.0, -1.0, 0.5, -3.0, 1.0], dtype=F64)  # needs negative weights
    margin = X @ w
    keep = margin.abs() > 0.3
    sep = (X[keep], (margin[keep] > 0).to(F64))
    xor = torch.tensor([[1.0, 0, 0], [1, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=F64)  # 1, x1, x2
    xor_y = torch.tensor([0.0, 0, 1, 1], dtype=F64)
    twin = torch.cat([sep[0], sep[0][:1]])  # one point with both labels
    twin_y = torch.cat([sep[1], 1 - sep[1][:1]])
    return [
        ((xor, xor_y), False, "XOR data (no line separates it)"),
        ((twin, twin_y), False, "data with one point labelled both 0 and 1"),
        (sep, True, "separable data whose separating w has negative entries"),
    ]


@exercise("9.4", "early_stopping", "is_separable")
def early_stopping(early_stopping, is_separable) -> str:
    """Validation BCE along gradient descent against a loop and F.binary_cross_entropy_with_logits;
    separability on data built to be separable or not."""
    for seed, (n_tr, n_va, d), checkpoints in [
        (0, (40, 200, 16), [0, 3, 10, 30, 100, 300]),
        (2, (30, 100, 12), [5, 20, 80, 320]),
    ]:
        data = (*_logistic_data(seed, n_tr, n_va, d), checkpoints)
        what = f"early_stopping with checkpoints {checkpoints}"
        got = attempt(early_stopping, *(t.clone() for t in data[:4]), list(checkpoints))
        expect(
            isinstance(got, (tuple, list)) and len(got) == 2,
            "early_stopping should return a pair (t_best, val_bce)",
        )
        t_best, val_bce = got
        want = _gd_losses(*data)
        expect_answer(
            val_bce,
            want,
            f"val_bce of {what}",
            wrong={fb: m(*data)[1] for m, fb in _STOP_MISTAKES},
            atol=1e-9,
            rtol=1e-7,
        )
        expect_answer(
            t_best,
            _stop(checkpoints, want)[0],
            f"t_best of {what}",
            wrong={
                "that is the position of the best checkpoint in the list, not its number of "
                "steps": _stop(checkpoints, want, index=True)[0],
                "that is the checkpoint with the smallest TRAINING loss": stop_on_training(*data)[
                    0
                ],
            },
            atol=0.0,
            rtol=0.0,
        )

    for (X, y), want, what in _separable_cases():
        got = attempt(is_separable, X.clone(), y.clone())
        expect(
            isinstance(got, (bool, np.bool_))
            or (isinstance(got, torch.Tensor) and got.numel() == 1 and got.dtype == torch.bool),
            f"is_separable should return a bool, got {type(got).__name__}",
        )
        if bool(got) != want:
            hint = (
                " (linprog's default bounds are w >= 0; pass bounds=(None, None))"
                if want
                else " (the constraints need the signs 2 y_i - 1 of the labels)"
            )
            raise Incorrect(f"is_separable says {bool(got)} for {what}{hint}")
    return (
        "validation cross-entropy along gradient descent and the chosen t match a written-out "
        "loop for 2 data sets; is_separable is right on 3 data sets"
    )


def separable_default_bounds(X, y):
    signs = (2 * y - 1).numpy()[:, None]
    lp = linprog(
        np.zeros(X.shape[1]), A_ub=-signs * X.numpy(), b_ub=-np.ones(X.shape[0]), method="highs"
    )  # bounds default to w >= 0
    return bool(lp.status == 0)


def separable_without_labels(X, y):
    lp = linprog(
        np.zeros(X.shape[1]),
        A_ub=-X.numpy(),
        b_ub=-np.ones(X.shape[0]),
        bounds=(None, None),
        method="highs",
    )
    return bool(lp.status == 0)


# --- 9.5 · Predict: the training R^2 of a fit to pure noise ---------------------------------------

_R2_N, _R2_D, _R2_DRAWS, _R2_FRESH, _R2_TOL = 60, 50, 200, 200, 0.05


def _noise_r2() -> tuple[float, float, float]:
    """Mean R^2 of least squares with an intercept and D Gaussian features, fitted to N pure-noise
    targets: on the training rows, and on 200 fresh rows; and the standard error of the first."""
    gen = torch.Generator().manual_seed(95)
    n, m = _R2_N, _R2_N + _R2_FRESH
    X = torch.randn(_R2_DRAWS, m, _R2_D, generator=gen, dtype=F64)
    y = torch.randn(_R2_DRAWS, m, 1, generator=gen, dtype=F64)  # independent of X
    A = torch.cat([torch.ones(_R2_DRAWS, m, 1, dtype=F64), X], dim=2)  # (draws, N + 200, D + 1)
    theta = torch.linalg.lstsq(A[:, :n], y[:, :n], driver="gels").solution  # (draws, D + 1, 1)
    r2 = []
    for rows in (slice(None, n), slice(n, None)):  # the training rows, then the fresh rows
        resid = (y[:, rows] - A[:, rows] @ theta).squeeze(2)
        centred = (y[:, rows] - y[:, rows].mean(dim=1, keepdim=True)).squeeze(2)
        r2.append(1 - (resid**2).sum(dim=1) / (centred**2).sum(dim=1))  # (draws,)
    train, test = r2
    return float(train.mean()), float(train.std() / math.sqrt(_R2_DRAWS)), float(test.mean())


@exercise("9.5", "predict_training_r2")
def predict_training_r2(answer) -> str:
    """The guess of the training R^2 against 200 least-squares fits to pure noise."""
    guess = as_tensor(attempt(answer), "predict_training_r2()")
    expect(guess.numel() == 1, "predict_training_r2() should return one number, an R^2")
    g = float(guess.reshape(()))
    train, se, test = _noise_r2()
    reveal = (
        f"the {_R2_DRAWS} fits reach a mean training R^2 of {train:.3f} (SE {se:.3f}; theory "
        f"D/(N - 1) = {_R2_D / (_R2_N - 1):.3f}), and R^2 = {test:.1f} on fresh rows"
    )
    if abs(g - train) <= _R2_TOL:
        return (
            f"your guess {fmt(g, 3)} is within {_R2_TOL} of the measurement: {reveal}. The usual "
            f"guess, 0, holds for new data only; on its own rows the fit spends 50 weights on "
            f"60 noise values"
        )
    if g < 0:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is negative: {reveal}. A negative R^2 is what the fit "
            f"scores on rows it has not seen; on its own training rows least squares with an "
            f"intercept always scores between 0 and 1, since predicting the mean is one of its "
            f"candidates"
        )
    if g < 0.3:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is far too low: {reveal}. The usual guess, 0, reasons that "
            f"noise cannot be explained; but the fit chooses 51 parameters to match 60 values, "
            f"and all the noise in the 51-dimensional column space of the features is "
            f"'explained' (optimism, §9.1)"
        )
    if g > 0.95:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is too high: {reveal}. R^2 = 1 needs an interpolating fit, "
            f"N <= D + 1 = 51 rows; with 60 rows, 9 dimensions of residual noise remain, about "
            f"9/59 of the total"
        )
    raise Incorrect(f"your guess {fmt(g, 3)} is off by more than {_R2_TOL}: {reveal}")


def guess_zero():
    return 0.0


def guess_one():
    return 1.0


def guess_test_r2():
    return -5.0


def guess_half():
    return 0.5


# --- 9.6 · Implement: the gradient-descent path of least squares ----------------------------------


def _gd_closed(X, y, theta0, lr, steps):
    """(steps + 1, D) iterates of gradient descent on (1/N)||X theta - y||^2, in closed form:
    theta_t = theta_hat + Q (1 - lr lambda)^t Q^T (theta0 - theta_hat), with H = 2 X^T X / N."""
    lam, Q = torch.linalg.eigh(2 * X.T @ X / X.shape[0])
    theta_hat = torch.linalg.lstsq(X, y[:, None], driver="gelsd").solution[:, 0]
    t = torch.arange(steps + 1, dtype=F64)[:, None]  # (T + 1, 1)
    return theta_hat + ((1 - lr * lam) ** t * (Q.T @ (theta0 - theta_hat))) @ Q.T


def path_without_two(X, y, theta0, lr, steps):
    return _gd_closed(X, y, theta0, lr / 2, steps)  # gradient (1/N) X^T r


def path_of_sum(X, y, theta0, lr, steps):
    return _gd_closed(X, y, theta0, lr * X.shape[0], steps)  # gradient 2 X^T r, no mean


def path_uphill(X, y, theta0, lr, steps):
    return _gd_closed(X, y, theta0, -lr, steps)


def path_without_start(X, y, theta0, lr, steps):
    return _gd_closed(X, y, theta0, lr, steps)[1:]


def path_in_place(X, y, theta0, lr, steps):
    return _gd_closed(X, y, theta0, lr, steps)[-1:].repeat(steps + 1, 1)  # every row the last


_PATH_MISTAKES = [
    (
        path_without_two,
        "the factor 2 of eq. 9.2 is missing: the gradient of (1/N)||X theta - y||^2 is "
        "(2/N) X^T (X theta - y), so this path takes half steps",
    ),
    (
        path_of_sum,
        "the gradient is summed over the examples; eq. 9.2 averages, (2/N) X^T (X theta - y)",
    ),
    (path_uphill, "the path goes uphill: the update is theta - lr * grad"),
    (
        path_without_start,
        "row 0 of the path is theta0 itself: return steps + 1 rows, row t after t steps",
    ),
    (
        path_in_place,
        "every row holds the last theta: the update changed theta in place after it was "
        "stored (write theta = theta - lr * grad, or store a clone)",
    ),
]


def _path_cases():
    X, y = _toy_problem()
    gen = torch.Generator().manual_seed(96)
    X5 = torch.randn(40, 5, generator=gen, dtype=F64) + 0.3
    y5 = X5 @ torch.randn(5, generator=gen, dtype=F64) + 0.5 * torch.randn(
        40, generator=gen, dtype=F64
    )
    out = []
    for X_, y_, theta0, mult, steps, what in [
        (X, y, torch.tensor([-1.0, 4.5], dtype=F64), 1.0, 60, "the line fit of §9.4"),
        (X5, y5, torch.zeros(5, dtype=F64), 1.5, 30, "a random problem with D = 5"),
    ]:
        lr = mult / float(torch.linalg.eigvalsh(2 * X_.T @ X_ / X_.shape[0])[-1])
        out.append(((X_, y_, theta0, lr, steps), f"{what}, lr = {mult} / lambda_max"))
    return out


@exercise("9.6", "gd_path")
def gd_path(answer) -> str:
    """The path of gradient descent on least squares against the closed form in the eigenbasis."""
    for case, what in _path_cases():
        X, y, theta0, lr, steps = case
        expect_answer(
            attempt(answer, X.clone(), y.clone(), theta0.clone(), lr, steps),
            _gd_closed(*case),
            f"gd_path for {what}, {steps} steps",
            wrong={fb: m(*case) for m, fb in _PATH_MISTAKES},
            atol=1e-9,
            rtol=1e-7,
        )
    return (
        "the path of steps + 1 iterates matches the closed form theta_hat + (I - lr H)^t "
        "(theta0 - theta_hat) on the line fit of §9.4 and on a random problem with D = 5"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# the reference answers, looked up when called: a wrong answer replaces one of them
ridge = _ref("9.1", "ridge")
select_l2 = _ref("9.1", "select_l2")
contraction_factor = _ref("9.2", "contraction_factor")
slowest_direction = _ref("9.2", "slowest_direction")
distance_ratio = _ref("9.2", "distance_ratio")
with_singular_values = _ref("9.3", "with_singular_values")
gram_condition = _ref("9.3", "gram_condition")
solver_errors = _ref("9.3", "solver_errors")
ref_early_stopping = _ref("9.4", "early_stopping")
is_separable = _ref("9.4", "is_separable")


def sv_squared(s, n_rows, generator):
    return _ref("9.3", "with_singular_values")(s**2, n_rows, generator)


def sv_transposed(s, n_rows, generator):
    return _ref("9.3", "with_singular_values")(s, n_rows, generator).T


def sv_padded(s, n_rows, generator):
    return torch.cat([torch.diag(s), torch.zeros(n_rows - s.numel(), s.numel(), dtype=s.dtype)])


def sv_global_seed(s, n_rows, generator):
    return _ref("9.3", "with_singular_values")(s, n_rows, torch.Generator().manual_seed(0))


MISTAKES = {
    "9.1": [
        ((ridge_without_n, select_l2), "missing the factor N"),
        ((ridge_half, select_l2), "the factor 2 is off"),
        ((ridge_plain, select_l2), "plain least squares"),
        ((ridge_flipped_sign, select_l2), "the sign of the penalty is flipped"),
        ((ridge, select_leaky), "training AND validation rows"),
        ((ridge, select_uncentred), "the targets are not centred"),
        ((ridge, select_own_mean), "their own mean"),
        ((ridge, select_on_training), "these are training MSEs"),
        ((ridge, select_index), "the index of the best strength"),
        ((ridge, select_single), "should return a pair"),
    ],
    "9.2": [
        ((rho_no_abs, slowest_direction, distance_ratio), "the absolute value is missing"),
        ((rho_top_only, slowest_direction, distance_ratio), "only lambda_max counts"),
        ((contraction_factor, slowest_row, distance_ratio), "ROW of the eigenvector matrix"),
        ((contraction_factor, slowest_no_abs, distance_ratio), "without the absolute value"),
        ((contraction_factor, slowest_always_top, distance_ratio), "largest |1 - eta lambda_i|"),
        ((contraction_factor, slowest_direction, ratio_upside_down), "upside down"),
        ((contraction_factor, slowest_direction, ratio_off_by_one), "off by one"),
        ((contraction_factor, slowest_direction, ratio_squared), "squared distances"),
    ],
    "9.3": [
        ((sv_squared, gram_condition, solver_errors), "came out squared"),
        ((sv_transposed, gram_condition, solver_errors), "looks transposed"),
        ((sv_padded, gram_condition, solver_errors), "mostly zeros"),
        ((sv_global_seed, gram_condition, solver_errors), "another seed must give another"),
        ((with_singular_values, cond_not_squared, solver_errors), "that is cond(X)"),
        ((with_singular_values, cond_of_gram, solver_errors), "forming X^T X"),
        ((with_singular_values, gram_condition, errors_absolute), "absolute errors"),
        ((with_singular_values, gram_condition, errors_swapped), "order is swapped"),
        ((with_singular_values, gram_condition, errors_of_residual), "relative residuals"),
    ],
    "9.4": [
        ((stop_on_training, is_separable), "these are the training losses"),
        ((stop_one_early, is_separable), "one step early"),
        ((stop_without_quarter, is_separable), "4 times too small"),
        ((stop_on_sum, is_separable), "the sum of the losses"),
        ((stop_index, is_separable), "position of the best checkpoint"),
        ((ref_early_stopping, separable_default_bounds), "default bounds"),
        ((ref_early_stopping, separable_without_labels), "signs 2 y_i - 1"),
    ],
    "9.5": [
        (guess_zero, "far too low"),
        (guess_one, "too high"),
        (guess_test_r2, "rows it has not seen"),
        (guess_half, "off by more than"),
    ],
    "9.6": [(m, fb.split(":")[0]) for m, fb in _PATH_MISTAKES],
}
