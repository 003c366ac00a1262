"""Typical wrong answers to the exercises of chapter 11 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import pytest
import torch
from exercise_support import cases, reference, rejected
from scipy import optimize

from mlbook.nn import activations as act


def _ref(eid, name):
    return reference(eid)[name]


# the reference answers, looked up when called: a wrong answer replaces one of them
def tanh_from_sigmoid(*args):
    return _ref("11.1", "tanh_from_sigmoid")(*args)


def tanh_grad_from_sigmoid(*args):
    return _ref("11.1", "tanh_grad_from_sigmoid")(*args)


def gelu_taylor_constants(*args):
    return _ref("11.2", "gelu_taylor_constants")(*args)


def gelu_tanh_max_error(*args):
    return _ref("11.2", "gelu_tanh_max_error")(*args)


def minimax_c(*args):
    return _ref("11.2", "minimax_c")(*args)


def softplus_beta(*args):
    return _ref("11.4", "softplus_beta")(*args)


def softplus_beta_grad(*args):
    return _ref("11.4", "softplus_beta_grad")(*args)


# --- 11.1 -----------------------------------------------------------------------------------------


def tanh_half_argument(x):
    return 2 * act.sigmoid(x) - 1


def tanh_without_minus_one(x):
    return 2 * act.sigmoid(2 * x)


def tanh_grad_missing_inner(x):
    return 2 * act.sigmoid_grad(2 * x)


def tanh_grad_at_x(x):
    return 4 * act.sigmoid_grad(x)


def tanh_in_float64(x):
    return 2 * act.sigmoid(2 * x.double()) - 1


# --- 11.2 -----------------------------------------------------------------------------------------


def constants_phi0(*args):
    return 1 / math.sqrt(2 * math.pi), (2 / math.pi - 0.5) / 3


def constants_b_not_c(*args):
    a = math.sqrt(2 / math.pi)
    return a, a * (2 / math.pi - 0.5) / 3


def constants_without_third(*args):
    return math.sqrt(2 / math.pi), 2 / math.pi - 0.5


def _err(c, x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + c * x**3))) - act.gelu(x)


def max_error_mean(c, x):
    return float(_err(c, x).abs().mean())


def max_error_signed(c, x):
    return float(_err(c, x).max())


def max_error_vs_tanh_form(c, x):
    approx = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + c * x**3)))
    return float((approx - act.gelu_tanh(x)).abs().max())


def minimax_published(x):
    return 0.044715


def minimax_by_mse(x):
    res = optimize.minimize_scalar(
        lambda c: float((_err(c, x) ** 2).mean()),
        bounds=(0.03, 0.06),
        method="bounded",
        options={"xatol": 1e-9},
    )
    return float(res.x)


# --- 11.3 -----------------------------------------------------------------------------------------


def _parts(X, W, V, W2, G):
    U, B = X @ W, X @ V
    return U, B, G @ W2.T


def backward_transposed_dW2(X, W, V, W2, G):
    dW, dV, dW2 = _ref("11.3", "swiglu_backward")(X, W, V, W2, G)
    return dW, dV, dW2.T


def backward_swapped(X, W, V, W2, G):
    dW, dV, dW2 = _ref("11.3", "swiglu_backward")(X, W, V, W2, G)
    return dV, dW, dW2


def backward_sigmoid_as_silu_grad(X, W, V, W2, G):
    U, B, dH = _parts(X, W, V, W2, G)
    return (X.T @ (dH * B * act.sigmoid(U)), X.T @ (dH * act.silu(U)), (act.silu(U) * B).T @ G)


def backward_without_silu_grad(X, W, V, W2, G):
    U, B, dH = _parts(X, W, V, W2, G)
    return X.T @ (dH * B), X.T @ (dH * act.silu(U)), (act.silu(U) * B).T @ G


def backward_without_value(X, W, V, W2, G):
    U, B, dH = _parts(X, W, V, W2, G)
    return X.T @ (dH * B * act.silu_grad(U)), X.T @ (dH * act.silu(U)), act.silu(U).T @ G


# --- 11.4 -----------------------------------------------------------------------------------------


def softplus_without_inverse_beta(x, beta):
    return act.softplus(beta * x)


def softplus_of_x(x, beta):
    return act.softplus(x) / beta


def softplus_naive(x, beta):
    return torch.log(1 + torch.exp(beta * x)) / beta


def grad_times_beta(x, beta):
    return beta * act.sigmoid(beta * x)


def grad_of_x(x, beta):
    return act.sigmoid(x)


WRONG = {
    "11.1": [
        ((tanh_half_argument, tanh_grad_from_sigmoid), "tanh(x/2)"),
        ((tanh_without_minus_one, tanh_grad_from_sigmoid), "the -1 is missing"),
        ((tanh_from_sigmoid, tanh_grad_missing_inner), "inner derivative 2"),
        ((tanh_from_sigmoid, tanh_grad_at_x), "it belongs at 2x"),
        ((tanh_in_float64, tanh_grad_from_sigmoid), "dtype torch.float32"),
    ],
    "11.2": [
        ((constants_phi0, gelu_tanh_max_error, minimax_c), "a = 2 phi(0)"),
        ((constants_b_not_c, gelu_tanh_max_error, minimax_c), "c is b"),
        ((constants_without_third, gelu_tanh_max_error, minimax_c), "the 1/3 is missing"),
        ((gelu_taylor_constants, max_error_mean, minimax_c), "mean absolute error"),
        ((gelu_taylor_constants, max_error_signed, minimax_c), "absolute value is missing"),
        ((gelu_taylor_constants, max_error_vs_tanh_form, minimax_c), "not the tanh"),
        ((gelu_taylor_constants, gelu_tanh_max_error, minimax_published), "published"),
        ((gelu_taylor_constants, gelu_tanh_max_error, minimax_by_mse), "mean squared error"),
    ],
    "11.3": [
        (backward_transposed_dW2, "looks transposed"),
        (backward_swapped, "swapped"),
        (backward_sigmoid_as_silu_grad, "not sigma(u) alone"),
        (backward_without_silu_grad, "SiLU' is missing"),
        (backward_without_value, "the value path B is missing"),
    ],
    "11.4": [
        ((softplus_without_inverse_beta, softplus_beta_grad), "1/beta is missing"),
        ((softplus_of_x, softplus_beta_grad), "not softplus(x) / beta"),
        ((softplus_naive, softplus_beta_grad), "nan or inf"),
        ((softplus_beta, grad_times_beta), "not beta sigma(beta x)"),
        ((softplus_beta, grad_of_x), "not sigma(x)"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
