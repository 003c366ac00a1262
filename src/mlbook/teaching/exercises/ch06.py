"""Checks of the exercises of chapter 6 (probability theory).

The references are independent of the reader's answer and of :mod:`mlbook.foundations.probability`:
Bayes' rule in log space (``torch.softmax`` of the summed log-likelihoods) and a simulated
population, autograd's Jacobian of ``torch.log_softmax``, samples drawn with ``torch.multinomial``,
the variance of a mean as the quadratic form of an explicit covariance matrix, ``torch.softmax``
for the frequencies of a sampler, and Gauss–Hermite quadrature (exact for polynomials) for the
variance of the score-function estimator; Monte Carlo comparisons allow four standard errors or
more, as stated. Each typical wrong answer is written once, as a function: the checks compute its
value to name the mistake, and ``MISTAKES`` lists it for the tests.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


# --- 6.1 · sequential Bayesian updating ----------------------------------------------------------


def _bayes_log(prior: np.ndarray, liks: np.ndarray) -> torch.Tensor:
    """p(h | e_1..e_T) by adding logs and normalising once (softmax), stable for any T."""
    logits = torch.log(torch.from_numpy(prior))
    if len(liks):
        logits = logits + torch.log(torch.from_numpy(liks)).sum(dim=0)
    return torch.softmax(logits, dim=0)


def _normalise(x):
    return x / x.sum()


def posterior_last_only(prior, likelihoods):
    return _normalise(prior * likelihoods[-1]) if len(likelihoods) else prior


def posterior_first_only(prior, likelihoods):
    return _normalise(prior * likelihoods[0]) if len(likelihoods) else prior


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


_POSTERIOR_MISTAKES = [
    (
        posterior_last_only,
        "only the last result counts: each update must start from the previous posterior, "
        "not from the prior",
    ),
    (posterior_first_only, "only the first result counts: update once per row of `likelihoods`"),
    (
        posterior_product_of_posteriors,
        "the prior entered once per result (as when multiplying the posteriors of the single "
        "results): p(h) belongs in the product once",
    ),
    (
        posterior_unnormalised,
        "not normalised: divide by the evidence p(e_1, ..., e_T) = sum over h",
    ),
]
_UNDERFLOW = (
    "the product of the likelihoods underflows to 0 in float64; normalise after every result, "
    "as bayes_posterior does"
)


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
            raise Incorrect(f"{err} (for T = 300 {_UNDERFLOW})") from None
        g = as_tensor(got, label)
        expect(bool(torch.isfinite(g).all()), f"{label} contains nan or inf: {_UNDERFLOW}")
        wrong = {fb: torch.as_tensor(m(prior, liks)) for m, fb in _POSTERIOR_MISTAKES}
        expect_answer(g, _bayes_log(prior, liks), label, wrong=wrong, atol=1e-12, rtol=1e-9)
    closed = 0.95**2 * 0.01 / (0.95**2 * 0.01 + 0.05**2 * 0.99)
    expect(
        abs(float(as_tensor(attempt(answer, *_posterior_cases()[0][1:]), "p")[0]) - closed) < 1e-12,
        "two positive tests must give the one-step formula of the exercise",
    )
    return (
        "matches Bayes' rule in log space for T = 0, 2, 3, 5 and 300 results, and the "
        "one-step formula for two positive tests"
    )


# --- 6.2 · the score of a categorical distribution -----------------------------------------------


def _score_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(62)
    z = torch.tensor([0.2, -0.4, 0.1, 0.5], dtype=F64)
    k = torch.multinomial(torch.softmax(z, 0), 50, replacement=True, generator=gen)
    return [
        (z, k),
        (torch.tensor([100.0, 99.0, 98.5], dtype=F64), torch.tensor([0, 1, 2, 0, 2])),
        (torch.tensor([0.3], dtype=F64), torch.tensor([0, 0])),
    ]  # K = 1: the score is 0


def _score_rows(z: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(n, K) rows d log p_k / dz: autograd's Jacobian of log_softmax, one row per sample."""
    return torch.autograd.functional.jacobian(lambda x: torch.log_softmax(x, dim=0), z)[k]


def score_flipped(z, k):
    return -_score_rows(z, k)


def score_one_hot(z, k):
    return F.one_hot(k, z.numel()).double()


def score_diagonal_only(z, k):
    return F.one_hot(k, z.numel()).double() * (1 - torch.softmax(z, 0))


def score_transposed(z, k):
    return _score_rows(z, k).T


def gradient_sum(z, r, k):
    return (r[k, None] * _score_rows(z, k)).sum(dim=0)


def gradient_without_reward(z, r, k):
    return _score_rows(z, k).mean(dim=0)


def gradient_without_baseline(z, r, k):
    return (r[k, None] * F.one_hot(k, z.numel()).double()).mean(dim=0)


def gradient_flipped(z, r, k):
    return -(r[k, None] * _score_rows(z, k)).mean(dim=0)


_SCORE_MISTAKES = [
    (score_flipped, "the sign is flipped: d log p_k / dz = e_k - p, not p - e_k"),
    (
        score_one_hot,
        "the - p term is missing: log p_k = z_k - logsumexp(z), and the logsumexp depends on "
        "every z_j",
    ),
    (score_diagonal_only, "only the diagonal term: d log p_k / dz_j = -p_j also for j != k"),
    (score_transposed, "this is the transpose: return one row per sample, shape (n, K)"),
]
_GRADIENT_MISTAKES = [
    (gradient_sum, "that is the sum over the samples; the estimator is their average"),
    (gradient_without_reward, "the reward is missing: weight each score by r_k"),
    (gradient_without_baseline, "the - p term of the score is missing: average r_k (e_k - p)"),
    (gradient_flipped, "the sign is flipped: average r_k (e_k - p)"),
]


@exercise("6.2", "categorical_score", "score_gradient")
def score_estimator(score, gradient) -> str:
    """Scores e_k - p and the REINFORCE estimate against autograd; unbiased over 100,000 draws."""
    for z, k in _score_cases():
        expect_answer(
            attempt(score, z.clone(), k.clone()),
            _score_rows(z, k),
            f"categorical_score(z, k) for K = {z.numel()}",
            wrong={fb: m(z, k) for m, fb in _SCORE_MISTAKES},
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
        expect_answer(
            attempt(gradient, z.clone(), r.clone(), k.clone()),
            (r[k, None] * _score_rows(z, k)).mean(dim=0),
            f"score_gradient(z, r, k) for K = {z.numel()}",
            wrong={fb: m(z, r, k) for m, fb in _GRADIENT_MISTAKES},
            atol=1e-10,
            rtol=1e-8,
        )
    # Unbiased: over many samples the estimate matches the exact gradient within 4 SE.
    z, r = _score_cases()[0][0], r_cases[0]
    k = torch.multinomial(torch.softmax(z, 0), 100_000, replacement=True, generator=gen)
    z_req = z.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad((torch.softmax(z_req, 0) * r).sum(), z_req)
    per = r[k, None] * _score_rows(z, k)  # (n, K) per-sample terms
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


# --- 6.3 · the mean of equicorrelated draws ------------------------------------------------------


def _draw_stats(x: torch.Tensor) -> torch.Tensor:
    """[mean variance of an entry, mean covariance of two entries, variance of the row mean]."""
    n = x.shape[1]
    c = torch.cov(x.T)  # (n, n)
    off = (c.sum() - c.diagonal().sum()) / (n * (n - 1))
    return torch.stack([c.diagonal().mean(), off, x.mean(dim=1).var()])


def _exact_stats(rho: float, n: int) -> torch.Tensor:
    """The exact [variance, covariance, Var of the row mean] of standard equicorrelated draws."""
    return torch.tensor([1.0, rho, rho + (1 - rho) / n], dtype=F64)


def draws_rho_coefficient(rho, n, reps, generator):
    z = torch.randn(reps, 1, generator=generator, dtype=torch.float64)
    eps = torch.randn(reps, n, generator=generator, dtype=torch.float64)
    return rho * z + math.sqrt(1 - rho) * eps


def draws_eps_coefficient(rho, n, reps, generator):
    z = torch.randn(reps, 1, generator=generator, dtype=torch.float64)
    eps = torch.randn(reps, n, generator=generator, dtype=torch.float64)
    return math.sqrt(rho) * z + (1 - rho) * eps


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


_DRAW_MISTAKES = [
    (
        draws_rho_coefficient,
        "the coefficient of Z is sqrt(rho): with rho Z the covariance is rho^2",
    ),
    (
        draws_eps_coefficient,
        "the coefficient of eps is sqrt(1 - rho): with 1 - rho the variance is not 1",
    ),
    (
        draws_z_per_entry,
        "the draws are uncorrelated: draw Z once per row, shape (reps, 1), and share it among "
        "the n draws of that row",
    ),
    (
        draws_one_z,
        "one Z for all rows makes the rows dependent and the columns uncorrelated: draw one Z "
        "per row, shape (reps, 1)",
    ),
]


def var_independent(sigma2, rho, n):
    return sigma2 / n


def var_of_sum_over_n(sigma2, rho, n):
    return sigma2 * (1 + (n - 1) * rho)


def var_n_squared_pairs(sigma2, rho, n):
    return sigma2 * (rho + 1 / n)


def var_limit(sigma2, rho, n):
    return rho * sigma2


def var_without_sigma(sigma2, rho, n):
    return rho + (1 - rho) / n


_VAR_MISTAKES = [
    (
        var_independent,
        "that is sigma^2 / n, the rule for independent draws; the n(n - 1) covariances "
        "rho sigma^2 add to Var[sum X_i]",
    ),
    (
        var_of_sum_over_n,
        "that is Var[sum X_i] / n; the mean divides the sum by n, so its variance by n^2",
    ),
    (
        var_n_squared_pairs,
        "there are n(n - 1) pairs i != j, not n^2: the n diagonal terms are plain variances",
    ),
    (
        var_limit,
        "that is the limit for n -> infinity; at finite n the term (1 - rho) sigma^2 / n remains",
    ),
    (
        var_without_sigma,
        "the factor sigma^2 is missing: the variance scales with the draws' variance",
    ),
]


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
        wrong = {  # the statistics of the same draws made with the mistake, another seed
            fb: _draw_stats(m(rho, n, reps, torch.Generator().manual_seed(630)))
            for m, fb in _DRAW_MISTAKES
        }
        expect_answer(
            _draw_stats(x),
            _exact_stats(rho, n),
            f"[variance, covariance, Var of the row mean] of {label}",
            wrong=wrong,
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
        expect_answer(
            attempt(var_of_mean, sigma2, rho, n),
            ones @ cov @ ones / n**2,
            f"var_of_mean({sigma2}, {rho}, {n})",
            wrong={fb: m(sigma2, rho, n) for m, fb in _VAR_MISTAKES},
            atol=1e-12,
            rtol=1e-9,
        )
    return (
        "the simulated draws have variance 1 and covariance rho for rho = 0.5, 0.1, 1, 0 "
        "(n = 4, 50, 3, 6), and var_of_mean matches 1^T Sigma 1 / n^2 for 6 cases"
    )


# --- 6.4 · Predict: a positive test for a rare condition -----------------------------------------

_BASE_RATE, _SENSITIVITY, _SPECIFICITY = 0.001, 0.99, 0.99
_GUESS_TOL = 0.03


def _screening_posterior() -> tuple[float, float]:
    """p(ill | +): by Bayes' rule, and the share of the ill among the positives of 2,000,000
    simulated people."""
    exact = (_SENSITIVITY * _BASE_RATE) / (
        _SENSITIVITY * _BASE_RATE + (1 - _SPECIFICITY) * (1 - _BASE_RATE)
    )
    rng = np.random.default_rng(64)
    n = 2_000_000
    ill = rng.random(n) < _BASE_RATE
    positive = np.where(ill, rng.random(n) < _SENSITIVITY, rng.random(n) < 1 - _SPECIFICITY)
    return exact, float(ill[positive].mean())


@exercise("6.4", "predict_posterior")
def predict_posterior(answer) -> str:
    """The guess of p(ill | +) against Bayes' rule and a simulated population of two million."""
    guess = as_tensor(attempt(answer), "predict_posterior()")
    expect(guess.numel() == 1, "predict_posterior() should return one number, a probability")
    g = float(guess.reshape(()))
    expect(0.0 <= g <= 1.0, f"predict_posterior() should return a probability, got {fmt(g)}")
    exact, simulated = _screening_posterior()
    reveal = (
        f"p(ill | +) = {exact:.3f} by Bayes' rule; of the positives among 2,000,000 simulated "
        f"people, {simulated:.3f} are ill"
    )
    if abs(g - exact) <= _GUESS_TOL:
        return (
            f"your guess {fmt(g, 3)} is within {_GUESS_TOL} of the truth: {reveal}. The usual "
            f"guess, 0.99, is the sensitivity p(+ | ill)"
        )
    if g >= 0.5:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is far too high: {reveal}. A guess near 0.99 confuses "
            f"p(+ | ill), the sensitivity, with p(ill | +): the 1 % false positives of the "
            f"999 healthy people in every 1,000 outnumber the one true positive"
        )
    if g < exact / 3:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is too low: {reveal}. A positive test multiplies the odds "
            f"of being ill by 0.99 / 0.01 = 99, so the posterior is far above the base rate "
            f"of 0.001"
        )
    raise Incorrect(f"your guess {fmt(g, 3)} is off by more than {_GUESS_TOL}: {reveal}")


def guess_sensitivity():
    return 0.99


def guess_base_rate():
    return 0.001


def guess_a_coin_flip():
    return 0.5


# --- 6.5 · Implement: the Gumbel-max sampler -----------------------------------------------------

_GUMBEL_DRAWS = 200_000
_GUMBEL_Z = 4.5  # standard errors a correct sampler's frequencies may stray


def gumbel_gaussian_noise(logits, n, generator):
    g = torch.randn(n, logits.numel(), generator=generator, dtype=torch.float64)
    return torch.argmax(logits[None, :] + g, dim=1)


def gumbel_exponential_noise(logits, n, generator):
    u = torch.rand(n, logits.numel(), generator=generator, dtype=torch.float64)
    return torch.argmax(logits[None, :] - torch.log(u.clamp(min=1e-300)), dim=1)


def gumbel_minus_sign(logits, n, generator):
    u = torch.rand(n, logits.numel(), generator=generator, dtype=torch.float64).clamp(min=1e-300)
    return torch.argmax(logits[None, :] + torch.log(-torch.log(u)), dim=1)


def gumbel_argmin(logits, n, generator):
    u = torch.rand(n, logits.numel(), generator=generator, dtype=torch.float64).clamp(min=1e-300)
    return torch.argmin(logits[None, :] - torch.log(-torch.log(u)), dim=1)


def gumbel_shared_noise(logits, n, generator):
    u = torch.rand(logits.numel(), generator=generator, dtype=torch.float64).clamp(min=1e-300)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=0).repeat(n)


_SAMPLER_MISTAKES = [
    (
        gumbel_gaussian_noise,
        "the noise is Gaussian: argmax with N(0, 1) noise over-selects the largest logit; "
        "the trick needs Gumbel noise -log(-log u)",
    ),
    (
        gumbel_exponential_noise,
        "the noise is -log u, an exponential variable; the Gumbel variable is -log(-log u)",
    ),
    (
        gumbel_minus_sign,
        "the noise has the wrong sign: log(-log u) is minus a Gumbel variable; add "
        "g = -log(-log u)",
    ),
    (gumbel_argmin, "that is the argmin: the sample is the argmax of z + g"),
]


def _frequencies(samples: torch.Tensor, k: int) -> torch.Tensor:
    return torch.bincount(samples, minlength=k).to(F64) / samples.numel()


@exercise("6.5", "gumbel_max")
def gumbel_max(answer) -> str:
    """Shape, dtype, determinism and frequencies of 200,000 samples against torch.softmax."""
    cases = [
        torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=F64),
        torch.tensor([0.5, -1.5, 3.0, 0.0, 1.0, -0.5], dtype=F64),
        torch.tensor([-400.0, -401.0, -399.0], dtype=F64),  # large negative logits
        torch.tensor([0.3], dtype=F64),  # K = 1: always category 0
    ]
    n = _GUMBEL_DRAWS
    for i, z in enumerate(cases):
        k = z.numel()
        label = f"gumbel_max(logits, {n}, generator) for K = {k}"
        got = attempt(answer, z.clone(), n, torch.Generator().manual_seed(65))
        expect(isinstance(got, torch.Tensor), f"{label} should return a tensor")
        expect(
            got.dtype == torch.int64,
            f"{label} should return int64 category indices (argmax gives them), got {got.dtype}",
        )
        expect(
            tuple(got.shape) == (n,), f"{label} should have shape ({n},), got {tuple(got.shape)}"
        )
        expect(bool(((got >= 0) & (got < k)).all()), f"{label} should hold categories in [0, {k})")
        again = attempt(answer, z.clone(), n, torch.Generator().manual_seed(65))
        expect(
            torch.equal(got, again),
            f"{label} gives different samples for the same generator state: take all "
            f"randomness from `generator`",
        )
        p = torch.softmax(z, dim=0)
        if k > 1:
            expect(
                got.unique().numel() > 1,
                f"{label}: all {n} samples are the same category; draw fresh noise for every "
                f"sample, shape (n, K), not one noise vector for all",
            )
        freq = _frequencies(got, k)
        se = torch.sqrt(p * (1 - p) / n)
        if bool(((freq - p).abs() <= _GUMBEL_Z * se + 1e-12).all()):
            continue
        if i == 0:  # name the mistake by the frequencies it produces (1,000,000 draws of it)
            for mistake, feedback in _SAMPLER_MISTAKES:
                q = _frequencies(mistake(z, 1_000_000, torch.Generator().manual_seed(650)), k)
                se_q = torch.sqrt(q * (1 - q) / n + q * (1 - q) / 1_000_000)
                if bool(((freq - q).abs() <= _GUMBEL_Z * se_q + 1e-12).all()):
                    raise Incorrect(f"{label}: {feedback}")
        j = int(torch.argmax((freq - p).abs() / se.clamp(min=1e-12)))
        raise Incorrect(
            f"{label}: category {j} has frequency {fmt(float(freq[j]))}, but softmax gives it "
            f"{fmt(float(p[j]))} (more than {_GUMBEL_Z} standard errors away)"
        )
    return (
        f"int64 samples of shape (n,), reproducible from the generator, with frequencies within "
        f"{_GUMBEL_Z} SE of torch.softmax for K = 4, 6, 3 (logits near -400) and 1, over "
        f"{n:,} draws each"
    )


# --- 6.6 · Explore: the variance-optimal baseline ------------------------------------------------

_MU, _SIGMA = 1.0, 2.0
_BASELINES = (0.0, 5.0, 10.0, 13.0, 16.0, 20.0, 26.0)
_BASELINE_DRAWS = 1_000_000
_BASELINE_RTOL = 0.07


def _estimate_moments(b: torch.Tensor, which: str = "mu", score_scale: float = 1.0):
    """E[g] and E[g^2] of the per-sample estimate g = (x^2 - b) s(x), x ~ N(mu, sigma^2), by
    80-point Gauss–Hermite quadrature (exact: g^2 is a polynomial of degree 6 in x)."""
    t, w = np.polynomial.hermite_e.hermegauss(80)
    t, w = torch.from_numpy(t), torch.from_numpy(w / w.sum())  # E[h(T)], T ~ N(0, 1)
    x = _MU + _SIGMA * t  # (Q,)
    if which == "mu":
        s = (x - _MU) / _SIGMA**2 * score_scale
    else:
        s = ((x - _MU) ** 2 - _SIGMA**2) / _SIGMA**3
    g = (x[None, :] ** 2 - b[:, None]) * s[None, :]  # (B, Q)
    return g @ w, g**2 @ w


def _exact_variances(b: torch.Tensor) -> torch.Tensor:
    m1, m2 = _estimate_moments(b)
    return m2 - m1**2


def baselines_second_moment(baselines, n, generator):
    return _estimate_moments(baselines)[1]


def baselines_score_without_sigma(baselines, n, generator):
    m1, m2 = _estimate_moments(baselines, score_scale=_SIGMA**2)
    return m2 - m1**2


def baselines_sigma_gradient(baselines, n, generator):
    m1, m2 = _estimate_moments(baselines, which="sigma")
    return m2 - m1**2


_BASELINE_MISTAKES = [
    (
        baselines_second_moment,
        "these are the second moments E[g^2]; the variance subtracts the squared mean "
        "(d/dmu E[f])^2 = (2 mu)^2",
    ),
    (
        baselines_score_without_sigma,
        "the score is missing its 1 / sigma^2: d log p / d mu = (x - mu) / sigma^2",
    ),
    (
        baselines_sigma_gradient,
        "these are the variances of the d/dsigma estimate; the exercise asks for d/dmu",
    ),
]


@exercise("6.6", "baseline_variances")
def baseline_variances(answer) -> str:
    """Measured variances for 7 baselines against exact Gauss–Hermite quadrature, within 7 %."""
    b = torch.tensor(_BASELINES, dtype=F64)
    n = _BASELINE_DRAWS
    label = f"baseline_variances(baselines, {n:,}, generator)"
    got = as_tensor(
        attempt(answer, b.clone(), n, torch.Generator().manual_seed(66)), label, (len(b),)
    )
    want = _exact_variances(b)
    expect_answer(
        got,
        want,
        label,
        wrong={fb: m(b, n, None) for m, fb in _BASELINE_MISTAKES},
        atol=0.0,
        rtol=_BASELINE_RTOL,
    )
    best = _BASELINES[int(torch.argmin(want))]
    at = {base: float(v) for base, v in zip(_BASELINES, want, strict=True)}
    return (
        f"the measured variances match the exact ones within {_BASELINE_RTOL:.0%} for "
        f"{len(b)} baselines. Exact: {at[0.0]:.4g} at b = 0, {at[5.0]:.4g} at b = E[f] = 5, "
        f"{at[13.0]:.4g} at b = {best:g} = mu^2 + 3 sigma^2 (the minimum) and {at[26.0]:.4g} "
        f"at b = 26"
    )


# Typical wrong answers (one place: the checks above compute their values to name the mistake,
# and the tests build each and check that it is rejected with its feedback) ------------------

ref_score = _ref("6.2", "categorical_score")
ref_gradient = _ref("6.2", "score_gradient")
ref_draws = _ref("6.3", "equicorrelated_draws")
ref_var = _ref("6.3", "var_of_mean")

MISTAKES = {
    "6.1": [
        *[(m, fb) for m, fb in _POSTERIOR_MISTAKES if m is not posterior_first_only],
        (posterior_product_at_once, "underflows"),
    ],
    "6.2": [
        *[((m, ref_gradient), fb) for m, fb in _SCORE_MISTAKES],
        *[((ref_score, m), fb) for m, fb in _GRADIENT_MISTAKES],
    ],
    "6.3": [
        *[((m, ref_var), fb) for m, fb in _DRAW_MISTAKES],
        ((draws_global_rng, ref_var), "from `generator`"),
        ((draws_transposed, ref_var), "looks transposed"),
        *[((ref_draws, m), fb) for m, fb in _VAR_MISTAKES],
    ],
    "6.4": [
        (guess_sensitivity, "confuses p(+ | ill)"),
        (guess_base_rate, "too low"),
        (guess_a_coin_flip, "far too high"),
    ],
    "6.5": [
        *_SAMPLER_MISTAKES,
        (gumbel_shared_noise, "all 200000 samples are the same category"),
    ],
    "6.6": _BASELINE_MISTAKES,
}
