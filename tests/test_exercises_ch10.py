"""Typical wrong answers to the exercises of chapter 10 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import numpy as np
import pytest
from exercise_support import cases, reference, rejected

from mlbook.foundations import autodiff as ad


def _ref(eid, name):
    return reference(eid)[name]


# the reference answers, looked up when called: a wrong answer replaces one of them
def chain_derivative(*args):
    return _ref("10.3", "chain_derivative")(*args)


def iterate_tanh(*args):
    return _ref("10.3", "iterate_tanh")(*args)


# --- 10.1 -----------------------------------------------------------------------------------------


def div_sign_flipped(z_bar, x, y):
    return ad.unbroadcast(z_bar / y, np.shape(x)), ad.unbroadcast(z_bar * x / y**2, np.shape(y))


def div_one_y_missing(z_bar, x, y):
    return ad.unbroadcast(z_bar / y, np.shape(x)), ad.unbroadcast(-z_bar * x / y, np.shape(y))


def div_product_rule(z_bar, x, y):
    return ad.unbroadcast(z_bar * y, np.shape(x)), ad.unbroadcast(-z_bar * x / y**2, np.shape(y))


def div_not_unbroadcast(z_bar, x, y):
    return z_bar / y, -z_bar * x / y**2


def div_swapped(z_bar, x, y):
    return _ref("10.1", "div_vjp")(z_bar, x, y)[::-1]


# --- 10.2 -----------------------------------------------------------------------------------------


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def vjp_without_inner(z, s_bar):
    return _softmax(z) * s_bar


def vjp_sum_of_s_bar(z, s_bar):
    s = _softmax(z)
    return s * (s_bar - s_bar.sum(axis=-1, keepdims=True))


def vjp_of_log_softmax(z, s_bar):
    return s_bar - _softmax(z) * s_bar.sum(axis=-1, keepdims=True)


def vjp_batch_axis(z, s_bar):
    s = _softmax(z)
    return s * (s_bar - (s_bar * s).sum(axis=0))


def vjp_naive_exp(z, s_bar):
    e = np.exp(z)
    s = e / e.sum(axis=-1, keepdims=True)
    return s * (s_bar - (s_bar * s).sum(axis=-1, keepdims=True))


def vjp_with_jacobian(z, s_bar):
    s = _softmax(z)
    jacobians = [np.diag(si) - np.outer(si, si) for si in s]  # B x (K, K)
    return np.stack([sb @ J for sb, J in zip(s_bar, jacobians, strict=True)])


# --- 10.3 -----------------------------------------------------------------------------------------


def _ys(w, L, y0):
    ys = [y0]
    for _ in range(L):
        ys.append(math.tanh(w * ys[-1]))
    return ys


def derivative_with_y_k(w, L, y0):
    return math.prod(w * (1 - y * y) for y in _ys(w, L, y0)[:-1])


def derivative_without_w(w, L, y0):
    return math.prod(1 - y * y for y in _ys(w, L, y0)[1:])


def iterate_math_tanh(y, w, L):
    for _ in range(L):
        y = math.tanh(w * y)
    return y


def iterate_one_short(y, w, L):
    for _ in range(L - 1):
        y = (y * w).tanh()
    return y


def iterate_w_outside(y, w, L):
    for _ in range(L):
        y = y.tanh() * w
    return y


def iterate_value(y, w, L):
    return _ref("10.3", "iterate_tanh")(y, w, L).value


WRONG = {
    "10.1": [
        (div_sign_flipped, "sign is flipped"),
        (div_one_y_missing, "one factor 1/y"),
        (div_product_rule, "rule for a product"),
        (div_not_unbroadcast, "ad.unbroadcast"),
        (div_swapped, "swapped"),
    ],
    "10.2": [
        (vjp_without_inner, "-<s_bar, s> s is missing"),
        (vjp_sum_of_s_bar, "not sum(s_bar)"),
        (vjp_of_log_softmax, "VJP of log-softmax"),
        (vjp_batch_axis, "over the batch axis"),
        (vjp_naive_exp, "nan or inf"),
        (vjp_with_jacobian, "formed a K x K matrix"),
    ],
    "10.3": [
        ((derivative_with_y_k, iterate_tanh), "NEXT iterate"),
        ((derivative_without_w, iterate_tanh), "the factor w is missing"),
        ((chain_derivative, iterate_math_tanh), "use the node's own `.tanh()`"),
        ((chain_derivative, iterate_one_short), "one iteration short"),
        ((chain_derivative, iterate_w_outside), "not w tanh(y)"),
        ((chain_derivative, iterate_value), "return the node, not its value"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
