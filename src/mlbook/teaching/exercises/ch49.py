"""Checks of the exercises of chapter 49 (generalisation and double descent).

The references are independent of :mod:`mlbook.beyond.generalisation`: the double-descent
experiment of 49.1 fits with ``torch.linalg.lstsq`` (the SVD-based ``gelsd`` driver) on its own
data; ridge (49.2) is checked against the ``(p, p)`` normal equations solved by
``torch.linalg.solve`` and, for ``lam = 0``, against ``torch.linalg.lstsq``; the early-stopping
distances (49.3) against explicit gradient steps and ridge by a linear solve, in NumPy.

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import Incorrect, attempt, exercise, expect, expect_answer, wrong_values

F64 = torch.float64

# --- 49.1 ----------------------------------------------------------------------------------------

CHOICES_49_1 = (10, 20, 40, 80, 320)


def _worst_p_experiment() -> dict[int, float]:
    """Median test error of the min-norm fit on 40 points, per number of random ReLU features."""
    n, d, m, sigma, seeds = 40, 5, 300, 0.3, 5
    errors = {p: [] for p in CHOICES_49_1}
    for seed in range(seeds):
        g = torch.Generator().manual_seed(4900 + seed)
        x, x_te = (
            torch.randn(n, d, generator=g, dtype=F64),
            torch.randn(m, d, generator=g, dtype=F64),
        )

        def target(z):
            return torch.tanh(z[:, 0] + z[:, 1]) + 0.5 * z[:, 2] * z[:, 3]

        y = target(x) + sigma * torch.randn(n, generator=g, dtype=F64)
        W = torch.randn(d, max(CHOICES_49_1), generator=g, dtype=F64)
        W = W / W.norm(dim=0)
        b = 2 * torch.rand(max(CHOICES_49_1), generator=g, dtype=F64) - 1
        for p in CHOICES_49_1:
            phi = torch.relu(x @ W[:, :p] + b[:p]) / math.sqrt(p)  # (n, p)
            phi_te = torch.relu(x_te @ W[:, :p] + b[:p]) / math.sqrt(p)  # (m, p)
            theta = torch.linalg.lstsq(phi, y[:, None], driver="gelsd").solution[:, 0]
            errors[p].append(float(((phi_te @ theta - target(x_te)) ** 2).mean()))
    return {p: float(np.median(e)) for p, e in errors.items()}


def guess_most_features():
    return 320


def guess_fewest_features():
    return 10


def guess_not_a_choice():
    return 100


@exercise("49.1", "predict_worst_p")
def worst_p(answer) -> str:
    """Run the double-descent experiment and compare the worst p with the reader's guess."""
    guess = attempt(answer)
    expect(
        not isinstance(guess, bool) and guess in CHOICES_49_1,
        f"predict_worst_p() should return one of {CHOICES_49_1}, got {guess!r}",
    )
    med = _worst_p_experiment()
    worst = max(med, key=med.get)
    seen = "median test errors " + ", ".join(f"p = {p}: {med[p]:.3g}" for p in CHOICES_49_1)
    if guess != worst:
        why = {
            320: "more parameters do not mean more overfitting here: with 320 features there are "
            "many interpolators and the minimum-norm one has a small norm",
            10: "few features underfit (bias), but their fit is stable; the error explodes where "
            "the model can just interpolate",
        }.get(guess, "the peak sits at the interpolation threshold, where p equals n = 40")
        raise Incorrect(f"you predicted p = {guess}; {seen}: {why}")
    return f"right: p = n = 40 is the interpolation threshold; {seen}"


# --- 49.2 ----------------------------------------------------------------------------------------


def _svd(X):
    U, s, Vh = torch.linalg.svd(X, full_matrices=False)
    return U, s, Vh


def ridge_scalar_broadcast(X, y, lam):
    return torch.linalg.solve(X.T @ X + lam, X.T @ y)


def ridge_lam_on_s(X, y, lam):
    U, s, Vh = _svd(X)
    return Vh.T @ (1 / (s + lam) * (U.T @ y))


def ridge_without_s_factor(X, y, lam):
    U, s, Vh = _svd(X)
    return Vh.T @ (1 / (s**2 + lam) * (U.T @ y))


def ridge_filter_only(X, y, lam):
    U, s, Vh = _svd(X)
    return Vh.T @ (s**2 / (s**2 + lam) * (U.T @ y))


WRONG_RIDGE = [
    (
        ridge_scalar_broadcast,
        "lam was added to every entry of X^T X (a scalar broadcasts); "
        "add lam * I, on the diagonal only",
    ),
    (
        ridge_lam_on_s,
        "the penalty acts on s_i^2: the coefficient is s_i / (s_i^2 + lam), not 1 / (s_i + lam)",
    ),
    (ridge_without_s_factor, "X^T y has coordinates s_i u_i^T y: the factor s_i is missing"),
    (ridge_filter_only, "s^2 / (s^2 + lam) is the filter g; the coefficient is g / s_i"),
]


def _ridge_reference(X, y, lam):
    if lam == 0:
        return torch.linalg.lstsq(X, y[:, None], driver="gelsd").solution[:, 0]
    return torch.linalg.solve(X.T @ X + lam * torch.eye(X.shape[1], dtype=F64), X.T @ y)


@exercise("49.2", "ridge_svd")
def ridge(answer) -> str:
    """ridge_svd against the normal equations (lam > 0) and lstsq (lam = 0)."""
    g = torch.Generator().manual_seed(49)
    cases = []
    for n, p in ((30, 12), (12, 30)):
        X = torch.randn(n, p, generator=g, dtype=F64)
        y = torch.randn(n, generator=g, dtype=F64)
        cases += [(X, y, lam) for lam in (0.3, 2.0, 0.0)]
    for X, y, lam in cases:
        what = f"ridge_svd(X of shape {tuple(X.shape)}, y, lam={lam:g})"
        got = attempt(answer, X.clone(), y.clone(), lam, name="ridge_svd")
        expect_answer(
            got,
            _ridge_reference(X, y, lam),
            what,
            wrong=wrong_values(WRONG_RIDGE, X, y, lam) if lam > 0 else None,
            atol=1e-9,
            rtol=1e-7,
        )
    return "matches the normal equations (lam = 0.3, 2) and lstsq (lam = 0), wide and tall X"


# --- 49.3 ----------------------------------------------------------------------------------------


def _distances(X, y, lr, steps, c, *, lam_of=None, relative=True):
    """Explicit GD in NumPy, ridge by a linear solve; switches reproduce typical mistakes."""
    Xn, yn = X.numpy(), y.numpy()
    theta, done, out = np.zeros(Xn.shape[1]), 0, []
    for t in steps:
        for _ in range(t - done):
            theta = theta - lr * Xn.T @ (Xn @ theta - yn)
        done = t
        lam = c / (lr * t) if lam_of is None else lam_of(lr, t, c)
        rg = np.linalg.solve(Xn.T @ Xn + lam * np.eye(Xn.shape[1]), Xn.T @ yn)
        dist = np.linalg.norm(theta - rg)
        out.append(dist / np.linalg.norm(rg) if relative else dist)
    return out


def distance_lam_inverted(X, y, lr, steps, c):
    return _distances(X, y, lr, steps, c, lam_of=lambda lr, t, c: c * lr * t)


def distance_absolute(X, y, lr, steps, c):
    return _distances(X, y, lr, steps, c, relative=False)


WRONG_DISTANCE = [
    (distance_lam_inverted, "lam = c / (lr t) shrinks as training goes on, not lam = c lr t"),
    (distance_absolute, "the distance is relative: divide by the norm of the ridge solution"),
]


@exercise("49.3", "path_distance")
def path_distance(answer) -> str:
    """Distances of explicit GD steps to ridge(c / (lr t)), for two c."""
    g = torch.Generator().manual_seed(4903)
    X = torch.randn(15, 25, generator=g, dtype=F64)
    y = torch.randn(15, generator=g, dtype=F64)
    lr = 1 / float(torch.linalg.matrix_norm(X, ord=2) ** 2)
    steps = [1, 10, 100, 1000]
    for c in (1.0, 3.0):
        got = attempt(answer, X.clone(), y.clone(), lr, list(steps), c, name="path_distance")
        expect(
            isinstance(got, (list, tuple)) and len(got) == len(steps),
            f"path_distance should return a list of {len(steps)} floats, one per t, got {got!r}",
        )
        expect_answer(
            torch.tensor([float(v) for v in got], dtype=F64),
            _distances(X, y, lr, steps, c),
            f"path_distance(X, y, lr, steps={steps}, c={c:g})",
            wrong=wrong_values(WRONG_DISTANCE, X, y, lr, steps, c),
            atol=1e-8,
            rtol=1e-6,
        )
    return "matches explicit gradient steps and ridge by a linear solve, for c = 1 and c = 3"


MISTAKES = {
    "49.1": [
        (guess_most_features, "more parameters do not mean more overfitting"),
        (guess_fewest_features, "few features underfit"),
        (guess_not_a_choice, "should return one of"),
    ],
    "49.2": WRONG_RIDGE,
    "49.3": WRONG_DISTANCE,
}
