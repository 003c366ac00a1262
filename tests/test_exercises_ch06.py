"""Typical wrong answers to the exercises of chapter 6 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


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


def ref_score(z, k):
    return _ref("6.2", "categorical_score")(z, k)


def ref_gradient(z, r, k):
    return _ref("6.2", "score_gradient")(z, r, k)


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


def ref_draws(rho, n, reps, generator):
    return _ref("6.3", "equicorrelated_draws")(rho, n, reps, generator)


def ref_var(sigma2, rho, n):
    return _ref("6.3", "var_of_mean")(sigma2, rho, n)


def var_independent(sigma2, rho, n):
    return sigma2 / n


def var_of_sum_over_n(sigma2, rho, n):
    return sigma2 * (1 + (n - 1) * rho)


def var_n_squared_pairs(sigma2, rho, n):
    return sigma2 * (rho + 1 / n)


def var_without_sigma(sigma2, rho, n):
    return rho + (1 - rho) / n


WRONG = {
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


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
