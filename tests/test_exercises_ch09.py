"""Typical wrong answers to the exercises of chapter 9 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import numpy as np
import pytest
import torch
from exercise_support import cases, reference, rejected
from scipy.optimize import linprog

from mlbook.foundations import linear_models as lm


def _ref(eid, name):
    return reference(eid)[name]


# the reference answers, looked up when called: a wrong answer replaces one of them
def ridge(*args):
    return _ref("9.1", "ridge")(*args)


def select_l2(*args):
    return _ref("9.1", "select_l2")(*args)


def contraction_factor(*args):
    return _ref("9.2", "contraction_factor")(*args)


def slowest_direction(*args):
    return _ref("9.2", "slowest_direction")(*args)


def distance_ratio(*args):
    return _ref("9.2", "distance_ratio")(*args)


def with_singular_values(*args):
    return _ref("9.3", "with_singular_values")(*args)


def gram_condition(*args):
    return _ref("9.3", "gram_condition")(*args)


def solver_errors(*args):
    return _ref("9.3", "solver_errors")(*args)


def early_stopping(*args):
    return _ref("9.4", "early_stopping")(*args)


def is_separable(*args):
    return _ref("9.4", "is_separable")(*args)


# --- 9.1 ------------------------------------------------------------------------------------------


def ridge_without_n(X, y, l2):
    d = X.shape[1]
    return torch.linalg.solve(X.T @ X + l2 * torch.eye(d, dtype=X.dtype), X.T @ y)


def ridge_half(X, y, l2):
    return _ref("9.1", "ridge")(X, y, l2 / 2)


def ridge_by_pinv(X, y, l2):
    return torch.linalg.pinv(X) @ y  # plain least squares (minimum norm), no penalty


def _select(X_tr, y_tr, X_va, y_va, grid, *, leak=False, centre=True, on_training=False):
    stats = torch.cat([X_tr, X_va]) if leak else X_tr
    mean, std = stats.mean(dim=0), stats.std(dim=0, correction=0)
    Z_tr, Z_va = (X_tr - mean) / std, (X_va - mean) / std
    mu = y_tr.mean() if centre else 0.0
    out = []
    for l2 in grid:
        theta = _ref("9.1", "ridge")(Z_tr, y_tr - mu, l2)
        Z, t = (Z_tr, y_tr - mu) if on_training else (Z_va, y_va - mu)
        out.append(((Z @ theta - t) ** 2).mean())
    val = torch.stack(out)
    return float(grid[int(val.argmin())]), val


def select_leaky(*args):
    return _select(*args, leak=True)


def select_uncentred(*args):
    return _select(*args, centre=False)


def select_on_training(*args):
    return _select(*args, on_training=True)


def select_index(*args):
    best, val = _ref("9.1", "select_l2")(*args)
    return int(val.argmin()), val


def select_single(*args):
    return _ref("9.1", "select_l2")(*args)[1]


# --- 9.2 ------------------------------------------------------------------------------------------


def rho_no_abs(H, eta):
    return float((1 - eta * torch.linalg.eigvalsh(H)).max())


def rho_top_only(H, eta):
    return float((1 - eta * torch.linalg.eigvalsh(H)[-1]).abs())


def slowest_row(H, eta):
    lam, Q = torch.linalg.eigh(H)
    return Q[int((1 - eta * lam).abs().argmax())]


def slowest_no_abs(H, eta):
    lam, Q = torch.linalg.eigh(H)
    return Q[:, int((1 - eta * lam).argmax())]


def slowest_always_top(H, eta):
    return torch.linalg.eigh(H)[1][:, -1]


def _dist(X, y, theta0, eta, steps):
    theta_hat = lm.least_squares_qr(X, y)
    path = lm.gradient_descent(lambda t: lm.mse_grad(t, X, y), theta0, eta, steps)
    return (path - theta_hat).norm(dim=1)


def ratio_upside_down(X, y, theta0, eta, steps, window):
    d = _dist(X, y, theta0, eta, steps)
    return float(d[steps - window] / d[steps])


def ratio_off_by_one(X, y, theta0, eta, steps, window):
    d = _dist(X, y, theta0, eta, steps)
    return float(d[-1] / d[-window])  # d[-window] is step T - window + 1


# --- 9.3 ------------------------------------------------------------------------------------------


def sv_squared(s, n_rows, generator):
    return _ref("9.3", "with_singular_values")(s**2, n_rows, generator)


def sv_transposed(s, n_rows, generator):
    return _ref("9.3", "with_singular_values")(s, n_rows, generator).T


def sv_padded(s, n_rows, generator):
    return torch.cat([torch.diag(s), torch.zeros(n_rows - s.numel(), s.numel(), dtype=s.dtype)])


def sv_global_seed(s, n_rows, generator):
    return _ref("9.3", "with_singular_values")(s, n_rows, torch.Generator().manual_seed(0))


def cond_not_squared(X):
    return float(torch.linalg.cond(X))


def cond_of_gram(X):
    return float(torch.linalg.cond(X.T @ X))


def errors_absolute(X, theta_star):
    return _ref("9.3", "solver_errors")(X, theta_star) * theta_star.norm()


def errors_swapped(X, theta_star):
    return _ref("9.3", "solver_errors")(X, theta_star).flip(0)


def errors_of_residual(X, theta_star):
    y = X @ theta_star
    return torch.stack(
        [
            (X @ lm.normal_equations(X, y) - y).norm() / y.norm(),
            (X @ lm.least_squares_qr(X, y) - y).norm() / y.norm(),
        ]
    )


# --- 9.4 ------------------------------------------------------------------------------------------


def _path(X_tr, y_tr, steps, lr_scale=1.0):
    L = float(torch.linalg.eigvalsh(X_tr.T @ X_tr).max()) / (4 * X_tr.shape[0])
    return lm.gradient_descent(
        lambda w: lm.bce_grad(w, X_tr, y_tr),
        torch.zeros(X_tr.shape[1], dtype=X_tr.dtype),
        lr_scale / L,
        steps,
    )


def stop_on_training(X_tr, y_tr, X_va, y_va, checkpoints):
    path = _path(X_tr, y_tr, max(checkpoints))
    losses = torch.stack([lm.bce_loss(path[t], X_tr, y_tr) for t in checkpoints])
    return checkpoints[int(losses.argmin())], losses


def stop_one_early(X_tr, y_tr, X_va, y_va, checkpoints):
    path = _path(X_tr, y_tr, max(checkpoints))
    losses = torch.stack([lm.bce_loss(path[t - 1], X_va, y_va) for t in checkpoints])
    return checkpoints[int(losses.argmin())], losses


def stop_without_quarter(X_tr, y_tr, X_va, y_va, checkpoints):
    path = _path(X_tr, y_tr, max(checkpoints), lr_scale=0.25)  # eta = 1 / lambda_max(X^T X / N)
    losses = torch.stack([lm.bce_loss(path[t], X_va, y_va) for t in checkpoints])
    return checkpoints[int(losses.argmin())], losses


def stop_index(X_tr, y_tr, X_va, y_va, checkpoints):
    t_best, losses = _ref("9.4", "early_stopping")(X_tr, y_tr, X_va, y_va, checkpoints)
    return checkpoints.index(t_best), losses


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


WRONG = {
    "9.1": [
        ((ridge_without_n, select_l2), "missing the factor N"),
        ((ridge_half, select_l2), "the factor 2 is off"),
        ((ridge_by_pinv, select_l2), "plain least squares"),
        ((ridge, select_leaky), "training AND validation rows"),
        ((ridge, select_uncentred), "the targets are not centred"),
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
        ((stop_index, is_separable), "position of the best checkpoint"),
        ((early_stopping, separable_default_bounds), "default bounds"),
        ((early_stopping, separable_without_labels), "signs 2 y_i - 1"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
