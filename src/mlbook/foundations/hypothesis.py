"""Hypothesis testing for evaluation: proportions, intervals, p-values, sample sizes (chapter 8).

Shape legend
    N      number of items (0/1 outcomes) in one sample or benchmark
    N1, N2 sizes of two independent samples
    K      number of successes, an integer in [0, N]
    P      number of success probabilities p evaluated at once (a grid)
    B      number of resamples (permutations or sign flips) of a Monte Carlo null distribution

Exact computations enumerate the N + 1 outcomes of a binomial; the Monte Carlo versions beside
them are the references they are tested against.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy import special

from ..validation import (
    binary,
    float_array,
    index_tensor,
    number,
    one_of,
    positive,
    positive_int,
    same_shape,
    unit_interval,
)

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

#: The textbook 1.96: the 97.5 % quantile of N(0, 1) to three digits (exact: 1.959964).
Z95 = 1.96

METHODS = ("normal", "wilson", "agresti-coull")

_TIE_RTOL = 1e-9  # |T| >= |T_obs| up to rounding: equal statistics summed in another order tie


# --- eqs. 8.1-8.3: estimate, standard error, intervals ------------------------------------------


def proportion(y, axis: int = -1) -> np.ndarray | float:
    """p_hat = (1/N) sum_i Y_i of 0/1 outcomes. Implements eq. 8.1. y: (..., N) along ``axis``."""
    out = binary(float_array(y, "y", not_empty=True), "y").mean(axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def standard_error(p_hat, n: int) -> np.ndarray | float:
    """SE_hat = sqrt(p_hat (1 - p_hat) / N). Implements eq. 8.2. p_hat: any shape, in [0, 1]."""
    n = positive_int(n, "n")
    p = unit_interval(float_array(p_hat, "p_hat"), "p_hat")
    out = np.sqrt(p * (1 - p) / n)
    return float(out) if out.ndim == 0 else out


def normal_ci(p_hat, n: int, z: float = Z95) -> tuple:
    """Wald interval p_hat +- z SE_hat, not clipped. Implements eq. 8.3.

    p_hat: any shape, in [0, 1]; z: normal quantile. Returns (low, high), each like p_hat."""
    z = positive(z, "z")
    se = standard_error(p_hat, n)
    p = float_array(p_hat, "p_hat")
    low, high = p - z * se, p + z * se
    return (float(low), float(high)) if p.ndim == 0 else (low, high)


def wilson_ci(k, n: int, z: float = Z95) -> tuple:
    """Wilson's score interval: all p with |p_hat - p| <= z sqrt(p (1 - p) / N).

    k: any shape, integer counts in [0, N]. Returns (low, high), each like k, inside [0, 1]."""
    n, z = positive_int(n, "n"), positive(z, "z")
    p = index_tensor(torch.as_tensor(k), "k", high=n + 1).numpy() / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    low, high = np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)  # clip: rounding
    return (float(low), float(high)) if p.ndim == 0 else (low, high)


def agresti_coull_ci(k, n: int, z: float = Z95) -> tuple:
    """Wald interval after adding z^2/2 successes and z^2/2 failures (Agresti-Coull).

    k: any shape, integer counts in [0, N]. Returns (low, high), each like k, clipped to [0, 1]."""
    n, z = positive_int(n, "n"), positive(z, "z")
    k_arr = index_tensor(torch.as_tensor(k), "k", high=n + 1).numpy()
    n_t = n + z**2
    p_t = (k_arr + z**2 / 2) / n_t
    half = z * np.sqrt(p_t * (1 - p_t) / n_t)
    low, high = np.clip(p_t - half, 0.0, 1.0), np.clip(p_t + half, 0.0, 1.0)
    return (float(low), float(high)) if k_arr.ndim == 0 else (low, high)


def confidence_interval(method: str, k, n: int, z: float = Z95) -> tuple:
    """Interval by ``method`` ("normal", "wilson" or "agresti-coull") from K of N successes.

    k: any shape, integer counts in [0, N]. Returns (low, high), each like k."""
    one_of(method, "method", METHODS)
    if method == "normal":
        n = positive_int(n, "n")
        return normal_ci(index_tensor(torch.as_tensor(k), "k", high=n + 1).numpy() / n, n, z)
    if method == "wilson":
        return wilson_ci(k, n, z)
    return agresti_coull_ci(k, n, z)


# --- coverage: exact enumeration and its Monte Carlo reference ----------------------------------


def binomial_pmf(n: int, p) -> np.ndarray:
    """P(K = k) = C(N, k) p^k (1 - p)^(N - k), k = 0..N, in log space.

    p: (P,) or scalar in [0, 1]. Returns (P, N + 1) (or (N + 1,) for scalar p)."""
    n = positive_int(n, "n")
    p_arr = unit_interval(float_array(p, "p"), "p")
    scalar = p_arr.ndim == 0
    p_arr = float_array(np.atleast_1d(p_arr), "p", ndim=1)
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
    """Exact coverage P_p(low(K) <= p <= high(K)), K ~ Binomial(N, p), by enumeration.

    p: (P,) or scalar in [0, 1]. Returns (P,) (a float for scalar p)."""
    n = positive_int(n, "n")
    p_arr = unit_interval(float_array(p, "p"), "p")
    k = np.arange(n + 1)
    low, high = confidence_interval(method, k, n, z)  # (N + 1,) each
    pv = np.atleast_1d(p_arr)  # (P,)
    contains = (low[None, :] <= pv[:, None]) & (pv[:, None] <= high[None, :])  # (P, N + 1)
    cov = (binomial_pmf(n, pv) * contains).sum(axis=1)
    return float(cov[0]) if p_arr.ndim == 0 else cov


def coverage_hits(
    method: str, n: int, p: float, reps: int, rng: np.random.Generator, z: float = Z95
) -> np.ndarray:
    """Monte Carlo reference for :func:`coverage_exact`: (reps,) booleans, interval contains p."""
    n, reps = positive_int(n, "n"), positive_int(reps, "reps")
    p_val = number(p, "p", 0.0, 1.0)
    k = rng.binomial(n, p_val, size=reps)  # (reps,)
    low, high = confidence_interval(method, k, n, z)
    return (low <= p_val) & (p_val <= high)


# --- eq. 8.4: p-values ---------------------------------------------------------------------------


def normal_p_value(t) -> np.ndarray | float:
    """Two-sided p-value P(|Z| >= |t|) = erfc(|t| / sqrt 2). Implements eq. 8.4. t: any shape."""
    arr = float_array(t, "t")
    if np.any(np.isnan(arr)):
        raise ValueError("t must not be NaN")
    out = special.erfc(np.abs(arr) / math.sqrt(2))
    return float(out) if out.ndim == 0 else out


def two_sided_p_value(t_obs: float, null_stats) -> float:
    """p-value P_H0(|T| >= |T_obs|): the share of null statistics reaching it (eq. 8.4).

    null_stats: (B,), finite; ties within a relative 1e-9 count as reaching."""
    t = number(t_obs, "t_obs")
    null = float_array(null_stats, "null_stats", ndim=1, all_finite=True, not_empty=True)
    thresh = abs(t) * (1 - _TIE_RTOL)
    return float(np.mean(np.abs(null) >= thresh))


def two_proportion_z(k1, n1: int, k2, n2: int) -> np.ndarray | float:
    """Pooled two-proportion z = (p1_hat - p2_hat) / SE_pooled.

    k1, k2: integer counts, broadcastable shapes; n1, n2: sample sizes."""
    n1, n2 = positive_int(n1, "n1"), positive_int(n2, "n2")
    k1_ = index_tensor(torch.as_tensor(k1), "k1", high=n1 + 1).numpy()
    k2_ = index_tensor(torch.as_tensor(k2), "k2", high=n2 + 1).numpy()
    p_bar = (k1_ + k2_) / (n1 + n2)
    if np.any((p_bar == 0) | (p_bar == 1)):
        raise ValueError("k1, k2: all outcomes are equal (pooled proportion 0 or 1), z undefined")
    se = np.sqrt(p_bar * (1 - p_bar) * (1 / n1 + 1 / n2))
    z = (k1_ / n1 - k2_ / n2) / se
    return float(z) if z.ndim == 0 else z


def mean_difference(x, y) -> float:
    """The two-sample statistic T = mean(x) - mean(y). x: (N1,), y: (N2,)."""
    xa = float_array(x, "x", ndim=1, all_finite=True, not_empty=True)
    return float(xa.mean() - float_array(y, "y", ndim=1, all_finite=True, not_empty=True).mean())


def permutation_null(x, y, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Monte Carlo permutation null of mean(x) - mean(y). x: (N1,), y: (N2,). Returns (B,)."""
    xa = float_array(x, "x", ndim=1, all_finite=True, not_empty=True)
    ya = float_array(y, "y", ndim=1, all_finite=True, not_empty=True)
    b = positive_int(n_resamples, "n_resamples")
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
    """All C(N1 + N2, N1) values of mean(x) - mean(y): the exact null (small samples)."""
    xa = float_array(x, "x", ndim=1, all_finite=True, not_empty=True)
    ya = float_array(y, "y", ndim=1, all_finite=True, not_empty=True)
    pooled = np.concatenate([xa, ya])
    n1, n = xa.size, pooled.size
    count = math.comb(n, n1)
    if count > max_splits:
        raise ValueError(f"x, y: C({n}, {n1}) = {count} splits exceed max_splits={max_splits}")
    idx = np.array(list(itertools.combinations(range(n), n1)))  # (C, N1) members of group x
    total = pooled.sum()
    sum_x = pooled[idx].sum(axis=1)  # (C,)
    return sum_x / n1 - (total - sum_x) / (n - n1)


def binary_permutation_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Exact two-sided permutation p-value of p1_hat - p2_hat for 0/1 samples (eq. 8.4)."""
    n1, n2 = positive_int(n1, "n1"), positive_int(n2, "n2")
    k1_ = int(index_tensor(torch.as_tensor(k1), "k1", high=n1 + 1))
    k2_ = int(index_tensor(torch.as_tensor(k2), "k2", high=n2 + 1))
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
    """2x2 table [[n11, n10], [n01, n00]] of paired 0/1 outcomes. a, b: (N,) of models A, B."""
    a_arr = binary(float_array(a, "a", ndim=1, not_empty=True), "a")
    b_arr = binary(float_array(b, "b", ndim=1, not_empty=True), "b")
    same_shape(a_arr, b_arr, ("a", "b"))
    a1, b1 = a_arr == 1, b_arr == 1
    return np.array(
        [[np.sum(a1 & b1), np.sum(a1 & ~b1)], [np.sum(~a1 & b1), np.sum(~a1 & ~b1)]], dtype=np.int64
    )


def mcnemar_exact_p(n10, n01) -> np.ndarray | float:
    """Exact McNemar p-value min(1, 2 P(Binomial(D, 1/2) <= min(n10, n01))) (eq. 8.4).

    n10, n01: integer counts, same shape; D = n10 + n01 = 0 gives 1."""
    a = index_tensor(torch.as_tensor(n10), "n10").numpy()
    c = index_tensor(torch.as_tensor(n01), "n01").numpy()
    same_shape(a, c, ("n10", "n01"))
    d = a + c
    low = np.minimum(a, c)
    # bdtr(k, n, 1/2) = P(Binomial(n, 1/2) <= k); with n = 0 it is 1, and the min gives p = 1.
    p = np.minimum(1.0, 2.0 * special.bdtr(low, np.maximum(d, 1), 0.5))
    p = np.where(d == 0, 1.0, p)
    return float(p) if p.ndim == 0 else p


def mcnemar_z(n10: int, n01: int) -> float:
    """Normal approximation to McNemar's test: z = (n10 - n01) / sqrt(n10 + n01); 0 if D = 0."""
    n10 = int(index_tensor(torch.as_tensor(n10), "n10"))
    n01 = int(index_tensor(torch.as_tensor(n01), "n01"))
    d = n10 + n01
    return 0.0 if d == 0 else (n10 - n01) / math.sqrt(d)


def mcnemar_rejection_rate(n: int, pi10: float, pi01: float, alpha: float = 0.05) -> float:
    """Exact probability that McNemar's exact test rejects at level alpha on N items.

    pi10, pi01: discordance probabilities, summing to <= 1; alpha in (0, 1)."""
    n = positive_int(n, "n")
    p10, p01 = number(pi10, "pi10", 0.0, 1.0), number(pi01, "pi01", 0.0, 1.0)
    pi_d = number(p10 + p01, "pi10 + pi01", high=1 + 1e-12)
    alpha = number(alpha, "alpha", 0.0, 1.0, open_low=True, open_high=True)
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
    """Sign-flip null of mean(a - b). a, b: (N,) paired 0/1 outcomes. Returns (B,)."""
    a_arr = binary(float_array(a, "a", ndim=1, not_empty=True), "a")
    b_arr = binary(float_array(b, "b", ndim=1, not_empty=True), "b")
    same_shape(a_arr, b_arr, ("a", "b"))
    n_res = positive_int(n_resamples, "n_resamples")
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
    """Normal interval mean(d) +- z sd(d) / sqrt(N), d = a - b (eq. 8.2).

    a, b: (N,) paired 0/1 outcomes. Returns (difference, low, high)."""
    z = positive(z, "z")
    a_arr = binary(float_array(a, "a", ndim=1, not_empty=True), "a")
    b_arr = binary(float_array(b, "b", ndim=1, not_empty=True), "b")
    same_shape(a_arr, b_arr, ("a", "b"))
    d = a_arr - b_arr
    diff = float(d.mean())
    se = float(d.std(ddof=0) / math.sqrt(d.size))
    return diff, diff - z * se, diff + z * se


# --- eq. 8.5: sample size ------------------------------------------------------------------------


def sample_size(p, h: float, z: float = Z95) -> int:
    """N = ceil(z^2 p (1 - p) / h^2) for half-width h. Implements eq. 8.5.

    p, h in (0, 1); a 1e-9 guard keeps exact integers from rounding up."""
    p_val = number(p, "p", 0.0, 1.0, open_low=True, open_high=True)
    h_val = number(h, "h", 0.0, 1.0, open_low=True, open_high=True)
    z = positive(z, "z")
    return max(1, math.ceil(z**2 * p_val * (1 - p_val) / h_val**2 - 1e-9))


def within_margin_probability(n: int, p, h: float) -> np.ndarray | float:
    """Exact P(|K/N - p| <= h), K ~ Binomial(N, p): the promise of eq. 8.5.

    p: (P,) or scalar in [0, 1]; h > 0."""
    n = positive_int(n, "n")
    p_arr = unit_interval(float_array(p, "p"), "p")
    h_val = positive(h, "h")
    pv = np.atleast_1d(p_arr)  # (P,)
    k = np.arange(n + 1)
    inside = np.abs(k[None, :] / n - pv[:, None]) <= h_val + 1e-12  # (P, N + 1)
    prob = (binomial_pmf(n, pv) * inside).sum(axis=1)
    return float(prob[0]) if p_arr.ndim == 0 else prob
