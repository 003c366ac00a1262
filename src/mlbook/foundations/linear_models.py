"""Learning from data: empirical risk, least squares, gradient descent and logistic regression
(formula sheet, chapter 9).

Shape legend
    N      number of examples (rows of a design matrix)
    D      number of parameters (columns of a design matrix, an intercept column included)
    T      number of gradient-descent steps
    X      (N, D) design matrix, one example per row
    y      (N,) targets: real numbers (regression) or labels in [0, 1] (classification)
    theta  (D,) parameters of a linear model f(x) = x^T theta
    w      (D,) weights of logistic regression, p = sigmoid(X w)

Functions take torch tensors of one floating dtype (the checks use float64) and return tensors.
Every public function validates its input and raises ``ValueError``/``TypeError`` naming the
offending shape or value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

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
    "bce_grad",
    "fit_logistic_regression",
    "accuracy",
    "add_intercept",
    "train_val_test_split",
    "standardise",
]


def _tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    return x


def _check_linear(theta, X, y, theta_name: str = "theta") -> None:
    """Validate theta (D,), X (N, D), y (N,) of one floating dtype."""
    _tensor(theta, theta_name), _tensor(X, "X"), _tensor(y, "y")
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty (N, D) matrix, got shape {tuple(X.shape)}")
    if theta.shape != (X.shape[1],):
        raise ValueError(
            f"{theta_name} must have shape (D,) = ({X.shape[1]},) to match X {tuple(X.shape)},"
            f" got {tuple(theta.shape)}"
        )
    if y.shape != (X.shape[0],):
        raise ValueError(
            f"y must have shape (N,) = ({X.shape[0]},) to match X {tuple(X.shape)},"
            f" got {tuple(y.shape)}"
        )
    if not theta.dtype == X.dtype == y.dtype:
        raise TypeError(
            f"{theta_name}, X, y must share one dtype, got {theta.dtype}, {X.dtype}, {y.dtype}"
        )


def _check_design(X, y) -> None:
    """Validate X (N, D) and y (N,) of one floating dtype."""
    _tensor(X, "X"), _tensor(y, "y")
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X must be a non-empty (N, D) matrix, got shape {tuple(X.shape)}")
    if y.shape != (X.shape[0],):
        raise ValueError(
            f"y must have shape ({X.shape[0]},) to match X {tuple(X.shape)}, got {tuple(y.shape)}"
        )
    if X.dtype != y.dtype:
        raise TypeError(f"X and y must share one dtype, got {X.dtype} and {y.dtype}")


def _check_labels(y: torch.Tensor) -> None:
    if torch.any(y < 0) or torch.any(y > 1) or not torch.all(torch.isfinite(y)):
        raise ValueError(
            f"labels y must lie in [0, 1]; got range [{float(y.min())}, {float(y.max())}]"
        )


# --- eq. 9.1: empirical risk ----------------------------------------------------------------------


def empirical_risk(
    predict: Callable[[torch.Tensor], torch.Tensor],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """R_hat(theta) = (1/N) sum_i loss(f_theta(x_i), y_i), all examples at once (eq. 9.1).

    Args:
        predict: the model f_theta, mapping inputs (N, ...) to outputs (N, ...), row by row.
        loss: maps outputs (N, ...) and targets (N, ...) to per-example losses (N,).
        X: (N, ...) inputs, one example per row.
        y: (N, ...) targets.

    Returns:
        A scalar tensor, differentiable wherever ``predict`` and ``loss`` are.
    """
    _tensor(X, "X")
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a torch.Tensor, got {type(y).__name__}")
    if X.ndim == 0 or X.shape[0] == 0 or y.ndim == 0 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"X and y must hold the same N >= 1 examples along dim 0, got shapes"
            f" {tuple(X.shape)} and {tuple(y.shape)}"
        )
    losses = loss(predict(X), y)
    if losses.shape != (X.shape[0],):
        raise ValueError(
            f"loss must return one value per example, shape ({X.shape[0]},),"
            f" got {tuple(losses.shape)}"
        )
    return losses.mean()


def empirical_risk_loop(
    predict: Callable[[torch.Tensor], torch.Tensor],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """The naive reference for :func:`empirical_risk`: one example at a time, then the average.

    Same arguments and result as :func:`empirical_risk`; each example is passed as a batch of one,
    ``X[i:i+1]`` of shape (1, ...), so the model sees the same input layout.
    """
    _tensor(X, "X")
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a torch.Tensor, got {type(y).__name__}")
    if X.ndim == 0 or X.shape[0] == 0 or y.ndim == 0 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"X and y must hold the same N >= 1 examples along dim 0, got shapes"
            f" {tuple(X.shape)} and {tuple(y.shape)}"
        )
    total = torch.zeros((), dtype=X.dtype)
    for i in range(X.shape[0]):
        li = loss(predict(X[i : i + 1]), y[i : i + 1])  # (1,): the loss of example i
        if li.shape != (1,):
            raise ValueError(f"loss must return one value per example, got {tuple(li.shape)}")
        total = total + li[0]
    return total / X.shape[0]


def squared_error(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example squared error (pred_i - y_i)^2, the loss of least squares. pred, y: (N,)."""
    _tensor(pred, "pred"), _tensor(y, "y")
    if pred.shape != y.shape or pred.ndim != 1:
        raise ValueError(
            f"pred and y must both be (N,), got {tuple(pred.shape)} and {tuple(y.shape)}"
        )
    return (pred - y) ** 2


# --- eq. 9.2: the least-squares loss and its gradient --------------------------------------------


def mse_loss(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(1/N) ||X theta - y||^2: the empirical risk (eq. 9.1) of a linear model under squared error.

    Args:
        theta: (D,) parameters.  X: (N, D) design matrix.  y: (N,) targets.
    """
    _check_linear(theta, X, y)
    r = X @ theta - y  # (N,) residuals
    return (r @ r) / X.shape[0]


def mse_grad(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """grad_theta (1/N)||X theta - y||^2 = (2/N) X^T (X theta - y), in closed form (eq. 9.2).

    Args:
        theta: (D,) parameters.  X: (N, D) design matrix.  y: (N,) targets.

    Returns:
        (D,) gradient.
    """
    _check_linear(theta, X, y)
    return 2.0 / X.shape[0] * (X.T @ (X @ theta - y))


# --- eq. 9.3: the normal equations ----------------------------------------------------------------


def normal_equations(X: torch.Tensor, y: torch.Tensor, l2: float = 0.0) -> torch.Tensor:
    """Solve X^T X theta = X^T y by a Cholesky factorisation (eq. 9.3).

    With ``l2 > 0`` it solves the ridge system (X^T X + N l2 I) theta = X^T y instead, whose
    solution minimises (1/N)||X theta - y||^2 + l2 ||theta||^2. Forming X^T X squares the
    condition number of X; :func:`least_squares_qr` is the numerically stable reference.

    Args:
        X: (N, D) design matrix of full column rank (or any, when ``l2 > 0``).
        y: (N,) targets.
        l2: non-negative ridge strength.

    Returns:
        (D,) least-squares (or ridge) solution.
    """
    _check_design(X, y)
    if not l2 >= 0:
        raise ValueError(f"l2 must be non-negative, got {l2}")
    n, d = X.shape
    gram = X.T @ X + n * l2 * torch.eye(d, dtype=X.dtype)  # (D, D)
    chol, info = torch.linalg.cholesky_ex(gram)  # chol: (D, D) lower triangular
    # A pivot at rounding level means a (numerically) singular matrix even where the
    # factorisation itself went through.
    pivot_floor = d * torch.finfo(X.dtype).eps * float(gram.diagonal().max())
    if int(info) != 0 or float(chol.diagonal().min()) ** 2 <= pivot_floor:
        raise ValueError(
            f"X^T X (D={d}) is not positive definite: X of shape {tuple(X.shape)} is"
            " (numerically) rank-deficient or N < D; use l2 > 0, or torch.linalg.lstsq for the"
            " minimum-norm solution"
        )
    rhs = (X.T @ y)[:, None]  # (D, 1)
    return torch.cholesky_solve(rhs, chol)[:, 0]


def least_squares_qr(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """argmin_theta ||X theta - y||^2 through a reduced QR factorisation X = QR.

    ||X theta - y||^2 = ||R theta - Q^T y||^2 + const, so theta = R^{-1} Q^T y. Never forms
    X^T X, so its error grows with cond(X), not cond(X)^2: the reference for eq. 9.3.

    Args:
        X: (N, D) design matrix of full column rank, N >= D.  y: (N,) targets.

    Returns:
        (D,) least-squares solution.
    """
    _check_design(X, y)
    n, d = X.shape
    if n < d:
        raise ValueError(f"need N >= D for a unique least-squares solution, got X {tuple(X.shape)}")
    q, r = torch.linalg.qr(X, mode="reduced")  # q: (N, D), r: (D, D) upper triangular
    diag = r.diagonal().abs()
    if float(diag.min()) <= torch.finfo(X.dtype).eps * max(n, d) * float(diag.max()):
        raise ValueError(f"X of shape {tuple(X.shape)} is numerically rank-deficient")
    return torch.linalg.solve_triangular(r, (q.T @ y)[:, None], upper=True)[:, 0]


# --- eq. 9.4: gradient descent --------------------------------------------------------------------


def _check_gd(theta0, lr) -> None:
    _tensor(theta0, "theta0")
    if theta0.ndim != 1 or theta0.numel() == 0:
        raise ValueError(f"theta0 must be a non-empty (D,) vector, got shape {tuple(theta0.shape)}")
    if not lr > 0:
        raise ValueError(f"the learning rate must be positive, got {lr}")


def gradient_descent(
    grad: Callable[[torch.Tensor], torch.Tensor], theta0: torch.Tensor, lr: float, steps: int
) -> torch.Tensor:
    """Run theta <- theta - lr * grad(theta) for ``steps`` steps and keep every iterate (eq. 9.4).

    Args:
        grad: maps parameters (D,) to the gradient of the loss there, (D,).
        theta0: (D,) starting point.
        lr: learning rate eta > 0.
        steps: number of updates T >= 0.

    Returns:
        (T + 1, D) iterates; row 0 is ``theta0``, row t the parameters after t updates. A learning
        rate too large for the loss makes them grow without bound; nothing stops that here.
    """
    _check_gd(theta0, lr)
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    path = torch.empty((steps + 1, theta0.numel()), dtype=theta0.dtype)  # (T + 1, D)
    path[0] = theta0
    theta = theta0.detach().clone()
    for t in range(steps):
        g = grad(theta)
        if g.shape != theta.shape:
            raise ValueError(f"grad must return shape {tuple(theta.shape)}, got {tuple(g.shape)}")
        theta = theta - lr * g
        path[t + 1] = theta
    return path


@dataclass(frozen=True)
class GDResult:
    """Outcome of :func:`minimize_gd`: the last iterate, the updates taken, the final gradient norm,
    and whether that norm reached the tolerance."""

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
    """Gradient descent (eq. 9.4) until ||grad|| <= tol or ``max_steps`` updates; keeps no path.

    Args:
        grad: maps parameters (D,) to the gradient (D,).
        theta0: (D,) starting point.
        lr: learning rate eta > 0.
        tol: stop as soon as the Euclidean norm of the gradient is at most ``tol`` (> 0).
        max_steps: the most updates to take.
    """
    _check_gd(theta0, lr)
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    if not isinstance(max_steps, int) or max_steps < 0:
        raise ValueError(f"max_steps must be a non-negative int, got {max_steps!r}")
    theta = theta0.detach().clone()
    for t in range(max_steps + 1):
        g = grad(theta)
        if g.shape != theta.shape:
            raise ValueError(f"grad must return shape {tuple(theta.shape)}, got {tuple(g.shape)}")
        gnorm = float(torch.linalg.vector_norm(g))
        if gnorm <= tol or t == max_steps or not torch.isfinite(g).all():
            return GDResult(theta, t, gnorm, gnorm <= tol)
        theta = theta - lr * g
    raise AssertionError("unreachable")  # pragma: no cover


# --- eq. 9.5: logistic regression -----------------------------------------------------------------


def bce_loss(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of labels y under p = sigmoid(X w), computed from the logits.

    -(1/N) sum_i [y_i log p_i + (1 - y_i) log(1 - p_i)] = (1/N) sum_i [log(1 + e^{z_i}) - y_i z_i]
    with z = X w, and log(1 + e^z) = max(z, 0) + log(1 + e^{-|z|}) so that no exponential
    overflows. The loss whose gradient is eq. 9.5.

    Args:
        w: (D,) weights.  X: (N, D) design matrix.  y: (N,) labels in [0, 1].
    """
    _check_linear(w, X, y, "w")
    _check_labels(y)
    z = X @ w  # (N,) logits
    softplus = torch.clamp(z, min=0) + torch.log1p(torch.exp(-z.abs()))
    return (softplus - y * z).mean()


def bce_grad(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """grad_w of the mean binary cross-entropy: (1/N) X^T (p - y), p = sigmoid(X w) (eq. 9.5).

    Args:
        w: (D,) weights.  X: (N, D) design matrix.  y: (N,) labels in [0, 1].

    Returns:
        (D,) gradient.
    """
    _check_linear(w, X, y, "w")
    _check_labels(y)
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
    """Fit logistic regression by gradient descent (eq. 9.4) on the gradient of eq. 9.5.

    Minimises bce_loss(w, X, y) + (l2 / 2) ||w[1:]||^2: column 0 of X must be the intercept (all
    ones), whose weight is not penalised. The objective is L-smooth with
    L = lambda_max(X^T X) / (4N) + l2 (the logistic curvature p(1 - p) is at most 1/4), and the
    default learning rate is the classic safe 1/L. Scikit-learn's ``LogisticRegression`` minimises
    C sum_i loss_i + ||w[1:]||^2 / 2, which is N C times this objective when C = 1 / (N l2): the
    two have the same minimiser.

    Args:
        X: (N, D) design matrix, X[:, 0] == 1.  y: (N,) labels in [0, 1].
        l2: non-negative L2 strength.
        lr: learning rate (default 1/L).
        tol, max_steps: stopping rule of :func:`minimize_gd`.
        w0: (D,) starting weights (default zeros), e.g. the fit for a nearby l2 (a warm start).

    Returns:
        A :class:`GDResult`; ``theta`` holds the (D,) weights, intercept first.
    """
    _check_design(X, y)
    _check_labels(y)
    if not torch.all(X[:, 0] == 1):
        raise ValueError("column 0 of X must be the intercept column of ones (use add_intercept)")
    if not l2 >= 0:
        raise ValueError(f"l2 must be non-negative, got {l2}")
    n, d = X.shape
    if w0 is None:
        w0 = torch.zeros(d, dtype=X.dtype)
    _check_linear(w0, X, y, "w0")
    if lr is None:
        smooth = float(torch.linalg.eigvalsh(X.T @ X).max()) / (4 * n) + l2
        lr = 1.0 / smooth
    mask = torch.ones(d, dtype=X.dtype)
    mask[0] = 0.0  # (D,): the intercept is not penalised

    def grad(w: torch.Tensor) -> torch.Tensor:
        return X.T @ (torch.sigmoid(X @ w) - y) / n + l2 * mask * w  # eq. 9.5 + penalty

    return minimize_gd(grad, w0, lr, tol=tol, max_steps=max_steps)


def accuracy(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    """Share of examples whose predicted class 1[x^T w > 0] (p > 1/2) equals the 0/1 label.

    Args:
        w: (D,) weights.  X: (N, D) design matrix.  y: (N,) labels in {0, 1}.
    """
    _check_linear(w, X, y, "w")
    if not torch.all((y == 0) | (y == 1)):
        raise ValueError("accuracy needs hard labels in {0, 1}")
    return float(((X @ w > 0).to(y.dtype) == y).to(torch.float64).mean())


# --- the train / validation / test protocol -------------------------------------------------------


def add_intercept(X: torch.Tensor) -> torch.Tensor:
    """Prepend a column of ones: (N, D) -> (N, D + 1), so that theta[0] is the intercept."""
    _tensor(X, "X")
    if X.ndim != 2:
        raise ValueError(f"X must be (N, D), got shape {tuple(X.shape)}")
    return torch.cat([torch.ones(X.shape[0], 1, dtype=X.dtype), X], dim=1)


def train_val_test_split(
    n: int, val_fraction: float, test_fraction: float, generator: torch.Generator
) -> tuple[torch.Tensor, ...]:
    """Shuffle the indices 0..n-1 and cut them into disjoint train, validation and test parts.

    Args:
        n: number of examples.
        val_fraction, test_fraction: shares of n (rounded down) for validation and test; the
            rest is for training. Each part must end up non-empty.
        generator: the torch random generator that fixes the shuffle.

    Returns:
        (train, val, test) int64 index tensors.
    """
    if not isinstance(n, int) or n < 3:
        raise ValueError(f"n must be an int >= 3, got {n!r}")
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ValueError(
            f"need fractions in (0, 1) summing below 1, got val={val_fraction},"
            f" test={test_fraction}"
        )
    n_val, n_test = int(n * val_fraction), int(n * test_fraction)
    n_train = n - n_val - n_test
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(
            f"a part is empty: n={n} gives train/val/test = {n_train}/{n_val}/{n_test}"
        )
    perm = torch.randperm(n, generator=generator)
    return perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]


def standardise(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Centre and scale every column by the mean and standard deviation of the TRAINING rows.

    Statistics from the training part only: computing them on validation or test rows too would
    leak information about the data that is meant to judge the model.

    Args:
        train: (N_train, D) training features.
        others: (N_k, D) further parts (validation, test), transformed with the same statistics.

    Returns:
        The standardised parts, training part first.
    """
    _tensor(train, "train")
    if train.ndim != 2 or train.shape[0] < 2:
        raise ValueError(f"train must be (N, D) with N >= 2, got shape {tuple(train.shape)}")
    for k, o in enumerate(others):
        _tensor(o, f"others[{k}]")
        if o.ndim != 2 or o.shape[1] != train.shape[1]:
            raise ValueError(f"others[{k}] must be (M, {train.shape[1]}), got {tuple(o.shape)}")
    mean = train.mean(dim=0)  # (D,)
    std = train.std(dim=0, correction=0)  # (D,), population std as in scikit-learn
    if torch.any(std == 0):
        cols = torch.nonzero(std == 0).flatten().tolist()
        raise ValueError(f"columns {cols} are constant on the training rows: cannot scale them")
    return tuple((part - mean) / std for part in (train, *others))
