"""Learning from data: empirical risk, least squares, gradient descent, logistic regression (ch. 9).

Shape legend
    N      number of examples (rows of a design matrix)
    D      number of parameters (columns of a design matrix, an intercept column included)
    T      number of gradient-descent steps
    X      (N, D) design matrix, one example per row
    y      (N,) targets: real numbers (regression) or labels in [0, 1] (classification)
    theta  (D,) parameters of a linear model f(x) = x^T theta
    w      (D,) weights of logistic regression, p = sigmoid(X w)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..validation import (
    binary,
    float_tensor,
    integer,
    number,
    positive,
    same_shape,
    shape_is,
    unit_interval,
)

__all__ = [
    "empirical_risk",
    "empirical_risk_loop",
    "squared_error",
    "mse_loss",
    "mse_grad",
    "normal_equations",
    "least_squares_qr",
    "gradient_descent",
    "GDResult",
    "minimize_gd",
    "bce_loss",
    "logistic_grad",
    "fit_logistic_regression",
    "accuracy",
    "add_intercept",
    "train_val_test_split",
    "standardise",
]


def _singular_cholesky(chol: torch.Tensor, gram: torch.Tensor) -> bool:
    """A Cholesky pivot at rounding level: the (D, D) matrix is numerically singular, even where
    the factorisation itself went through."""
    floor = chol.shape[0] * torch.finfo(chol.dtype).eps * float(gram.diagonal().max())
    return float(chol.diagonal().min()) ** 2 <= floor


def _singular_qr(r: torch.Tensor, n_rows: int) -> bool:
    """A pivot of the (D, D) factor R at rounding level: X is numerically rank-deficient."""
    diag = r.diagonal().abs()
    floor = torch.finfo(r.dtype).eps * max(n_rows, r.shape[0]) * float(diag.max())
    return float(diag.min()) <= floor


# --- eq. 9.1: empirical risk ----------------------------------------------------------------------


def empirical_risk(
    predict: Callable[[torch.Tensor], torch.Tensor],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """R_hat = (1/N) sum_i loss(f(x_i), y_i), all examples at once. Implements eq. 9.1.

    predict: (N, ...) -> (N, ...); loss: (outputs, targets) -> (N,); X, y: (N, ...). Returns ()."""
    float_tensor(X, "X", min_ndim=1, not_empty=True)
    shape_is(y, "y", (len(X), *y.shape[1:]))
    losses = shape_is(loss(predict(X), y), "loss(predict(X), y)", (len(X),))
    return losses.mean()


def empirical_risk_loop(
    predict: Callable[[torch.Tensor], torch.Tensor],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """Naive reference for :func:`empirical_risk`: one example (a batch of one) at a time."""
    float_tensor(X, "X", min_ndim=1, not_empty=True)
    shape_is(y, "y", (len(X), *y.shape[1:]))
    total = torch.zeros((), dtype=X.dtype)
    for i in range(X.shape[0]):
        li = loss(predict(X[i : i + 1]), y[i : i + 1])  # (1,): the loss of example i
        shape_is(li, "loss(predict(X[i:i+1]), y[i:i+1])", (1,))
        total = total + li[0]
    return total / X.shape[0]


def squared_error(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example squared error (pred - y)^2. pred, y: (N,)."""
    same_shape(pred, y, ("pred", "y"))
    return (pred - y) ** 2


# --- eq. 9.2: the least-squares loss and its gradient --------------------------------------------


def mse_loss(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/N) ||X theta - y||^2, the empirical risk of a linear model (eq. 9.1).

    theta: (D,), X: (N, D), y: (N,). Returns ()."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(theta, "theta", (X.shape[1],))
    shape_is(y, "y", (X.shape[0],))
    r = X @ theta - y  # (N,) residuals
    return (r @ r) / X.shape[0]


def mse_grad(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(2/N) X^T (X theta - y), the gradient of :func:`mse_loss`. Implements eq. 9.2.

    theta: (D,), X: (N, D), y: (N,). Returns (D,)."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(theta, "theta", (X.shape[1],))
    shape_is(y, "y", (X.shape[0],))
    return 2.0 / X.shape[0] * (X.T @ (X @ theta - y))


# --- eq. 9.3: the normal equations ----------------------------------------------------------------


def normal_equations(X: torch.Tensor, y: torch.Tensor, l2: float = 0.0) -> torch.Tensor:
    """Solve (X^T X + N l2 I) theta = X^T y by Cholesky (ridge if l2 > 0). Implements eq. 9.3.

    X: (N, D) of full column rank unless l2 > 0; y: (N,); l2 >= 0. Returns (D,)."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(y, "y", (X.shape[0],))
    l2 = number(l2, "l2", 0.0)
    n, d = X.shape
    gram = X.T @ X + n * l2 * torch.eye(d, dtype=X.dtype)  # (D, D)
    chol, info = torch.linalg.cholesky_ex(gram)  # chol: (D, D) lower triangular
    if int(info) != 0 or _singular_cholesky(chol, gram):
        raise ValueError(f"X {tuple(X.shape)} is (numerically) rank-deficient: use l2 > 0")
    rhs = (X.T @ y)[:, None]  # (D, 1)
    return torch.cholesky_solve(rhs, chol)[:, 0]


def least_squares_qr(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """argmin ||X theta - y||^2 by reduced QR (never forms X^T X): the reference for eq. 9.3.

    X: (N, D) of full column rank, N >= D; y: (N,). Returns (D,)."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(y, "y", (X.shape[0],))
    if X.shape[0] < X.shape[1]:
        raise ValueError(f"X must have N >= D rows for a unique solution, got {tuple(X.shape)}")
    q, r = torch.linalg.qr(X, mode="reduced")  # q: (N, D), r: (D, D) upper triangular
    if _singular_qr(r, X.shape[0]):
        raise ValueError(f"X of shape {tuple(X.shape)} is numerically rank-deficient")
    return torch.linalg.solve_triangular(r, (q.T @ y)[:, None], upper=True)[:, 0]


# --- eq. 9.4: gradient descent --------------------------------------------------------------------


def gradient_descent(
    grad: Callable[[torch.Tensor], torch.Tensor], theta0: torch.Tensor, lr: float, steps: int
) -> torch.Tensor:
    """theta <- theta - lr grad(theta), ``steps`` times. Implements eq. 9.4.

    grad: (D,) -> (D,); theta0: (D,); lr > 0; steps: T >= 0. Returns (T + 1, D) iterates."""
    float_tensor(theta0, "theta0", ndim=1, not_empty=True)
    lr = positive(lr, "lr")
    steps = integer(steps, "steps", low=0)
    path = torch.empty((steps + 1, theta0.numel()), dtype=theta0.dtype)  # (T + 1, D)
    path[0] = theta0
    theta = theta0.detach().clone()
    for t in range(steps):
        g = shape_is(grad(theta), "grad(theta)", theta.shape)
        theta = theta - lr * g
        path[t + 1] = theta
    return path


@dataclass(frozen=True)
class GDResult:
    """Outcome of :func:`minimize_gd`: last iterate, steps, final gradient norm, converged."""

    theta: torch.Tensor
    steps: int
    grad_norm: float
    converged: bool


def minimize_gd(
    grad: Callable[[torch.Tensor], torch.Tensor],
    theta0: torch.Tensor,
    lr: float,
    *,
    tol: float = 1e-8,
    max_steps: int = 100_000,
) -> GDResult:
    """Gradient descent (eq. 9.4) until ||grad|| <= tol or ``max_steps`` updates.

    grad: (D,) -> (D,); theta0: (D,); lr > 0; tol > 0."""
    float_tensor(theta0, "theta0", ndim=1, not_empty=True)
    lr = positive(lr, "lr")
    tol = positive(tol, "tol")
    max_steps = integer(max_steps, "max_steps", low=0)
    theta = theta0.detach().clone()
    for t in range(max_steps + 1):
        g = shape_is(grad(theta), "grad(theta)", theta.shape)
        gnorm = float(torch.linalg.vector_norm(g))
        if gnorm <= tol or t == max_steps or not torch.isfinite(g).all():
            return GDResult(theta, t, gnorm, gnorm <= tol)
        theta = theta - lr * g
    raise AssertionError("unreachable")  # pragma: no cover


# --- eq. 9.5: logistic regression -----------------------------------------------------------------


def bce_loss(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy mean(softplus(z) - y z), z = X w, without overflow.

    w: (D,), X: (N, D), y: (N,) labels in [0, 1]. Returns ()."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(w, "w", (X.shape[1],))
    shape_is(y, "y", (X.shape[0],))
    unit_interval(y, "y")
    z = X @ w  # (N,) logits
    softplus = torch.clamp(z, min=0) + torch.log1p(torch.exp(-z.abs()))
    return (softplus - y * z).mean()


def logistic_grad(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/N) X^T (sigmoid(X w) - y), the gradient of :func:`bce_loss` with respect to the
    weights w (not the logits). Implements eq. 9.5.

    w: (D,), X: (N, D), y: (N,) labels in [0, 1]. Returns (D,)."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(w, "w", (X.shape[1],))
    shape_is(y, "y", (X.shape[0],))
    unit_interval(y, "y")
    return X.T @ (torch.sigmoid(X @ w) - y) / X.shape[0]


def fit_logistic_regression(
    X: torch.Tensor,
    y: torch.Tensor,
    l2: float = 0.0,
    *,
    lr: float | None = None,
    tol: float = 1e-8,
    max_steps: int = 100_000,
    w0: torch.Tensor | None = None,
) -> GDResult:
    """Logistic regression by gradient descent on eq. 9.5 + (l2/2) ||w[1:]||^2 (eq. 9.4).

    X: (N, D) with X[:, 0] == 1 (unpenalised intercept); y: (N,) in [0, 1]; l2 >= 0; lr defaults
    to 1/L, L = lambda_max(X^T X) / (4N) + l2; w0: (D,) start. Returns a :class:`GDResult`."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    unit_interval(shape_is(y, "y", (X.shape[0],)), "y")
    if not torch.all(X[:, 0] == 1):
        raise ValueError("X[:, 0] must be the intercept column of ones (use add_intercept)")
    l2 = number(l2, "l2", 0.0)
    n, d = X.shape
    w0 = torch.zeros(d, dtype=X.dtype) if w0 is None else shape_is(w0, "w0", (d,))
    if lr is None:
        smooth = float(torch.linalg.eigvalsh(X.T @ X).max()) / (4 * n) + l2
        lr = 1.0 / smooth
    mask = torch.ones(d, dtype=X.dtype)
    mask[0] = 0.0  # (D,): the intercept is not penalised

    def grad(w: torch.Tensor) -> torch.Tensor:
        return X.T @ (torch.sigmoid(X @ w) - y) / n + l2 * mask * w  # eq. 9.5 + penalty

    return minimize_gd(grad, w0, lr, tol=tol, max_steps=max_steps)


def accuracy(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    """Share of examples with 1[x^T w > 0] == y. w: (D,), X: (N, D), y: (N,) in {0, 1}."""
    float_tensor(X, "X", ndim=2, not_empty=True)
    shape_is(w, "w", (X.shape[1],))
    shape_is(y, "y", (X.shape[0],))
    binary(y, "y")
    return float(((X @ w > 0).to(y.dtype) == y).to(torch.float64).mean())


# --- the train / validation / test protocol -------------------------------------------------------


def add_intercept(X: torch.Tensor) -> torch.Tensor:
    """Prepend a column of ones: (N, D) -> (N, D + 1), so that theta[0] is the intercept."""
    float_tensor(X, "X", ndim=2)
    return torch.cat([torch.ones(X.shape[0], 1, dtype=X.dtype), X], dim=1)


def train_val_test_split(
    n: int, val_fraction: float, test_fraction: float, generator: torch.Generator
) -> tuple[torch.Tensor, ...]:
    """Shuffle 0..n-1 into disjoint, non-empty train, validation, test index tensors.

    n >= 3; val_fraction, test_fraction: shares of n (rounded down), summing below 1."""
    n = integer(n, "n", low=3)
    val_fraction = number(val_fraction, "val_fraction", 0.0, 1.0, open_low=True)
    test_fraction = number(test_fraction, "test_fraction", 0.0, 1.0, open_low=True)
    number(val_fraction + test_fraction, "val_fraction + test_fraction", high=1.0, open_high=True)
    n_val, n_test = int(n * val_fraction), int(n * test_fraction)
    n_train = n - n_val - n_test
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(f"n={n} leaves a part empty: train/val/test = {n_train}/{n_val}/{n_test}")
    perm = torch.randperm(n, generator=generator)
    return perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]


def standardise(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Centre and scale every column by the training rows' mean and std only.

    train: (N_train, D); others: (N_k, D). Returns the standardised parts, train first."""
    float_tensor(train, "train", ndim=2)
    for k, o in enumerate(others):
        shape_is(o, f"others[{k}]", (None, train.shape[1]))
    mean = train.mean(dim=0)  # (D,)
    std = train.std(dim=0, correction=0)  # (D,), population std as in scikit-learn
    if torch.any(std == 0):
        cols = torch.nonzero(std == 0).flatten().tolist()
        raise ValueError(f"train columns {cols} are constant: cannot scale them")
    return tuple((part - mean) / std for part in (train, *others))
