"""Typical wrong answers to the exercises of chapter 12 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


def slope_flipped(z, T):
    return -_ref("12.1", "entropy_slope")(z, T)


def slope_without_beta(z, T):
    p = torch.softmax(z / T, dim=0)
    return -((p * z**2).sum() - (p * z).sum() ** 2)


def slope_in_T(z, T):
    return -_ref("12.1", "entropy_slope")(z, T) / T**2


def slope_plain_variance(z, T):
    return -(1 / T) * z.var(unbiased=False)


def bce_naive(a, y):
    s = torch.sigmoid(a)
    return -(y * torch.log(s) + (1 - y) * torch.log(1 - s))


def bce_swapped(a, y):
    return _ref("12.2", "two_class_cross_entropy")(a, 1 - y)


def bce_mean(a, y):
    return _ref("12.2", "two_class_cross_entropy")(a, y).mean()


def jac_transposed(z):
    return _ref("12.3", "log_softmax_jacobian")(z).T


def jac_of_softmax(z):
    p = torch.softmax(z, dim=0)
    return torch.diag(p) - torch.outer(p, p)


def jac_without_identity(z):
    p = torch.softmax(z, dim=0)
    return -p.expand(z.numel(), -1)


def jac_vector(z):
    return torch.softmax(z, dim=0)


WRONG = {
    "12.1": [
        (slope_flipped, "sign is flipped"),
        (slope_without_beta, "missing the factor β"),
        (slope_in_T, "that is dH/dT"),
        (slope_plain_variance, "mean under p"),
    ],
    "12.2": [
        (bce_naive, "nan or inf"),
        (bce_swapped, "classes are swapped"),
        (bce_mean, "that is the mean over the batch"),
    ],
    "12.3": [
        (jac_transposed, "transpose"),
        (jac_of_softmax, "Jacobian of softmax"),
        (jac_without_identity, "identity is missing"),
        (jac_vector, "shape (6, 6)"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
