"""Hypothesis testing for evaluation: proportions, intervals, p-values, sample sizes (chapter 8).

An accuracy on a benchmark is a proportion of 0/1 outcomes, so most of this module is about the
binomial: the estimate and its standard error (eqs. 8.1, 8.2), the normal ("Wald") interval
(eq. 8.3) next to the Wilson and Agresti-Coull intervals, their exact coverage by enumerating the
binomial distribution, p-values (eq. 8.4) from the normal approximation and from permutation
tests, McNemar's test for two models scored on the same items, and the sample-size rule (eq. 8.5).

Shape legend
    N      number of items (0/1 outcomes) in one sample or benchmark
    N1, N2 sizes of two independent samples
    K      number of successes, an integer in [0, N]
    P      number of success probabilities p evaluated at once (a grid)
    B      number of resamples (permutations or sign flips) of a Monte Carlo null distribution

Every public function validates its input and raises ``ValueError``/``TypeError`` naming the
offending shape or value. Exact computations enumerate all N + 1 outcomes of a binomial; Monte
Carlo versions beside them are the naive references they are tested against.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import special

__all__ = [
    "Z95",
    "proportion",
    "standard_error",
    "normal_ci",
    "wilson_ci",
    "agresti_coull_ci",
    "confidence_interval",
    "binomial_pmf",
    "coverage_exact",
    "coverage_hits",
    "normal_p_value",
    "two_sided_p_value",
    "two_proportion_z",
    "mean_difference",
    "permutation_null",
    "exact_permutation_null",
    "binary_permutation_p",
    "mcnemar_table",
    "mcnemar_exact_p",
    "mcnemar_z",
    "mcnemar_rejection_rate",
    "paired_permutation_null",
    "paired_difference_ci",
    "sample_size",
    "within_margin_probability",
]

#: The sheet's 1.96, the 97.5 % quantile of N(0, 1) rounded to three digits (exact: 1.959964).
Z95 = 1.96

METHODS = ("normal", "wilson", "agresti-coull")

_TIE_RTOL = 1e-9  # |T| >= |T_obs| up to rounding: equal statistics summed in another order tie


# --- validation ------------------------------------------------------------------------------


def _check_n(n, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"{name} must be positive, got {n}")
    return int(n)


def _check_z(z) -> float:
    z = float(z)
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a positive finite number, got {z}")
    return z


def _check_prob(p, name: str = "p", open_interval: bool = False) -> np.ndarray:
    arr = np.asarray(p)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    lo_bad = arr <= 0 if open_interval else arr < 0
    hi_bad = arr >= 1 if open_interval else arr > 1
    if np.any(lo_bad | hi_bad):
        where = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must lie in {where}, got range [{arr.min()}, {arr.max()}]")
    return arr


def _check_counts(k, n: int) -> np.ndarray:
    arr = np.asarray(k)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"success counts k must be integers, got dtype {arr.dtype}")
    if np.any((arr < 0) | (arr > n)):
        raise ValueError(f"success counts k must lie in [0, n={n}], got [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


def _check_binary(y, name: str = "y") -> np.ndarray:
    arr = np.asarray(y)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric or boolean array, got dtype {arr.dtype}")
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one item along its last axis, got {arr.shape}")
    arr = arr.astype(np.float64)
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{name} must hold 0/1 outcomes only")
    return arr


def _check_sample(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _check_resamples(n_resamples, rng) -> int:
    b = _check_n(n_resamples, "n_resamples")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return b


def _check_paired(a, b) -> tuple[np.ndarray, np.ndarray]:
    a_arr, b_arr = _check_binary(a, "a"), _check_binary(b, "b")
    if a_arr.ndim != 1 or a_arr.shape != b_arr.shape:
        raise ValueError(
            f"a and b must be 1-D of the same length (N,), got {a_arr.shape}, {b_arr.shape}"
        )
    return a_arr, b_arr


# --- eqs. 8.1-8.3: estimate, standard error, intervals ------------------------------------------


def proportion(y, axis: int = -1) -> np.ndarray | float:
    """The sample proportion p_hat = (1/N) sum_i Y_i of 0/1 outcomes (eq. 8.1).

    Args:
        y: (..., N) outcomes in {0, 1} (bool or numbers), e.g. per-item correctness.
        axis: the axis of the N items.

    Returns:
        p_hat with the item axis removed (a float for 1-D input).
    """
    arr = np.moveaxis(_check_binary(np.moveaxis(np.asarray(y), axis, -1)), -1, axis)
    out = arr.mean(axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def standard_error(p_hat, n: int) -> np.ndarray | float:
    """Estimated standard error sqrt(p_hat (1 - p_hat) / N) of a proportion (eq. 8.2).

    Var[p_hat] = p(1 - p)/N for N independent Bernoulli(p) outcomes (eq. 6.3); the estimate plugs
    in p_hat for the unknown p.

    Args:
        p_hat: any shape, values in [0, 1].
        n: the number of items N.
    """
    n = _check_n(n)
    p = _check_prob(p_hat, "p_hat")
    out = np.sqrt(p * (1 - p) / n)
    return float(out) if out.ndim == 0 else out


def normal_ci(p_hat, n: int, z: float = Z95) -> tuple:
    """The normal-approximation (Wald) interval p_hat +- z SE_hat(p_hat) (eq. 8.3).

    The interval is returned as the formula gives it, *not* clipped to [0, 1]: a lower end below
    0 is one of the symptoms of the approximation failing.

    Args:
        p_hat: any shape, values in [0, 1].
        n: the number of items N.
        z: the normal quantile (1.96 for 95 %).

    Returns:
        (low, high), each the shape of ``p_hat``.
    """
    z = _check_z(z)
    se = standard_error(p_hat, n)
    p = _check_prob(p_hat, "p_hat")
    low, high = p - z * se, p + z * se
    return (float(low), float(high)) if p.ndim == 0 else (low, high)


def wilson_ci(k, n: int, z: float = Z95) -> tuple:
    """Wilson's score interval: all p with |p_hat - p| <= z sqrt(p (1 - p) / N).

    The Wald interval of eq. 8.3 evaluates the standard error at p_hat; Wilson evaluates it at the
    candidate p and solves the quadratic (p_hat - p)^2 = z^2 p (1 - p) / N, giving

        centre = (p_hat + z^2/(2N)) / (1 + z^2/N),
        half   = z / (1 + z^2/N) * sqrt(p_hat (1 - p_hat)/N + z^2/(4 N^2)).

    Args:
        k: any shape, integer success counts in [0, N].
        n: the number of items N.
        z: the normal quantile.

    Returns:
        (low, high), each the shape of ``k``; always inside [0, 1].
    """
    n = _check_n(n)
    z = _check_z(z)
    p = _check_counts(k, n) / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    low, high = np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)  # clip: rounding
    return (float(low), float(high)) if p.ndim == 0 else (low, high)


def agresti_coull_ci(k, n: int, z: float = Z95) -> tuple:
    """Agresti-Coull interval: the Wald interval after adding z^2/2 successes and z^2/2 failures.

    With n_t = N + z^2 and p_t = (K + z^2/2)/n_t the interval is p_t +- z sqrt(p_t (1 - p_t)/n_t),
    clipped to [0, 1]. For z = 1.96 this is close to "add two successes and two failures".

    Args:
        k: any shape, integer success counts in [0, N].
        n: the number of items N.
        z: the normal quantile.

    Returns:
        (low, high), each the shape of ``k``.
    """
    n = _check_n(n)
    z = _check_z(z)
    k_arr = _check_counts(k, n)
    n_t = n + z**2
    p_t = (k_arr + z**2 / 2) / n_t
    half = z * np.sqrt(p_t * (1 - p_t) / n_t)
    low, high = np.clip(p_t - half, 0.0, 1.0), np.clip(p_t + half, 0.0, 1.0)
    return (float(low), float(high)) if k_arr.ndim == 0 else (low, high)


def confidence_interval(method: str, k, n: int, z: float = Z95) -> tuple:
    """Interval for a proportion from K successes in N items by ``method``.

    Args:
        method: ``"normal"`` (eq. 8.3 with p_hat = K/N), ``"wilson"`` or ``"agresti-coull"``.
        k: any shape, integer counts in [0, N].

    Returns:
        (low, high), each the shape of ``k``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    n = _check_n(n)
    if method == "normal":
        return normal_ci(_check_counts(k, n) / n, n, z)
    if method == "wilson":
        return wilson_ci(k, n, z)
    return agresti_coull_ci(k, n, z)


# --- coverage: exact enumeration and its Monte Carlo reference ----------------------------------


def binomial_pmf(n: int, p) -> np.ndarray:
    """P(K = k) = C(N, k) p^k (1 - p)^(N - k) for k = 0..N, computed in log space.

    Args:
        n: the number of trials N.
        p: (P,) or scalar success probabilities in [0, 1].

    Returns:
        (P, N + 1) probabilities (a (N + 1,) vector for scalar p); each row sums to 1.
    """
    n = _check_n(n)
    p_arr = _check_prob(p)
    scalar = p_arr.ndim == 0
    p_arr = np.atleast_1d(p_arr)
    if p_arr.ndim != 1:
        raise ValueError(f"p must be a scalar or 1-D (P,), got shape {p_arr.shape}")
    k = np.arange(n + 1)  # (N + 1,)
    log_choose = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    # xlogy/xlog1py give 0 * log 0 = 0, so p = 0 and p = 1 put all mass on k = 0 or k = N.
    log_pmf = (
        log_choose[None, :]
        + special.xlogy(k[None, :], p_arr[:, None])
        + special.xlog1py(n - k[None, :], -p_arr[:, None])
    )  # (P, N + 1)
    pmf = np.exp(log_pmf)
    return pmf[0] if scalar else pmf


def coverage_exact(method: str, n: int, p, z: float = Z95) -> np.ndarray | float:
    """Exact coverage P_p(low(K) <= p <= high(K)) with K ~ Binomial(N, p), by enumeration.

    Only N + 1 intervals exist, one per possible count K; the coverage at p is the binomial mass of
    the counts whose interval contains p. Deterministic and exact up to float rounding.

    Args:
        method: see :func:`confidence_interval`.
        n: the number of items N.
        p: (P,) or scalar true probabilities in [0, 1].

    Returns:
        (P,) coverages (a float for scalar p).
    """
    n = _check_n(n)
    p_arr = _check_prob(p)
    k = np.arange(n + 1)
    low, high = confidence_interval(method, k, n, z)  # (N + 1,) each
    pv = np.atleast_1d(p_arr)  # (P,)
    contains = (low[None, :] <= pv[:, None]) & (pv[:, None] <= high[None, :])  # (P, N + 1)
    cov = (binomial_pmf(n, pv) * contains).sum(axis=1)
    return float(cov[0]) if p_arr.ndim == 0 else cov


def coverage_hits(
    method: str, n: int, p: float, reps: int, rng: np.random.Generator, z: float = Z95
) -> np.ndarray:
    """Monte Carlo reference for :func:`coverage_exact`: simulate ``reps`` samples, test each.

    Returns:
        (reps,) booleans, True where the interval built from a simulated K ~ Binomial(N, p)
        contains p. Their mean estimates the coverage with standard error sqrt(c (1 - c)/reps).
    """
    n = _check_n(n)
    p_val = float(_check_prob(p))
    reps = _check_resamples(reps, rng)
    k = rng.binomial(n, p_val, size=reps)  # (reps,)
    low, high = confidence_interval(method, k, n, z)
    return (low <= p_val) & (p_val <= high)


# --- eq. 8.4: p-values ---------------------------------------------------------------------------


def normal_p_value(t) -> np.ndarray | float:
    """Two-sided p-value P(|Z| >= |t|) = erfc(|t| / sqrt 2) when T ~ N(0, 1) under H0 (eq. 8.4)."""
    arr = np.asarray(t)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"t must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if np.any(np.isnan(arr)):
        raise ValueError("t must not be NaN")
    out = special.erfc(np.abs(arr) / math.sqrt(2))
    return float(out) if out.ndim == 0 else out


def two_sided_p_value(t_obs: float, null_stats) -> float:
    """p-value = P_H0(|T| >= |T_obs|), estimated by the share of null statistics that reach it.

    Implements eq. 8.4 with the null distribution given by draws (or by an exhaustive list) of
    the statistic under H0. Statistics equal to |T_obs| up to a relative 1e-9 count as reaching
    it: a permutation that reproduces the observed split must tie, even if its sum was rounded
    in another order.

    Args:
        t_obs: the observed statistic.
        null_stats: (B,) statistics under H0.
    """
    t = float(t_obs)
    if not math.isfinite(t):
        raise ValueError(f"t_obs must be finite, got {t}")
    null = np.asarray(null_stats, dtype=np.float64)
    if null.ndim != 1 or null.size == 0:
        raise ValueError(f"null_stats must be a non-empty 1-D array, got shape {null.shape}")
    thresh = abs(t) * (1 - _TIE_RTOL)
    return float(np.mean(np.abs(null) >= thresh))


def two_proportion_z(k1, n1: int, k2, n2: int) -> np.ndarray | float:
    """Pooled two-proportion z statistic (p1_hat - p2_hat) / SE_pooled for independent samples.

    Under H0: p1 = p2 = p, both samples estimate the same p, so the pooled p_bar = (K1 + K2) /
    (N1 + N2) enters eq. 8.2 for each: SE_pooled = sqrt(p_bar (1 - p_bar) (1/N1 + 1/N2)).

    Args:
        k1, k2: integer success counts, scalars or arrays of one (broadcastable) shape.
        n1, n2: the two sample sizes.

    Returns:
        z, a float for scalar counts, else an array of the broadcast shape.
    """
    n1, n2 = _check_n(n1, "n1"), _check_n(n2, "n2")
    k1_, k2_ = _check_counts(k1, n1), _check_counts(k2, n2)
    p_bar = (k1_ + k2_) / (n1 + n2)
    if np.any((p_bar == 0) | (p_bar == 1)):
        raise ValueError("all outcomes are equal (pooled proportion 0 or 1): z is undefined")
    se = np.sqrt(p_bar * (1 - p_bar) * (1 / n1 + 1 / n2))
    z = (k1_ / n1 - k2_ / n2) / se
    return float(z) if z.ndim == 0 else z


def mean_difference(x, y) -> float:
    """The two-sample statistic T = mean(x) - mean(y). x: (N1,), y: (N2,)."""
    return float(_check_sample(x, "x").mean() - _check_sample(y, "y").mean())


def permutation_null(x, y, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Monte Carlo permutation distribution of mean(x) - mean(y) under H0: exchangeable labels.

    Under H0 both samples come from one distribution, so every reassignment of the pooled N1 + N2
    values into groups of sizes N1 and N2 is equally likely. Draws ``n_resamples`` random
    reassignments (in chunks, to bound memory).

    Args:
        x: (N1,), y: (N2,) the two samples.

    Returns:
        (B,) statistics under H0.
    """
    xa, ya = _check_sample(x, "x"), _check_sample(y, "y")
    b = _check_resamples(n_resamples, rng)
    pooled = np.concatenate([xa, ya])  # (N1 + N2,)
    n1, n = xa.size, pooled.size
    chunk = max(1, 2_000_000 // n)
    out = np.empty(b)
    for start in range(0, b, chunk):
        m = min(chunk, b - start)
        perm = rng.permuted(np.broadcast_to(pooled, (m, n)), axis=1)  # (m, N1 + N2)
        out[start : start + m] = perm[:, :n1].mean(axis=1) - perm[:, n1:].mean(axis=1)
    return out


def exact_permutation_null(x, y, max_splits: int = 1_000_000) -> np.ndarray:
    """All C(N1 + N2, N1) values of mean(x) - mean(y) over reassignments (the exact null).

    The naive, exhaustive reference for :func:`permutation_null`; only for small samples.

    Returns:
        (C(N1 + N2, N1),) statistics, one per split, each split equally likely under H0.
    """
    xa, ya = _check_sample(x, "x"), _check_sample(y, "y")
    pooled = np.concatenate([xa, ya])
    n1, n = xa.size, pooled.size
    count = math.comb(n, n1)
    if count > max_splits:
        raise ValueError(f"C({n}, {n1}) = {count} splits exceed max_splits={max_splits}")
    idx = np.array(list(itertools.combinations(range(n), n1)))  # (C, N1) members of group x
    total = pooled.sum()
    sum_x = pooled[idx].sum(axis=1)  # (C,)
    return sum_x / n1 - (total - sum_x) / (n - n1)


def binary_permutation_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Exact two-sided permutation p-value of p1_hat - p2_hat for two samples of 0/1 outcomes.

    With 0/1 data a split is summarised by the number A of the K = K1 + K2 successes that land in
    group 1, and under random reassignment A is hypergeometric:
    P(A = a) = C(K, a) C(N - K, N1 - a) / C(N, N1). The statistic is T(a) = a/N1 - (K - a)/N2,
    and the p-value (eq. 8.4) sums P(A = a) over all a with |T(a)| >= |T_obs|. This is the fast
    form of :func:`exact_permutation_null` for binary data (the test is Fisher's exact test with
    |p1_hat - p2_hat| as its ordering).
    """
    n1, n2 = _check_n(n1, "n1"), _check_n(n2, "n2")
    k1_, k2_ = int(_check_counts(k1, n1)), int(_check_counts(k2, n2))
    n, k = n1 + n2, k1_ + k2_
    a = np.arange(max(0, k - n2), min(k, n1) + 1)  # feasible successes in group 1
    log_p = (
        special.gammaln(k + 1)
        - special.gammaln(a + 1)
        - special.gammaln(k - a + 1)
        + special.gammaln(n - k + 1)
        - special.gammaln(n1 - a + 1)
        - special.gammaln(n - k - n1 + a + 1)
        - (special.gammaln(n + 1) - special.gammaln(n1 + 1) - special.gammaln(n2 + 1))
    )
    t = a / n1 - (k - a) / n2
    t_obs = k1_ / n1 - k2_ / n2
    reach = np.abs(t) >= abs(t_obs) * (1 - _TIE_RTOL)
    return float(min(1.0, np.exp(log_p)[reach].sum()))


# --- paired comparisons: McNemar -----------------------------------------------------------------


def mcnemar_table(a, b) -> np.ndarray:
    """2x2 table of paired 0/1 outcomes (e.g. per-item correctness of models A and B).

    Args:
        a, b: (N,) outcomes of A and B on the same N items.

    Returns:
        (2, 2) int array [[both right, A right & B wrong], [A wrong & B right, both wrong]];
        the off-diagonal counts n10 = table[0, 1] and n01 = table[1, 0] are the discordant pairs.
    """
    a_arr, b_arr = _check_paired(a, b)
    a1, b1 = a_arr == 1, b_arr == 1
    return np.array(
        [[np.sum(a1 & b1), np.sum(a1 & ~b1)], [np.sum(~a1 & b1), np.sum(~a1 & ~b1)]], dtype=np.int64
    )


def mcnemar_exact_p(n10, n01) -> np.ndarray | float:
    """Exact McNemar test: two-sided p-value for H0 "A and B are equally accurate" on paired data.

    Concordant items carry no information about the difference. Under H0 each of the D = n10 + n01
    discordant items is equally likely to favour A or B, so n10 ~ Binomial(D, 1/2), and
    P_H0(|n10 - n01| >= |observed|) = min(1, 2 P(Binomial(D, 1/2) <= min(n10, n01))) by symmetry
    (eq. 8.4 with T = n10 - n01). D = 0 gives p = 1.

    Args:
        n10, n01: integer counts, any (matching) shape.
    """
    a, c = np.asarray(n10), np.asarray(n01)
    if not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(c.dtype, np.integer)):
        raise TypeError(f"counts must be integers, got dtypes {a.dtype}, {c.dtype}")
    if a.shape != c.shape:
        raise ValueError(f"n10 and n01 must have the same shape, got {a.shape}, {c.shape}")
    if np.any(a < 0) or np.any(c < 0):
        raise ValueError("counts must be non-negative")
    d = a + c
    low = np.minimum(a, c)
    # bdtr(k, n, 1/2) = P(Binomial(n, 1/2) <= k); with n = 0 it is 1, and the min gives p = 1.
    p = np.minimum(1.0, 2.0 * special.bdtr(low, np.maximum(d, 1), 0.5))
    p = np.where(d == 0, 1.0, p)
    return float(p) if p.ndim == 0 else p


def mcnemar_z(n10: int, n01: int) -> float:
    """Normal approximation to McNemar's test: z = (n10 - n01) / sqrt(n10 + n01).

    Given D discordant items, n10 - n01 = 2 n10 - D has mean 0 and variance D under H0. Its
    square is McNemar's chi-square statistic (without continuity correction). D = 0 gives 0.
    """
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (n10, n01)):
        raise TypeError(f"counts must be ints, got {type(n10).__name__}, {type(n01).__name__}")
    if n10 < 0 or n01 < 0:
        raise ValueError(f"counts must be non-negative, got {n10}, {n01}")
    d = int(n10) + int(n01)
    return 0.0 if d == 0 else (int(n10) - int(n01)) / math.sqrt(d)


def mcnemar_rejection_rate(n: int, pi10: float, pi01: float, alpha: float = 0.05) -> float:
    """Exact probability that McNemar's exact test rejects at level alpha on N paired items.

    Each item is discordant in A's favour with probability pi10 and in B's with pi01, so the
    number of discordant items is D ~ Binomial(N, pi_d), pi_d = pi10 + pi01, and given D,
    n10 ~ Binomial(D, pi10 / pi_d). Summing P(D) P(n10 | D) over the outcomes with
    p-value <= alpha gives the power (pi10 != pi01) or the type-I error (pi10 = pi01). Values of
    D with P(D) < 1e-16 are skipped, an error below (N + 1) 1e-16. The naive reference is a
    simulation of the 2x2 table.

    Args:
        n: the number of items N.
        pi10, pi01: the two discordance probabilities, non-negative, pi10 + pi01 <= 1.
        alpha: the significance level in (0, 1).
    """
    n = _check_n(n)
    p10, p01 = float(_check_prob(pi10, "pi10")), float(_check_prob(pi01, "pi01"))
    pi_d = p10 + p01
    if pi_d > 1 + 1e-12:
        raise ValueError(f"pi10 + pi01 must be at most 1, got {pi_d}")
    alpha = float(_check_prob(alpha, "alpha", open_interval=True))
    if pi_d == 0:
        return 0.0  # no discordant items: p = 1, never a rejection
    p_d = binomial_pmf(n, min(pi_d, 1.0))  # (N + 1,) P(D = d)
    q = p10 / pi_d
    total = 0.0
    for d in np.flatnonzero(p_d >= 1e-16):
        if d == 0:
            continue
        n10 = np.arange(d + 1)  # (d + 1,) possible n10 given D = d
        reject = mcnemar_exact_p(n10, d - n10) <= alpha
        total += p_d[d] * binomial_pmf(int(d), q)[reject].sum()
    return float(total)


def paired_permutation_null(a, b, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Sign-flip null distribution of mean(a - b) for paired outcomes (a paired permutation test).

    Under H0 the two scores of an item are exchangeable, so each difference d_i = a_i - b_i keeps
    or flips its sign with probability 1/2, independently. For 0/1 outcomes only the discordant
    items have d_i != 0, and the exact version of this test *is* the exact McNemar test.

    Args:
        a, b: (N,) paired outcomes (0/1).

    Returns:
        (B,) values of mean(s * d) with random signs s in {-1, +1}^N.
    """
    a_arr, b_arr = _check_paired(a, b)
    n_res = _check_resamples(n_resamples, rng)
    d = a_arr - b_arr  # (N,)
    n = d.size
    chunk = max(1, 2_000_000 // n)
    out = np.empty(n_res)
    for start in range(0, n_res, chunk):
        m = min(chunk, n_res - start)
        signs = 2.0 * rng.integers(0, 2, size=(m, n)) - 1.0  # (m, N) random +-1
        out[start : start + m] = (signs * d).mean(axis=1)
    return out


def paired_difference_ci(a, b, z: float = Z95) -> tuple[float, float, float]:
    """Normal interval for the accuracy difference of two models scored on the same items.

    The difference of accuracies is the mean of d_i = a_i - b_i, so eq. 8.2 becomes
    SE = sd(d) / sqrt(N) with the plug-in sd(d)^2 = mean(d^2) - mean(d)^2 = (n10 + n01)/N -
    ((n10 - n01)/N)^2. Agreement between the models (many concordant items) shrinks it.

    Args:
        a, b: (N,) paired outcomes (0/1).

    Returns:
        (difference, low, high).
    """
    z = _check_z(z)
    a_arr, b_arr = _check_paired(a, b)
    d = a_arr - b_arr
    diff = float(d.mean())
    se = float(d.std(ddof=0) / math.sqrt(d.size))
    return diff, diff - z * se, diff + z * se


# --- eq. 8.5: sample size ------------------------------------------------------------------------


def sample_size(p, h: float, z: float = Z95) -> int:
    """Items needed for a normal interval of half-width h: N = ceil(z^2 p (1 - p) / h^2) (eq. 8.5).

    Solves z sqrt(p (1 - p)/N) = h for N and rounds up. A 1e-9 guard absorbs float rounding, so
    that an exact integer such as 1.96^2 * 0.25 / 0.01^2 = 9604 is not pushed to 9605.

    Args:
        p: the anticipated proportion in (0, 1); 0.5 is the worst case.
        h: the desired half-width in (0, 1).
    """
    p_val = float(_check_prob(p, open_interval=True))
    h_val = float(_check_prob(h, "h", open_interval=True))
    z = _check_z(z)
    return max(1, math.ceil(z**2 * p_val * (1 - p_val) / h_val**2 - 1e-9))


def within_margin_probability(n: int, p, h: float) -> np.ndarray | float:
    """Exact P(|p_hat - p| <= h) for p_hat = K/N, K ~ Binomial(N, p), by enumeration.

    The sample-size rule (eq. 8.5) promises about 95 % here when N = sample_size(p, h). Counts at
    distance exactly h (up to 1e-12) count as within.

    Args:
        n: the number of items N.
        p: (P,) or scalar true probabilities in [0, 1].
        h: the margin, positive.
    """
    n = _check_n(n)
    p_arr = _check_prob(p)
    h_val = float(h)
    if not (math.isfinite(h_val) and h_val > 0):
        raise ValueError(f"h must be positive and finite, got {h}")
    pv = np.atleast_1d(p_arr)  # (P,)
    k = np.arange(n + 1)
    inside = np.abs(k[None, :] / n - pv[:, None]) <= h_val + 1e-12  # (P, N + 1)
    prob = (binomial_pmf(n, pv) * inside).sum(axis=1)
    return float(prob[0]) if p_arr.ndim == 0 else prob
