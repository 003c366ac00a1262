"""Unit tests of mlbook.foundations.linear_models against independent references (chapter 9).

References: torch autograd in float64, torch.linalg.lstsq, NumPy's lstsq, torch.optim.SGD,
F.binary_cross_entropy_with_logits, scikit-learn's LogisticRegression, Ridge and StandardScaler.
Tolerances: float64 results that agree up to rounding use 1e-10..1e-12; float32 uses 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbook.foundations import linear_models as lm

F64 = torch.float64


def problem(n=40, d=4, seed=0, dtype=F64):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=gen, dtype=dtype)
    theta = torch.randn(d, generator=gen, dtype=dtype)
    y = X @ theta + 0.3 * torch.randn(n, generator=gen, dtype=dtype)
    return X, y, torch.randn(d, generator=gen, dtype=dtype)


def classification(n=60, d=3, seed=1):
    gen = torch.Generator().manual_seed(seed)
    X = lm.add_intercept(torch.randn(n, d, generator=gen, dtype=F64))
    w_true = torch.randn(d + 1, generator=gen, dtype=F64)
    y = (torch.rand(n, generator=gen, dtype=F64) < torch.sigmoid(X @ w_true)).to(F64)
    return X, y, torch.randn(d + 1, generator=gen, dtype=F64)


# --- eq. 9.1 --------------------------------------------------------------------------------------


def test_empirical_risk_matches_loop_and_mse():
    X, y, theta = problem()

    def predict(x):
        return x @ theta

    vec = lm.empirical_risk(predict, lm.squared_error, X, y)
    loop = lm.empirical_risk_loop(predict, lm.squared_error, X, y)
    ref = F.mse_loss(X @ theta, y)
    torch.testing.assert_close(vec, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(loop, ref, atol=1e-12, rtol=0)


def test_empirical_risk_is_differentiable():
    X, y, theta = problem()
    t = theta.clone().requires_grad_(True)
    risk = lm.empirical_risk(lambda x: x @ t, lm.squared_error, X, y)
    (g,) = torch.autograd.grad(risk, t)
    torch.testing.assert_close(g, lm.mse_grad(theta, X, y), atol=1e-12, rtol=0)


def test_empirical_risk_bad_input():
    X, y, theta = problem()
    with pytest.raises(ValueError, match="y must have shape"):
        lm.empirical_risk(lambda x: x @ theta, lm.squared_error, X, y[:-1])
    with pytest.raises(ValueError, match=r"loss\(predict\(X\), y\) must have shape"):
        lm.empirical_risk(lambda x: x @ theta, lambda p, t: (p - t).sum(), X, y)
    with pytest.raises(TypeError, match="X must be a torch.Tensor"):
        lm.empirical_risk(lambda x: x @ theta, lm.squared_error, X.numpy(), y)
    with pytest.raises(ValueError, match="X must not be empty"):
        lm.empirical_risk_loop(lambda x: x @ theta, lm.squared_error, X[:0], y[:0])
    with pytest.raises(ValueError, match="must have shape"):
        lm.empirical_risk_loop(lambda x: x @ theta, lambda p, t: (p - t).sum(), X, y)
    with pytest.raises(ValueError, match="same shape"):
        lm.squared_error(X, y)


# --- eq. 9.2 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_mse_grad_matches_autograd(dtype, atol):
    X, y, theta = problem(dtype=dtype)
    t = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(F.mse_loss(X @ t, y), t)
    torch.testing.assert_close(lm.mse_grad(theta, X, y), g, atol=atol, rtol=0)
    torch.testing.assert_close(
        lm.mse_loss(theta, X, y), F.mse_loss(X @ theta, y), atol=atol, rtol=0
    )


def test_mse_bad_input():
    X, y, theta = problem()
    with pytest.raises(ValueError, match="theta must have shape"):
        lm.mse_grad(theta[:-1], X, y)
    with pytest.raises(ValueError, match="y must have shape"):
        lm.mse_loss(theta, X, y[:-1])
    with pytest.raises(ValueError, match="X must have 2 axes"):
        lm.mse_grad(theta, X[0], y)


# --- eq. 9.3 --------------------------------------------------------------------------------------


def test_normal_equations_match_lstsq_and_qr():
    X, y, _ = problem(n=50, d=6)
    ref = torch.linalg.lstsq(X, y[:, None]).solution[:, 0]
    np_ref = np.linalg.lstsq(X.numpy(), y.numpy(), rcond=None)[0]
    torch.testing.assert_close(lm.normal_equations(X, y), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(lm.least_squares_qr(X, y), ref, atol=1e-12, rtol=0)
    np.testing.assert_allclose(lm.least_squares_qr(X, y).numpy(), np_ref, atol=1e-12, rtol=0)
    theta = lm.normal_equations(X, y)
    # the residual is orthogonal to every column: the gradient vanishes
    torch.testing.assert_close(X.T @ (y - X @ theta), torch.zeros(6, dtype=F64), atol=1e-11, rtol=0)


def test_ridge_matches_sklearn():
    sklearn_linear = pytest.importorskip("sklearn.linear_model")
    X, y, _ = problem(n=30, d=5)
    l2 = 0.2
    ref = sklearn_linear.Ridge(alpha=30 * l2, fit_intercept=False).fit(X.numpy(), y.numpy()).coef_
    np.testing.assert_allclose(lm.normal_equations(X, y, l2=l2).numpy(), ref, atol=1e-10, rtol=0)
    # the ridge gradient vanishes at the solution
    theta = lm.normal_equations(X, y, l2=l2)
    torch.testing.assert_close(
        lm.mse_grad(theta, X, y) + 2 * l2 * theta, torch.zeros(5, dtype=F64), atol=1e-12, rtol=0
    )


def test_least_squares_bad_input():
    X, y, _ = problem(n=10, d=3)
    rank_def = torch.cat([X, X[:, :1]], dim=1)  # (10, 4), last column repeats the first
    with pytest.raises(ValueError, match="rank-deficient"):
        lm.normal_equations(rank_def, y)
    lm.normal_equations(rank_def, y, l2=0.1)  # ridge makes it solvable
    with pytest.raises(ValueError, match="rank-deficient"):
        lm.least_squares_qr(rank_def, y)
    with pytest.raises(ValueError, match="N >= D"):
        lm.least_squares_qr(X[:2], y[:2])
    with pytest.raises(ValueError, match="l2 must be a finite number in"):
        lm.normal_equations(X, y, l2=-1.0)
    with pytest.raises(ValueError, match="y must have shape"):
        lm.normal_equations(X, y[:-1])


# --- eq. 9.4 --------------------------------------------------------------------------------------


def test_gradient_descent_matches_torch_sgd():
    X, y, theta0 = problem()
    lr, steps = 0.1, 25
    path = lm.gradient_descent(lambda t: lm.mse_grad(t, X, y), theta0, lr, steps)
    assert path.shape == (steps + 1, 4)
    p = theta0.clone().requires_grad_(True)
    opt = torch.optim.SGD([p], lr=lr)
    ref = [theta0.clone()]
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(X @ p, y).backward()
        opt.step()
        ref.append(p.detach().clone())
    torch.testing.assert_close(path, torch.stack(ref), atol=1e-12, rtol=0)


def test_gradient_descent_on_quadratic_has_closed_form():
    X, y, theta0 = problem()
    lr, steps = 0.2, 15
    theta_star = lm.normal_equations(X, y)
    H = 2 * X.T @ X / X.shape[0]
    path = lm.gradient_descent(lambda t: lm.mse_grad(t, X, y), theta0, lr, steps)
    M = torch.eye(4, dtype=F64) - lr * H
    expected = theta_star + torch.linalg.matrix_power(M, steps) @ (theta0 - theta_star)
    torch.testing.assert_close(path[-1], expected, atol=1e-12, rtol=0)


def test_minimize_gd_converges_to_normal_equations():
    X, y, theta0 = problem()
    res = lm.minimize_gd(lambda t: lm.mse_grad(t, X, y), theta0, 0.2, tol=1e-11)
    assert res.converged and res.grad_norm <= 1e-11 and res.steps > 0
    torch.testing.assert_close(res.theta, lm.normal_equations(X, y), atol=1e-10, rtol=0)
    capped = lm.minimize_gd(lambda t: lm.mse_grad(t, X, y), theta0, 0.2, tol=1e-11, max_steps=3)
    assert capped.steps == 3 and not capped.converged


def test_gradient_descent_bad_input():
    X, y, theta0 = problem()

    def grad(t):
        return lm.mse_grad(t, X, y)

    with pytest.raises(ValueError, match="lr must be"):
        lm.gradient_descent(grad, theta0, 0.0, 5)
    with pytest.raises(ValueError, match="steps"):
        lm.gradient_descent(grad, theta0, 0.1, -1)
    with pytest.raises(ValueError, match="theta0"):
        lm.gradient_descent(grad, theta0[None], 0.1, 5)
    with pytest.raises(ValueError, match=r"grad\(theta\) must have shape"):
        lm.gradient_descent(lambda t: t[:2], theta0, 0.1, 5)
    with pytest.raises(ValueError, match="tol"):
        lm.minimize_gd(grad, theta0, 0.1, tol=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        lm.minimize_gd(grad, theta0, 0.1, max_steps=-2)
    with pytest.raises(ValueError, match=r"grad\(theta\) must have shape"):
        lm.minimize_gd(lambda t: t[:2], theta0, 0.1)
    with pytest.raises(TypeError, match="theta0 must be a torch.Tensor"):
        lm.minimize_gd(grad, theta0.numpy(), 0.1)


# --- eq. 9.5 --------------------------------------------------------------------------------------


def test_bce_loss_and_logistic_grad_match_torch():
    X, y, w = classification()
    ref = F.binary_cross_entropy_with_logits(X @ w, y)
    torch.testing.assert_close(lm.bce_loss(w, X, y), ref, atol=1e-12, rtol=0)
    wr = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(F.binary_cross_entropy_with_logits(X @ wr, y), wr)
    torch.testing.assert_close(lm.logistic_grad(w, X, y), g, atol=1e-12, rtol=0)


def test_bce_loss_is_stable_for_huge_logits():
    X = torch.tensor([[1.0], [1.0], [1.0], [1.0]], dtype=F64)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=F64)
    for scale in (800.0, -800.0):
        w = torch.tensor([scale], dtype=F64)
        loss = lm.bce_loss(w, X, y)
        assert torch.isfinite(loss)
        torch.testing.assert_close(
            loss, F.binary_cross_entropy_with_logits(X @ w, y), atol=1e-12, rtol=1e-14
        )


def test_bce_soft_labels():
    X, _, w = classification()
    y = torch.linspace(0, 1, X.shape[0], dtype=F64)
    torch.testing.assert_close(
        lm.bce_loss(w, X, y), F.binary_cross_entropy_with_logits(X @ w, y), atol=1e-12, rtol=0
    )


def test_logistic_regression_matches_sklearn():
    sklearn_linear = pytest.importorskip("sklearn.linear_model")
    X, y, _ = classification(n=80)
    l2 = 0.05
    fit = lm.fit_logistic_regression(X, y, l2=l2, tol=1e-10)
    assert fit.converged
    sk = sklearn_linear.LogisticRegression(C=1 / (80 * l2), tol=1e-12, max_iter=10_000)
    sk.fit(X[:, 1:].numpy(), y.numpy())
    ref = np.r_[sk.intercept_, sk.coef_[0]]
    np.testing.assert_allclose(fit.theta.numpy(), ref, atol=1e-6, rtol=0)
    acc = lm.accuracy(fit.theta, X, y)
    assert acc == pytest.approx(sk.score(X[:, 1:].numpy(), y.numpy()), abs=1e-12)
    # a warm start from the solution stops at once
    again = lm.fit_logistic_regression(X, y, l2=l2, tol=1e-8, w0=fit.theta)
    assert again.steps == 0


def test_logistic_bad_input():
    X, y, w = classification()
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\]"):
        lm.bce_loss(w, X, 2 * y)
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\]"):
        lm.logistic_grad(w, X, y - 1)
    with pytest.raises(ValueError, match="w must have shape"):
        lm.logistic_grad(w[:-1], X, y)
    with pytest.raises(ValueError, match="intercept"):
        lm.fit_logistic_regression(X[:, 1:], y)
    with pytest.raises(ValueError, match="l2"):
        lm.fit_logistic_regression(X, y, l2=-0.1)
    with pytest.raises(ValueError, match="w0 must have shape"):
        lm.fit_logistic_regression(X, y, w0=w[:-1])
    with pytest.raises(ValueError, match="0/1"):
        lm.accuracy(w, X, torch.full_like(y, 0.5))


# --- protocol helpers -----------------------------------------------------------------------------


def test_split_is_a_disjoint_cover_and_seeded():
    gen = torch.Generator().manual_seed(0)
    tr, va, te = lm.train_val_test_split(101, 0.2, 0.1, gen)
    assert (len(tr), len(va), len(te)) == (71, 20, 10)
    assert torch.equal(torch.sort(torch.cat([tr, va, te])).values, torch.arange(101))
    again = lm.train_val_test_split(101, 0.2, 0.1, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip((tr, va, te), again, strict=True))


def test_split_bad_input():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"val_fraction \+ test_fraction"):
        lm.train_val_test_split(10, 0.6, 0.5, gen)
    with pytest.raises(ValueError, match="empty"):
        lm.train_val_test_split(5, 0.1, 0.1, gen)
    with pytest.raises(TypeError, match="n must be an int"):
        lm.train_val_test_split(2.5, 0.1, 0.1, gen)


def test_standardise_matches_sklearn():
    preprocessing = pytest.importorskip("sklearn.preprocessing")
    gen = torch.Generator().manual_seed(3)
    a = 5 + 3 * torch.randn(40, 3, generator=gen, dtype=F64)
    b = torch.randn(7, 3, generator=gen, dtype=F64)
    sa, sb = lm.standardise(a, b)
    scaler = preprocessing.StandardScaler().fit(a.numpy())
    np.testing.assert_allclose(sa.numpy(), scaler.transform(a.numpy()), atol=1e-12, rtol=0)
    np.testing.assert_allclose(sb.numpy(), scaler.transform(b.numpy()), atol=1e-12, rtol=0)


def test_standardise_and_intercept_bad_input():
    a = torch.ones(5, 2, dtype=F64)
    with pytest.raises(ValueError, match="constant"):
        lm.standardise(a)
    with pytest.raises(ValueError, match="others"):
        lm.standardise(torch.randn(5, 2, dtype=F64), torch.randn(3, 3, dtype=F64))
    with pytest.raises(ValueError, match="X must have 2 axes"):
        lm.add_intercept(torch.randn(5, dtype=F64))
    with pytest.raises(TypeError, match="X must be a torch.Tensor"):
        lm.add_intercept(np.ones((3, 2)))
