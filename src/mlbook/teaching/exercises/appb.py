"""Checks of the exercises of Appendix B (NumPy for deep learning).

The references are independent of :mod:`mlbook.foundations.numerics` and
:mod:`mlbook.foundations.autodiff`: the float32 errors of central differences of x^3 measured on a
grid of steps (B.1); the gradient of a broadcast input from torch.autograd (B.2); central
differences of a small tanh network's loss against autograd's directional derivative, computed
here (B.3).

Each typical wrong answer is written once, as a function below; the checks compare the reader's
answer with those functions' results to name the mistake, and ``MISTAKES`` lists them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, wrong_values

F64, F32 = torch.float64, torch.float32


# --- B.1 ------------------------------------------------------------------------------------------


def _float32_central_errors() -> tuple[np.ndarray, np.ndarray]:
    """Steps from 1e-7 to 1 and the float32 errors of (f(1 + h) - f(1 - h)) / 2h, f = x^3."""
    hs = np.logspace(-7, 0, 141)
    x = torch.tensor(1.0, dtype=F32)
    errs = []
    for h in hs:
        hh = torch.tensor(h, dtype=F32)
        a, b = x + hh, x - hh
        errs.append(abs(float((a * a * a - b * b * b) / (2 * hh)) - 3.0))
    return hs, np.array(errs)


def step_float64():
    return (2.0**-52 / 2) ** (1 / 3)


def step_epsilon():
    return 2.0**-23


def step_sqrt_epsilon():
    return 2.0**-11.5


_B1_WRONG = [
    (
        step_float64,
        "that is float64's best step; in float32 the rounding branch eps/h is 2^29 "
        "times higher, so the balance moves to a much larger h",
    ),
    (
        step_epsilon,
        "a step near float32's epsilon is deep in the rounding branch: the error "
        "eps |f| / h is of order 1 there",
    ),
    (
        step_sqrt_epsilon,
        "eps^(1/2) is the best step of the one-sided (forward) difference; the "
        "central difference balances h^2 against eps / h, at eps^(1/3)",
    ),
]


@exercise("B.1", "predict_best_step_float32")
def best_step_float32(predict) -> str:
    """The guess within a factor 3 of the measured best float32 step of the central difference."""
    hs, errs = _float32_central_errors()
    best = float(hs[np.argmin(errs)])
    guess = float(as_tensor(attempt(predict, name="predict_best_step_float32"), "your guess"))
    expect(math.isfinite(guess) and guess > 0, f"the step must be a positive number, got {guess}")

    def near(a: float, b: float) -> bool:
        return abs(math.log10(a / b)) <= math.log10(3)

    at_1e6 = float(errs[np.argmin(abs(np.log10(hs) + 6))])
    if not near(guess, best):
        for wrong, feedback in _B1_WRONG:
            if near(guess, wrong()):
                raise Incorrect(
                    f"predict_best_step_float32(): {feedback}; the measured best step is {best:.1e}"
                )
        raise Incorrect(
            f"predict_best_step_float32() = {guess:.2g}: the measured best step is {best:.1e}, "
            "near (eps/2)^(1/3) = 2^-8 for float32's eps = 2^-23"
        )
    return (
        f"right within a factor 3: the float32 error is smallest near h = {best:.0e}, close to "
        f"(eps/2)^(1/3) = 2^-8 = 3.9e-3, with an error of {float(errs.min()):.0e}; at h = 1e-6 "
        f"the error is {at_1e6:.1g}, of the order eps / h"
    )


# --- B.2 ------------------------------------------------------------------------------------------

_B2_PAIRS = [
    ((2, 1, 3), (2, 4, 3)),
    ((3,), (4, 3)),
    ((4, 1), (4, 5)),
    ((1, 5), (3, 4, 5)),
    ((), (2, 3)),
    ((1, 1), (3, 4)),
    ((5,), (5,)),
]


def _autograd_unbroadcast(grad: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The gradient of a (shape) input of a broadcast addition, by torch.autograd."""
    a = torch.zeros(shape, dtype=F64, requires_grad=True)
    (a + torch.zeros(grad.shape, dtype=F64)).backward(grad)
    return a.grad


def sum_leading_only(grad, shape):
    extra = grad.ndim - len(shape)
    return grad.sum(dim=tuple(range(extra))) if extra else grad


def sum_without_keepdims(grad, shape):
    g = sum_leading_only(grad, shape)
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(dim=stretched) if stretched else g


def mean_instead_of_sum(grad, shape):
    extra = grad.ndim - len(shape)
    g = grad.mean(dim=tuple(range(extra))) if extra else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.mean(dim=stretched, keepdim=True) if stretched else g


_B2_WRONG = [
    (
        sum_leading_only,
        "the axes where the input has size 1 were stretched too: sum over them "
        "as well (keeping them with size 1)",
    ),
    (
        sum_without_keepdims,
        "sum the stretched axes with keepdim=True: the input's size-1 axes "
        "must stay in the gradient",
    ),
    (
        mean_instead_of_sum,
        "sum, do not average: every reuse of an entry adds its full contribution",
    ),
]


@exercise("B.2", "unbroadcast")
def unbroadcast_check(fn) -> str:
    """The gradient of a broadcast input against autograd for seven pairs of shapes."""
    gen = torch.Generator().manual_seed(4)
    for small, big in _B2_PAIRS:
        grad = torch.randn(big, generator=gen, dtype=F64)
        expect_answer(
            attempt(fn, grad.clone(), small, name="unbroadcast"),
            _autograd_unbroadcast(grad, small),
            f"unbroadcast(grad of shape {big}, {small})",
            wrong=wrong_values(_B2_WRONG, grad, small),
            atol=1e-12,
            rtol=1e-12,
        )
    return (
        "matches autograd's gradient of a broadcast input for 7 pairs of shapes, scalars included"
    )


# --- B.3 ------------------------------------------------------------------------------------------

_B3_STEPS = [10.0**-k for k in range(1, 10)]


def _network(dtype: torch.dtype):
    """A small tanh network's mean squared error as a function of its (6, 5) weight, the weight,
    and a unit direction, all in ``dtype``."""
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(8, 6, generator=gen, dtype=F64).to(dtype)
    w2 = torch.randn(5, generator=gen, dtype=F64).to(dtype)
    t = torch.randn(8, generator=gen, dtype=F64).to(dtype)
    W = torch.randn(6, 5, generator=gen, dtype=F64).to(dtype)
    v = torch.randn(6, 5, generator=gen, dtype=F64)
    v = (v / v.norm()).to(dtype)

    def loss(W_):
        return ((torch.tanh(X @ W_) @ w2 - t) ** 2).mean()

    return loss, W, v


def _directional(f, x, v) -> float:
    xs = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(xs), xs)
    return float((g * v).sum())


def _errors(f, x, v, hs, quotient) -> list[float]:
    d = _directional(f, x, v)
    with torch.no_grad():
        return [abs(float(quotient(f, x, v, h)) - d) / abs(d) for h in hs]


def _central(f, x, v, h):
    return (f(x + h * v) - f(x - h * v)) / (2 * h)


def forward_difference_errors(f, x, v, hs):
    return _errors(f, x, v, hs, lambda f, x, v, h: (f(x + h * v) - f(x)) / h)


def without_the_two(f, x, v, hs):
    return _errors(f, x, v, hs, lambda f, x, v, h: (f(x + h * v) - f(x - h * v)) / h)


def absolute_errors(f, x, v, hs):
    d = abs(_directional(f, x, v))
    return [e * d for e in _errors(f, x, v, hs, _central)]


_B3_WRONG = [
    (
        forward_difference_errors,
        "that is the one-sided difference (f(x + hv) - f(x)) / h; use "
        "the central one, (f(x + hv) - f(x - hv)) / (2h)",
    ),
    (without_the_two, "the two points are 2h apart: divide by 2h"),
    (absolute_errors, "return the relative error |d_h - d| / |d|, not the absolute one"),
]


@exercise("B.3", "fd_errors")
def gradient_check(fn) -> str:
    """Relative errors of central differences of a tanh network's loss, float64 and float32."""
    best = {}
    for dtype, floor in ((F64, 1e-12), (F32, 1e-6)):
        f, W, v = _network(dtype)
        want = torch.tensor(_errors(f, W, v, _B3_STEPS, _central), dtype=F64)
        got = attempt(fn, f, W.clone(), v.clone(), list(_B3_STEPS), name="fd_errors")
        expect_answer(
            got,
            want,
            f"fd_errors(f, x, v, hs) in {str(dtype).removeprefix('torch.')}",
            wrong={fb: w(f, W, v, _B3_STEPS) for w, fb in _B3_WRONG},
            atol=floor,
            rtol=0.05,
        )
        best[dtype] = want
    f64_best, f32_best = float(best[F64].min()), float(best[F32].min())
    f32_at_1e6 = float(best[F32][5])
    expect(f64_best < 1e-9 and f32_best > 1e-5 and f32_at_1e6 > 1e-2, "unexpected errors")
    return (
        "matches the central differences against autograd: in float64 the relative error falls "
        "below 1e-9 near h = 1e-5, in float32 never below 1e-5 (best near h = 1e-2), and at "
        "h = 1e-6 float32 errs by more than 1e-2"
    )


MISTAKES = {
    "B.1": [
        (step_float64, "that is float64's best step"),
        (step_epsilon, "deep in the rounding branch"),
        (step_sqrt_epsilon, "the one-sided (forward) difference"),
    ],
    "B.2": [
        (sum_leading_only, "sum over them as well"),
        (sum_without_keepdims, "keepdim=True"),
        (mean_instead_of_sum, "sum, do not average"),
    ],
    "B.3": [
        (forward_difference_errors, "that is the one-sided difference"),
        (without_the_two, "divide by 2h"),
        (absolute_errors, "not the absolute one"),
    ],
}
