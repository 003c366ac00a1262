"""Typical wrong answers to the exercises of chapter 8 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import numpy as np
import pytest
from exercise_support import cases, reference, rejected
from scipy import stats


def _ref(eid, name):
    return reference(eid)[name]


def ref_upper(n, alpha):
    return _ref("8.1", "zero_failure_upper_bound")(n, alpha)


def ref_wilson(n, z):
    return _ref("8.1", "wilson_upper_at_zero")(n, z)


def upper_rule_of_three(n, alpha):
    return 3 / n


def upper_log_alpha(n, alpha):
    return -math.log(alpha) / n


def upper_without_one_minus(n, alpha):
    return alpha ** (1 / n)


def upper_one_minus_alpha(n, alpha):
    return 1 - (1 - alpha) ** (1 / n)


def upper_two_sided(n, alpha):
    return 1 - (alpha / 2) ** (1 / n)


def upper_wald(n, alpha):
    return 0.0


def wilson_without_z2(n, z):
    return z**2 / n


def wilson_centre(n, z):
    return z**2 / 2 / (n + z**2)


def wilson_z_not_squared(n, z):
    return z / (n + z)


def ref_paired(pi, h, z):
    return _ref("8.2", "paired_sample_size")(pi, h, z)


def ref_independent(pi, h, z):
    return _ref("8.2", "independent_sample_size")(pi, h, z)


def paired_without_delta(pi, h, z):
    return math.ceil(z**2 * (pi[1] + pi[2]) / h**2)


def paired_rounded_down(pi, h, z):
    return math.floor(z**2 * ((pi[1] + pi[2]) - (pi[1] - pi[2]) ** 2) / h**2)


def paired_bernoulli(pi, h, z):
    delta = pi[1] - pi[2]
    return math.ceil(z**2 * delta * (1 - delta) / h**2)


def paired_unsquared(pi, h, z):
    return math.ceil(z * ((pi[1] + pi[2]) - (pi[1] - pi[2]) ** 2) / h)


def independent_as_paired(pi, h, z):
    return ref_paired(pi, h, z)


def independent_averaged(pi, h, z):
    p_a, p_b = pi[0] + pi[1], pi[0] + pi[2]
    return math.ceil(z**2 * (p_a * (1 - p_a) + p_b * (1 - p_b)) / 2 / h**2)


def independent_one_model(pi, h, z):
    p_a = pi[0] + pi[1]
    return math.ceil(z**2 * p_a * (1 - p_a) / h**2)


def ref_size(n, pi_disc, alpha):
    return _ref("8.3", "mcnemar_size")(n, pi_disc, alpha)


def ref_familywise(n, pi_disc, alpha, m, bonferroni):
    return _ref("8.3", "familywise_error")(n, pi_disc, alpha, m, bonferroni)


def size_nominal(n, pi_disc, alpha):
    return alpha


def _size_by_rule(n, pi_disc, reject):
    total = 0.0
    for d in range(1, n + 1):
        n10 = np.arange(d + 1)
        total += stats.binom.pmf(d, n, pi_disc) * stats.binom.pmf(n10, d, 0.5)[reject(n10, d)].sum()
    return total


def size_normal_approximation(n, pi_disc, alpha):
    z = stats.norm.ppf(1 - alpha / 2)
    return _size_by_rule(n, pi_disc, lambda n10, d: np.abs(2 * n10 - d) >= z * math.sqrt(d))


def size_one_sided(n, pi_disc, alpha):
    return _size_by_rule(
        n, pi_disc, lambda n10, d: stats.binom.cdf(np.minimum(n10, d - n10), d, 0.5) <= alpha
    )


def size_fixed_d(n, pi_disc, alpha):
    d = round(n * pi_disc)
    n10 = np.arange(d + 1)
    p = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(n10, d - n10), d, 0.5))
    return stats.binom.pmf(n10, d, 0.5)[p <= alpha].sum()


def familywise_union_bound(n, pi_disc, alpha, m, bonferroni):
    return m * ref_size(n, pi_disc, alpha / m if bonferroni else alpha)


def familywise_nominal(n, pi_disc, alpha, m, bonferroni):
    level = alpha / m if bonferroni else alpha
    return 1 - (1 - level) ** m


def familywise_one_test(n, pi_disc, alpha, m, bonferroni):
    return ref_size(n, pi_disc, alpha / m if bonferroni else alpha)


def familywise_without_bonferroni(n, pi_disc, alpha, m, bonferroni):
    return 1 - (1 - ref_size(n, pi_disc, alpha)) ** m


WRONG = {
    "8.1": [
        ((upper_rule_of_three, ref_wilson), "rule of three"),
        ((upper_log_alpha, ref_wilson), "rule of three"),
        ((upper_without_one_minus, ref_wilson), "that is 1 - p_u"),
        ((upper_one_minus_alpha, ref_wilson), "not 1 - alpha"),
        ((upper_two_sided, ref_wilson), "two-sided bound"),
        ((upper_wald, ref_wilson), "Wald interval's end"),
        ((ref_upper, wilson_without_z2), "the + z^2 in the denominator is missing"),
        ((ref_upper, wilson_centre), "centre of the Wilson interval"),
        ((ref_upper, wilson_z_not_squared), "z must be squared"),
    ],
    "8.2": [
        ((paired_without_delta, ref_independent), "subtract delta^2"),
        ((ref_independent, ref_independent), "that ignores the pairing"),
        ((paired_rounded_down, ref_independent), "round up"),
        ((paired_bernoulli, ref_independent), "not delta (1 - delta)"),
        ((paired_unsquared, ref_independent), "enter squared"),
        ((ref_paired, independent_as_paired), "do not share their noise"),
        ((ref_paired, independent_averaged), "do not average them"),
        ((ref_paired, independent_one_model), "its own variance"),
    ],
    "8.3": [
        ((size_nominal, ref_familywise), "the exact test is discrete"),
        ((size_normal_approximation, ref_familywise), "normal-approximation test"),
        ((size_one_sided, ref_familywise), "double the smaller tail"),
        ((size_fixed_d, ref_familywise), "D is random"),
        ((ref_size, familywise_union_bound), "union bound"),
        ((ref_size, familywise_nominal), "not the nominal level"),
        ((ref_size, familywise_one_test), "that is the error of one test"),
        ((ref_size, familywise_without_bonferroni), "each test runs at alpha / m"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
