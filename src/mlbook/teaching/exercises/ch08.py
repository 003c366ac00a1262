"""Checks of the exercises of chapter 8 (hypothesis testing).

The references are independent of the reader's answer and of :mod:`mlbook.foundations.hypothesis`:
``scipy.stats.binomtest(...).proportion_ci()`` (Clopper–Pearson) for the zero-failure bound, the
Wilson equation solved by ``scipy.optimize.brentq``, the variance of the paired difference by
enumerating its three values, McNemar's exact test rebuilt from ``scipy.stats.binom``, and
simulations of benchmarks with NumPy, judged within four standard errors.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, stats

from . import as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

Z975 = float(stats.norm.ppf(0.975))


@exercise("8.1", "zero_failure_upper_bound", "wilson_upper_at_zero")
def zero_failures(upper, wilson) -> str:
    """The exact bound against SciPy's Clopper–Pearson; Wilson's end against a root finder."""
    for n in (300, 10, 1, 5000):
        for alpha in (0.05, 0.01):
            want = stats.binomtest(0, n, alternative="less").proportion_ci(1 - alpha).high
            expect_answer(
                attempt(upper, n, alpha),
                want,
                f"zero_failure_upper_bound({n}, {alpha})",
                wrong={
                    "that is the Wald interval's end, which collapses to 0 when no event is "
                    "seen": 0.0,
                    "that is the rule of three 3/N, an approximation; solve (1 - p)^N = alpha "
                    "exactly": 3 / n,
                    "that is the approximation -ln(alpha) / N (the rule of three at alpha = 0.05);"
                    " solve (1 - p)^N = alpha exactly": -math.log(alpha) / n,
                    "that is 1 - p_u: the bound solves (1 - p)^N = alpha for p": alpha ** (1 / n),
                    "P(K = 0) = (1 - p)^N must stay at least alpha, not 1 - alpha": 1
                    - (1 - alpha) ** (1 / n),
                    "that is the two-sided bound, alpha / 2 in each tail; the question is "
                    "one-sided": 1 - (alpha / 2) ** (1 / n),
                },
                atol=1e-12,
                rtol=1e-9,
            )
    expect(
        abs(float(as_tensor(attempt(upper, 300, 0.05), "bound")) * 300 / 3 - 1) < 0.01,
        "at N = 300 and alpha = 0.05 the exact bound should be within 1 % of 3/N",
    )
    for n in (300, 10, 1, 5000):
        for z in (Z975, 1.0, 2.576):
            want = optimize.brentq(
                lambda p, n=n, z=z: p - z * math.sqrt(p * (1 - p) / n),
                1e-300,
                1.0,
                xtol=1e-16,
                rtol=1e-15,
            )
            expect_answer(
                attempt(wilson, n, z),
                want,
                f"wilson_upper_at_zero({n}, {z:.4g})",
                wrong={
                    "the + z^2 in the denominator is missing: the end is z^2 / (N + z^2)": z**2 / n,
                    "z must be squared: p^2 <= z^2 p (1 - p) / N": z / (n + z),
                    "that is the centre of the Wilson interval, not its upper end": z**2
                    / 2
                    / (n + z**2),
                    "that is the Wald interval's end, which collapses to 0 at p_hat = 0": 0.0,
                },
                atol=1e-12,
                rtol=1e-9,
            )
    return (
        "the exact bound matches SciPy's one-sided Clopper-Pearson bound for 8 (N, alpha) and "
        "is within 1 % of 3/N at N = 300; the Wilson end matches the root of its equation "
        "for 12 (N, z)"
    )


def _variance(values: np.ndarray, probs: np.ndarray) -> float:
    mean = float(probs @ values)
    return float(probs @ (values - mean) ** 2)


@exercise("8.2", "paired_sample_size", "independent_sample_size")
def paired_sample_size(paired, independent) -> str:
    """Sample sizes from the enumerated variances; 4,000 simulated benchmarks of the paired size."""
    d_vals = np.array([0.0, 1.0, -1.0, 0.0])  # a - b in the four cells
    a_vals, b_vals = np.array([1.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 1.0, 0.0])
    cases = [
        (np.array([0.70, 0.12, 0.08, 0.10]), 0.01, Z975),
        (np.array([0.50, 0.20, 0.20, 0.10]), 0.02, 1.96),
        (np.array([0.80, 0.05, 0.01, 0.14]), 0.005, 2.5758293035489004),
        (np.array([0.30, 0.30, 0.10, 0.30]), 0.03, 1.6448536269514722),
    ]
    for pi, h, z in cases:
        var_d = _variance(d_vals, pi)
        var_ab = _variance(a_vals, pi) + _variance(b_vals, pi)
        pi_d, delta = pi[1] + pi[2], pi[1] - pi[2]
        want = math.ceil(z**2 * var_d / h**2)
        what = f"paired_sample_size(pi = {pi.tolist()}, h = {h}, z = {z:.4g})"
        expect_answer(
            attempt(paired, pi.copy(), h, z),
            want,
            what,
            wrong={
                "E[d^2] = pi_d is not the variance of d: subtract delta^2": math.ceil(
                    z**2 * pi_d / h**2
                ),
                "that ignores the pairing: Var[d] = pi_d - delta^2, not the sum of the two "
                "accuracies' variances": math.ceil(z**2 * var_ab / h**2),
                "round up: the smallest N whose half-width is at most h": math.floor(
                    z**2 * var_d / h**2
                ),
                "d takes the values -1, 0, 1, so Var[d] = pi_d - delta^2, not delta (1 - "
                "delta)": math.ceil(z**2 * delta * (1 - delta) / h**2),
                "z and h enter squared: N = z^2 Var[d] / h^2": math.ceil(z * var_d / h),
            },
            atol=0,
            rtol=0,
        )
        want_ind = math.ceil(z**2 * var_ab / h**2)
        expect_answer(
            attempt(independent, pi.copy(), h, z),
            want_ind,
            what.replace("paired_sample_size", "independent_sample_size"),
            wrong={
                "two independent test sets do not share their noise: use the variances of the "
                "two accuracies, not Var[d]": want,
                "the variances of the two accuracies add; do not average them": math.ceil(
                    z**2 * var_ab / 2 / h**2
                ),
                "round up: the smallest N whose half-width is at most h": math.floor(
                    z**2 * var_ab / h**2
                ),
                "model B's accuracy has its own variance p_B (1 - p_B); add it": math.ceil(
                    z**2 * _variance(a_vals, pi) / h**2
                ),
            },
            atol=0,
            rtol=0,
        )
    pi, h, _ = cases[0]
    n = int(attempt(paired, pi.copy(), h, Z975))
    rng = np.random.default_rng(82)
    tabs = rng.multinomial(n, pi, size=4000)  # (reps, 4)
    within = np.abs((tabs[:, 1] - tabs[:, 2]) / n - (pi[1] - pi[2])) <= h
    tol = 4 * math.sqrt(0.95 * 0.05 / 4000) + 0.005
    expect(
        abs(within.mean() - 0.95) <= tol,
        "in 4,000 simulated benchmarks of the paired size the difference is not within h of "
        "the truth about 95 % of the time",
    )
    return (
        "both sizes match z^2 Var / h^2 rounded up, with the variances enumerated, for 4 "
        "cases; 4,000 simulated benchmarks of the paired size land within h about 95 % of "
        "the time"
    )


@functools.lru_cache(maxsize=8)
def _pvalues(n: int) -> np.ndarray:
    """(n + 1, n + 1) McNemar exact p-values at (D = d, n10 = j), nan where j > d."""
    d = np.arange(n + 1)[:, None]
    j = np.arange(n + 1)[None, :]
    p = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(j, d - j), d, 0.5))
    p = np.where(d == 0, 1.0, p)
    return np.where(j <= d, p, np.nan)


@functools.lru_cache(maxsize=8)
def _weights(n: int, pi_disc: float) -> np.ndarray:
    """(n + 1, n + 1) P(D = d) P(n10 = j | D = d) under H0, 0 where j > d."""
    d = np.arange(n + 1)[:, None]
    j = np.arange(n + 1)[None, :]
    return stats.binom.pmf(d, n, pi_disc) * np.where(j <= d, stats.binom.pmf(j, d, 0.5), 0.0)


def _size(n: int, pi_disc: float, reject) -> float:
    """Sum of P(D) P(n10 | D) over the (D, n10) where reject(p, d, j) holds."""
    d = np.arange(n + 1)[:, None]
    j = np.arange(n + 1)[None, :]
    hit = (j <= d) & reject(_pvalues(n), d, j)
    return float((_weights(n, pi_disc) * hit).sum())


def _exact_size(n: int, pi_disc: float, alpha: float) -> float:
    return _size(n, pi_disc, lambda p, d, j: p <= alpha)


@exercise("8.3", "mcnemar_size", "familywise_error")
def mcnemar_family(size, familywise) -> str:
    """McNemar's exact size from SciPy's binomial; the family-wise error, also by simulation."""
    for n, pi_disc, alpha in [
        (500, 0.2, 0.05),
        (60, 0.3, 0.1),
        (200, 0.1, 0.01),
        (20, 0.5, 0.05),
        (1, 0.5, 0.05),
    ]:
        want = _exact_size(n, pi_disc, alpha)
        z = float(stats.norm.ppf(1 - alpha / 2))
        d_mid = round(n * pi_disc)
        row = _pvalues(n)[d_mid, : d_mid + 1]  # p-values given D = n pi
        fixed_d = float(stats.binom.pmf(np.arange(d_mid + 1), d_mid, 0.5)[row <= alpha].sum())
        wrong = {
            "the exact test is discrete: its size is below alpha; sum P(D) P(n10 | D) over the "
            "outcomes it rejects": alpha,
            "that is the size of the normal-approximation test; use the exact p-values": _size(
                n, pi_disc, lambda p, d, j, z=z: (d > 0) & (np.abs(2 * j - d) >= z * np.sqrt(d))
            ),
            "the p-value is two-sided: double the smaller tail": _size(
                n, pi_disc, lambda p, d, j, a=alpha: p / 2 <= a
            ),
            "D is random: average over D ~ Binomial(n, pi_disc), not fix D = n pi_disc": fixed_d,
        }
        expect_answer(
            attempt(size, n, pi_disc, alpha),
            want,
            f"mcnemar_size({n}, {pi_disc}, {alpha})",
            wrong=wrong,
            atol=1e-10,
            rtol=1e-8,
        )
    family = {}
    for n, pi_disc, alpha, m, bonf in [
        (500, 0.2, 0.05, 10, False),
        (200, 0.2, 0.05, 10, True),
        (60, 0.3, 0.1, 3, False),
        (100, 0.1, 0.05, 5, True),
    ]:
        level = alpha / m if bonf else alpha
        one = _exact_size(n, pi_disc, level)
        want = 1 - (1 - one) ** m
        wrong = {
            "the union bound m alpha' is only an upper bound; the tests are independent, so "
            "P(none rejects) = (1 - alpha')^m": m * one,
            "use the exact size alpha' of one test, not the nominal level": 1 - (1 - level) ** m,
            "that is the error of one test; the family errs when any of the m tests rejects": one,
            "that is the probability that all m tests reject": one**m,
        }
        if bonf:
            wrong["with Bonferroni each test runs at alpha / m"] = (
                1 - (1 - _exact_size(n, pi_disc, alpha)) ** m
            )
        family[n] = expect_answer(
            attempt(familywise, n, pi_disc, alpha, m, bonf),
            want,
            f"familywise_error({n}, {pi_disc}, {alpha}, {m}, bonferroni={bonf})",
            wrong=wrong,
            atol=1e-10,
            rtol=1e-8,
        )
        if bonf:
            expect(want <= alpha, "Bonferroni should keep the family-wise error at most alpha")
    rng = np.random.default_rng(83)
    d = rng.binomial(500, 0.2, size=(20_000, 10))  # (reps, m) discordant counts
    n10 = rng.binomial(d, 0.5)
    any_sig = (_pvalues(500)[d, n10] <= 0.05).any(axis=1)  # (reps,) any test rejects
    fwer = float(family[500])
    se = math.sqrt(fwer * (1 - fwer) / any_sig.size)
    expect(
        abs(any_sig.mean() - fwer) <= 4 * se,
        "familywise_error(500, 0.2, 0.05, 10, False) is more than 4 standard errors from "
        "20,000 simulated families of 10 comparisons",
    )
    return (
        "mcnemar_size matches the exact sum over (D, n10) for 5 cases; familywise_error "
        "matches the exact family-wise error with and without Bonferroni, and 20,000 simulated "
        "families of 10 comparisons within 4 SE"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


ref_upper = _ref("8.1", "zero_failure_upper_bound")
ref_wilson = _ref("8.1", "wilson_upper_at_zero")


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


ref_paired = _ref("8.2", "paired_sample_size")
ref_independent = _ref("8.2", "independent_sample_size")


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


ref_size = _ref("8.3", "mcnemar_size")
ref_familywise = _ref("8.3", "familywise_error")


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


MISTAKES = {
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
