"""Checks of the exercises of chapter 11 (activation functions).

The references are independent of :mod:`mlbook.nn.activations`: ``torch.tanh`` and autograd for the
tanh identity and its derivative; SciPy's normal CDF ``scipy.special.ndtr`` for the exact GELU, the
Taylor constants in closed form, and a golden-section search written out here for the minimax
constant of the tanh approximation; ``torch.autograd.grad`` through ``F.silu(X W) * (X V) @ W2`` for
the SwiGLU gradients; ``torch.logaddexp`` and its autograd derivative for the scaled softplus.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from scipy import optimize, special

from ...nn import activations as act
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _grid(dtype=F64) -> torch.Tensor:
    """x in [-30, 30] plus 0, +-50 and +-800, where naive exponentials overflow."""
    return torch.cat(
        [
            torch.linspace(-30, 30, 601, dtype=dtype),
            torch.tensor([0.0, -50.0, 50.0, -800.0, 800.0], dtype=dtype),
        ]
    )


def _autograd_derivative(f, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x).sum(), x)
    return g


def _same_dtype(got, x: torch.Tensor, what: str) -> None:
    expect(
        isinstance(got, torch.Tensor) and got.dtype == x.dtype,
        f"{what} should return a tensor of the input's dtype {x.dtype}, got "
        f"{getattr(got, 'dtype', type(got).__name__)}",
    )


def _sigmoid_grad(t: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(t) * (1 - torch.sigmoid(t))


# --- 11.1 tanh from the sigmoid -------------------------------------------------------------------


@exercise("11.1", "tanh_from_sigmoid", "tanh_grad_from_sigmoid")
def tanh_from_sigmoid(tanh_from_sigmoid, tanh_grad_from_sigmoid) -> str:
    """2 sigma(2x) - 1 against torch.tanh, 4 sigma'(2x) against autograd of torch.tanh."""
    x = _grid()
    sig, dsig = torch.sigmoid, _sigmoid_grad
    expect_answer(
        attempt(tanh_from_sigmoid, x.clone()),
        torch.tanh(x),
        "tanh_from_sigmoid(x) for x in [-30, 30] and +-800",
        wrong={
            "that is 2 sigma(x) - 1 = tanh(x/2): the sigmoid's argument is 2x": 2 * sig(x) - 1,
            "the -1 is missing: 2 sigma(2x) runs from 0 to 2, tanh from -1 to 1": 2 * sig(2 * x),
            "the factor 2 is missing: sigma(2x) - 1 runs from -1 to 0": sig(2 * x) - 1,
        },
        atol=1e-12,
        rtol=1e-10,
    )
    want = _autograd_derivative(torch.tanh, x)
    expect_answer(
        attempt(tanh_grad_from_sigmoid, x.clone()),
        want,
        "tanh_grad_from_sigmoid(x) for x in [-30, 30] and +-800",
        wrong={
            "a factor 2 is missing: the chain rule on sigma(2x) brings the inner "
            "derivative 2, so tanh' = 2 * 2 sigma'(2x)": 2 * dsig(2 * x),
            "sigma' is taken at x; it belongs at 2x": 4 * dsig(x),
            "the factor 4 is missing: tanh' = 4 sigma'(2x)": dsig(2 * x),
        },
        atol=1e-12,
        rtol=1e-10,
    )
    x32 = _grid(torch.float32)
    for f, ref, what in [
        (tanh_from_sigmoid, torch.tanh(x32), "tanh_from_sigmoid"),
        (tanh_grad_from_sigmoid, _autograd_derivative(torch.tanh, x32), "tanh_grad_from_sigmoid"),
    ]:
        got = attempt(f, x32.clone())
        _same_dtype(got, x32, f"{what}(x) for float32 x")
        expect_answer(got, ref, f"{what}(x) for float32 x", atol=1e-6, rtol=1e-5)
    return (
        "2 sigma(2x) - 1 matches torch.tanh and 4 sigma'(2x) its autograd derivative on "
        "[-30, 30] and at +-800, in float64 and float32"
    )


# --- 11.2 the constant of the tanh approximation --------------------------------------------------

_A = math.sqrt(2 / math.pi)


def _gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return x * torch.from_numpy(special.ndtr(x.numpy()))


def _max_error(c: float, x: torch.Tensor, exact: torch.Tensor) -> float:
    return float((0.5 * x * (1 + torch.tanh(_A * (x + c * x**3))) - exact).abs().max())


def _golden_section(f, lo: float, hi: float, tol: float = 1e-9) -> float:
    """The minimiser of a unimodal f on [lo, hi] by golden-section search."""
    r = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - r * (b - a), a + r * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - r * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + r * (b - a)
            fd = f(d)
    return (a + b) / 2


@exercise("11.2", "gelu_taylor_constants", "gelu_tanh_max_error", "minimax_c")
def gelu_constant(gelu_taylor_constants, gelu_tanh_max_error, minimax_c) -> str:
    """The Taylor constants in closed form; the max error against SciPy's ndtr; the minimax c
    against a golden-section search."""
    phi0 = 1 / math.sqrt(2 * math.pi)
    a, c = 2 * phi0, (2 / math.pi - 0.5) / 3
    got = attempt(gelu_taylor_constants)
    expect(
        isinstance(got, (tuple, list)) and len(got) == 2,
        "gelu_taylor_constants() should return a pair (a, c)",
    )
    expect_answer(
        as_tensor(list(got), "gelu_taylor_constants()"),
        [a, c],
        "(a, c) of gelu_taylor_constants()",
        wrong={
            "a is phi(0); matching the x terms, a / 2 = phi(0), so a = 2 phi(0)": [phi0, c],
            "c is b; the exercise asks for c = b / a": [a, a * c],
            "the sign of c is flipped: b = a^3/3 - phi(0)/3 > 0": [a, -c],
            "the 1/3 is missing: tanh y = y - y^3/3 and Phi has -phi(0) x^3/6": [a, 3 * c],
        },
        atol=1e-12,
        rtol=1e-10,
    )

    x = torch.linspace(-8, 8, 1601, dtype=F64)  # step 0.01
    exact = _gelu_exact(x)
    for cc in (c, 0.044715, 0.04):  # at 0.04 the largest error is negative
        approx = 0.5 * x * (1 + torch.tanh(_A * (x + cc * x**3)))
        err = approx - exact
        expect_answer(
            attempt(gelu_tanh_max_error, cc, x.clone()),
            err.abs().max(),
            f"gelu_tanh_max_error({cc:.6g}, x) on [-8, 8]",
            wrong={
                "that is the mean absolute error; the exercise asks for the "
                "maximum": err.abs().mean(),
                "the absolute value is missing: the largest error may be negative": err.max(),
                "the reference must be the exact GELU x Phi(x), not the tanh "
                "approximation with c = 0.044715": (
                    approx - 0.5 * x * (1 + torch.tanh(_A * (x + 0.044715 * x**3)))
                )
                .abs()
                .max(),
            },
            atol=1e-12,
            rtol=1e-8,
        )

    def objective(cc: float) -> float:
        return _max_error(cc, x, exact)

    c_best = _golden_section(objective, 0.03, 0.06)
    got = float(as_tensor(attempt(minimax_c, x.clone()), "minimax_c(x)"))
    mse_best = _golden_section(
        lambda cc: float(((0.5 * x * (1 + torch.tanh(_A * (x + cc * x**3))) - exact) ** 2).mean()),
        0.03,
        0.06,
    )
    expect_answer(
        got,
        c_best,
        "minimax_c(x) on [-8, 8]",
        wrong={
            "that is the Taylor constant; the minimax c minimises the maximum error": c,
            "that is the published 0.044715; minimise the maximum error on the grid": 0.044715,
            "that c minimises the mean squared error, not the maximum error": mse_best,
        },
        atol=1e-5,
        rtol=0.0,
    )
    if objective(got) > objective(c_best) * (1 + 1e-3):
        raise Incorrect(
            "minimax_c(x): its maximum error is larger than at the minimax c "
            "(tighten the tolerance of the search, e.g. options={'xatol': 1e-7})"
        )
    expect(
        objective(c) > objective(0.044715) > objective(c_best),
        "the maximum errors should fall from the Taylor c to 0.044715 to the minimax c",
    )
    return (
        "a = sqrt(2/pi) and c = (2/pi - 1/2)/3 by Taylor; the max error matches SciPy's ndtr "
        "for 3 values of c; the minimax c matches a golden-section search"
    )


# --- 11.3 backpropagation through SwiGLU ----------------------------------------------------------


@exercise("11.3", "swiglu_backward")
def swiglu_backward(answer) -> str:
    """dL/dW, dL/dV, dL/dW2 of SwiGLU against torch.autograd.grad with grad_outputs G."""
    gen = torch.Generator().manual_seed(113)
    n, d, h, d_out = 11, 5, 7, 3
    X = torch.randn(n, d, generator=gen, dtype=F64)
    W, V = (torch.randn(d, h, generator=gen, dtype=F64) for _ in range(2))
    W2 = torch.randn(h, d_out, generator=gen, dtype=F64)
    G = torch.randn(n, d_out, generator=gen, dtype=F64)
    params = [p.clone().requires_grad_(True) for p in (W, V, W2)]
    Y = (F.silu(X @ params[0]) * (X @ params[1])) @ params[2]
    dW, dV, dW2 = torch.autograd.grad(Y, params, grad_outputs=G)
    U, B = X @ W, X @ V
    dH = G @ W2.T
    sig = torch.sigmoid(U)
    got = attempt(answer, X.clone(), W.clone(), V.clone(), W2.clone(), G.clone())
    expect(
        isinstance(got, (tuple, list)) and len(got) == 3,
        "swiglu_backward should return a triple (dW, dV, dW2)",
    )
    what = f"for X ({n}, {d}), W and V ({d}, {h}), W2 ({h}, {d_out})"
    expect_answer(
        got[2],
        dW2,
        f"dW2 of swiglu_backward {what}",
        wrong={
            "dW2 = H^T G with H = SiLU(U) * B; the value path B is missing": F.silu(U).T @ G,
            "dW2 = H^T G, with H = SiLU(U) * B, not B alone": B.T @ G,
        },
        atol=1e-10,
        rtol=1e-9,
    )
    expect_answer(
        got[1],
        dV,
        f"dV of swiglu_backward {what}",
        wrong={
            "dW and dV are swapped: return (dW, dV, dW2)": dW,
            "dV = X^T (dH * SiLU(U)): the gate SiLU(U) multiplies B, not U": X.T @ (dH * U),
            "the gate is missing: dL/dB = dH * SiLU(U)": X.T @ dH,
        },
        atol=1e-10,
        rtol=1e-9,
    )
    expect_answer(
        got[0],
        dW,
        f"dW of swiglu_backward {what}",
        wrong={
            "dW and dV are swapped: return (dW, dV, dW2)": dV,
            "SiLU'(u) = sigma(u) + u sigma(u) (1 - sigma(u)), not sigma(u) alone": X.T
            @ (dH * B * sig),
            "SiLU' is missing: dL/dU = dH * B * SiLU'(U)": X.T @ (dH * B),
            "that uses SiLU(U) where SiLU'(U) belongs": X.T @ (dH * B * F.silu(U)),
        },
        atol=1e-10,
        rtol=1e-9,
    )
    return "dW, dV and dW2 match torch.autograd in float64 for a block with d = 5, h = 7, d_out = 3"


# --- 11.4 the scaled softplus ---------------------------------------------------------------------


def _softplus_beta(x: torch.Tensor, beta: float) -> torch.Tensor:
    return torch.logaddexp(beta * x, torch.zeros_like(x)) / beta


@exercise("11.4", "softplus_beta", "softplus_beta_grad")
def softplus_beta(softplus_beta, softplus_beta_grad) -> str:
    """softplus_beta against torch.logaddexp / beta, its derivative against autograd; the gap
    to ReLU in (0, log 2 / beta] with the maximum at 0."""
    x = _grid()
    for beta in (1.0, 4.0, 16.0):
        want = _softplus_beta(x, beta)
        plain = torch.logaddexp(x, torch.zeros_like(x))
        what = f"softplus_beta(x, {beta:g}) for x in [-30, 30] and +-800"
        got = expect_answer(
            attempt(softplus_beta, x.clone(), beta),
            want,
            what,
            wrong={
                "the factor 1/beta is missing: softplus_beta(x) = softplus(beta x) / beta": want
                * beta,
                "the argument is beta x: softplus_beta(x) = softplus(beta x) / beta, not "
                "softplus(x) / beta": plain / beta,
            },
            atol=1e-12,
            rtol=1e-10,
        )
        gap = got - x.clamp(min=0)
        expect(
            bool((gap >= 0).all() and (gap <= math.log(2) / beta + 1e-12).all())
            and abs(float(gap[x == 0][0]) - math.log(2) / beta) < 1e-12,
            f"{what}: the gap to ReLU should lie in [0, log(2)/beta], largest at x = 0",
        )
        dwant = _autograd_derivative(lambda t, b=beta: _softplus_beta(t, b), x)
        s_beta = torch.sigmoid(beta * x)
        expect_answer(
            attempt(softplus_beta_grad, x.clone(), beta),
            dwant,
            f"softplus_beta_grad(x, {beta:g}) for x in [-30, 30] and +-800",
            wrong={
                "the factors beta (chain rule) and 1/beta cancel: the derivative is "
                "sigma(beta x), not beta sigma(beta x)": beta * s_beta,
                "the factors cancel: the derivative is sigma(beta x), not "
                "sigma(beta x) / beta": s_beta / beta,
                "the derivative is sigma(beta x), not sigma(x)": torch.sigmoid(x),
            },
            atol=1e-12,
            rtol=1e-10,
        )
    x32 = _grid(torch.float32)
    for f, ref, what in [
        (softplus_beta, _softplus_beta(x32, 4.0), "softplus_beta"),
        (softplus_beta_grad, torch.sigmoid(4.0 * x32), "softplus_beta_grad"),
    ]:
        got = attempt(f, x32.clone(), 4.0)
        _same_dtype(got, x32, f"{what}(x, 4) for float32 x")
        expect_answer(got, ref, f"{what}(x, 4) for float32 x", atol=1e-6, rtol=1e-5)
    return (
        "softplus(beta x)/beta matches torch.logaddexp and sigma(beta x) its autograd "
        "derivative for beta = 1, 4, 16 up to x = +-800; the gap to ReLU peaks at log(2)/beta"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# the reference answers, looked up when called: a wrong answer replaces one of them
ref_tanh_from_sigmoid = _ref("11.1", "tanh_from_sigmoid")
tanh_grad_from_sigmoid = _ref("11.1", "tanh_grad_from_sigmoid")
gelu_taylor_constants = _ref("11.2", "gelu_taylor_constants")
gelu_tanh_max_error = _ref("11.2", "gelu_tanh_max_error")
minimax_c = _ref("11.2", "minimax_c")
ref_softplus_beta = _ref("11.4", "softplus_beta")
softplus_beta_grad = _ref("11.4", "softplus_beta_grad")


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


MISTAKES = {
    "11.1": [
        ((tanh_half_argument, tanh_grad_from_sigmoid), "tanh(x/2)"),
        ((tanh_without_minus_one, tanh_grad_from_sigmoid), "the -1 is missing"),
        ((ref_tanh_from_sigmoid, tanh_grad_missing_inner), "inner derivative 2"),
        ((ref_tanh_from_sigmoid, tanh_grad_at_x), "it belongs at 2x"),
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
        ((ref_softplus_beta, grad_times_beta), "not beta sigma(beta x)"),
        ((ref_softplus_beta, grad_of_x), "not sigma(x)"),
    ],
}
