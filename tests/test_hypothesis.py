"""mlbook.foundations.hypothesis against independent references (SciPy, enumeration, simulation).

All quantities are float64; tolerances are stated per test: 1e-12 for closed forms that differ
only by rounding, Monte Carlo comparisons at 4 standard errors with fixed seeds.
"""

import math

import numpy as np
import pytest
from scipy import stats

from mlbook.foundations import hypothesis as ht

Z975 = float(stats.norm.ppf(0.975))


def test_proportion_and_standard_error():
    rng = np.random.default_rng(0)
    y = rng.random((3, 50)) < 0.3
    np.testing.assert_allclose(ht.proportion(y), y.sum(axis=1) / 50, atol=1e-15)
    np.testing.assert_allclose(ht.proportion(y.T, axis=0), y.sum(axis=1) / 50, atol=1e-15)
    assert ht.proportion([1, 0, 1, 1]) == 0.75
    # SE against the Bernoulli variance from scipy, divided by N.
    p = np.array([0.0, 0.1, 0.5, 0.93])
    np.testing.assert_allclose(
        ht.standard_error(p, 40), np.sqrt(stats.bernoulli(p).var() / 40), atol=1e-15
    )


def test_normal_ci_matches_scipy_norm_interval():
    for p_hat, n in [(0.2, 30), (0.5, 100), (0.97, 1000)]:
        se = math.sqrt(p_hat * (1 - p_hat) / n)
        ref = stats.norm.interval(0.95, loc=p_hat, scale=se)
        np.testing.assert_allclose(ht.normal_ci(p_hat, n, z=Z975), ref, atol=1e-12)
    low, high = ht.normal_ci(0.0, 10)
    assert low == high == 0.0  # the degenerate interval at k = 0


@pytest.mark.parametrize("n", [1, 7, 30, 250])
def test_wilson_matches_scipy_binomtest(n):
    k = np.arange(n + 1)
    low, high = ht.wilson_ci(k, n, z=Z975)
    for kk in range(n + 1):
        ci = stats.binomtest(kk, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert abs(low[kk] - ci.low) < 1e-12 and abs(high[kk] - ci.high) < 1e-12


def test_wilson_endpoints_solve_score_equation_and_agresti_coull_contains_wilson():
    n, z = 40, 1.96
    k = np.arange(1, n)  # interior counts: both endpoints strictly inside (0, 1)
    low, high = ht.wilson_ci(k, n, z)
    p_hat = k / n
    for end in (low, high):
        np.testing.assert_allclose(
            np.abs(p_hat - end) / np.sqrt(end * (1 - end) / n), z, rtol=1e-10
        )
    ac_low, ac_high = ht.agresti_coull_ci(np.arange(n + 1), n, z)
    w_low, w_high = ht.wilson_ci(np.arange(n + 1), n, z)
    assert np.all(ac_low <= w_low + 1e-12) and np.all(ac_high >= w_high - 1e-12)
    # Same centre (K + z^2/2)/(N + z^2) before clipping: compare at an interior count.
    kk = 17
    assert abs(sum(ht.agresti_coull_ci(kk, n, z)) / 2 - (kk + z**2 / 2) / (n + z**2)) < 1e-12


def test_binomial_pmf_matches_scipy():
    p = np.array([0.0, 0.03, 0.5, 0.999, 1.0])
    for n in (1, 13, 400):
        np.testing.assert_allclose(
            ht.binomial_pmf(n, p),
            stats.binom.pmf(np.arange(n + 1)[None, :], n, p[:, None]),
            atol=1e-12,
        )
    assert ht.binomial_pmf(5, 0.3).shape == (6,)


@pytest.mark.parametrize("method", ht.METHODS)
def test_coverage_exact_vs_scipy_sum_and_monte_carlo(method):
    n, ps = 25, np.array([0.02, 0.3, 0.5, 0.85])
    cov = ht.coverage_exact(method, n, ps)
    k = np.arange(n + 1)
    low, high = ht.confidence_interval(method, k, n)
    for p, c in zip(ps, cov, strict=True):
        ref = stats.binom.pmf(k, n, p)[(low <= p) & (p <= high)].sum()
        assert abs(c - ref) < 1e-12
    rng = np.random.default_rng(1)
    hits = ht.coverage_hits(method, n, 0.3, 40_000, rng)
    se = math.sqrt(cov[1] * (1 - cov[1]) / hits.size)
    assert abs(hits.mean() - cov[1]) < 4 * se


def test_normal_p_value_and_two_sided_p_value():
    t = np.array([0.0, 1.0, 1.96, -3.2])
    np.testing.assert_allclose(ht.normal_p_value(t), 2 * stats.norm.sf(np.abs(t)), atol=1e-15)
    null = np.array([-3.0, -1.0, 0.0, 1.0, 2.0, 3.0])
    assert ht.two_sided_p_value(2.0, null) == 3 / 6
    assert ht.two_sided_p_value(-1.0, null) == 5 / 6
    # A tie reached by a different rounding still counts.
    assert ht.two_sided_p_value(0.1 + 0.2, np.array([0.3])) == 1.0


def test_two_proportion_z_squared_is_chi2_contingency():
    k1, n1, k2, n2 = 30, 80, 45, 90
    table = np.array([[k1, n1 - k1], [k2, n2 - k2]])
    chi2 = stats.chi2_contingency(table, correction=False).statistic
    assert abs(ht.two_proportion_z(k1, n1, k2, n2) ** 2 - chi2) < 1e-10
    zs = ht.two_proportion_z(np.array([k1, 10]), n1, np.array([k2, 70]), n2)
    assert zs.shape == (2,) and zs[0] == ht.two_proportion_z(k1, n1, k2, n2)


def test_exact_permutation_matches_scipy_and_monte_carlo():
    rng = np.random.default_rng(2)
    x, y = rng.normal(0.8, 1, 7), rng.normal(0, 1, 6)
    t_obs = ht.mean_difference(x, y)
    exact_null = ht.exact_permutation_null(x, y)
    assert exact_null.size == math.comb(13, 7)
    p_exact = ht.two_sided_p_value(t_obs, exact_null)
    ref = stats.permutation_test(
        (x, y),
        lambda a, b: a.mean() - b.mean(),
        permutation_type="independent",
        n_resamples=np.inf,
        alternative="two-sided",
    ).pvalue

    # symmetric-ish null only approximately, so compare with the one-sided definition instead.
    p_greater = np.mean(exact_null >= t_obs * (1 - 1e-9))
    p_less = np.mean(exact_null <= t_obs * (1 + 1e-9))
    assert abs(min(1.0, 2 * min(p_greater, p_less)) - ref) < 1e-12
    mc_null = ht.permutation_null(x, y, 20_000, rng)
    hits = np.abs(mc_null) >= abs(t_obs) * (1 - 1e-9)
    se = math.sqrt(p_exact * (1 - p_exact) / hits.size)
    assert abs(hits.mean() - p_exact) < 4 * se


def test_binary_permutation_null_is_hypergeometric():
    x = np.array([1] * 7 + [0] * 2)
    y = np.array([1] * 3 + [0] * 5)
    null = ht.exact_permutation_null(x, y)
    t_obs = ht.mean_difference(x, y)
    # Group-x successes A ~ Hypergeom(total 17, successes 10, draws 9); T = A/9 - (10 - A)/8.
    a = np.arange(0, 10)
    t_a = a / 9 - (10 - a) / 8
    pmf = stats.hypergeom(17, 10, 9).pmf(a)
    ref = pmf[np.abs(t_a) >= abs(t_obs) - 1e-12].sum()
    assert abs(ht.two_sided_p_value(t_obs, null) - ref) < 1e-12


def test_mcnemar_exact_matches_binomtest_and_sign_flips():
    for n10, n01 in [(0, 0), (5, 5), (3, 10), (25, 12), (1, 0), (40, 61)]:
        ref = 1.0 if n10 + n01 == 0 else stats.binomtest(n10, n10 + n01, 0.5).pvalue
        assert abs(ht.mcnemar_exact_p(n10, n01) - ref) < 1e-12
    vec = ht.mcnemar_exact_p(np.array([3, 25]), np.array([10, 12]))
    assert vec.shape == (2,)
    rng = np.random.default_rng(3)
    a = (rng.random(300) < 0.7).astype(int)
    b = np.where(rng.random(300) < 0.85, a, 1 - a)  # correlated with a
    table = ht.mcnemar_table(a, b)
    assert table.sum() == 300 and table[0, 0] == np.sum((a == 1) & (b == 1))
    n10, n01 = int(table[0, 1]), int(table[1, 0])
    p_exact = ht.mcnemar_exact_p(n10, n01)
    null = ht.paired_permutation_null(a, b, 20_000, rng)
    hits = np.abs(null) >= abs((n10 - n01) / 300) * (1 - 1e-9)
    se = math.sqrt(p_exact * (1 - p_exact) / hits.size)
    assert abs(hits.mean() - p_exact) < 4 * se
    assert ht.mcnemar_z(n10, n01) ** 2 == pytest.approx((n10 - n01) ** 2 / (n10 + n01), rel=1e-12)


def test_paired_difference_ci_closed_form():
    a = np.array([1, 1, 0, 1, 0, 1, 1, 0, 1, 1])
    b = np.array([1, 0, 0, 1, 1, 0, 1, 0, 0, 1])
    diff, low, high = ht.paired_difference_ci(a, b, z=2.0)
    n10, n01, n = 3, 1, 10
    var = (n10 + n01) / n - ((n10 - n01) / n) ** 2
    assert diff == pytest.approx(0.2, abs=1e-15)
    assert high - diff == pytest.approx(2.0 * math.sqrt(var / n), abs=1e-14)
    assert diff - low == pytest.approx(high - diff, abs=1e-14)


def test_sample_size_and_within_margin():
    assert ht.sample_size(0.5, 0.01) == 9604
    assert ht.sample_size(0.5, 0.05) == 385
    n = ht.sample_size(0.3, 0.03)
    # Half-width at the rule's N is at most h and above h one item earlier.
    assert 1.96 * math.sqrt(0.21 / n) <= 0.03 < 1.96 * math.sqrt(0.21 / (n - 1))
    prob = ht.within_margin_probability(n, 0.3, 0.03)
    k = np.arange(n + 1)
    ref = stats.binom.pmf(k, n, 0.3)[np.abs(k / n - 0.3) <= 0.03 + 1e-12].sum()
    assert abs(prob - ref) < 1e-12
    assert 0.93 < prob < 0.97


def test_bad_input_raises():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="0/1"):
        ht.proportion([0, 2, 1])
    with pytest.raises(ValueError, match="empty"):
        ht.proportion(np.zeros((3, 0)))
    with pytest.raises(TypeError, match="numeric"):
        ht.proportion(np.array(["a", "b"]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ht.standard_error(1.2, 10)
    with pytest.raises(ValueError, match="positive"):
        ht.standard_error(0.5, 0)
    with pytest.raises(TypeError, match="int"):
        ht.standard_error(0.5, 10.0)
    with pytest.raises(ValueError, match="z must be"):
        ht.normal_ci(0.5, 10, z=-1)
    with pytest.raises(ValueError, match=r"k must hold indices in \[0, 11\)"):
        ht.wilson_ci(11, 10)
    with pytest.raises(TypeError, match="integer tensor"):
        ht.agresti_coull_ci(2.5, 10)
    with pytest.raises(ValueError, match="method"):
        ht.confidence_interval("wald", 3, 10)
    with pytest.raises(ValueError, match="1 axes"):
        ht.binomial_pmf(5, np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ht.coverage_exact("wilson", 10, [0.5, 1.5])
    with pytest.raises(ValueError, match="reps must be a positive int"):
        ht.coverage_hits("wilson", 10, 0.5, 0, rng)
    with pytest.raises(ValueError, match="NaN"):
        ht.normal_p_value(float("nan"))
    with pytest.raises(ValueError, match="1 axes"):
        ht.two_sided_p_value(1.0, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="t_obs must be a finite"):
        ht.two_sided_p_value(float("inf"), [1.0])
    # NaN null statistics used to be skipped silently (|NaN| >= t is False): a wrong p-value.
    with pytest.raises(ValueError, match="null_stats must be finite"):
        ht.two_sided_p_value(0.5, np.array([0.1, np.nan, 0.7]))
    with pytest.raises(ValueError, match="null_stats must be finite"):
        ht.two_sided_p_value(1.0, np.full(10, np.nan))
    with pytest.raises(ValueError, match="undefined"):
        ht.two_proportion_z(0, 10, 0, 12)
    with pytest.raises(ValueError, match="1 axes"):
        ht.mean_difference(np.zeros((2, 2)), [1.0])
    with pytest.raises(ValueError, match="positive"):
        ht.permutation_null([1.0, 2.0], [3.0], 0, rng)
    with pytest.raises(ValueError, match="max_splits"):
        ht.exact_permutation_null(np.zeros(20), np.zeros(20))
    with pytest.raises(ValueError, match="same shape"):
        ht.mcnemar_table([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="same shape"):
        ht.mcnemar_exact_p(np.array([1, 2]), np.array([1]))
    with pytest.raises(TypeError, match="integer tensor"):
        ht.mcnemar_exact_p(1.5, 2)
    with pytest.raises(ValueError, match="n10 must hold indices"):
        ht.mcnemar_z(-1, 3)
    with pytest.raises(ValueError, match="0/1"):
        ht.paired_permutation_null([1, 0, 3], [1, 0, 1], 10, rng)
    with pytest.raises(ValueError, match="same shape"):
        ht.paired_difference_ci([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match=r"\(0.0, 1.0\)"):
        ht.sample_size(0.0, 0.01)
    with pytest.raises(ValueError, match=r"\(0.0, 1.0\)"):
        ht.sample_size(0.5, 0.0)
    with pytest.raises(ValueError, match="h must be"):
        ht.within_margin_probability(100, 0.5, -0.1)


def test_binary_permutation_p_vs_enumeration_and_hypergeom():
    for k1, n1, k2, n2 in [(6, 8, 2, 7), (0, 5, 5, 5), (3, 8, 3, 8), (7, 9, 2, 8)]:
        x = np.array([1] * k1 + [0] * (n1 - k1))
        y = np.array([1] * k2 + [0] * (n2 - k2))
        p_enum = ht.two_sided_p_value(ht.mean_difference(x, y), ht.exact_permutation_null(x, y))
        assert abs(ht.binary_permutation_p(k1, n1, k2, n2) - p_enum) < 1e-12
    # Large samples: against scipy's hypergeometric distribution.
    k1, n1, k2, n2 = 130, 200, 100, 180
    a = np.arange(0, 201)
    t_a = a / n1 - (230 - a) / n2
    ref = stats.hypergeom(380, 230, 200).pmf(a)[np.abs(t_a) >= abs(k1 / n1 - k2 / n2) - 1e-12]
    assert abs(ht.binary_permutation_p(k1, n1, k2, n2) - ref.sum()) < 1e-12
    with pytest.raises(ValueError, match=r"k1 must hold indices in \[0, 6\)"):
        ht.binary_permutation_p(6, 5, 1, 5)


def test_mcnemar_rejection_rate_vs_enumeration_and_simulation():
    # Small N: enumerate the full multinomial over (n10, n01, rest) with scipy.
    n, pi10, pi01 = 12, 0.25, 0.1
    ref = 0.0
    for n10 in range(n + 1):
        for n01 in range(n + 1 - n10):
            prob = stats.multinomial.pmf(
                [n10, n01, n - n10 - n01], n, [pi10, pi01, 1 - pi10 - pi01]
            )
            if (1.0 if n10 + n01 == 0 else stats.binomtest(n10, n10 + n01).pvalue) <= 0.05:
                ref += prob
    assert abs(ht.mcnemar_rejection_rate(n, pi10, pi01) - ref) < 1e-12
    # Larger N: simulation, and the exact test's size never exceeds alpha.
    rng = np.random.default_rng(4)
    n = 400
    exact = ht.mcnemar_rejection_rate(n, 0.12, 0.08)
    tabs = rng.multinomial(n, [0.12, 0.08, 0.8], size=20_000)
    hits = ht.mcnemar_exact_p(tabs[:, 0], tabs[:, 1]) <= 0.05
    assert abs(hits.mean() - exact) < 4 * math.sqrt(exact * (1 - exact) / hits.size)
    assert ht.mcnemar_rejection_rate(n, 0.1, 0.1) <= 0.05
    assert ht.mcnemar_rejection_rate(n, 0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match=r"pi10 \+ pi01 must be"):
        ht.mcnemar_rejection_rate(10, 0.7, 0.6)
    with pytest.raises(ValueError, match="alpha"):
        ht.mcnemar_rejection_rate(10, 0.1, 0.1, alpha=0.0)
