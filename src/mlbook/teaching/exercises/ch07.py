"""Checks of the exercises of chapter 7 (information theory).

The references are independent of the reader's answer and of :mod:`mlbook.foundations.information`:
``scipy.stats.entropy`` for entropies, ``sklearn.metrics.mutual_info_score`` for the plug-in mutual
information, a vectorised simulation and a Kolmogorov–Smirnov test against ``chi2`` for its bias,
Gauss–Hermite quadrature (exact for these polynomials) and Monte Carlo for the moments of ``k2``,
SciPy's bivariate normal CDF for the bin probabilities, binomial sums and a simulation for the
mean of the plug-in entropy, and 40-digit decimal arithmetic for ``k3`` in float32. Each typical
wrong answer is written once, as a function: the checks compute its value to name the mistake,
and ``MISTAKES`` lists it for the tests.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import torch
from scipy import stats
from sklearn.metrics import mutual_info_score

from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64
LOG2 = math.log(2)
_INFO_PARTS = ("I(X; Y)", "H(X) + log h")


def _named(name: str, fn):
    fn.__name__ = fn.__qualname__ = name
    return fn


# --- 7.1 · conditioning on one value -------------------------------------------------------------


def _column_entropies(joint: np.ndarray) -> np.ndarray:
    return stats.entropy(joint, axis=0)  # normalises each column, 0 log 0 = 0


def given_each_y_bits(joint):
    return _column_entropies(joint) / LOG2


def given_each_x(joint):
    return stats.entropy(joint, axis=1)  # H(Y | X = x), one value per row


def given_each_y_unnormalised(joint):
    return -np.where(joint > 0, joint * np.log(np.where(joint > 0, joint, 1.0)), 0.0).sum(axis=0)


def given_each_y_weighted(joint):
    return _column_entropies(joint) * joint.sum(axis=0)


def given_each_y_naive_log(joint):
    p = joint / joint.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(p * np.log(p)).sum(axis=0)


_GIVEN_MISTAKES = [
    (given_each_y_bits, "that is in bits; use the natural log (nats)"),
    (given_each_x, "that is H(Y | X = x), one value per row; condition on the columns y"),
    (
        given_each_y_unnormalised,
        "each column must be divided by p(y) to give the conditional p(x | y)",
    ),
    (
        given_each_y_weighted,
        "that is p(y) H(X | Y = y), the terms of the average H(X | Y); return the entropies "
        "themselves",
    ),
]


@exercise("7.1", "entropy_given_each_y", "surprising_joint")
def conditioning_on_one_value(given_each_y, surprising) -> str:
    """H(X | Y = y) per column against scipy.stats.entropy; a table where one y adds uncertainty."""
    rng = np.random.default_rng(71)
    tables = [
        ("the exercise's 2 x 2 table", np.array([[0.90, 0.05], [0.00, 0.05]])),
        ("a 3 x 4 table", rng.dirichlet(np.ones(12)).reshape(3, 4)),
        (
            "a 3 x 3 table with zero cells",
            np.array([[0.2, 0.0, 0.1], [0.0, 0.3, 0.1], [0.1, 0.0, 0.2]]),
        ),
    ]
    for what, joint in tables:
        label = f"entropy_given_each_y(joint) for {what}"
        got = as_tensor(attempt(given_each_y, joint.copy()), label)
        if (joint == 0).any():
            expect(
                bool(torch.isfinite(got).all()),
                f"{label} contains nan or inf: a cell with p(x, y) = 0 contributes 0 "
                f"(t log t -> 0 as t -> 0)",
            )
        expect_answer(
            got,
            _column_entropies(joint),
            label,
            wrong={fb: m(joint) for m, fb in _GIVEN_MISTAKES},
            atol=1e-10,
            rtol=1e-8,
        )
    table = as_tensor(attempt(surprising), "surprising_joint()", (2, 2)).numpy()
    expect(
        bool((table >= 0).all()) and abs(table.sum() - 1) < 1e-9,
        "surprising_joint() must be a probability table: non-negative, summing to 1",
    )
    expect(
        bool((table.sum(axis=0) > 0).all()),
        "surprising_joint(): every column y needs positive mass, or H(X | Y = y) is undefined",
    )
    h_x = stats.entropy(table.sum(axis=1))
    h_given = _column_entropies(table)
    if not (h_given > h_x + 1e-9).any():
        transposed = (table.sum(axis=1) > 0).all() and (
            _column_entropies(table.T) > stats.entropy(table.sum(axis=0)) + 1e-9
        ).any()
        expect(not transposed, "surprising_joint() looks transposed: rows are x, columns y")
        raise Incorrect(
            "surprising_joint(): no column y has H(X | Y = y) > H(X); make X nearly "
            "certain overall but uncertain after a rare value of Y"
        )
    h_cond = float((table.sum(axis=0) * h_given).sum())
    expect(h_cond <= h_x + 1e-12, "surprising_joint(): H(X | Y) exceeds H(X)")
    return (
        "H(X | Y = y) matches scipy.stats.entropy for 3 tables (zero cells included), and in "
        "your table one y raises the entropy of X while H(X | Y) <= H(X)"
    )


def independent_joint():
    return np.outer([0.9, 0.1], [0.5, 0.5])


def transposed_joint():
    return _ref("7.1", "surprising_joint")().T


# --- 7.2 · the bias of the plug-in mutual information --------------------------------------------


def plugin_bits(x, y, kx, ky):
    return mutual_info_score(x, y) / LOG2


def plugin_flipped(x, y, kx, ky):
    return -mutual_info_score(x, y)


def plugin_joint_entropy(x, y, kx, ky):
    return stats.entropy(np.bincount(x * ky + y))


def plugin_without_joint(x, y, kx, ky):
    return stats.entropy(np.bincount(x)) + stats.entropy(np.bincount(y))


_PLUGIN_MISTAKES = [
    (plugin_bits, "that is in bits; use the natural log (nats)"),
    (plugin_flipped, "the sign is flipped: I = H(X) + H(Y) - H(X, Y) >= 0"),
    (plugin_joint_entropy, "that is the joint entropy H(X, Y); I = KL(p(x, y) || p(x) p(y))"),
    (plugin_without_joint, "H(X, Y) must be subtracted: I = H(X) + H(Y) - H(X, Y)"),
]


def bias_without_half(kx, ky, n):
    return (kx - 1) * (ky - 1) / n


def bias_cells_as_dof(kx, ky, n):
    return kx * ky / (2 * n)


def bias_goodness_of_fit_dof(kx, ky, n):
    return (kx * ky - 1) / (2 * n)


def bias_bits(kx, ky, n):
    return (kx - 1) * (ky - 1) / (2 * n) / LOG2


_BIAS_MISTAKES = [
    (
        bias_without_half,
        "the factor 1/2 is missing: 2N I is the chi-square statistic, so E[I] = dof / (2N)",
    ),
    (
        bias_cells_as_dof,
        "the degrees of freedom of a test of independence are (K_x - 1)(K_y - 1), not K_x K_y",
    ),
    (
        bias_goodness_of_fit_dof,
        "K_x K_y - 1 degrees of freedom test a whole table against fixed probabilities; "
        "independence has (K_x - 1)(K_y - 1)",
    ),
    (bias_bits, "that is in bits; use nats"),
]


def _independent_mi(reps: int, n: int, kx: int, ky: int, rng) -> np.ndarray:
    """Plug-in MI of `reps` samples of n independent uniform pairs, vectorised."""
    x, y = rng.integers(0, kx, (reps, n)), rng.integers(0, ky, (reps, n))
    cell = x * ky + y + (np.arange(reps) * kx * ky)[:, None]
    p = np.bincount(cell.ravel(), minlength=reps * kx * ky).reshape(reps, kx, ky) / n
    prod = p.sum(axis=2, keepdims=True) * p.sum(axis=1, keepdims=True)
    safe = np.where(p > 0, p, 1.0)
    return np.where(p > 0, p * np.log(safe / np.where(p > 0, prod, 1.0)), 0.0).sum(axis=(1, 2))


@exercise("7.2", "plugin_mi", "mi_bias")
def plugin_mutual_information(plugin, bias) -> str:
    """Plug-in MI against sklearn; the chi-square bias against 2,000 simulated samples."""
    rng = np.random.default_rng(72)
    x1 = rng.integers(0, 3, 400)
    cases = [
        (
            "N = 500 independent pairs, K_x = K_y = 4",
            rng.integers(0, 4, 500),
            rng.integers(0, 4, 500),
            4,
            4,
        ),
        ("dependent pairs, K_x = 3, K_y = 5", x1, (x1 + rng.integers(0, 3, 400)) % 5, 3, 5),
        (
            "a value of x that never occurs, K_x = 4, K_y = 2",
            rng.integers(0, 3, 300),
            rng.integers(0, 2, 300),
            4,
            2,
        ),
        ("N = 1", np.array([2]), np.array([0]), 3, 2),
    ]
    for what, x, y, kx, ky in cases:
        expect_answer(
            attempt(plugin, x.copy(), y.copy(), kx, ky),
            mutual_info_score(x, y),
            f"plugin_mi(x, y) for {what}",
            wrong={fb: m(x, y, kx, ky) for m, fb in _PLUGIN_MISTAKES},
            atol=1e-10,
            rtol=1e-8,
        )
    for kx, ky, n in [(4, 4, 500), (2, 3, 100), (10, 2, 1000), (1, 5, 50)]:
        expect_answer(
            attempt(bias, kx, ky, n),
            (kx - 1) * (ky - 1) / (2 * n),
            f"mi_bias({kx}, {ky}, {n})",
            wrong={fb: m(kx, ky, n) for m, fb in _BIAS_MISTAKES},
            atol=1e-12,
            rtol=1e-9,
        )
    n, k = 500, 4
    mi = _independent_mi(2000, n, k, k, rng)
    predicted = float(as_tensor(attempt(bias, k, k, n), "mi_bias(4, 4, 500)"))
    ratio = mi.mean() / predicted
    expect(
        0.9 <= ratio <= 1.1,
        f"the mean plug-in estimate over 2,000 samples is not within 10 % "
        f"of mi_bias(4, 4, 500) (ratio {ratio:.3f})",
    )
    p_ks = stats.kstest(2 * n * mi, stats.chi2(df=(k - 1) ** 2).cdf).pvalue
    expect(p_ks > 1e-3, "2N times the plug-in estimate is not chi-square with 9 degrees of freedom")
    return (
        "plugin_mi matches sklearn's mutual_info_score for 4 samples; mi_bias matches the "
        "chi-square prediction, and 2,000 simulated samples agree within 10 % and by a KS "
        "test"
    )


# --- 7.3 · the moments of k2 ---------------------------------------------------------------------


def mean_kl_only(mu):
    return mu**2 / 2


def mean_without_half(mu):
    return mu**2 + mu**4 / 4


def mean_bias_quarter(mu):
    return mu**2 / 2 + mu**4 / 4


def var_without_quarter(mu):
    return 2 * mu**4 + mu**6


def var_half(mu):
    return mu**4 + mu**6 / 2


def var_centred(mu):
    return mu**4 / 2


def var_std(mu):
    return (mu**4 / 2 + mu**6 / 4).sqrt()


_K2_MEAN_MISTAKES = [
    (
        mean_kl_only,
        "that is KL(q || p) itself, but k2 is biased: E[u^2] also holds (E u)^2 = mu^4 / 4",
    ),
    (mean_without_half, "the factor 1/2 of k2 = u^2 / 2 is missing"),
    (mean_bias_quarter, "the bias is (E u)^2 / 2 = mu^4 / 8, not mu^4 / 4"),
]
_K2_VAR_MISTAKES = [
    (var_without_quarter, "Var[u^2 / 2] = Var[u^2] / 4: the factor 1/4 is missing"),
    (var_half, "Var[c X] = c^2 Var[X]: the factor is 1/4, not 1/2"),
    (var_centred, "the term 4 m^2 s^2 of Var[u^2] is missing: u has mean -mu^2 / 2, not 0"),
    (var_std, "that is the standard deviation; return the variance"),
]


@exercise("7.3", "k2_moments")
def k2_moments(answer) -> str:
    """E[k2] and Var[k2] against Gauss–Hermite quadrature; Monte Carlo at mu = 1."""
    mu = torch.tensor([0.0, 0.1, 0.5, 1.0, 2.0, -1.5], dtype=F64)
    nodes, weights = np.polynomial.hermite_e.hermegauss(20)  # E[f(X)], X ~ N(0, 1)
    x = torch.from_numpy(nodes)[None, :]  # (1, 20) samples of q
    w = torch.from_numpy(weights / weights.sum())[None, :]
    p, q = torch.distributions.Normal(mu[:, None], 1.0), torch.distributions.Normal(0.0, 1.0)
    u = p.log_prob(x) - q.log_prob(x)  # (M, 20) log r at the nodes
    mean = (w * u**2 / 2).sum(dim=1)
    var = (w * u**4 / 4).sum(dim=1) - mean**2
    got_mean, got_var = expect_tuple(
        attempt(answer, mu.clone()), "k2_moments(mu)", ("mean", "variance")
    )
    for part, got, want, mistakes in (
        ("mean", got_mean, mean, _K2_MEAN_MISTAKES),
        ("variance", got_var, var, _K2_VAR_MISTAKES),
    ):
        expect_answer(
            got,
            want,
            f"the {part} of k2_moments(mu) for mu = 0, 0.1, 0.5, 1, 2, -1.5",
            wrong={fb: m(mu) for m, fb in mistakes},
            atol=1e-10,
            rtol=1e-8,
        )
    gen = torch.Generator().manual_seed(73)
    u1 = torch.randn(200_000, generator=gen, dtype=F64) - 0.5  # log r at mu = 1
    k2 = u1**2 / 2
    se = float(k2.std()) / math.sqrt(k2.numel())
    m1 = float(as_tensor(got_mean, "mean")[3])
    v1 = float(as_tensor(got_var, "var")[3])
    dev = (k2 - k2.mean()) ** 2
    expect(
        abs(float(k2.mean()) - m1) <= 4 * se,
        "at mu = 1 the mean is more than 4 standard errors from 200,000 samples of k2",
    )
    expect(
        abs(float(dev.mean()) - v1) <= 4 * float(dev.std()) / math.sqrt(dev.numel()),
        "at mu = 1 the variance is more than 4 standard errors from 200,000 samples of k2",
    )
    expect((float(k2.mean()) - 0.5) / se > 4, "at mu = 1 the samples of k2 should exceed the KL")
    return (
        "the mean and the variance of k2 match Gauss-Hermite quadrature for 6 values of "
        "mu, and 200,000 samples at mu = 1, where k2 is more than 4 SE above the KL"
    )


# --- 7.4 · Explore: binned Gaussians -------------------------------------------------------------


def _bvn_table(rho: float, h: float) -> np.ndarray:
    """Bin probabilities from SciPy's bivariate normal CDF at the corners of the bins."""
    edges = np.linspace(-6, 6, round(12 / h) + 1)
    gx, gy = np.meshgrid(edges, edges, indexing="ij")
    cdf = stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf(
        np.stack([gx, gy], axis=-1)
    )  # (B + 1, B + 1)
    return np.clip(np.diff(np.diff(cdf, axis=0), axis=1), 0.0, None)  # (B, B), no -1e-16


def _information(table: np.ndarray, h: float) -> tuple[float, float]:
    t = table / table.sum()
    h_x, h_y, h_xy = (
        stats.entropy(t.sum(axis=1)),
        stats.entropy(t.sum(axis=0)),
        stats.entropy(t.reshape(-1)),
    )
    return h_x + h_y - h_xy, h_x + math.log(h)


def table_independent(rho, h):
    m = np.diff(stats.norm.cdf(np.linspace(-6, 6, round(12 / h) + 1)))
    return np.outer(m, m)


def table_sign_flipped(rho, h):
    return _bvn_table(-rho, h)


def table_at_centres(rho, h):
    edges = np.linspace(-6, 6, round(12 / h) + 1)
    c = (edges[:-1] + edges[1:]) / 2
    gx, gy = np.meshgrid(c, c, indexing="ij")
    mvn = stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]])
    return mvn.pdf(np.stack([gx, gy], axis=-1)) * h**2


def table_unit_conditional_sd(rho, h):
    edges = np.linspace(-6, 6, round(12 / h) + 1)
    c = (edges[:-1] + edges[1:]) / 2
    return np.diff(stats.norm.cdf(edges))[:, None] * np.diff(
        stats.norm.cdf(edges[None, :] - rho * c[:, None]), axis=1
    )


_TABLE_MISTAKES = [
    (
        table_independent,
        "the table is the product of its marginals: Y given X = x is N(rho x, 1 - rho^2), "
        "not N(0, 1)",
    ),
    (table_sign_flipped, "the sign of rho is flipped: given X = x, Y has mean rho x"),
    (
        table_at_centres,
        "the density at the bin centre times h^2 is too crude: integrate over the bin",
    ),
    (table_unit_conditional_sd, "Y given X = x has standard deviation sqrt(1 - rho^2), not 1"),
]


def information_bits(table, h):
    i, hx = _information(table, h)
    return i / LOG2, hx


def information_flipped(table, h):
    i, hx = _information(table, h)
    return -i, hx


def information_without_log_h(table, h):
    i, hx = _information(table, h)
    return i, hx - math.log(h)


def information_log_h_sign(table, h):
    i, hx = _information(table, h)
    return i, hx - 2 * math.log(h)


def information_joint_entropy(table, h):
    i, _ = _information(table, h)
    return i, stats.entropy(table.reshape(-1)) + math.log(h)


def information_hx_bits(table, h):
    i, hx = _information(table, h)
    return i, hx / LOG2


_I_MISTAKES = [  # wrong in the first part, I(X; Y)
    (information_bits, "that is in bits; use nats"),
    (information_flipped, "the sign is flipped: I = H(X) + H(Y) - H(X, Y) >= 0"),
]
_HX_MISTAKES = [  # wrong in the second part, H(X) + log h
    (
        information_without_log_h,
        "log h is missing: return H(X) + log h, which converges as h shrinks",
    ),
    (information_log_h_sign, "the sign of log h: H(X) grows like -log h, so add log h"),
    (
        information_joint_entropy,
        "that uses the joint H(X, Y); H(X) is the entropy of the row sums",
    ),
    (information_hx_bits, "H(X) + log h is in bits; use nats"),
]


@exercise("7.4", "binned_gaussian_table", "binned_information")
def binned_gaussian(table_fn, information) -> str:
    """Bin probabilities against SciPy's bivariate CDF; I and H(X) + log h as the bins shrink."""
    for rho, h in [(0.8, 0.8), (-0.5, 0.6), (0.0, 1.0), (0.95, 0.4)]:
        want = _bvn_table(rho, h)
        expect_answer(
            attempt(table_fn, rho, h),
            want,
            f"binned_gaussian_table({rho}, {h})",
            wrong={fb: m(rho, h) for m, fb in _TABLE_MISTAKES},
            atol=1e-6,
        )
        parts = expect_tuple(
            attempt(information, want.copy(), h), f"binned_information(table, {h})", _INFO_PARTS
        )
        for j, (name, mistakes) in enumerate(
            ((_INFO_PARTS[0], _I_MISTAKES), (_INFO_PARTS[1], _HX_MISTAKES))
        ):
            expect_answer(
                parts[j],
                _information(want, h)[j],
                f"{name} of binned_information(table, {h}) for rho = {rho}",
                wrong={fb: m(want, h)[j] for m, fb in mistakes},
                atol=1e-10,
                rtol=1e-8,
            )
    rho = 0.8
    mi_cont, h_diff = -0.5 * math.log(1 - rho**2), 0.5 * math.log(2 * math.pi * math.e)
    mis, hs = [], []
    for h in (0.8, 0.4, 0.2, 0.1, 0.05):
        i, hx = expect_tuple(
            attempt(information, attempt(table_fn, rho, h), h),
            f"binned_information(binned_gaussian_table(0.8, {h}), {h})",
            _INFO_PARTS,
        )
        mis.append(float(as_tensor(i, "I")))
        hs.append(float(as_tensor(hx, "H(X) + log h")))
    expect(
        all(b > a for a, b in zip(mis, mis[1:], strict=False)) and max(mis) < mi_cont,
        "the binned I should increase as h shrinks and stay below the continuous I",
    )
    expect(
        -1e-3 <= mis[-1] - mi_cont <= 0,
        "at h = 0.05 the binned I should be within 1e-3 below -log(1 - rho^2) / 2",
    )
    expect(
        0 <= hs[-1] - h_diff <= 1e-3,
        "at h = 0.05 H(X) + log h should be within 1e-3 above "
        "the differential entropy log(2 pi e) / 2",
    )
    return (
        "the table matches SciPy's bivariate normal CDF for 4 (rho, h); at rho = 0.8 the "
        f"binned I climbs from {mis[0]:.4f} (h = 0.8) to {mis[-1]:.4f} (h = 0.05), below the "
        f"continuous {mi_cont:.4f}, and H(X) + log h falls from {hs[0]:.4f} to {hs[-1]:.4f}, "
        f"above log(2 pi e) / 2 = {h_diff:.4f}"
    )


# --- 7.5 · Predict: the plug-in entropy of a small sample ----------------------------------------

_PLUGIN_K, _PLUGIN_N, _PLUGIN_TOL = 50, 100, 0.1


def _plugin_entropy_mean() -> tuple[float, float]:
    """E[H(p_hat)] for N uniform draws over K outcomes: exactly (each count is Binomial(N, 1/K),
    so the sum over outcomes is K times one binomial sum) and over 20,000 simulated samples."""
    k, n = _PLUGIN_K, _PLUGIN_N
    c = np.arange(n + 1)
    share = c / n
    t = np.where(c > 0, share * np.log(np.where(c > 0, share, 1.0)), 0.0)  # (N + 1,) p log p
    exact = -k * float(stats.binom.pmf(c, n, 1 / k) @ t)
    counts = np.random.default_rng(75).multinomial(n, np.full(k, 1 / k), size=20_000)
    return exact, float(stats.entropy(counts, axis=1).mean())


@exercise("7.5", "predict_plugin_entropy")
def predict_plugin_entropy(answer) -> str:
    """The guess of E[H(p_hat)] against the exact binomial sum and 20,000 simulated samples."""
    guess = as_tensor(attempt(answer), "predict_plugin_entropy()")
    expect(guess.numel() == 1, "predict_plugin_entropy() should return one number, in nats")
    g = float(guess.reshape(()))
    exact, simulated = _plugin_entropy_mean()
    log_k = math.log(_PLUGIN_K)
    miller_madow = log_k - (_PLUGIN_K - 1) / (2 * _PLUGIN_N)
    reveal = (
        f"E[H(p_hat)] = {exact:.3f} nats exactly ({simulated:.3f} over 20,000 simulated "
        f"samples), below the true H = log 50 = {log_k:.3f}; the first-order correction "
        f"log K - (K - 1) / (2N) gives {miller_madow:.3f}"
    )
    if abs(g - exact) <= _PLUGIN_TOL:
        return f"your guess {fmt(g, 3)} is within {_PLUGIN_TOL} nats: {reveal}"
    if g > log_k + 1e-9:
        raise Incorrect(
            f"your guess {fmt(g, 3)} exceeds log 50 = {log_k:.3f}, the largest entropy of any "
            f"distribution over 50 outcomes (eq. 7.1): {reveal}"
        )
    if g >= log_k - _PLUGIN_TOL:
        raise Incorrect(
            f"your guess {fmt(g, 3)} treats the plug-in estimate as unbiased: {reveal}. H is "
            f"concave, so by Jensen E[H(p_hat)] <= H(E[p_hat]) = H(p): a small sample looks "
            f"more predictable than its source"
        )
    raise Incorrect(f"your guess {fmt(g, 3)} is off by more than {_PLUGIN_TOL} nats: {reveal}")


def guess_true_entropy():
    return math.log(50)


def guess_above_the_bound():
    return 4.2


# --- 7.6 · Implement: k3 without cancellation ----------------------------------------------------

_K3_RTOL = 1e-3


def _k3_inputs() -> torch.Tensor:
    mags = torch.logspace(-8, 1, 181, dtype=F64)
    return torch.cat([-mags.flip(0), torch.zeros(1, dtype=F64), mags]).float()  # (363,)


def _k3_decimal(u: torch.Tensor, sign: int = 1) -> np.ndarray:
    """e^(s u) - 1 - s u at each float32 input, in 40-digit decimal arithmetic."""
    with localcontext() as ctx:
        ctx.prec = 40
        return np.array(
            [float((sign * Decimal(v)).exp() - 1 - sign * Decimal(v)) for v in u.tolist()]
        )


def k3_naive(log_ratio):
    r = torch.exp(log_ratio)
    return (r - 1) - torch.log(r)


def k3_expm1_minus_u(log_ratio):
    return torch.expm1(log_ratio) - log_ratio


def k3_second_order(log_ratio):
    return log_ratio**2 / 2


def k3_is_k1(log_ratio):
    return -log_ratio


def k3_inverse_ratio(log_ratio):
    u = -log_ratio
    small = u.abs() < 1e-2
    us = torch.where(small, u, torch.zeros_like(u))
    ub = torch.where(small, torch.ones_like(u), u)
    return torch.where(small, us**2 / 2 * (1 + us / 3 * (1 + us / 4)), torch.expm1(ub) - ub)


def k3_in_float64(log_ratio):
    u = log_ratio.double()
    small = u.abs() < 1e-3
    return torch.where(small, u**2 / 2 * (1 + u / 3), torch.expm1(u) - u)


@exercise("7.6", "stable_k3")
def stable_k3(answer) -> str:
    """k3 of float32 log-ratios from -10 to 10 against 40-digit decimal e^u - 1 - u, within 1e-3."""
    u = _k3_inputs()
    label = "stable_k3(u) for float32 u, |u| from 1e-8 to 10 and u = 0"
    got = attempt(answer, u.clone())
    expect(isinstance(got, torch.Tensor), f"{label} should return a tensor")
    expect(
        got.dtype == torch.float32,
        f"{label} should keep the dtype float32 of its argument, got {got.dtype}",
    )
    g = as_tensor(got, label, tuple(u.shape)).numpy()
    expect(bool(np.isfinite(g).all()), f"{label} contains nan or inf")
    if np.allclose(g, -u.double().numpy(), rtol=1e-5, atol=1e-12):
        raise Incorrect(f"{label} is -u = -log r, the estimator k1, not k3 = (r - 1) - log r")
    zero = u.numpy() == 0
    mag = np.abs(u.numpy()[~zero])  # (362,)
    want = _k3_decimal(u)[~zero]
    rel = np.abs(g[~zero] / want - 1)  # (362,)
    if rel.max() <= _K3_RTOL:
        expect(
            bool((g[zero] == 0).all()),
            f"{label}: at u = 0 (r = 1) the estimate must be exactly 0",
        )
        return (
            f"float32 results within a relative {_K3_RTOL:g} of 40-digit decimal arithmetic for "
            f"|u| from 1e-8 to 10 (largest {fmt(float(rel.max()), 2)}), exactly 0 at u = 0, so "
            f"never negative"
        )
    other = _k3_decimal(u, sign=-1)[~zero]
    wide = mag >= 1e-2
    if np.all(np.abs(g[~zero][wide] / other[wide] - 1) <= 1e-2):
        raise Incorrect(
            f"{label} computes e^(-u) - 1 + u: the ratio is r = p(x) / q(x) = e^u with u = "
            f"log p(x) - log q(x), not its inverse (that estimates KL in the other direction)"
        )
    bad_small = rel[mag < 1e-3].max() > _K3_RTOL
    bad_large = rel[mag >= 1e-3].max() > _K3_RTOL
    worst = int(np.argmax(rel))
    at = fmt(float(u.numpy()[~zero][worst]), 2)
    where = f"(relative error {fmt(float(rel[worst]), 2)} at u = {at})"
    if bad_small and not bad_large:
        raise Incorrect(
            f"{label} loses its digits for small |u| {where}: (r - 1) and log r, or expm1(u) "
            f"and u, agree in their leading digits there, and their float32 difference cancels "
            f"them; use the series u^2/2 (1 + u/3 + u^2/12 + ...) for small |u|"
        )
    if bad_large and not bad_small:
        raise Incorrect(
            f"{label} is inaccurate for larger |u| {where}: a truncated series is only good "
            f"near 0; switch to expm1(u) - u above a threshold"
        )
    raise Incorrect(f"{label} misses 40-digit decimal arithmetic by more than {_K3_RTOL:g} {where}")


# Typical wrong answers (one place: the checks above compute their values to name the mistake,
# and the tests build each and check that it is rejected with its feedback) ------------------

ref_given_each_y = _ref("7.1", "entropy_given_each_y")
ref_surprising = _ref("7.1", "surprising_joint")
ref_plugin = _ref("7.2", "plugin_mi")
ref_bias = _ref("7.2", "mi_bias")
ref_k2 = _ref("7.3", "k2_moments")
ref_table = _ref("7.4", "binned_gaussian_table")
ref_information = _ref("7.4", "binned_information")


def _with_true_variance(mean_mistake):
    return _named(mean_mistake.__name__, lambda mu: (mean_mistake(mu), ref_k2(mu)[1]))


def _with_true_mean(var_mistake):
    return _named(var_mistake.__name__, lambda mu: (ref_k2(mu)[0], var_mistake(mu)))


MISTAKES = {
    "7.1": [
        *[((m, ref_surprising), fb) for m, fb in _GIVEN_MISTAKES],
        ((given_each_y_naive_log, ref_surprising), "t log t -> 0"),
        ((ref_given_each_y, independent_joint), "no column y has H(X | Y = y) > H(X)"),
        ((ref_given_each_y, transposed_joint), "looks transposed"),
    ],
    "7.2": [
        *[((m, ref_bias), fb) for m, fb in _PLUGIN_MISTAKES],
        *[((ref_plugin, m), fb) for m, fb in _BIAS_MISTAKES],
    ],
    "7.3": [
        *[(_with_true_variance(m), fb) for m, fb in _K2_MEAN_MISTAKES],
        *[(_with_true_mean(m), fb) for m, fb in _K2_VAR_MISTAKES],
    ],
    "7.4": [
        *[((m, ref_information), fb) for m, fb in _TABLE_MISTAKES],
        *[((ref_table, m), fb) for m, fb in _I_MISTAKES + _HX_MISTAKES],
    ],
    "7.5": [
        (guess_true_entropy, "treats the plug-in estimate as unbiased"),
        (guess_above_the_bound, "the largest entropy of any distribution"),
    ],
    "7.6": [
        (k3_naive, "loses its digits for small |u|"),
        (k3_expm1_minus_u, "loses its digits for small |u|"),
        (k3_second_order, "inaccurate for larger |u|"),
        (k3_is_k1, "the estimator k1, not k3"),
        (k3_inverse_ratio, "not its inverse"),
        (k3_in_float64, "keep the dtype float32"),
    ],
}
