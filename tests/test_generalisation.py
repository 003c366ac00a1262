"""Tests of mlbook.beyond.generalisation against independent references: NumPy's lstsq and pinv,
the normal equations, explicit gradient steps with float64 autograd, loops, and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlbook.beyond import generalisation as gen

F64 = torch.float64


def _data(n, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, p, generator=g, dtype=F64), torch.randn(n, generator=g, dtype=F64)


@pytest.mark.parametrize("n, p", [(20, 50), (50, 20), (30, 30)])
def test_min_norm_matches_numpy_lstsq_and_pinv_and_naive(n, p):
    X, y = _data(n, p)
    theta = gen.min_norm_solution(X, y)
    ref = np.linalg.lstsq(X.numpy(), y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(theta.numpy(), ref, atol=1e-8)
    np.testing.assert_allclose(theta.numpy(), np.linalg.pinv(X.numpy()) @ y.numpy(), atol=1e-8)
    torch.testing.assert_close(theta, gen.min_norm_solution_naive(X, y), atol=1e-7, rtol=0)


def test_min_norm_interpolates_and_lies_in_the_row_space():
    X, y = _data(10, 40, seed=1)
    theta = gen.min_norm_solution(X, y)
    torch.testing.assert_close(X @ theta, y, atol=1e-10, rtol=0)
    coef = torch.linalg.lstsq(X.T, theta[:, None]).solution  # theta = X^T alpha exactly
    torch.testing.assert_close(X.T @ coef[:, 0], theta, atol=1e-10, rtol=0)


def test_min_norm_leaves_out_a_zero_singular_value():
    X, y = _data(12, 6, seed=2)
    X[:, 3] = 0.0  # a dead feature: rank 5
    theta = gen.min_norm_solution(X, y)
    assert torch.isfinite(theta).all() and abs(float(theta[3])) < 1e-12
    ref = np.linalg.lstsq(X.numpy(), y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(theta.numpy(), ref, atol=1e-10)
    assert torch.isfinite(gen.ridge_path(X, y, [0.0, 0.1])).all()


@pytest.mark.parametrize("n, p", [(20, 50), (50, 20)])
@pytest.mark.parametrize("lam", [1e-3, 0.5, 10.0])
def test_ridge_matches_normal_equations(n, p, lam):
    X, y = _data(n, p, seed=3)
    ref = np.linalg.solve(X.numpy().T @ X.numpy() + lam * np.eye(p), X.numpy().T @ y.numpy())
    np.testing.assert_allclose(gen.ridge_solution(X, y, lam).numpy(), ref, atol=1e-9)
    torch.testing.assert_close(
        gen.ridge_solution(X, y, lam), gen.ridge_solution_naive(X, y, lam), atol=1e-9, rtol=0
    )


def test_ridge_is_the_minimiser_of_the_penalised_loss():
    X, y = _data(15, 25, seed=4)
    lam = 0.3
    theta = gen.ridge_solution(X, y, lam).requires_grad_(True)
    loss = 0.5 * ((X @ theta - y) ** 2).sum() + 0.5 * lam * (theta**2).sum()
    (grad,) = torch.autograd.grad(loss, theta)
    assert float(grad.abs().max()) < 1e-10


def test_ridge_path_and_limit():
    X, y = _data(20, 60, seed=5)
    lams = [0.0, 1e-2, 1.0]
    path = gen.ridge_path(X, y, lams)
    assert path.shape == (3, 60)
    torch.testing.assert_close(path[0], gen.min_norm_solution(X, y), atol=1e-10, rtol=0)
    for row, lam in zip(path[1:], lams[1:], strict=True):
        torch.testing.assert_close(row, gen.ridge_solution(X, y, lam), atol=1e-12, rtol=0)
    torch.testing.assert_close(
        gen.ridge_solution(X, y, 1e-12), gen.min_norm_solution(X, y), atol=1e-8, rtol=0
    )


def test_gd_closed_form_matches_autograd_steps():
    X, y = _data(12, 30, seed=6)
    lr = 1 / float(torch.linalg.matrix_norm(X, ord=2) ** 2)
    theta = torch.zeros(30, dtype=F64, requires_grad=True)
    for t in range(1, 41):
        loss = 0.5 * ((X @ theta - y) ** 2).sum()
        (grad,) = torch.autograd.grad(loss, theta)
        theta = (theta - lr * grad).detach().requires_grad_(True)
        if t in (1, 10, 40):
            torch.testing.assert_close(
                gen.gd_solution(X, y, lr, t), theta.detach(), atol=1e-11, rtol=0
            )
    torch.testing.assert_close(
        gen.gd_solution_naive(X, y, lr, 40), theta.detach(), atol=1e-11, rtol=0
    )
    torch.testing.assert_close(gen.gd_solution(X, y, lr, 0), torch.zeros(30, dtype=F64))


def test_gd_converges_to_the_min_norm_solution():
    X, y = _data(10, 25, seed=7)
    lr = 1 / float(torch.linalg.matrix_norm(X, ord=2) ** 2)
    torch.testing.assert_close(
        gen.gd_solution(X, y, lr, 10**9), gen.min_norm_solution(X, y), atol=1e-8, rtol=0
    )


def test_filters_closed_forms():
    s2 = torch.tensor([0.0, 1e-3, 1.0, 5.0], dtype=F64)
    torch.testing.assert_close(gen.ridge_filter(s2, 0.5), s2 / (s2 + 0.5))
    assert gen.ridge_filter(s2, 0.0).tolist() == [0.0, 1.0, 1.0, 1.0]
    torch.testing.assert_close(gen.gd_filter(s2, 0.1, 3), 1 - (1 - 0.1 * s2) ** 3)


def test_bias_variance_against_numpy():
    g = torch.Generator().manual_seed(8)
    preds = torch.randn(50, 7, generator=g, dtype=F64)
    f = torch.randn(7, generator=g, dtype=F64)
    b2, var = gen.bias_variance(preds, f)
    P, fn = preds.numpy(), f.numpy()
    assert b2 == pytest.approx(np.mean((P.mean(0) - fn) ** 2), abs=1e-12)
    assert var == pytest.approx(np.var(P, axis=0).mean(), abs=1e-12)
    assert b2 + var == pytest.approx(np.mean((P - fn) ** 2), abs=1e-12)  # the exact identity


def test_relu_features_against_numpy():
    g = torch.Generator().manual_seed(9)
    x, W, b = (torch.randn(*s, generator=g, dtype=F64) for s in ((6, 3), (3, 16), (16,)))
    ref = np.maximum(x.numpy() @ W.numpy() + b.numpy(), 0) / 4.0
    np.testing.assert_allclose(gen.relu_features(x, W, b).numpy(), ref, atol=1e-14)


def test_threshold_risks_match_loop_and_broadcast():
    g = torch.Generator().manual_seed(10)
    z = torch.rand(4, 37, generator=g, dtype=F64)
    labels = (torch.rand(4, 37, generator=g, dtype=F64) > 0.4).to(F64)
    thresholds = torch.cat([torch.rand(9, generator=g, dtype=F64), z[0, :3]])  # ties, unsorted
    risks = gen.threshold_risks(z, labels, thresholds)
    loop = torch.stack([gen.threshold_risks_naive(z[i], labels[i], thresholds) for i in range(4)])
    torch.testing.assert_close(risks, loop, atol=1e-15, rtol=0)
    wrong = (z[..., :, None] > thresholds) != (labels[..., :, None] > 0.5)  # (4, n, K)
    torch.testing.assert_close(risks, wrong.to(F64).mean(-2), atol=1e-15, rtol=0)


def test_union_bound_epsilon_solves_the_tail_equation():
    for n, k, delta in [(100, 1, 0.05), (500, 101, 0.01), (37, 1000, 0.5)]:
        eps = gen.union_bound_epsilon(n, k, delta)
        assert 2 * k * math.exp(-2 * n * eps**2) == pytest.approx(delta, rel=1e-12)


def test_argument_checks():
    X, y = _data(5, 3)
    with pytest.raises(ValueError, match="y must have shape"):
        gen.ridge_solution(X, y[:4], 0.1)
    with pytest.raises(ValueError, match="lam must be a finite number"):
        gen.ridge_solution(X, y, -1.0)
    with pytest.raises(ValueError, match="X must be finite"):
        gen.min_norm_solution(torch.full((5, 3), float("nan"), dtype=F64), y)
    with pytest.raises(ValueError, match="lr must be a finite number"):
        gen.gd_solution(X, y, 0.0, 3)
    with pytest.raises(ValueError, match="b must have shape"):
        gen.relu_features(X, torch.ones(3, 4, dtype=F64), torch.ones(4, 1, dtype=F64))
    with pytest.raises(ValueError, match="f_true must have shape"):
        gen.bias_variance(torch.ones(4, 3, dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match="z and labels must have the same shape"):
        gen.threshold_risks(torch.rand(5, dtype=F64), torch.ones(4), torch.rand(3, dtype=F64))
    with pytest.raises(ValueError, match="delta must be in"):
        gen.union_bound_epsilon(10, 5, 0.0)
