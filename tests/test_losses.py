"""Unit tests of mlbook.nn.losses against independent references (torch built-ins, SciPy, autograd).

Tolerances per dtype: float64 results agree with float64 references to ~1e-12 (a few ulps of
the values involved); float32 results are judged against float64 references at ~1e-5 relative.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import optimize, stats

from mlbook.foundations import linear_models as lm
from mlbook.nn import losses as L

F64 = torch.float64


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# --- eq. 13.1 ---------------------------------------------------------------------------------


def test_squared_and_absolute_error_are_shifted_scaled_nlls(gen):
    y = torch.randn(50, generator=gen, dtype=F64)
    m = torch.randn(50, generator=gen, dtype=F64)
    sigma, b = 0.7, 1.3
    gauss = -stats.norm.logpdf(y.numpy(), m.numpy(), sigma)
    lap = -stats.laplace.logpdf(y.numpy(), m.numpy(), b)
    np.testing.assert_allclose(
        lm.squared_error(m, y).numpy() / (2 * sigma**2) + math.log(sigma * math.sqrt(2 * math.pi)),
        gauss,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        L.absolute_error(m, y).numpy() / b + math.log(2 * b), lap, atol=1e-12
    )
    assert torch.equal(
        L.absolute_error(m, y), L.absolute_error(y, m)
    )  # symmetric, like (pred - y)^2
    assert math.isclose(float(L.laplace_nll(y, m, b)), lap.mean(), abs_tol=1e-12)


def test_laplace_mle_scale_is_mean_absolute_residual(gen):
    y = torch.randn(200, generator=gen, dtype=F64)
    m = torch.zeros(200, dtype=F64)
    res = optimize.minimize_scalar(
        lambda b: float(L.laplace_nll(y, m, b)),
        bounds=(0.05, 5),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert abs(res.x - float(y.abs().mean())) < 1e-6


def _line_data(seed=0, n=60):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, n))
    y = 1.0 + 0.5 * x + rng.normal(0, 0.5, n)
    y[-8::2] -= rng.uniform(6, 10, 4)  # outliers
    return torch.tensor(np.stack([x, np.ones(n)], 1)), torch.tensor(y)


def test_irls_l2_is_least_squares_and_l1_is_the_lp_solution():
    X, y = _line_data()
    th2 = L.fit_linear_irls(X, y, "l2")
    np.testing.assert_allclose(
        th2.numpy(), np.linalg.lstsq(X.numpy(), y.numpy(), rcond=None)[0], atol=1e-10
    )
    n = len(y)
    c = np.r_[0, 0, np.ones(n)]
    A = np.block([[X.numpy(), -np.eye(n)], [-X.numpy(), -np.eye(n)]])
    lp = optimize.linprog(
        c,
        A_ub=A,
        b_ub=np.r_[y.numpy(), -y.numpy()],
        bounds=[(None, None)] * 2 + [(0, None)] * n,
        method="highs",
    )
    th1 = L.fit_linear_irls(X, y, "l1")
    assert float((y - X @ th1).abs().sum()) - lp.fun < 1e-7
    np.testing.assert_allclose(th1.numpy(), lp.x[:2], atol=1e-5)


def test_irls_huber_matches_scipy_least_squares_huber():
    X, y = _line_data(seed=1)
    for delta in (0.5, 1.0, 3.0):
        th = L.fit_linear_irls(X, y, "huber", delta=delta)
        ref = optimize.least_squares(
            lambda t: y.numpy() - X.numpy() @ t,
            np.zeros(2),
            loss="huber",
            f_scale=delta,
            xtol=1e-15,
            ftol=1e-15,
            gtol=1e-15,
        )
        np.testing.assert_allclose(th.numpy(), ref.x, atol=1e-7)


def test_irls_never_increases_the_objective():
    X, y = _line_data(seed=2)
    for loss, delta in (("l1", 1.0), ("huber", 0.7)):

        def objective(th, loss=loss, delta=delta):
            r = y - X @ th
            return float(r.abs().sum() if loss == "l1" else L.huber_loss(r, delta).sum())

        values = [
            objective(L.fit_linear_irls(X, y, loss, delta=delta, n_iter=k)) for k in range(1, 15)
        ]
        assert all(b <= a + 1e-12 for a, b in zip(values, values[1:], strict=False))


def test_constant_model_gives_mean_and_median(gen):
    y = torch.randn(101, generator=gen, dtype=F64) ** 3
    ones = torch.ones(101, 1, dtype=F64)
    assert abs(float(L.fit_linear_irls(ones, y, "l2")[0]) - float(y.mean())) < 1e-12
    assert abs(float(L.fit_linear_irls(ones, y, "l1")[0]) - float(np.median(y.numpy()))) < 1e-6


# --- eq. 13.2 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_huber_matches_torch_builtins(gen, dtype, atol):
    r = 3 * torch.randn(1000, generator=gen, dtype=F64)
    for delta in (0.1, 1.0, 2.5):
        ref = F.huber_loss(r, torch.zeros_like(r), reduction="none", delta=delta)
        ref_sl1 = delta * F.smooth_l1_loss(r, torch.zeros_like(r), reduction="none", beta=delta)
        got = L.huber_loss(r.to(dtype), delta).double()
        torch.testing.assert_close(got, ref, atol=atol, rtol=atol)
        torch.testing.assert_close(got, ref_sl1, atol=atol, rtol=atol)
        torch.testing.assert_close(
            L.huber_loss_naive(r.to(dtype), delta).double(), ref, atol=atol, rtol=atol
        )


def test_huber_grad_matches_autograd(gen):
    r = (3 * torch.randn(500, generator=gen, dtype=F64)).requires_grad_(True)
    (g,) = torch.autograd.grad(L.huber_loss(r, 1.5).sum(), r)
    torch.testing.assert_close(L.huber_grad(r.detach(), 1.5), g, atol=1e-14, rtol=0)


# --- eq. 13.3 ---------------------------------------------------------------------------------


def test_bce_matches_builtin_and_gradient(gen):
    z = (8 * torch.randn(400, generator=gen, dtype=F64)).requires_grad_(True)
    y = torch.rand(400, generator=gen, dtype=F64)  # soft labels
    loss = L.bce_with_logits(z, y)
    ref = F.binary_cross_entropy_with_logits(z, y, reduction="none")
    torch.testing.assert_close(loss, ref, atol=1e-12, rtol=1e-12)
    (g,) = torch.autograd.grad(loss.sum(), z)
    torch.testing.assert_close(L.bce_grad(z.detach(), y), g, atol=1e-14, rtol=0)
    zz = torch.randn(6, generator=gen, dtype=F64, requires_grad=True)
    yy = torch.rand(6, generator=gen, dtype=F64)
    assert torch.autograd.gradcheck(lambda t: L.bce_with_logits(t, yy), (zz,))


def test_bce_stable_for_large_logits_where_naive_breaks():
    z = torch.tensor([-200.0, -40.0, 40.0, 200.0])
    for y in (torch.zeros(4), torch.ones(4)):
        stable = L.bce_with_logits(z, y)
        assert torch.all(torch.isfinite(stable))
        # exact to 30 digits: softplus(z) for y = 0, softplus(-z) for y = 1 (the built-in
        # F.binary_cross_entropy_with_logits returns 0 instead of 4e-18 at z = -40, y = 0)
        ref = torch.tensor(
            [float(mpmath.log1p(mpmath.exp(-t if y[0] == 1 else t))) for t in z.tolist()], dtype=F64
        )
        torch.testing.assert_close(stable.double(), ref, rtol=1e-6, atol=1e-38)  # fp32 range
        assert not torch.all(torch.isfinite(L.bce_naive(z, y)))


def test_bce_naive_agrees_for_moderate_logits(gen):
    z = torch.randn(100, generator=gen, dtype=F64)
    y = torch.rand(100, generator=gen, dtype=F64)
    torch.testing.assert_close(L.bce_naive(z, y), L.bce_with_logits(z, y), atol=1e-12, rtol=0)


# --- eq. 13.4 ---------------------------------------------------------------------------------


def _focal_numpy(z, y, gamma, alpha):
    p = 1 / (1 + np.exp(-z))
    pt = np.where(y == 1, p, 1 - p)
    at = 1.0 if alpha is None else np.where(y == 1, alpha, 1 - alpha)
    return -at * (1 - pt) ** gamma * np.log(pt)


@pytest.mark.parametrize("gamma,alpha", [(0.0, None), (0.5, 0.25), (2.0, None), (5.0, 0.75)])
def test_focal_matches_direct_float64_formula(gen, gamma, alpha):
    z = 4 * torch.randn(300, generator=gen, dtype=F64)
    y = (torch.rand(300, generator=gen) < 0.3).double()
    ref = _focal_numpy(z.numpy(), y.numpy(), gamma, alpha)
    np.testing.assert_allclose(
        L.focal_loss(z, y, gamma, alpha).numpy(), ref, rtol=1e-10, atol=1e-14
    )
    np.testing.assert_allclose(
        L.focal_loss_naive(z, y, gamma, alpha).numpy(), ref, rtol=1e-12, atol=1e-14
    )


def test_focal_gamma0_is_bce_and_stays_finite(gen):
    z = 30 * torch.randn(300, generator=gen, dtype=F64)
    y = (torch.rand(300, generator=gen) < 0.5).double()
    ref = F.binary_cross_entropy_with_logits(z, y, reduction="none")
    torch.testing.assert_close(L.focal_loss(z, y, 0.0), ref, atol=1e-12, rtol=1e-12)
    zz = torch.tensor([-300.0, 300.0]).requires_grad_(True)
    loss = L.focal_loss(zz, torch.tensor([1.0, 0.0]), 2.0).sum()
    (g,) = torch.autograd.grad(loss, zz)
    assert torch.isfinite(loss) and torch.all(torch.isfinite(g))


# --- eq. 13.5 ---------------------------------------------------------------------------------


def test_kl_matches_kl_div_and_naive(gen):
    p = torch.softmax(torch.randn(8, 5, generator=gen, dtype=F64), -1)
    z = torch.randn(8, 5, generator=gen, dtype=F64)
    ref = F.kl_div(torch.log_softmax(z, -1), p, reduction="none").sum(-1)
    torch.testing.assert_close(L.kl_categorical(p, z), ref, atol=1e-13, rtol=0)
    torch.testing.assert_close(
        L.kl_categorical_naive(p, torch.softmax(z, -1)), ref, atol=1e-13, rtol=0
    )
    onehot = F.one_hot(torch.arange(8) % 5, 5).double()  # zeros in p: 0 log 0 = 0
    torch.testing.assert_close(
        L.kl_categorical(onehot, z),
        F.cross_entropy(z, torch.arange(8) % 5, reduction="none"),
        atol=1e-13,
        rtol=0,
    )


def test_kl_and_distillation_gradients_match_autograd(gen):
    p = torch.softmax(torch.randn(4, 6, generator=gen, dtype=F64), -1)
    z = torch.randn(4, 6, generator=gen, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(L.kl_categorical(p, z).sum(), z)
    torch.testing.assert_close(L.kl_grad_logits(p, z.detach()), g, atol=1e-14, rtol=0)
    v = 3 * torch.randn(4, 6, generator=gen, dtype=F64)
    for T in (0.5, 1.0, 4.0, 20.0):
        loss = L.distillation_loss(z, v, T)
        ref = T**2 * F.kl_div(
            torch.log_softmax(z / T, -1), torch.softmax(v / T, -1), reduction="none"
        ).sum(-1)
        torch.testing.assert_close(loss, ref, atol=1e-12, rtol=0)
        (g,) = torch.autograd.grad(loss.sum(), z)
        torch.testing.assert_close(L.distillation_grad(z.detach(), v, T), g, atol=1e-13, rtol=0)
    assert torch.autograd.gradcheck(lambda t: L.distillation_loss(t, v, 3.0), (z,))


def test_gaussian_fits_forward_moment_matching_and_reverse_in_a_mode():
    x = torch.linspace(-20, 20, 401, dtype=F64)  # spacing 0.1: exact enough for sigma >= 0.3
    w, m, s = (0.6, 0.4), (-2.0, 2.0), (0.7, 0.7)
    log_p = torch.logsumexp(
        torch.stack(
            [
                math.log(wk) + L.gaussian_log_density(x, mk, sk)
                for wk, mk, sk in zip(w, m, s, strict=True)
            ]
        ),
        0,
    )
    mean = sum(wk * mk for wk, mk in zip(w, m, strict=True))
    var = sum(wk * (sk**2 + mk**2) for wk, mk, sk in zip(w, m, s, strict=True)) - mean**2
    mus = torch.linspace(-3.5, 3.5, 141, dtype=F64)  # spacing 0.05
    sigmas = torch.linspace(0.3, 2.5, 111, dtype=F64)  # spacing 0.02
    mu_f, s_f, _ = L.fit_gaussian_kl(x, log_p, mus, sigmas, "forward")
    assert abs(mu_f - mean) <= 0.025 + 1e-9 and abs(s_f - math.sqrt(var)) <= 0.01 + 1e-9
    mu_r, s_r, _ = L.fit_gaussian_kl(x, log_p, mus, sigmas, "reverse")
    assert abs(mu_r - (-2.0)) < 0.1 and abs(s_r - 0.7) < 0.1
    # the grid KL of two Gaussians against the closed form
    kl = L.kl_on_grid(
        L.gaussian_log_density(x, 0.3, 1.2),
        L.gaussian_log_density(x, -0.5, 0.8),
        float(x[1] - x[0]),
    )
    exact = math.log(0.8 / 1.2) + (1.2**2 + 0.8**2) / (2 * 0.8**2) - 0.5
    assert abs(float(kl) - exact) < 1e-12


# --- bad input --------------------------------------------------------------------------------


def test_bad_input_raises():
    z, y = torch.zeros(3), torch.zeros(3)
    with pytest.raises(ValueError, match="y and mean must have the same shape"):
        L.laplace_nll(z, torch.zeros(4), 1.0)
    with pytest.raises(ValueError, match="b must be positive"):
        L.laplace_nll(z, y, 0.0)
    with pytest.raises(ValueError, match="delta must be"):
        L.huber_loss(z, delta=0.0)
    with pytest.raises(ValueError, match="delta must be"):
        L.huber_loss_naive(z, delta=-1.0)
    with pytest.raises(ValueError, match="delta must be"):
        L.huber_grad(z, delta=float("nan"))
    with pytest.raises(ValueError, match="loss must be one of"):
        L.fit_linear_irls(torch.zeros(3, 2), y, "l3")
    with pytest.raises(ValueError, match="y must have shape"):
        L.fit_linear_irls(torch.zeros(3, 2), torch.zeros(4))
    with pytest.raises(ValueError, match="at least as many rows"):
        L.fit_linear_irls(torch.zeros(1, 2), torch.zeros(1))
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 1\]"):
        L.bce_with_logits(z, torch.tensor([0.0, 1.0, 1.5]))
    with pytest.raises(ValueError, match="same shape"):
        L.bce_naive(z, torch.zeros(2))
    with pytest.raises(ValueError, match="0/1"):
        L.focal_loss(z, torch.tensor([0.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="gamma must be"):
        L.focal_loss(z, y, gamma=-1.0)
    with pytest.raises(ValueError, match="alpha must be"):
        L.focal_loss(z, y, alpha=1.5)
    with pytest.raises(ValueError, match="gamma must be"):
        L.focal_loss_naive(z, y, gamma=-0.5)
    p = torch.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match="sum to one"):
        L.kl_categorical(torch.tensor([[0.5, 0.6]]), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="same shape"):
        L.kl_categorical(p, torch.zeros(1, 3))
    with pytest.raises(ValueError, match="non-negative"):
        L.kl_categorical_naive(p, torch.tensor([[-0.5, 1.5]]))
    with pytest.raises(ValueError, match="T must be"):
        L.distillation_loss(torch.zeros(2, 3), torch.zeros(2, 3), T=0.0)
    with pytest.raises(ValueError, match="same shape"):
        L.distillation_grad(torch.zeros(2, 3), torch.zeros(2, 4), T=1.0)
    with pytest.raises(ValueError, match="sigma must be positive"):
        L.gaussian_log_density(z, 0.0, -1.0)
    with pytest.raises(ValueError, match="dx must be"):
        L.kl_on_grid(z, z, 0.0)
    x = torch.linspace(0, 1, 5, dtype=F64)
    with pytest.raises(ValueError, match="direction must be one of"):
        L.fit_gaussian_kl(x, x, x, x + 1, "sideways")
    with pytest.raises(ValueError, match="uniform grid"):
        L.fit_gaussian_kl(x**2, x, x, x + 1, "forward")  # non-uniform grid
    with pytest.raises(ValueError, match="sigmas must be positive"):
        L.fit_gaussian_kl(x, x, x, x, "forward")  # sigma = 0 in the candidates
    with pytest.raises(ValueError, match="pred and y must have the same shape"):
        L.absolute_error(z, torch.zeros(3, 1))  # would broadcast to (3, 3)


def test_empty_batch_raises_instead_of_nan():
    e, e2 = torch.zeros(0, dtype=F64), torch.zeros(0, 3, dtype=F64)
    calls = [
        (lambda: L.absolute_error(e, e), "pred"),
        (lambda: L.laplace_nll(e, e, 1.0), "y"),
        (lambda: L.huber_loss(e), "residual"),
        (lambda: L.huber_loss_naive(e), "residual"),
        (lambda: L.huber_grad(e), "residual"),
        (lambda: L.bce_with_logits(e, e), "logits"),
        (lambda: L.bce_naive(e, e), "logits"),
        (lambda: L.bce_grad(e, e), "logits"),
        (lambda: L.focal_loss(e, e), "logits"),
        (lambda: L.focal_loss_naive(e, e), "logits"),
        (lambda: L.kl_categorical(e2, e2), "logits"),
        (lambda: L.kl_grad_logits(e2, e2), "logits"),
        (lambda: L.distillation_loss(e2, e2, 2.0), "student_logits"),
        (lambda: L.distillation_grad(e2, e2, 2.0), "student_logits"),
        (lambda: L.kl_on_grid(e, e, 0.1), "log_p"),
    ]
    for call, name in calls:
        with pytest.raises(ValueError, match=f"^{name} must not be empty"):
            call()


def test_numpy_input_raises_a_type_error_naming_the_argument():
    a = np.zeros(3)
    t = torch.zeros(3, dtype=F64)
    with pytest.raises(TypeError, match="^y must be a torch.Tensor, got ndarray"):
        L.laplace_nll(a, t, 1.0)
    with pytest.raises(TypeError, match="^mean must be a torch.Tensor"):
        L.laplace_nll(t, a, 1.0)
    with pytest.raises(TypeError, match="^x must be a torch.Tensor"):
        L.gaussian_log_density(a, 0.0, 1.0)
    with pytest.raises(TypeError, match="^residual must be a torch.Tensor"):
        L.huber_loss(a)
    with pytest.raises(TypeError, match="^logits must be a floating-point tensor"):
        L.bce_with_logits(torch.zeros(3, dtype=torch.long), t)
