"""Checks of the exercises of chapter 11 (activation functions).

The references are independent of :mod:`mlbook.nn.activations`: ``torch.tanh`` and autograd for the
tanh identity and its derivative; SciPy's normal CDF ``scipy.special.ndtr`` for the exact GELU, the
Taylor constants in closed form, and a golden-section search written out here for the minimax
constant of the tanh approximation; ``torch.autograd.grad`` through ``F.silu(X W) * (X V) @ W2`` for
the SwiGLU gradients; ``torch.logaddexp`` and its autograd derivative for the scaled softplus; a
ReLU layer on Gaussian inputs for the prediction of dead units; and a deep network differentiated by
``torch.autograd`` for the gain sweep.

Each typical wrong answer is written once, as a function next to its check (from torch's own
functions, not the package's): the check computes the wrong value from it, and ``MISTAKES`` lists
it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from scipy import special

from ..check import fmt
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


def tanh_half_argument(x):
    return 2 * torch.sigmoid(x) - 1


def tanh_without_minus_one(x):
    return 2 * torch.sigmoid(2 * x)


def tanh_without_two(x):
    return torch.sigmoid(2 * x) - 1


def tanh_in_float64(x):
    return 2 * torch.sigmoid(2 * x.double()) - 1


def tanh_grad_missing_inner(x):
    return 2 * _sigmoid_grad(2 * x)


def tanh_grad_at_x(x):
    return 4 * _sigmoid_grad(x)


def tanh_grad_without_four(x):
    return _sigmoid_grad(2 * x)


_TANH_MISTAKES = [
    (tanh_half_argument, "that is 2 sigma(x) - 1 = tanh(x/2): the sigmoid's argument is 2x"),
    (
        tanh_without_minus_one,
        "the -1 is missing: 2 sigma(2x) runs from 0 to 2, tanh from -1 to 1",
    ),
    (tanh_without_two, "the factor 2 is missing: sigma(2x) - 1 runs from -1 to 0"),
]
_TANH_GRAD_MISTAKES = [
    (
        tanh_grad_missing_inner,
        "a factor 2 is missing: the chain rule on sigma(2x) brings the inner derivative 2, so "
        "tanh' = 2 * 2 sigma'(2x)",
    ),
    (tanh_grad_at_x, "sigma' is taken at x; it belongs at 2x"),
    (tanh_grad_without_four, "the factor 4 is missing: tanh' = 4 sigma'(2x)"),
]


@exercise("11.1", "tanh_from_sigmoid", "tanh_grad_from_sigmoid")
def tanh_from_sigmoid(tanh_from_sigmoid, tanh_grad_from_sigmoid) -> str:
    """2 sigma(2x) - 1 against torch.tanh, 4 sigma'(2x) against autograd of torch.tanh."""
    x = _grid()
    expect_answer(
        attempt(tanh_from_sigmoid, x.clone()),
        torch.tanh(x),
        "tanh_from_sigmoid(x) for x in [-30, 30] and +-800",
        wrong={fb: m(x) for m, fb in _TANH_MISTAKES},
        atol=1e-12,
        rtol=1e-10,
    )
    expect_answer(
        attempt(tanh_grad_from_sigmoid, x.clone()),
        _autograd_derivative(torch.tanh, x),
        "tanh_grad_from_sigmoid(x) for x in [-30, 30] and +-800",
        wrong={fb: m(x) for m, fb in _TANH_GRAD_MISTAKES},
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
_PHI0 = 1 / math.sqrt(2 * math.pi)
_C_TAYLOR = (2 / math.pi - 0.5) / 3
_C_PUBLISHED = 0.044715


def _gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return x * torch.from_numpy(special.ndtr(x.numpy()))


def _tanh_form(c: float, x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(_A * (x + c * x**3)))


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


def _max_error(c: float, x: torch.Tensor) -> float:
    return float((_tanh_form(c, x) - _gelu_exact(x)).abs().max())


def constants_phi0():
    return _PHI0, _C_TAYLOR


def constants_b_not_c():
    return _A, _A * _C_TAYLOR


def constants_sign_flipped():
    return _A, -_C_TAYLOR


def constants_without_third():
    return _A, 3 * _C_TAYLOR


def max_error_mean(c, x):
    return float((_tanh_form(c, x) - _gelu_exact(x)).abs().mean())


def max_error_signed(c, x):
    return float((_tanh_form(c, x) - _gelu_exact(x)).max())


def max_error_vs_tanh_form(c, x):
    return float((_tanh_form(c, x) - _tanh_form(_C_PUBLISHED, x)).abs().max())


def minimax_taylor(x):
    return _C_TAYLOR


def minimax_published(x):
    return _C_PUBLISHED


def minimax_by_mse(x):
    exact = _gelu_exact(x)
    return _golden_section(lambda c: float(((_tanh_form(c, x) - exact) ** 2).mean()), 0.03, 0.06)


_CONSTANTS_MISTAKES = [
    (constants_phi0, "a is phi(0); matching the x terms, a / 2 = phi(0), so a = 2 phi(0)"),
    (constants_b_not_c, "c is b; the exercise asks for c = b / a"),
    (constants_sign_flipped, "the sign of c is flipped: b = a^3/3 - phi(0)/3 > 0"),
    (
        constants_without_third,
        "the 1/3 is missing: tanh y = y - y^3/3 and Phi has -phi(0) x^3/6",
    ),
]
_MAX_ERROR_MISTAKES = [
    (max_error_mean, "that is the mean absolute error; the exercise asks for the maximum"),
    (max_error_signed, "the absolute value is missing: the largest error may be negative"),
    (
        max_error_vs_tanh_form,
        "the reference must be the exact GELU x Phi(x), not the tanh approximation with "
        "c = 0.044715",
    ),
]
_MINIMAX_MISTAKES = [
    (minimax_taylor, "that is the Taylor constant; the minimax c minimises the maximum error"),
    (minimax_published, "that is the published 0.044715; minimise the maximum error on the grid"),
    (minimax_by_mse, "that c minimises the mean squared error, not the maximum error"),
]


@exercise("11.2", "gelu_taylor_constants", "gelu_tanh_max_error", "minimax_c")
def gelu_constant(gelu_taylor_constants, gelu_tanh_max_error, minimax_c) -> str:
    """The Taylor constants in closed form; the max error against SciPy's ndtr; the minimax c
    against a golden-section search."""
    got = attempt(gelu_taylor_constants)
    expect(
        isinstance(got, (tuple, list)) and len(got) == 2,
        "gelu_taylor_constants() should return a pair (a, c)",
    )
    expect_answer(
        as_tensor(list(got), "gelu_taylor_constants()"),
        [_A, _C_TAYLOR],
        "(a, c) of gelu_taylor_constants()",
        wrong={fb: list(m()) for m, fb in _CONSTANTS_MISTAKES},
        atol=1e-12,
        rtol=1e-10,
    )

    x = torch.linspace(-8, 8, 1601, dtype=F64)  # step 0.01
    for cc in (_C_TAYLOR, _C_PUBLISHED, 0.04):  # at 0.04 the largest error is negative
        expect_answer(
            attempt(gelu_tanh_max_error, cc, x.clone()),
            _max_error(cc, x),
            f"gelu_tanh_max_error({cc:.6g}, x) on [-8, 8]",
            wrong={fb: m(cc, x) for m, fb in _MAX_ERROR_MISTAKES},
            atol=1e-12,
            rtol=1e-8,
        )

    c_best = _golden_section(lambda cc: _max_error(cc, x), 0.03, 0.06)
    got = float(as_tensor(attempt(minimax_c, x.clone()), "minimax_c(x)"))
    expect_answer(
        got,
        c_best,
        "minimax_c(x) on [-8, 8]",
        wrong={fb: m(x) for m, fb in _MINIMAX_MISTAKES},
        atol=1e-5,
        rtol=0.0,
    )
    if _max_error(got, x) > _max_error(c_best, x) * (1 + 1e-3):
        raise Incorrect(
            "minimax_c(x): its maximum error is larger than at the minimax c "
            "(tighten the tolerance of the search, e.g. options={'xatol': 1e-7})"
        )
    expect(
        _max_error(_C_TAYLOR, x) > _max_error(_C_PUBLISHED, x) > _max_error(c_best, x),
        "the maximum errors should fall from the Taylor c to 0.044715 to the minimax c",
    )
    return (
        "a = sqrt(2/pi) and c = (2/pi - 1/2)/3 by Taylor; the max error matches SciPy's ndtr "
        "for 3 values of c; the minimax c matches a golden-section search"
    )


# --- 11.3 backpropagation through SwiGLU ----------------------------------------------------------


def _swiglu_parts(X, W, V, W2, G, *, silu_grad=None, gate=None, value=True):
    """(dW, dV, dW2) written out with torch's own functions; the switches make the mistakes:
    another SiLU', another factor in place of the gate SiLU(U) in dV, no value path in dW2."""
    U, B = X @ W, X @ V
    dH = G @ W2.T
    s = torch.sigmoid(U)
    d_silu = s + U * s * (1 - s) if silu_grad is None else silu_grad(U)
    dW2 = ((F.silu(U) * B) if value else F.silu(U)).T @ G
    dV = X.T @ (dH * (F.silu(U) if gate is None else gate(U)))
    dW = X.T @ (dH * B * d_silu)
    return dW, dV, dW2


def backward_transposed_dW2(X, W, V, W2, G):
    dW, dV, dW2 = _swiglu_parts(X, W, V, W2, G)
    return dW, dV, dW2.T


def backward_swapped(X, W, V, W2, G):
    dW, dV, dW2 = _swiglu_parts(X, W, V, W2, G)
    return dV, dW, dW2


def backward_sigmoid_as_silu_grad(X, W, V, W2, G):
    return _swiglu_parts(X, W, V, W2, G, silu_grad=torch.sigmoid)


def backward_without_silu_grad(X, W, V, W2, G):
    return _swiglu_parts(X, W, V, W2, G, silu_grad=torch.ones_like)


def backward_silu_for_silu_grad(X, W, V, W2, G):
    return _swiglu_parts(X, W, V, W2, G, silu_grad=F.silu)


def backward_gate_on_u(X, W, V, W2, G):
    return _swiglu_parts(X, W, V, W2, G, gate=lambda U: U)


def backward_without_gate(X, W, V, W2, G):
    return _swiglu_parts(X, W, V, W2, G, gate=torch.ones_like)


def backward_without_value(X, W, V, W2, G):
    return _swiglu_parts(X, W, V, W2, G, value=False)


_SWIGLU_MISTAKES = [  # (answer, feedback, the gradient it gets wrong: 0 dW, 1 dV, 2 dW2)
    (
        backward_without_value,
        "dW2 = H^T G with H = SiLU(U) * B; the value path B is missing",
        2,
    ),
    (backward_swapped, "dW and dV are swapped: return (dW, dV, dW2)", 1),
    (
        backward_gate_on_u,
        "dV = X^T (dH * SiLU(U)): the gate SiLU(U) multiplies B, not U",
        1,
    ),
    (backward_without_gate, "the gate is missing: dL/dB = dH * SiLU(U)", 1),
    (
        backward_sigmoid_as_silu_grad,
        "SiLU'(u) = sigma(u) + u sigma(u) (1 - sigma(u)), not sigma(u) alone",
        0,
    ),
    (backward_without_silu_grad, "SiLU' is missing: dL/dU = dH * B * SiLU'(U)", 0),
    (backward_silu_for_silu_grad, "that uses SiLU(U) where SiLU'(U) belongs", 0),
]


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
    want = torch.autograd.grad(Y, params, grad_outputs=G)  # (dW, dV, dW2)
    got = attempt(answer, X.clone(), W.clone(), V.clone(), W2.clone(), G.clone())
    expect(
        isinstance(got, (tuple, list)) and len(got) == 3,
        "swiglu_backward should return a triple (dW, dV, dW2)",
    )
    what = f"of swiglu_backward for X ({n}, {d}), W and V ({d}, {h}), W2 ({h}, {d_out})"
    for k, name in ((2, "dW2"), (1, "dV"), (0, "dW")):
        expect_answer(
            got[k],
            want[k],
            f"{name} {what}",
            wrong={fb: m(X, W, V, W2, G)[k] for m, fb, part in _SWIGLU_MISTAKES if part == k},
            atol=1e-10,
            rtol=1e-9,
        )
    return "dW, dV and dW2 match torch.autograd in float64 for a block with d = 5, h = 7, d_out = 3"


# --- 11.4 the scaled softplus ---------------------------------------------------------------------


def _softplus_beta(x: torch.Tensor, beta: float) -> torch.Tensor:
    return torch.logaddexp(beta * x, torch.zeros_like(x)) / beta


def softplus_without_inverse_beta(x, beta):
    return _softplus_beta(x, beta) * beta


def softplus_of_x(x, beta):
    return _softplus_beta(x, 1.0) / beta


def softplus_naive(x, beta):
    return torch.log(1 + torch.exp(beta * x)) / beta


def grad_times_beta(x, beta):
    return beta * torch.sigmoid(beta * x)


def grad_over_beta(x, beta):
    return torch.sigmoid(beta * x) / beta


def grad_of_x(x, beta):
    return torch.sigmoid(x)


_SOFTPLUS_MISTAKES = [
    (
        softplus_without_inverse_beta,
        "the factor 1/beta is missing: softplus_beta(x) = softplus(beta x) / beta",
    ),
    (
        softplus_of_x,
        "the argument is beta x: softplus_beta(x) = softplus(beta x) / beta, not "
        "softplus(x) / beta",
    ),
]
_SOFTPLUS_GRAD_MISTAKES = [
    (
        grad_times_beta,
        "the factors beta (chain rule) and 1/beta cancel: the derivative is sigma(beta x), "
        "not beta sigma(beta x)",
    ),
    (
        grad_over_beta,
        "the factors cancel: the derivative is sigma(beta x), not sigma(beta x) / beta",
    ),
    (grad_of_x, "the derivative is sigma(beta x), not sigma(x)"),
]


@exercise("11.4", "softplus_beta", "softplus_beta_grad")
def softplus_beta(softplus_beta, softplus_beta_grad) -> str:
    """softplus_beta against torch.logaddexp / beta, its derivative against autograd; the gap
    to ReLU in (0, log 2 / beta] with the maximum at 0."""
    x = _grid()
    for beta in (1.0, 4.0, 16.0):
        what = f"softplus_beta(x, {beta:g}) for x in [-30, 30] and +-800"
        got = expect_answer(
            attempt(softplus_beta, x.clone(), beta),
            _softplus_beta(x, beta),
            what,
            wrong={fb: m(x, beta) for m, fb in _SOFTPLUS_MISTAKES},
            atol=1e-12,
            rtol=1e-10,
        )
        gap = got - x.clamp(min=0)
        expect(
            bool((gap >= 0).all() and (gap <= math.log(2) / beta + 1e-12).all())
            and abs(float(gap[x == 0][0]) - math.log(2) / beta) < 1e-12,
            f"{what}: the gap to ReLU should lie in [0, log(2)/beta], largest at x = 0",
        )
        expect_answer(
            attempt(softplus_beta_grad, x.clone(), beta),
            _autograd_derivative(lambda t, b=beta: _softplus_beta(t, b), x),
            f"softplus_beta_grad(x, {beta:g}) for x in [-30, 30] and +-800",
            wrong={fb: m(x, beta) for m, fb in _SOFTPLUS_GRAD_MISTAKES},
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


# --- 11.5 · Predict: dead units on zero-mean inputs -----------------------------------------------

_DEAD_TOL = 0.02


def _dead_on_gaussian_inputs() -> tuple[float, float]:
    """A He-initialised ReLU layer (64 -> 128, zero bias) on 500 standard normal inputs: the
    share of units dead on the batch, and the share of pre-activations that are <= 0."""
    gen = torch.Generator().manual_seed(115)
    x = torch.randn(500, 64, generator=gen, dtype=F64)
    W = torch.randn(64, 128, generator=gen, dtype=F64) * math.sqrt(2 / 64)
    z = x @ W  # (500, 128)
    return float((z <= 0).all(dim=0).double().mean()), float((z <= 0).double().mean())


@exercise("11.5", "predict_dead_fraction")
def predict_dead_fraction(answer) -> str:
    """The guess of the dead share of a ReLU layer on Gaussian inputs, against the experiment."""
    guess = as_tensor(attempt(answer), "predict_dead_fraction()")
    expect(guess.numel() == 1, "predict_dead_fraction() should return one number, a fraction")
    g = float(guess.reshape(()))
    dead, inactive = _dead_on_gaussian_inputs()
    reveal = (
        f"{fmt(100 * dead, 3)} % of the 128 units are dead on the batch, although "
        f"{fmt(100 * inactive, 3)} % of the pre-activations are <= 0: a unit is dead only if it "
        f"is inactive on all 500 inputs, and for zero-mean inputs each of them is a coin flip "
        f"(probability about 2^-500)"
    )
    if abs(g - dead) <= _DEAD_TOL:
        return (
            f"your guess {fmt(g, 3)} is within {_DEAD_TOL} of the measurement: {reveal}. The usual "
            f"guess, one half, confuses inactive on one input with dead on every input; "
            f"non-negative inputs such as the pixels of §11.2 are what leave units dead from "
            f"the start"
        )
    if abs(g - inactive) <= 0.15:
        raise Incorrect(
            f"your guess {fmt(g, 3)} is the share of inactive pre-activations, not of dead units: "
            f"{reveal}"
        )
    raise Incorrect(f"your guess {fmt(g, 3)} is off by more than {_DEAD_TOL}: {reveal}")


def guess_half():
    return 0.5


def guess_quarter():
    return 0.25


# --- 11.6 · Explore: the gain of the initialisation against depth ---------------------------------

_SWEEPS = [
    (torch.tanh, "tanh", [0.5, 1.0, 2.0, 4.0]),
    (F.relu, "ReLU", [1.0, 2.0, 4.0]),
]
_DEPTH, _WIDTH, _BATCH = 20, 32, 256


def _gain_ratios(
    f, gains, depth, width, generator, *, upside=False, base=10.0, of_a=False, std=False
):
    """log10(|dL/dz_1| / |dL/dz_depth|) for each gain by torch.autograd, with the draws in the
    order of the exercise; the switches make the typical mistakes."""
    out = []
    for g in gains:
        x = torch.randn(_BATCH, width, generator=generator, dtype=F64)
        scale = g / width if std else math.sqrt(g / width)
        Ws = [
            torch.randn(width, width, generator=generator, dtype=F64) * scale for _ in range(depth)
        ]
        probe = torch.randn(_BATCH, width, generator=generator, dtype=F64)
        zs, acts, a = [], [], x
        for W in Ws:
            zs.append((a @ W).requires_grad_(True))
            a = f(zs[-1])
            acts.append(a)
        wrt = acts if of_a else zs
        grads = torch.autograd.grad((a * probe).sum(), wrt)
        first, last = grads[0], probe if of_a else grads[-1]
        ratio = float(first.norm() / last.norm())
        out.append(math.log(1 / ratio if upside else ratio, base))
    return torch.tensor(out, dtype=F64)


def sweep_upside_down(f, gains, depth, width, generator):
    return _gain_ratios(f, gains, depth, width, generator, upside=True)


def sweep_natural_log(f, gains, depth, width, generator):
    return _gain_ratios(f, gains, depth, width, generator, base=math.e)


def sweep_of_activations(f, gains, depth, width, generator):
    return _gain_ratios(f, gains, depth, width, generator, of_a=True)


def sweep_gain_as_std(f, gains, depth, width, generator):
    return _gain_ratios(f, gains, depth, width, generator, std=True)


_SWEEP_MISTAKES = [
    (sweep_upside_down, "the ratio is upside down: |dL/dz_1| / |dL/dz_L|, the first layer on top"),
    (sweep_natural_log, "that is the natural logarithm; the exercise asks for log10"),
    (
        sweep_of_activations,
        "those are the gradients with respect to the activations a_l; measure dL/dz_l, the "
        "pre-activations",
    ),
    (
        sweep_gain_as_std,
        "the weights have VARIANCE g / width: multiply standard normal draws by sqrt(g / width)",
    ),
]


@exercise("11.6", "gain_sweep")
def gain_sweep(answer) -> str:
    """log10 |dL/dz_1| / |dL/dz_L| over gains against torch.autograd on the same draws."""
    relu_measured = None
    for f, name, gains in _SWEEPS:
        want = _gain_ratios(f, gains, _DEPTH, _WIDTH, torch.Generator().manual_seed(116))
        got = attempt(answer, f, list(gains), _DEPTH, _WIDTH, torch.Generator().manual_seed(116))
        expect_answer(
            got,
            want,
            f"gain_sweep({name}, gains={gains}, depth={_DEPTH}, width={_WIDTH})",
            wrong={
                fb: m(f, gains, _DEPTH, _WIDTH, torch.Generator().manual_seed(116))
                for m, fb in _SWEEP_MISTAKES
            },
            atol=1e-8,
            rtol=1e-8,
        )
        if name == "ReLU":
            relu_measured = want
    theory = [(_DEPTH - 1) / 2 * math.log10(g / 2) for g in _SWEEPS[1][2]]
    return (
        f"the log10 ratios match torch.autograd on the same draws for tanh and ReLU; for ReLU at "
        f"gains {_SWEEPS[1][2]} they are {[round(float(v), 2) for v in relu_measured]}, and "
        f"(L - 1)/2 log10(g/2) predicts {[round(v, 2) for v in theory]}"
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


MISTAKES = {
    "11.1": [((m, tanh_grad_from_sigmoid), fb.split(":")[0]) for m, fb in _TANH_MISTAKES]
    + [((ref_tanh_from_sigmoid, m), fb.split(":")[0]) for m, fb in _TANH_GRAD_MISTAKES]
    + [((tanh_in_float64, tanh_grad_from_sigmoid), "dtype torch.float32")],
    "11.2": [
        ((m, gelu_tanh_max_error, minimax_c), fb.split(":")[0]) for m, fb in _CONSTANTS_MISTAKES
    ]
    + [((gelu_taylor_constants, m, minimax_c), fb.split(":")[0]) for m, fb in _MAX_ERROR_MISTAKES]
    + [
        ((gelu_taylor_constants, gelu_tanh_max_error, m), fb.split(";")[0].split(",")[0])
        for m, fb in _MINIMAX_MISTAKES
    ],
    "11.3": [(m, fb.split(":")[0]) for m, fb, _ in _SWIGLU_MISTAKES]
    + [(backward_transposed_dW2, "looks transposed")],
    "11.4": [((m, softplus_beta_grad), fb.split(":")[0]) for m, fb in _SOFTPLUS_MISTAKES]
    + [((ref_softplus_beta, m), fb.split(":")[0]) for m, fb in _SOFTPLUS_GRAD_MISTAKES]
    + [((softplus_naive, softplus_beta_grad), "nan or inf")],
    "11.5": [(guess_half, "inactive pre-activations"), (guess_quarter, "off by more than")],
    "11.6": [(m, fb.split(":")[0].split(";")[0]) for m, fb in _SWEEP_MISTAKES],
}
