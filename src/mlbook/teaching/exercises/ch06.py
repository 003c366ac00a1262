"""Checks of the exercises of chapter 6 (probability theory).

The references are independent of the reader's answer and of :mod:`mlbook.foundations.probability`:
Bayes' rule in log space (``torch.softmax`` of the summed log-likelihoods), autograd's Jacobian of
``torch.log_softmax``, samples drawn with ``torch.multinomial``, and the variance of a mean as the
quadratic form of an explicit covariance matrix; Monte Carlo comparisons allow four standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _bayes_log(prior: np.ndarray, liks: np.ndarray, prior_power: int = 1) -> torch.Tensor:
    """p(h | e_1..e_T) by adding logs and normalising once (softmax), stable for any T."""
    logits = prior_power * torch.log(torch.from_numpy(prior))
    if len(liks):
        logits = logits + torch.log(torch.from_numpy(liks)).sum(dim=0)
    return torch.softmax(logits, dim=0)


def _posterior_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(61)
    screening = np.array([0.01, 0.99])
    pos, neg = [0.95, 0.05], [0.05, 0.95]
    long = rng.uniform(0.01, 0.1, size=(300, 3))  # the product of 300 rows underflows float64
    return [
        ("two positive tests", screening, np.array([pos, pos])),
        ("the results +, -, +", screening, np.array([pos, neg, pos])),
        ("H = 3, T = 5", np.array([0.5, 0.3, 0.2]), rng.uniform(0.05, 1.0, size=(5, 3))),
        ("T = 0 (no results)", np.array([0.2, 0.8]), np.zeros((0, 2))),
        ("T = 300", np.array([0.25, 0.25, 0.5]), long),
    ]


@exercise("6.1", "sequential_posterior")
def sequential_posterior(answer) -> str:
    """The posterior after T results against Bayes' rule in log space, for T = 0, 2, 3, 5, 300."""
    for what, prior, liks in _posterior_cases():
        label = f"sequential_posterior(prior, likelihoods) for {what}"
        try:
            got = attempt(answer, prior.copy(), liks.copy())
        except Incorrect as err:
            if len(liks) < 300:
                raise
            raise Incorrect(
                f"{err} (for T = 300 the product of the likelihoods underflows to 0 in "
                f"float64: normalise after every result)"
            ) from None
        g = as_tensor(got, label)
        expect(
            bool(torch.isfinite(g).all()),
            f"{label} contains nan or inf: the product of {len(liks)} likelihoods underflows "
            f"to 0 in float64; normalise after every result, as bayes_posterior does",
        )
        want = _bayes_log(prior, liks)
        wrong = {}
        if len(liks):
            wrong[
                "only the last result counts: each update must start from the previous "
                "posterior, not from the prior"
            ] = _bayes_log(prior, liks[-1:])
            wrong["only the first result counts: update once per row of `likelihoods`"] = (
                _bayes_log(prior, liks[:1])
            )
        if len(liks) > 1:
            wrong[
                "the prior entered once per result (as when multiplying the posteriors of the "
                "single results): p(h) belongs in the product once"
            ] = _bayes_log(prior, liks, prior_power=len(liks))
        wrong["not normalised: divide by the evidence p(e_1, ..., e_T) = sum over h"] = (
            torch.from_numpy(prior * liks.prod(axis=0))
        )
        expect_answer(g, want, label, wrong=wrong, atol=1e-12, rtol=1e-9)
    closed = 0.95**2 * 0.01 / (0.95**2 * 0.01 + 0.05**2 * 0.99)
    expect(
        abs(float(as_tensor(attempt(answer, *_posterior_cases()[0][1:]), "p")[0]) - closed) < 1e-12,
        "two positive tests must give the one-step formula of the exercise",
    )
    return (
        "matches Bayes' rule in log space for T = 0, 2, 3, 5 and 300 results, and the "
        "one-step formula for two positive tests"
    )


def _score_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(62)
    z = torch.tensor([0.2, -0.4, 0.1, 0.5], dtype=F64)
    k = torch.multinomial(torch.softmax(z, 0), 50, replacement=True, generator=gen)
    return [
        (z, k),
        (torch.tensor([100.0, 99.0, 98.5], dtype=F64), torch.tensor([0, 1, 2, 0, 2])),
        (torch.tensor([0.3], dtype=F64), torch.tensor([0, 0])),
    ]  # K = 1: the score is 0


def _log_softmax_jacobian(z: torch.Tensor) -> torch.Tensor:
    return torch.autograd.functional.jacobian(lambda x: torch.log_softmax(x, dim=0), z)


@exercise("6.2", "categorical_score", "score_gradient")
def score_estimator(score, gradient) -> str:
    """Scores e_k - p and the REINFORCE estimate against autograd; unbiased over 100,000 draws."""
    for z, k in _score_cases():
        K, n = z.numel(), k.numel()
        ref = _log_softmax_jacobian(z)[k]  # (n, K) rows d log p_k / dz
        p = torch.softmax(z, 0)
        onehot = torch.nn.functional.one_hot(k, K).to(F64)
        expect_answer(
            attempt(score, z.clone(), k.clone()),
            ref,
            f"categorical_score(z, k) for K = {K}",
            wrong={
                "the sign is flipped: d log p_k / dz = e_k - p, not p - e_k": -ref,
                "the - p term is missing: log p_k = z_k - logsumexp(z), and the logsumexp "
                "depends on every z_j": onehot,
                "only the diagonal term: d log p_k / dz_j = -p_j also for j != k": onehot * (1 - p),
                f"this is the transpose: return one row per sample, shape ({n}, {K})": ref.T,
            },
            atol=1e-10,
            rtol=1e-8,
        )
    gen = torch.Generator().manual_seed(620)
    r_cases = [
        torch.tensor([1.0, 0.0, 3.0, -1.0], dtype=F64),
        torch.tensor([2.0, -1.0, 0.5], dtype=F64),
        torch.tensor([1.5], dtype=F64),
    ]
    for (z, k), r in zip(_score_cases(), r_cases, strict=True):
        J = _log_softmax_jacobian(z)[k]  # (n, K)
        want = (r[k, None] * J).mean(dim=0)
        expect_answer(
            attempt(gradient, z.clone(), r.clone(), k.clone()),
            want,
            f"score_gradient(z, r, k) for K = {z.numel()}",
            wrong={
                "that is the sum over the samples; the estimator is their average": (
                    r[k, None] * J
                ).sum(dim=0),
                "the reward is missing: weight each score by r_k": J.mean(dim=0),
                "the - p term of the score is missing: average r_k (e_k - p)": (
                    r[k, None] * torch.nn.functional.one_hot(k, z.numel()).to(F64)
                ).mean(0),
                "the sign is flipped: average r_k (e_k - p)": -want,
            },
            atol=1e-10,
            rtol=1e-8,
        )
    # Unbiased: over many samples the estimate matches the exact gradient within 4 SE.
    z, r = _score_cases()[0][0], r_cases[0]
    k = torch.multinomial(torch.softmax(z, 0), 100_000, replacement=True, generator=gen)
    z_req = z.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad((torch.softmax(z_req, 0) * r).sum(), z_req)
    per = r[k, None] * _log_softmax_jacobian(z)[k]  # (n, K) per-sample terms
    se = per.std(dim=0) / math.sqrt(k.numel())
    est = as_tensor(attempt(gradient, z.clone(), r.clone(), k.clone()), "score_gradient", (4,))
    expect(
        bool(((est - exact).abs() <= 4 * se).all()),
        "score_gradient over 100,000 samples is more than 4 standard errors from autograd's "
        "exact gradient of E[r_k]",
    )
    return (
        "e_k - p matches autograd for K = 4, 3 (large logits) and 1; the estimate matches "
        "its definition and, over 100,000 samples, autograd's gradient within 4 SE"
    )


def _draw_stats(x: torch.Tensor) -> torch.Tensor:
    """[mean variance of an entry, mean covariance of two entries, variance of the row mean]."""
    n = x.shape[1]
    c = torch.cov(x.T)  # (n, n)
    off = (c.sum() - c.diagonal().sum()) / (n * (n - 1))
    return torch.stack([c.diagonal().mean(), off, x.mean(dim=1).var()])


def _stats_for(a2: float, b2: float, shared: bool, n: int) -> torch.Tensor:
    """The exact stats of X = a Z + b eps, with Z shared by a row (or drawn per entry)."""
    var, cov = a2 + b2, a2 if shared else 0.0
    return torch.tensor([var, cov, (var + (n - 1) * cov) / n], dtype=F64)


@exercise("6.3", "equicorrelated_draws", "var_of_mean")
def equicorrelated_mean(draws, var_of_mean) -> str:
    """Covariance of the simulated draws; Var of the mean against 1^T Sigma 1 / n^2."""
    for rho, n, reps in [(0.5, 4, 20_000), (0.1, 50, 20_000), (1.0, 3, 20_000), (0.0, 6, 20_000)]:
        label = f"equicorrelated_draws({rho}, {n}, {reps}, generator)"
        x = as_tensor(
            attempt(draws, rho, n, reps, torch.Generator().manual_seed(63)), label, (reps, n)
        )
        again = as_tensor(attempt(draws, rho, n, reps, torch.Generator().manual_seed(63)), label)
        expect(
            torch.equal(x, again),
            f"{label} gives different draws for the same generator "
            f"state: take all randomness from `generator`",
        )
        r2 = math.sqrt(1 - rho)
        expect_answer(
            _draw_stats(x),
            _stats_for(rho, 1 - rho, True, n),
            f"[variance, covariance, Var of the row mean] of {label}",
            wrong={
                "the coefficient of Z is sqrt(rho): with rho Z the covariance is rho^2": _stats_for(
                    rho**2, 1 - rho, True, n
                ),
                "the coefficient of eps is sqrt(1 - rho): with 1 - rho the variance is not "
                "1": _stats_for(rho, (1 - rho) ** 2, True, n),
                "the draws are uncorrelated: draw Z once per row, shape (reps, 1), and share it "
                "among the n draws of that row": _stats_for(rho, r2**2, False, n),
                "one Z for all rows makes the rows dependent and the columns uncorrelated: draw "
                "one Z per row, shape (reps, 1)": _stats_for(0.0, 1 - rho, False, n),
            },
            atol=0.05,
        )
    for sigma2, rho, n in [
        (1.0, 0.1, 50),
        (2.5, 0.0, 10),
        (0.3, -0.2, 5),
        (1.7, 1.0, 7),
        (4.0, 0.3, 1),
        (0.8, 0.6, 1000),
    ]:
        cov = sigma2 * ((1 - rho) * torch.eye(n, dtype=F64) + rho * torch.ones(n, n, dtype=F64))
        ones = torch.ones(n, dtype=F64)
        want = ones @ cov @ ones / n**2
        expect_answer(
            attempt(var_of_mean, sigma2, rho, n),
            want,
            f"var_of_mean({sigma2}, {rho}, {n})",
            wrong={
                "that is sigma^2 / n, the rule for independent draws; the n(n - 1) covariances "
                "rho sigma^2 add to Var[sum X_i]": sigma2 / n,
                "that is Var[sum X_i] / n; the mean divides the sum by n, so its variance by "
                "n^2": sigma2 * (1 + (n - 1) * rho),
                "there are n(n - 1) pairs i != j, not n^2: the n diagonal terms are plain "
                "variances": sigma2 * (rho + 1 / n),
                "that is the limit for n -> infinity; at finite n the term (1 - rho) sigma^2 / n "
                "remains": rho * sigma2,
                "the factor sigma^2 is missing: the variance scales with the draws' variance": rho
                + (1 - rho) / n,
            },
            atol=1e-12,
            rtol=1e-9,
        )
    return (
        "the simulated draws have variance 1 and covariance rho for rho = 0.5, 0.1, 1, 0 "
        "(n = 4, 50, 3, 6), and var_of_mean matches 1^T Sigma 1 / n^2 for 6 cases"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


def _normalise(x):
    return x / x.sum()


def posterior_last_only(prior, likelihoods):
    return _normalise(prior * likelihoods[-1]) if len(likelihoods) else prior


def posterior_product_of_posteriors(prior, likelihoods):
    post = np.ones_like(prior)
    for lik in likelihoods:
        post = post * _normalise(prior * lik)
    return _normalise(post) if len(likelihoods) else prior


def posterior_unnormalised(prior, likelihoods):
    return prior * likelihoods.prod(axis=0)


def posterior_product_at_once(prior, likelihoods):
    with np.errstate(invalid="ignore"):  # 0 / 0 once the product underflows
        return _normalise(prior * likelihoods.prod(axis=0))


def score_flipped(z, k):
    return -_ref("6.2", "categorical_score")(z, k)


def score_one_hot(z, k):
    return F.one_hot(k, z.numel()).double()


def score_transposed(z, k):
    return _ref("6.2", "categorical_score")(z, k).T


def score_diagonal_only(z, k):
    return F.one_hot(k, z.numel()).double() * (1 - torch.softmax(z, 0))


def gradient_sum(z, r, k):
    return (r[k, None] * _ref("6.2", "categorical_score")(z, k)).sum(dim=0)


def gradient_without_reward(z, r, k):
    return _ref("6.2", "categorical_score")(z, k).mean(dim=0)


def gradient_without_baseline(z, r, k):
    return (r[k, None] * F.one_hot(k, z.numel()).double()).mean(dim=0)


ref_score = _ref("6.2", "categorical_score")
ref_gradient = _ref("6.2", "score_gradient")


def draws_rho_coefficient(rho, n, reps, generator):
    z = torch.randn(reps, 1, generator=generator, dtype=torch.float64)
    eps = torch.randn(reps, n, generator=generator, dtype=torch.float64)
    return rho * z + math.sqrt(1 - rho) * eps


def draws_z_per_entry(rho, n, reps, generator):
    z = torch.randn(reps, n, generator=generator, dtype=torch.float64)
    eps = torch.randn(reps, n, generator=generator, dtype=torch.float64)
    return math.sqrt(rho) * z + math.sqrt(1 - rho) * eps


def draws_one_z(rho, n, reps, generator):
    z = torch.randn(1, 1, generator=generator, dtype=torch.float64)
    eps = torch.randn(reps, n, generator=generator, dtype=torch.float64)
    return math.sqrt(rho) * z + math.sqrt(1 - rho) * eps


def draws_global_rng(rho, n, reps, generator):
    z = torch.from_numpy(np.random.default_rng().standard_normal((reps, 1)))
    eps = torch.from_numpy(np.random.default_rng().standard_normal((reps, n)))
    return math.sqrt(rho) * z + math.sqrt(1 - rho) * eps


def draws_transposed(rho, n, reps, generator):
    return _ref("6.3", "equicorrelated_draws")(rho, n, reps, generator).T


ref_draws = _ref("6.3", "equicorrelated_draws")
ref_var = _ref("6.3", "var_of_mean")


def var_independent(sigma2, rho, n):
    return sigma2 / n


def var_of_sum_over_n(sigma2, rho, n):
    return sigma2 * (1 + (n - 1) * rho)


def var_n_squared_pairs(sigma2, rho, n):
    return sigma2 * (rho + 1 / n)


def var_without_sigma(sigma2, rho, n):
    return rho + (1 - rho) / n


MISTAKES = {
    "6.1": [
        (posterior_last_only, "only the last result counts"),
        (posterior_product_of_posteriors, "the prior entered once per result"),
        (posterior_unnormalised, "not normalised"),
        (posterior_product_at_once, "underflows"),
    ],
    "6.2": [
        ((score_flipped, ref_gradient), "sign is flipped"),
        ((score_one_hot, ref_gradient), "the - p term is missing"),
        ((score_transposed, ref_gradient), "transpose"),
        ((score_diagonal_only, ref_gradient), "diagonal term"),
        ((ref_score, gradient_sum), "that is the sum over the samples"),
        ((ref_score, gradient_without_reward), "the reward is missing"),
        ((ref_score, gradient_without_baseline), "the - p term of the score is missing"),
    ],
    "6.3": [
        ((draws_rho_coefficient, ref_var), "coefficient of Z"),
        ((draws_z_per_entry, ref_var), "draws are uncorrelated"),
        ((draws_one_z, ref_var), "one Z for all rows"),
        ((draws_global_rng, ref_var), "from `generator`"),
        ((draws_transposed, ref_var), "looks transposed"),
        ((ref_draws, var_independent), "rule for independent draws"),
        ((ref_draws, var_of_sum_over_n), "that is Var[sum X_i] / n"),
        ((ref_draws, var_n_squared_pairs), "not n^2"),
        ((ref_draws, var_without_sigma), "factor sigma^2 is missing"),
    ],
}
