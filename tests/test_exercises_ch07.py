"""Typical wrong answers to the exercises of chapter 7 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import numpy as np
import pytest
from exercise_support import cases, reference, rejected
from scipy import stats


def _ref(eid, name):
    return reference(eid)[name]


def ref_given_each_y(joint):
    return _ref("7.1", "entropy_given_each_y")(joint)


def ref_surprising():
    return _ref("7.1", "surprising_joint")()


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


def ref_plugin(x, y, kx, ky):
    return _ref("7.2", "plugin_mi")(x, y, kx, ky)


def ref_bias(kx, ky, n):
    return _ref("7.2", "mi_bias")(kx, ky, n)


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


def ref_table(rho, h):
    return _ref("7.4", "binned_gaussian_table")(rho, h)


def ref_information(table, h):
    return _ref("7.4", "binned_information")(table, h)


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


WRONG = {
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


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
