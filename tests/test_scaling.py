"""Tests of mlbook.architectures.scaling against independent references (float64, seeded)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize_scalar

from mlbook.architectures import scaling as sc

TRUE = sc.LossParams(E=0.8, A=30.0, B=200.0, alpha=0.45, beta=0.4)


def _synthetic(seed: int, noise: float):
    """A 6 x 5 grid of (N, D) with losses from TRUE, times exp(noise * standard normal)."""
    rng = np.random.default_rng(seed)
    n, d = np.meshgrid(np.geomspace(1e3, 1e5, 6), np.geomspace(1e4, 1e6, 5), indexing="ij")
    n, d = n.ravel(), d.ravel()
    loss = sc.parametric_loss(n, d, TRUE) * np.exp(noise * rng.standard_normal(n.size))
    return n, d, loss


def test_fit_power_law_matches_linregress():
    rng = np.random.default_rng(0)
    x = np.geomspace(1.0, 1e4, 12)
    y = 3.0 * x**-0.4 * np.exp(0.05 * rng.standard_normal(12))
    a, alpha, cov = sc.fit_power_law(x, y)
    ref = stats.linregress(np.log(x), np.log(y))
    assert alpha == pytest.approx(-ref.slope, abs=1e-12)
    assert math.log(a) == pytest.approx(ref.intercept, abs=1e-12)
    assert math.sqrt(cov[1, 1]) == pytest.approx(ref.stderr, rel=1e-10)
    assert math.sqrt(cov[0, 0]) == pytest.approx(ref.intercept_stderr, rel=1e-10)
    np.testing.assert_allclose(sc.power_law(x, a, alpha), np.exp(ref.intercept) * x**ref.slope)


def test_fit_recovers_noiseless_constants():
    n, d, loss = _synthetic(0, 0.0)
    fit = sc.fit_parametric_loss(n, d, loss)
    np.testing.assert_allclose(fit, TRUE, rtol=1e-5)


def test_fit_without_floor_recovers_pure_power_laws():
    n, d, _ = _synthetic(0, 0.0)
    pure = TRUE._replace(E=0.0)
    fit = sc.fit_parametric_loss(n, d, sc.parametric_loss(n, d, pure), floor=False)
    np.testing.assert_allclose(fit, pure, rtol=1e-6, atol=1e-12)
    with_floor = sc.parametric_loss(n, d, TRUE)  # a floor the fit cannot represent
    bad = sc.fit_parametric_loss(n, d, with_floor, floor=False)
    resid = np.log(sc.parametric_loss(n, d, bad) / with_floor)
    assert np.sqrt(np.mean(resid**2)) > 1e-2


def test_fit_with_noise_is_close_and_bootstrap_covers_truth():
    n, d, loss = _synthetic(1, 0.01)
    fit = sc.fit_parametric_loss(n, d, loss)
    assert abs(fit.alpha - TRUE.alpha) < 0.1 and abs(fit.beta - TRUE.beta) < 0.1
    draws = sc.bootstrap_fit(n, d, loss, n_boot=30, seed=0)
    assert draws.shape == (30, 5)
    lo, hi = np.percentile(draws[:, 3:], [1, 99], axis=0)
    assert (lo <= [TRUE.alpha, TRUE.beta]).all() and ([TRUE.alpha, TRUE.beta] <= hi).all()


@pytest.mark.parametrize("params", [sc.HOFFMANN_2022, sc.BESIROGLU_2024, TRUE])
def test_compute_optimal_closed_form_vs_scipy_and_naive(params):
    c = np.geomspace(1e15, 1e25, 5)
    n_opt, d_opt = sc.compute_optimal(c, params)
    np.testing.assert_allclose(6 * n_opt * d_opt, c, rtol=1e-12)
    for C, n_star in zip(c, n_opt, strict=True):
        res = minimize_scalar(
            lambda log_n, C=C: sc.parametric_loss(np.exp(log_n), C / 6 / np.exp(log_n), params),
            bounds=(0.0, math.log(C / 6)),
            method="bounded",
            options={"xatol": 1e-10},
        )
        assert math.exp(res.x) == pytest.approx(n_star, rel=1e-5)
    n_naive, d_naive = sc.compute_optimal_naive(c, params)
    np.testing.assert_allclose(n_naive, n_opt, rtol=1e-6)
    np.testing.assert_allclose(d_naive, d_opt, rtol=1e-6)
    # eq. 29.4: the marginal gains of N and D are equal at the optimum
    E, A, B, alpha, beta = params
    np.testing.assert_allclose(alpha * A * n_opt**-alpha, beta * B * d_opt**-beta, rtol=1e-10)


def test_published_allocation():
    """Besiroglu et al.'s constants: about 20 tokens per parameter, N_opt ~ C^0.51."""
    c = np.array([1e21, 1e24])
    ratio = sc.tokens_per_parameter(c, sc.BESIROGLU_2024)
    assert ((ratio > 15) & (ratio < 30)).all()
    n_opt, _ = sc.compute_optimal(c, sc.BESIROGLU_2024)
    slope = math.log(n_opt[1] / n_opt[0]) / math.log(c[1] / c[0])
    assert slope == pytest.approx(0.3658 / (0.3478 + 0.3658), rel=1e-12)
    gamma = sc.frontier_exponent(sc.HOFFMANN_2022)
    L_opt = sc.parametric_loss(*sc.compute_optimal(c, sc.HOFFMANN_2022), sc.HOFFMANN_2022) - 1.69
    assert -math.log(L_opt[1] / L_opt[0]) / math.log(1e3) == pytest.approx(gamma, rel=1e-10)


def test_selection_score_and_best_size():
    n = np.geomspace(1e3, 1e9, 200001)
    alpha, beta, c = 0.3, 2e-6, 0.5
    log_s = sc.log_selection_score(n, c * n, alpha, beta)
    assert n[np.argmax(log_s)] == pytest.approx(sc.best_size(alpha, beta, c), rel=1e-4)
    assert np.argmax(sc.log_selection_score(n, c * n, alpha, 0.0)) == n.size - 1


def test_argument_checks():
    with pytest.raises(ValueError, match="n must be positive everywhere"):
        sc.parametric_loss(np.array([1.0, 0.0]), np.array([1.0, 1.0]), TRUE)
    with pytest.raises(ValueError, match="x and y must have the same shape"):
        sc.fit_power_law(np.ones(4), np.ones(5))
    with pytest.raises(ValueError, match="the number of points"):
        sc.fit_power_law(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="the number of runs"):
        sc.fit_parametric_loss(np.ones(4), np.ones(4), np.ones(4))
    with pytest.raises(TypeError, match="params must be a LossParams"):
        sc.compute_optimal(1e20, (1.0, 1.0, 1.0, 0.3, 0.3))
    with pytest.raises(ValueError, match="params.alpha must be a finite number"):
        sc.compute_optimal(1e20, sc.LossParams(1.0, 1.0, 1.0, 0.0, 0.3))
    with pytest.raises(ValueError, match="c must be finite"):
        sc.compute_optimal(np.array([1e20, np.nan]), TRUE)
    with pytest.raises(ValueError, match="n and cost must have the same shape"):
        sc.log_selection_score(np.ones(3), np.ones(2), 0.3, 1.0)
    with pytest.raises(ValueError, match="beta must be a finite number"):
        sc.best_size(0.3, 0.0, 1.0)
