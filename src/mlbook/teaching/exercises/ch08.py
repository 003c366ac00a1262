"""Checks of the exercises of chapter 8 (hypothesis testing).

The references are independent of the reader's answer and of :mod:`mlbook.foundations.hypothesis`:
``scipy.stats.binomtest(...).proportion_ci()`` (Clopper–Pearson) for the zero-failure bound, the
Wilson equation solved by ``scipy.optimize.brentq``, the variance of the paired difference by
enumerating its three values, McNemar's exact test rebuilt from ``scipy.stats.binom``, the exact
probability of a "significant" look by dynamic programming over binomial counts, the sign-flip
null by enumerating every sign vector, binomial sums from ``scipy.stats.binom.cdf``, and
simulations with NumPy, judged within four standard errors or more, as stated. Each typical wrong
answer is written once, as a function: the checks compute its value to name the mistake, and
``MISTAKES`` lists it for the tests.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import optimize, stats

from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

Z975 = float(stats.norm.ppf(0.975))


# --- 8.1 · zero failures ------------------------------------------------------------------------


def upper_wald(n, alpha):
    return 0.0


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


_UPPER_MISTAKES = [
    (upper_wald, "that is the Wald interval's end, which collapses to 0 when no event is seen"),
    (
        upper_rule_of_three,
        "that is the rule of three 3/N, an approximation; solve (1 - p)^N = alpha exactly",
    ),
    (
        upper_log_alpha,
        "that is the approximation -ln(alpha) / N (the rule of three at alpha = 0.05); solve "
        "(1 - p)^N = alpha exactly",
    ),
    (upper_without_one_minus, "that is 1 - p_u: the bound solves (1 - p)^N = alpha for p"),
    (upper_one_minus_alpha, "P(K = 0) = (1 - p)^N must stay at least alpha, not 1 - alpha"),
    (
        upper_two_sided,
        "that is the two-sided bound, alpha / 2 in each tail; the question is one-sided",
    ),
]


def wilson_without_z2(n, z):
    return z**2 / n


def wilson_z_not_squared(n, z):
    return z / (n + z)


def wilson_centre(n, z):
    return z**2 / 2 / (n + z**2)


def wilson_wald(n, z):
    return 0.0


_WILSON_MISTAKES = [
    (wilson_without_z2, "the + z^2 in the denominator is missing: the end is z^2 / (N + z^2)"),
    (wilson_z_not_squared, "z must be squared: p^2 <= z^2 p (1 - p) / N"),
    (wilson_centre, "that is the centre of the Wilson interval, not its upper end"),
    (wilson_wald, "that is the Wald interval's end, which collapses to 0 at p_hat = 0"),
]


@exercise("8.1", "zero_failure_upper_bound", "wilson_upper_at_zero")
def zero_failures(upper, wilson) -> str:
    """The exact bound against SciPy's Clopper–Pearson; Wilson's end against a root finder."""
    for n in (300, 10, 1, 5000):
        for alpha in (0.05, 0.01):
            expect_answer(
                attempt(upper, n, alpha),
                stats.binomtest(0, n, alternative="less").proportion_ci(1 - alpha).high,
                f"zero_failure_upper_bound({n}, {alpha})",
                wrong={fb: m(n, alpha) for m, fb in _UPPER_MISTAKES},
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
                wrong={fb: m(n, z) for m, fb in _WILSON_MISTAKES},
                atol=1e-12,
                rtol=1e-9,
            )
    return (
        "the exact bound matches SciPy's one-sided Clopper-Pearson bound for 8 (N, alpha) and "
        "is within 1 % of 3/N at N = 300; the Wilson end matches the root of its equation "
        "for 12 (N, z)"
    )


# --- 8.2 · the size of a paired benchmark -----------------------------------------------------

_D_VALUES = np.array([0.0, 1.0, -1.0, 0.0])  # a - b in the four cells
_A_VALUES, _B_VALUES = np.array([1.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 1.0, 0.0])


def _variance(values: np.ndarray, probs: np.ndarray) -> float:
    mean = float(probs @ values)
    return float(probs @ (values - mean) ** 2)


def _var_independent(pi: np.ndarray) -> float:
    return _variance(_A_VALUES, pi) + _variance(_B_VALUES, pi)


def paired_without_delta(pi, h, z):
    return math.ceil(z**2 * (pi[1] + pi[2]) / h**2)


def paired_ignores_pairing(pi, h, z):
    return math.ceil(z**2 * _var_independent(pi) / h**2)


def paired_rounded_down(pi, h, z):
    return math.floor(z**2 * _variance(_D_VALUES, pi) / h**2)


def paired_bernoulli(pi, h, z):
    delta = pi[1] - pi[2]
    return math.ceil(z**2 * delta * (1 - delta) / h**2)


def paired_unsquared(pi, h, z):
    return math.ceil(z * _variance(_D_VALUES, pi) / h)


_PAIRED_MISTAKES = [
    (paired_without_delta, "E[d^2] = pi_d is not the variance of d: subtract delta^2"),
    (
        paired_ignores_pairing,
        "that ignores the pairing: Var[d] = pi_d - delta^2, not the sum of the two accuracies' "
        "variances",
    ),
    (paired_rounded_down, "round up: the smallest N whose half-width is at most h"),
    (
        paired_bernoulli,
        "d takes the values -1, 0, 1, so Var[d] = pi_d - delta^2, not delta (1 - delta)",
    ),
    (paired_unsquared, "z and h enter squared: N = z^2 Var[d] / h^2"),
]


def independent_as_paired(pi, h, z):
    return math.ceil(z**2 * _variance(_D_VALUES, pi) / h**2)


def independent_averaged(pi, h, z):
    return math.ceil(z**2 * _var_independent(pi) / 2 / h**2)


def independent_rounded_down(pi, h, z):
    return math.floor(z**2 * _var_independent(pi) / h**2)


def independent_one_model(pi, h, z):
    return math.ceil(z**2 * _variance(_A_VALUES, pi) / h**2)


_INDEPENDENT_MISTAKES = [
    (
        independent_as_paired,
        "two independent test sets do not share their noise: use the variances of the two "
        "accuracies, not Var[d]",
    ),
    (independent_averaged, "the variances of the two accuracies add; do not average them"),
    (independent_rounded_down, "round up: the smallest N whose half-width is at most h"),
    (independent_one_model, "model B's accuracy has its own variance p_B (1 - p_B); add it"),
]


@exercise("8.2", "paired_sample_size", "independent_sample_size")
def paired_sample_size(paired, independent) -> str:
    """Sample sizes from the enumerated variances; 4,000 simulated benchmarks of the paired size."""
    cases = [
        (np.array([0.70, 0.12, 0.08, 0.10]), 0.01, Z975),
        (np.array([0.50, 0.20, 0.20, 0.10]), 0.02, 1.96),
        (np.array([0.80, 0.05, 0.01, 0.14]), 0.005, 2.5758293035489004),
        (np.array([0.30, 0.30, 0.10, 0.30]), 0.03, 1.6448536269514722),
    ]
    for pi, h, z in cases:
        what = f"paired_sample_size(pi = {pi.tolist()}, h = {h}, z = {z:.4g})"
        for fn, name, var, mistakes in (
            (paired, "paired_sample_size", _variance(_D_VALUES, pi), _PAIRED_MISTAKES),
            (independent, "independent_sample_size", _var_independent(pi), _INDEPENDENT_MISTAKES),
        ):
            expect_answer(
                attempt(fn, pi.copy(), h, z),
                math.ceil(z**2 * var / h**2),
                what.replace("paired_sample_size", name),
                wrong={fb: m(pi, h, z) for m, fb in mistakes},
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


# --- 8.3 · the size of McNemar's exact test, one and many --------------------------------------


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
    with np.errstate(invalid="ignore"):  # nan p-values where j > d are masked out
        hit = (j <= d) & reject(_pvalues(n), d, j)
    return float((_weights(n, pi_disc) * hit).sum())


def _exact_size(n: int, pi_disc: float, alpha: float) -> float:
    return _size(n, pi_disc, lambda p, d, j: p <= alpha)


def size_nominal(n, pi_disc, alpha):
    return alpha


def size_normal_approximation(n, pi_disc, alpha):
    z = float(stats.norm.ppf(1 - alpha / 2))
    return _size(n, pi_disc, lambda p, d, j: (d > 0) & (np.abs(2 * j - d) >= z * np.sqrt(d)))


def size_one_sided(n, pi_disc, alpha):
    return _size(n, pi_disc, lambda p, d, j: p / 2 <= alpha)


def size_fixed_d(n, pi_disc, alpha):
    d = round(n * pi_disc)
    row = _pvalues(n)[d, : d + 1]  # p-values given D = n pi_disc
    return float(stats.binom.pmf(np.arange(d + 1), d, 0.5)[row <= alpha].sum())


_SIZE_MISTAKES = [
    (
        size_nominal,
        "the exact test is discrete: its size is below alpha; sum P(D) P(n10 | D) over the "
        "outcomes it rejects",
    ),
    (
        size_normal_approximation,
        "that is the size of the normal-approximation test; use the exact p-values",
    ),
    (size_one_sided, "the p-value is two-sided: double the smaller tail"),
    (size_fixed_d, "D is random: average over D ~ Binomial(n, pi_disc), not fix D = n pi_disc"),
]


def _level(alpha, m, bonferroni):
    return alpha / m if bonferroni else alpha


def familywise_union_bound(n, pi_disc, alpha, m, bonferroni):
    return m * _exact_size(n, pi_disc, _level(alpha, m, bonferroni))


def familywise_nominal(n, pi_disc, alpha, m, bonferroni):
    return 1 - (1 - _level(alpha, m, bonferroni)) ** m


def familywise_one_test(n, pi_disc, alpha, m, bonferroni):
    return _exact_size(n, pi_disc, _level(alpha, m, bonferroni))


def familywise_all_reject(n, pi_disc, alpha, m, bonferroni):
    return _exact_size(n, pi_disc, _level(alpha, m, bonferroni)) ** m


def familywise_without_bonferroni(n, pi_disc, alpha, m, bonferroni):
    return 1 - (1 - _exact_size(n, pi_disc, alpha)) ** m


_FAMILY_MISTAKES = [
    (
        familywise_union_bound,
        "the union bound m alpha' is only an upper bound; the tests are independent, so "
        "P(none rejects) = (1 - alpha')^m",
    ),
    (familywise_nominal, "use the exact size alpha' of one test, not the nominal level"),
    (
        familywise_one_test,
        "that is the error of one test; the family errs when any of the m tests rejects",
    ),
    (familywise_all_reject, "that is the probability that all m tests reject"),
    (familywise_without_bonferroni, "with Bonferroni each test runs at alpha / m"),
]


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
        expect_answer(
            attempt(size, n, pi_disc, alpha),
            _exact_size(n, pi_disc, alpha),
            f"mcnemar_size({n}, {pi_disc}, {alpha})",
            wrong={fb: m(n, pi_disc, alpha) for m, fb in _SIZE_MISTAKES},
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
        want = 1 - (1 - _exact_size(n, pi_disc, _level(alpha, m, bonf))) ** m
        family[n] = expect_answer(
            attempt(familywise, n, pi_disc, alpha, m, bonf),
            want,
            f"familywise_error({n}, {pi_disc}, {alpha}, {m}, bonferroni={bonf})",
            wrong={fb: mk(n, pi_disc, alpha, m, bonf) for mk, fb in _FAMILY_MISTAKES},
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


# --- 8.4 · Predict: peeking at the p-value -------------------------------------------------------

_LOOK_EVERY, _MAX_ITEMS, _ALPHA, _STOP_TOL = 50, 1000, 0.05, 0.05


def _two_sided_sign_p(k: np.ndarray, n: int) -> np.ndarray:
    """Exact two-sided sign-test (McNemar) p-value of k wins in n discordant items."""
    return np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(k, n - k), n, 0.5))


def _optional_stopping() -> tuple[float, float]:
    """P(some look has p <= alpha) under H0: exactly, by carrying the distribution of A's wins
    from look to look and removing the paths that stopped; and over 20,000 simulated
    evaluators."""
    looks = _MAX_ITEMS // _LOOK_EVERY
    block = stats.binom.pmf(np.arange(_LOOK_EVERY + 1), _LOOK_EVERY, 0.5)
    wins = np.zeros(_MAX_ITEMS + 1)
    wins[0] = 1.0  # P(A has won k of the items so far, and no look has stopped)
    stopped = 0.0
    k = np.arange(_MAX_ITEMS + 1)
    for look in range(1, looks + 1):
        wins = np.convolve(wins, block)[: _MAX_ITEMS + 1]
        n = look * _LOOK_EVERY
        stop = (k <= n) & (_two_sided_sign_p(np.minimum(k, n), n) <= _ALPHA)
        stopped += float(wins[stop].sum())
        wins[stop] = 0.0
    rng = np.random.default_rng(84)
    paths = rng.binomial(_LOOK_EVERY, 0.5, size=(20_000, looks)).cumsum(axis=1)  # (reps, looks)
    sizes = _LOOK_EVERY * np.arange(1, looks + 1)
    simulated = float((_two_sided_sign_p(paths, sizes) <= _ALPHA).any(axis=1).mean())
    return stopped, simulated


@exercise("8.4", "predict_peeking")
def predict_peeking(answer) -> str:
    """The guess against the exact probability (dynamic programming) and 20,000 simulations."""
    guess = as_tensor(attempt(answer), "predict_peeking()")
    expect(guess.numel() == 1, "predict_peeking() should return one number, a probability")
    g = float(guess.reshape(()))
    expect(0.0 <= g <= 1.0, f"predict_peeking() should return a probability, got {fmt(g)}")
    exact, simulated = _optional_stopping()
    looks = _MAX_ITEMS // _LOOK_EVERY
    independent = 1 - (1 - _ALPHA) ** looks
    reveal = (
        f"under H0 some look is 'significant' with probability {exact:.3f} (exact; "
        f"{simulated:.3f} over 20,000 simulated evaluators), {exact / _ALPHA:.1f} times the "
        f"5 % of a single test, and below 1 - 0.95^{looks} = {independent:.2f}, the value for "
        f"{looks} independent tests"
    )
    if abs(g - exact) <= _STOP_TOL:
        return f"your guess {fmt(g, 3)} is within {_STOP_TOL}: {reveal}"
    if g <= _ALPHA + 0.02:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is the level of one test: {reveal}. Each look is a new "
            f"chance to cross the threshold, and stopping at the first crossing keeps it"
        )
    if g >= independent - 0.1:
        raise Incorrect(
            f"your guess {fmt(g, 3)} treats the {looks} looks as independent tests: {reveal}. "
            f"Each look reuses the items of the earlier ones, so the p-values are strongly "
            f"correlated"
        )
    raise Incorrect(f"your guess {fmt(g, 3)} is off by more than {_STOP_TOL}: {reveal}")


def guess_single_test():
    return 0.05


def guess_independent_looks():
    return 0.64


# --- 8.5 · Implement: the sign-flip permutation test ---------------------------------------------

_FLIPS = 20_000
_MISTAKE_FLIPS = 100_000  # resamples of a typical wrong answer, to name it by its value
_FLIP_Z = 4.5


def sign_flip_one_sided(a, b, n_resamples, rng):
    d = a - b
    signs = 2.0 * rng.integers(0, 2, size=(n_resamples, d.size)) - 1.0
    return float(np.mean((signs * d).mean(axis=1) >= d.mean() * (1 - 1e-9)))


def sign_flip_strict(a, b, n_resamples, rng):
    d = a - b
    signs = 2.0 * rng.integers(0, 2, size=(n_resamples, d.size)) - 1.0
    return float(np.mean(np.abs((signs * d).mean(axis=1)) > abs(d.mean()) * (1 + 1e-9)))


def sign_flip_unpaired(a, b, n_resamples, rng):
    pooled = np.concatenate([a, b])
    perm = rng.permuted(np.broadcast_to(pooled, (n_resamples, pooled.size)), axis=1)
    null = perm[:, : a.size].mean(axis=1) - perm[:, a.size :].mean(axis=1)
    return float(np.mean(np.abs(null) >= abs(a.mean() - b.mean()) * (1 - 1e-9)))


def sign_flip_one_sign_per_resample(a, b, n_resamples, rng):
    d = a - b
    signs = 2.0 * rng.integers(0, 2, size=(n_resamples, 1)) - 1.0  # the same sign for every item
    return float(np.mean(np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) * (1 - 1e-9)))


_FLIP_MISTAKES = [
    (
        sign_flip_one_sided,
        "that is one-sided, P(T >= T_obs); the two-sided p-value counts |T| >= |T_obs|",
    ),
    (
        sign_flip_strict,
        "count the sign flips with |T| >= |T_obs|, ties included: with 0/1 outcomes many flips "
        "tie the observed statistic exactly",
    ),
    (
        sign_flip_unpaired,
        "that shuffles the pooled outcomes of both models, the unpaired permutation test; "
        "flip the sign of each item's difference d_i = a_i - b_i instead",
    ),
    (
        sign_flip_one_sign_per_resample,
        "draw one random sign per item, shape (n_resamples, N), not one per resample",
    ),
]


def _flip_cases() -> list[tuple[str, np.ndarray, np.ndarray, float]]:
    """(what, a, b, exact two-sided p-value) for three paired samples."""
    rng = np.random.default_rng(85)
    a = rng.normal(0.6, 0.2, 10)  # scores in [0, 1]-ish, e.g. per-item BLEU or log-likelihoods
    b = a - rng.normal(0.1, 0.15, 10)
    d = a - b
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=d.size)))  # (1024, 10)
    exact_cont = float(np.mean(np.abs(signs @ d) >= abs(d.sum()) * (1 - 1e-9)))
    n10, n01, same = 9, 1, 190  # few discordant items: many flips tie the observed statistic
    a01 = np.r_[np.ones(n10), np.zeros(n01), np.ones(same // 2), np.zeros(same - same // 2)]
    b01 = np.r_[np.zeros(n10), np.ones(n01), np.ones(same // 2), np.zeros(same - same // 2)]
    exact_01 = float(stats.binomtest(n10, n10 + n01, 0.5).pvalue)  # McNemar's exact test
    tie = rng.integers(0, 2, 40).astype(float)
    return [
        ("10 real-valued paired scores", a, b, exact_cont),
        ("200 paired 0/1 outcomes, n10 = 9, n01 = 1", a01, b01, exact_01),
        ("two identical models", tie, tie.copy(), 1.0),
    ]


@functools.lru_cache(maxsize=64)
def _mistake_value(case: int, index: int) -> float:
    _, a, b, _ = _flip_cases()[case]
    mistake = _FLIP_MISTAKES[index][0]
    return mistake(a, b, _MISTAKE_FLIPS, np.random.default_rng(850 + case))


@exercise("8.5", "sign_flip_p")
def sign_flip_p(answer) -> str:
    """The Monte Carlo p-value against exact enumeration of all sign flips and McNemar's test."""
    for i, (what, a, b, exact) in enumerate(_flip_cases()):
        label = f"sign_flip_p(a, b, {_FLIPS}, rng) for {what}"
        got = as_tensor(
            attempt(answer, a.copy(), b.copy(), _FLIPS, np.random.default_rng(8)), label
        )
        expect(got.numel() == 1, f"{label} should return one number, the p-value")
        again = attempt(answer, a.copy(), b.copy(), _FLIPS, np.random.default_rng(8))
        p = float(got.reshape(()))
        expect(
            p == float(as_tensor(again, label).reshape(())),
            f"{label} gives different p-values for the same generator state: take all "
            f"randomness from `rng`",
        )
        se = math.sqrt(exact * (1 - exact) / _FLIPS)
        if abs(p - exact) <= _FLIP_Z * se + 1 / _FLIPS:
            continue
        for j, (_, feedback) in enumerate(_FLIP_MISTAKES):
            q = _mistake_value(i, j)
            se_q = math.sqrt(q * (1 - q) / _FLIPS + q * (1 - q) / _MISTAKE_FLIPS)
            if abs(p - q) <= _FLIP_Z * se_q + 1 / _FLIPS and abs(q - exact) > _FLIP_Z * se:
                raise Incorrect(f"{label}: {feedback}")
        raise Incorrect(
            f"{label} is {fmt(p)}, but the exact two-sided p-value is {fmt(exact)} (more than "
            f"{_FLIP_Z} Monte Carlo standard errors away)"
        )
    return (
        f"within {_FLIP_Z} Monte Carlo standard errors of the exact p-value for 10 real-valued "
        f"paired scores (all 1,024 sign vectors), of McNemar's exact test for 200 paired 0/1 "
        f"outcomes, and exactly 1 for two identical models"
    )


# --- 8.6 · Explore: where the sample-size rule keeps its promise ---------------------------------


def _margin_reference(p: float, h: float, n_max: int) -> np.ndarray:
    """P(|K/N - p| <= h), K ~ Binomial(N, p), N = 1..n_max, as a difference of binomial CDFs."""
    n = np.arange(1, n_max + 1)
    hi = np.floor(n * (p + h) + 1e-9)
    lo = np.ceil(n * (p - h) - 1e-9)
    return stats.binom.cdf(hi, n, p) - stats.binom.cdf(lo - 1, n, p)


def margin_strict(p, h, n_max):
    n = np.arange(1, n_max + 1)
    hi = np.ceil(n * (p + h) - 1e-9) - 1
    lo = np.floor(n * (p - h) + 1e-9) + 1
    return stats.binom.cdf(hi, n, p) - stats.binom.cdf(lo - 1, n, p)


def margin_normal(p, h, n_max):
    n = np.arange(1, n_max + 1)
    return 2 * stats.norm.cdf(h * np.sqrt(n / (p * (1 - p)))) - 1


def margin_one_sided(p, h, n_max):
    n = np.arange(1, n_max + 1)
    return stats.binom.cdf(np.floor(n * (p + h) + 1e-9), n, p)


_MARGIN_MISTAKES = [
    (
        margin_strict,
        "the window excludes its ends: the promise is |p_hat - p| <= h, ends included",
    ),
    (
        margin_normal,
        "that is the normal approximation 2 Phi(h sqrt(N / (p (1 - p)))) - 1; sum the "
        "binomial probabilities of the K inside the window",
    ),
    (
        margin_one_sided,
        "that counts only K / N <= p + h; the window has two sides, |K / N - p| <= h",
    ),
]

_MARGIN_CASES = [(0.5, 0.05, 800), (0.99, 0.05, 100), (0.95, 0.02, 1000), (0.8, 0.02, 2500)]


def _rule(p: float, h: float) -> int:
    return math.ceil(Z975**2 * p * (1 - p) / h**2 - 1e-9)


@exercise("8.6", "margin_curve")
def margin_curve(answer) -> str:
    """The curve of P(|K/N - p| <= h) against binomial CDF sums for 4 (p, h), N = 1..n_max."""
    summary = []
    for p, h, n_max in _MARGIN_CASES:
        want = _margin_reference(p, h, n_max)
        expect_answer(
            attempt(answer, p, h, n_max),
            want,
            f"margin_curve({p}, {h}, {n_max}) (entry N - 1 is the probability at N items)",
            wrong={fb: m(p, h, n_max) for m, fb in _MARGIN_MISTAKES},
            atol=1e-9,
        )
        ok = want >= 0.95
        first = int(np.argmax(ok)) + 1
        stays = int(np.flatnonzero(~ok)[-1]) + 2 if (~ok).any() else 1
        summary.append(f"p = {p}, h = {h}: {_rule(p, h)}, {first}, {stays}")
    return (
        "your curves match the exact binomial sums for 4 (p, h). The rule's N, the first N "
        "whose curve reaches 0.95 and the N from which it stays there: " + "; ".join(summary)
    )


# Typical wrong answers (one place: the checks above compute their values to name the mistake,
# and the tests build each and check that it is rejected with its feedback) ------------------

ref_upper = _ref("8.1", "zero_failure_upper_bound")
ref_wilson = _ref("8.1", "wilson_upper_at_zero")
ref_paired = _ref("8.2", "paired_sample_size")
ref_independent = _ref("8.2", "independent_sample_size")
ref_size = _ref("8.3", "mcnemar_size")
ref_familywise = _ref("8.3", "familywise_error")

MISTAKES = {
    "8.1": [
        *[((m, ref_wilson), fb) for m, fb in _UPPER_MISTAKES],
        *[((ref_upper, m), fb) for m, fb in _WILSON_MISTAKES],
    ],
    "8.2": [
        *[((m, ref_independent), fb) for m, fb in _PAIRED_MISTAKES],
        *[((ref_paired, m), fb) for m, fb in _INDEPENDENT_MISTAKES],
    ],
    "8.3": [
        *[((m, ref_familywise), fb) for m, fb in _SIZE_MISTAKES],
        *[((ref_size, m), fb) for m, fb in _FAMILY_MISTAKES],
    ],
    "8.4": [
        (guess_single_test, "the level of one test"),
        (guess_independent_looks, "as independent tests"),
    ],
    "8.5": _FLIP_MISTAKES,
    "8.6": _MARGIN_MISTAKES,
}
