"""Checks of the exercises of chapter 7 (information theory).

The references are independent of the reader's answer and of :mod:`mlbook.foundations.information`:
``scipy.stats.entropy`` for entropies, ``sklearn.metrics.mutual_info_score`` for the plug-in mutual
information, a vectorised simulation and a Kolmogorov–Smirnov test against ``chi2`` for its bias,
Gauss–Hermite quadrature (exact for these polynomials) and Monte Carlo for the moments of ``k2``,
and SciPy's bivariate normal CDF for the bin probabilities.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats
from sklearn.metrics import mutual_info_score

from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64
LOG2 = math.log(2)
_INFO_PARTS = ("I(X; Y)", "H(X) + log h")


def _column_entropies(joint: np.ndarray) -> np.ndarray:
    return stats.entropy(joint, axis=0)  # normalises each column, 0 log 0 = 0


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
        want = _column_entropies(joint)
        rows = stats.entropy(joint, axis=1)
        unnormalised = -(
            np.where(joint > 0, joint * np.log(np.where(joint > 0, joint, 1)), 0).sum(axis=0)
        )
        expect_answer(
            got,
            want,
            label,
            wrong={
                "that is in bits; use the natural log (nats)": want / LOG2,
                "that is H(Y | X = x), one value per row; condition on the columns y": rows,
                "each column must be divided by p(y) to give the conditional p(x | "
                "y)": unnormalised,
                "that is p(y) H(X | Y = y), the terms of the average H(X | Y); return the "
                "entropies themselves": want * joint.sum(axis=0),
            },
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
        want = mutual_info_score(x, y)
        h_x, h_y = stats.entropy(np.bincount(x)), stats.entropy(np.bincount(y))
        h_xy = stats.entropy(np.bincount(x * ky + y))
        expect_answer(
            attempt(plugin, x.copy(), y.copy(), kx, ky),
            want,
            f"plugin_mi(x, y) for {what}",
            wrong={
                "that is in bits; use the natural log (nats)": want / LOG2,
                "the sign is flipped: I = H(X) + H(Y) - H(X, Y) >= 0": -want,
                "that is the joint entropy H(X, Y); I = KL(p(x, y) || p(x) p(y))": h_xy,
                "H(X, Y) must be subtracted: I = H(X) + H(Y) - H(X, Y)": h_x + h_y,
            },
            atol=1e-10,
            rtol=1e-8,
        )
    for kx, ky, n in [(4, 4, 500), (2, 3, 100), (10, 2, 1000), (1, 5, 50)]:
        want = (kx - 1) * (ky - 1) / (2 * n)
        expect_answer(
            attempt(bias, kx, ky, n),
            want,
            f"mi_bias({kx}, {ky}, {n})",
            wrong={
                "the factor 1/2 is missing: 2N I is the chi-square statistic, so "
                "E[I] = dof / (2N)": 2 * want,
                "the degrees of freedom of a test of independence are (K_x - 1)(K_y - 1), not "
                "K_x K_y": kx * ky / (2 * n),
                "K_x K_y - 1 degrees of freedom test a whole table against fixed probabilities; "
                "independence has (K_x - 1)(K_y - 1)": (kx * ky - 1) / (2 * n),
                "that is in bits; use nats": want / LOG2,
            },
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
    m2, m4, m6 = mu**2, mu**4, mu**6
    expect_answer(
        got_mean,
        mean,
        "the mean of k2_moments(mu) for mu = 0, 0.1, 0.5, 1, 2, -1.5",
        wrong={
            "that is KL(q || p) itself, but k2 is biased: E[u^2] also holds (E u)^2 = mu^4 / 4": m2
            / 2,
            "the factor 1/2 of k2 = u^2 / 2 is missing": m2 + m4 / 4,
            "the bias is (E u)^2 / 2 = mu^4 / 8, not mu^4 / 4": m2 / 2 + m4 / 4,
        },
        atol=1e-10,
        rtol=1e-8,
    )
    expect_answer(
        got_var,
        var,
        "the variance of k2_moments(mu) for mu = 0, 0.1, 0.5, 1, 2, -1.5",
        wrong={
            "Var[u^2 / 2] = Var[u^2] / 4: the factor 1/4 is missing": 2 * m4 + m6,
            "Var[c X] = c^2 Var[X]: the factor is 1/4, not 1/2": m4 + m6 / 2,
            "the term 4 m^2 s^2 of Var[u^2] is missing: u has mean -mu^2 / 2, not 0": m4 / 2,
            "that is the standard deviation; return the variance": var.sqrt(),
        },
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


@exercise("7.4", "binned_gaussian_table", "binned_information")
def binned_gaussian(table_fn, information) -> str:
    """Bin probabilities against SciPy's bivariate CDF; I and H(X) + log h as the bins shrink."""
    for rho, h in [(0.8, 0.8), (-0.5, 0.6), (0.0, 1.0), (0.95, 0.4)]:
        label = f"binned_gaussian_table({rho}, {h})"
        want = _bvn_table(rho, h)
        B = want.shape[0]
        edges = np.linspace(-6, 6, B + 1)
        marg = np.diff(stats.norm.cdf(edges))  # (B,) one-variable bins
        centres = (edges[:-1] + edges[1:]) / 2
        gx, gy = np.meshgrid(centres, centres, indexing="ij")
        at_centre = (
            stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).pdf(
                np.stack([gx, gy], axis=-1)
            )
            * h**2
        )
        cond_sd1 = np.diff(stats.norm.cdf(edges[None, :] - rho * centres[:, None]), axis=1)
        cond_sd1 = cond_sd1 * marg[:, None]
        expect_answer(
            attempt(table_fn, rho, h),
            want,
            label,
            wrong={
                "the table is the product of its marginals: Y given X = x is N(rho x, 1 - rho^2), "
                "not N(0, 1)": np.outer(marg, marg),
                "the sign of rho is flipped: given X = x, Y has mean rho x": _bvn_table(-rho, h),
                "the density at the bin centre times h^2 is too crude: integrate over the "
                "bin": at_centre,
                "Y given X = x has standard deviation sqrt(1 - rho^2), not 1": cond_sd1,
            },
            atol=1e-6,
        )
        i_want, hx_want = _information(want, h)
        p = want / want.sum()
        i_got, hx_got = expect_tuple(
            attempt(information, want.copy(), h), f"binned_information(table, {h})", _INFO_PARTS
        )
        expect_answer(
            i_got,
            i_want,
            f"I(X; Y) of binned_information(table, {h}) for rho = {rho}",
            wrong={
                "that is in bits; use nats": i_want / LOG2,
                "the sign is flipped: I = H(X) + H(Y) - H(X, Y) >= 0": -i_want,
            },
            atol=1e-10,
            rtol=1e-8,
        )
        expect_answer(
            hx_got,
            hx_want,
            f"H(X) + log h of binned_information(table, {h}) for rho = {rho}",
            wrong={
                "log h is missing: return H(X) + log h, which converges as h shrinks": hx_want
                - math.log(h),
                "the sign of log h: H(X) grows like -log h, so add log h": hx_want
                - 2 * math.log(h),
                "that uses the joint H(X, Y); H(X) is the entropy of the row sums": stats.entropy(
                    p.reshape(-1)
                )
                + math.log(h),
                "that is in bits; use nats": hx_want / LOG2,
            },
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
        "binned I climbs to the continuous value from below and H(X) + log h converges to "
        "log(2 pi e) / 2"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


ref_given_each_y = _ref("7.1", "entropy_given_each_y")
ref_surprising = _ref("7.1", "surprising_joint")


def given_each_y_bits(joint):
    return ref_given_each_y(joint) / math.log(2)


def given_each_x(joint):
    return ref_given_each_y(joint.T)


def given_each_y_unnormalised(joint):
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(joint * np.log(joint), axis=0)


def given_each_y_weighted(joint):
    return ref_given_each_y(joint) * joint.sum(axis=0)


def given_each_y_naive_log(joint):
    p = joint / joint.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(p * np.log(p)).sum(axis=0)


def independent_joint():
    return np.outer([0.9, 0.1], [0.5, 0.5])


def transposed_joint():
    return ref_surprising().T


ref_plugin = _ref("7.2", "plugin_mi")
ref_bias = _ref("7.2", "mi_bias")


def plugin_bits(x, y, kx, ky):
    return ref_plugin(x, y, kx, ky) / math.log(2)


def plugin_joint_entropy(x, y, kx, ky):
    return stats.entropy(np.bincount(x * ky + y))


def plugin_without_joint(x, y, kx, ky):
    return stats.entropy(np.bincount(x)) + stats.entropy(np.bincount(y))


def bias_without_half(kx, ky, n):
    return (kx - 1) * (ky - 1) / n


def bias_cells_as_dof(kx, ky, n):
    return kx * ky / (2 * n)


def bias_goodness_of_fit_dof(kx, ky, n):
    return (kx * ky - 1) / (2 * n)


def moments_unbiased(mu):
    return mu**2 / 2, mu**4 / 2 + mu**6 / 4


def moments_without_quarter(mu):
    return mu**2 / 2 + mu**4 / 8, 2 * mu**4 + mu**6


def moments_centred(mu):
    return mu**2 / 2 + mu**4 / 8, mu**4 / 2


def moments_std(mu):
    return mu**2 / 2 + mu**4 / 8, (mu**4 / 2 + mu**6 / 4).sqrt()


def moments_bias_quarter(mu):
    return mu**2 / 2 + mu**4 / 4, mu**4 / 2 + mu**6 / 4


ref_table = _ref("7.4", "binned_gaussian_table")
ref_information = _ref("7.4", "binned_information")


def table_independent(rho, h):
    m = np.diff(stats.norm.cdf(np.linspace(-6, 6, round(12 / h) + 1)))
    return np.outer(m, m)


def table_sign_flipped(rho, h):
    return ref_table(-rho, h)


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


def information_bits(table, h):
    i, hx = ref_information(table, h)
    return i / math.log(2), hx


def information_without_log_h(table, h):
    i, hx = ref_information(table, h)
    return i, hx - math.log(h)


def information_joint_entropy(table, h):
    i, _ = ref_information(table, h)
    return i, stats.entropy(table.reshape(-1)) + math.log(h)


MISTAKES = {
    "7.1": [
        ((given_each_y_bits, ref_surprising), "that is in bits"),
        ((given_each_x, ref_surprising), "that is H(Y | X = x)"),
        ((given_each_y_unnormalised, ref_surprising), "divided by p(y)"),
        ((given_each_y_weighted, ref_surprising), "the terms of the average H(X | Y)"),
        ((given_each_y_naive_log, ref_surprising), "t log t -> 0"),
        ((ref_given_each_y, independent_joint), "no column y has H(X | Y = y) > H(X)"),
        ((ref_given_each_y, transposed_joint), "looks transposed"),
    ],
    "7.2": [
        ((plugin_bits, ref_bias), "that is in bits"),
        ((plugin_joint_entropy, ref_bias), "that is the joint entropy"),
        ((plugin_without_joint, ref_bias), "H(X, Y) must be subtracted"),
        ((ref_plugin, bias_without_half), "the factor 1/2 is missing"),
        ((ref_plugin, bias_cells_as_dof), "not K_x K_y"),
        ((ref_plugin, bias_goodness_of_fit_dof), "K_x K_y - 1 degrees of freedom"),
    ],
    "7.3": [
        (moments_unbiased, "that is KL(q || p) itself"),
        (moments_bias_quarter, "not mu^4 / 4"),
        (moments_without_quarter, "the factor 1/4 is missing"),
        (moments_centred, "the term 4 m^2 s^2 of Var[u^2] is missing"),
        (moments_std, "that is the standard deviation"),
    ],
    "7.4": [
        ((table_independent, ref_information), "product of its marginals"),
        ((table_sign_flipped, ref_information), "the sign of rho is flipped"),
        ((table_at_centres, ref_information), "too crude"),
        ((table_unit_conditional_sd, ref_information), "standard deviation sqrt(1 - rho^2)"),
        ((ref_table, information_bits), "that is in bits"),
        ((ref_table, information_without_log_h), "log h is missing"),
        ((ref_table, information_joint_entropy), "that uses the joint H(X, Y)"),
    ],
}
