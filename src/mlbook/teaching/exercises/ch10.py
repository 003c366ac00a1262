"""Checks of the exercises of chapter 10 (automatic differentiation).

Every reference is computed by ``torch.autograd`` in float64 (``torch.autograd.grad`` with
``grad_outputs`` for the vector-Jacobian products, a backward pass through the unrolled loop for the
derivative of the tanh iteration), independent of :mod:`mlbook.foundations.autodiff`. The engine
itself is used only to run the reader's iteration on dual numbers and graph nodes, and
``tracemalloc`` tells whether a softmax VJP formed the K x K Jacobian.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import torch

from ...foundations import autodiff as ad
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64


def _adjoint(got, want: torch.Tensor, operand: str, what: str) -> torch.Tensor:
    """The reader's adjoint as a tensor of the operand's shape, naming a missing unbroadcast."""
    t = as_tensor(got, f"{operand}_bar of {what}")
    if tuple(t.shape) != tuple(want.shape):
        hint = ""
        if t.numel() > want.numel():
            hint = (
                f"; {operand} was broadcast, so its adjoint sums z_bar's contributions over "
                f"the broadcast axes (ad.unbroadcast)"
            )
        raise Incorrect(
            f"{operand}_bar of {what} should have {operand}'s shape "
            f"{tuple(want.shape)}, got {tuple(t.shape)}{hint}"
        )
    return t


@exercise("10.1", "div_vjp")
def div_vjp(answer) -> str:
    """The VJP of z = x / y against torch.autograd, with and without broadcasting."""
    gen = torch.Generator().manual_seed(101)
    cases = [
        ((5,), (5,), "x, y of shape (5,)"),
        ((4, 3), (3,), "x (4, 3) / y (3,)"),
        ((2, 1), (2, 3), "x (2, 1) / y (2, 3)"),
    ]
    for x_shape, y_shape, what in cases:
        x = torch.randn(x_shape, generator=gen, dtype=F64)
        y = torch.randn(y_shape, generator=gen, dtype=F64).sign() * (
            0.3 + torch.rand(y_shape, generator=gen, dtype=F64)
        )  # |y| >= 0.3, both signs
        z_shape = torch.broadcast_shapes(x_shape, y_shape)
        z_bar = torch.randn(z_shape, generator=gen, dtype=F64)
        tx, ty = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        x_bar, y_bar = torch.autograd.grad(tx / ty, (tx, ty), grad_outputs=z_bar)
        got = expect_tuple(
            attempt(answer, z_bar.numpy().copy(), x.numpy().copy(), y.numpy().copy()),
            f"div_vjp for {what}",
            ("x_bar", "y_bar"),
        )
        gx = _adjoint(got[0], x_bar, "x", f"div_vjp for {what}")
        gy = _adjoint(got[1], y_bar, "y", f"div_vjp for {what}")
        same = x_shape == y_shape
        xb, yb, zb = x, y, z_bar
        expect_answer(
            gx,
            x_bar,
            f"x_bar of div_vjp for {what}",
            wrong={
                **({"x_bar and y_bar are swapped: return (x_bar, y_bar)": y_bar} if same else {}),
                "that is the rule for a product, z_bar y; for x / y the factor is 1/y": (
                    zb * yb
                ).sum_to_size(x_shape),
                "the factor 1/y is missing: dz/dx = 1/y": zb.sum_to_size(x_shape),
            },
            atol=1e-10,
            rtol=1e-9,
        )
        expect_answer(
            gy,
            y_bar,
            f"y_bar of div_vjp for {what}",
            wrong={
                **({"x_bar and y_bar are swapped: return (x_bar, y_bar)": x_bar} if same else {}),
                "the sign is flipped: dz/dy = -x / y^2": -y_bar,
                "one factor 1/y is missing: dz/dy = -x / y^2, not -x / y": (
                    -zb * xb / yb
                ).sum_to_size(y_shape),
                "the factor x is missing: dz/dy = -x / y^2": (-zb / yb**2).sum_to_size(y_shape),
                "that is z_bar z; the derivative is -z / y, so y_bar = -z_bar z / y": (
                    zb * xb / yb
                ).sum_to_size(y_shape),
            },
            atol=1e-10,
            rtol=1e-9,
        )
    return (
        "x_bar = z_bar / y and y_bar = -z_bar x / y^2 match torch.autograd for 3 shapes, "
        "2 of them broadcast"
    )


def _peak_bytes(fn, *args):
    """The result of fn(*args) and the peak of memory traced (NumPy reports its arrays)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        with np.errstate(all="ignore"):  # an overflow shows as inf or nan in the answer
            out = fn(*args)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return out, peak


@exercise("10.2", "softmax_vjp")
def softmax_vjp(answer) -> str:
    """z_bar = s * (s_bar - <s_bar, s>) against torch.autograd, in O(B K) memory."""
    gen = torch.Generator().manual_seed(102)
    cases = [
        (3 * torch.randn(4, 1000, generator=gen, dtype=F64), "B = 4, K = 1000"),
        (
            torch.tensor(
                [[1000.0, 999.0, 998.5, 990.0, 1001.0], [-800.0, -801.0, -799.0, -850.0, -800.5]],
                dtype=F64,
            ),
            "logits near +-1000 (B = 2, K = 5)",
        ),
        (torch.randn(3, 1, generator=gen, dtype=F64), "K = 1"),
    ]
    for z, what in cases:
        s_bar = torch.randn(z.shape, generator=gen, dtype=F64)
        tz = z.clone().requires_grad_(True)
        s = torch.softmax(tz, dim=-1)
        (want,) = torch.autograd.grad(s, tz, grad_outputs=s_bar)
        s = s.detach()
        got, peak = _peak_bytes(attempt, answer, z.numpy().copy(), s_bar.numpy().copy())
        expect_answer(
            got,
            want,
            f"softmax_vjp(z, s_bar) for {what}",
            wrong={
                "the term -<s_bar, s> s is missing: J = diag(s) - s s^T has a rank-one part too": s
                * s_bar,
                "the inner product must weight s_bar by s: <s_bar, s>, not sum(s_bar)": s
                * (s_bar - s_bar.sum(-1, keepdim=True)),
                "that is the VJP of log-softmax, s_bar - s sum(s_bar); softmax's is "
                "s * (s_bar - <s_bar, s>)": s_bar - s * s_bar.sum(-1, keepdim=True),
                "the sign is flipped: z_bar = s * (s_bar - <s_bar, s>)": -want,
                "the inner product <s_bar, s> runs over the batch axis; take it over the last "
                "axis, one per row (keepdims=True)": s * (s_bar - (s_bar * s).sum(0)),
                "the inner product is one number for the whole batch; take one per row": s
                * (s_bar - (s_bar * s).sum()),
            },
            atol=1e-12,
            rtol=1e-9,
        )
        if z.shape[-1] == 1000:
            expect(
                peak < 2_000_000,
                f"softmax_vjp(z, s_bar) for {what} used {peak // 10**6} MB: "
                f"it formed a K x K matrix; the VJP needs only O(K) memory per row",
            )
    return (
        "z_bar = s * (s_bar - <s_bar, s>) matches torch.autograd for K = 1000, K = 1 and "
        "logits near +-1000, without forming the K x K Jacobian"
    )


def _torch_chain(w: float, L: int, y0: float) -> tuple[torch.Tensor, torch.Tensor]:
    t0 = torch.tensor(y0, dtype=F64, requires_grad=True)
    y = t0
    for _ in range(L):
        y = torch.tanh(w * y)
    if L == 0:
        return y.detach(), torch.tensor(1.0, dtype=F64)
    (g,) = torch.autograd.grad(y, t0)
    return y.detach(), g


_CHAIN_CASES = [
    (0.5, 50, 0.5),
    (1.0, 50, 0.5),
    (2.0, 50, 0.5),
    (4.0, 50, 0.5),
    (-1.5, 7, -0.3),
    (2.0, 0, 0.5),
]


def _iterates(w: float, L: int, y0: float) -> list[float]:
    ys = [y0]
    for _ in range(L):
        ys.append(math.tanh(w * ys[-1]))
    return ys


@exercise("10.3", "chain_derivative", "iterate_tanh")
def tanh_chain(chain_derivative, iterate_tanh) -> str:
    """dy_L/dy_0 of y <- tanh(w y) against torch.autograd: the product formula, and the reader's
    iteration run in forward mode (ad.Dual) and in reverse mode (ad.Scalar)."""
    for w, L, y0 in _CHAIN_CASES:
        _, want = _torch_chain(w, L, y0)
        ys = _iterates(w, L, y0)
        what = f"chain_derivative(w={w}, L={L}, y0={y0})"
        expect_answer(
            attempt(chain_derivative, w, L, y0),
            want,
            what,
            wrong={
                "the factors use y_k; tanh'(w y_k) = 1 - y_{k+1}^2 is written with the NEXT "
                "iterate": math.prod(w * (1 - y * y) for y in ys[:-1]),
                "the factor w is missing: d tanh(w y)/dy = w (1 - tanh^2(w y))": math.prod(
                    1 - y * y for y in ys[1:]
                ),
                "tanh' = 1 - tanh^2: the iterate must be squared": math.prod(
                    w * (1 - y) for y in ys[1:]
                ),
            },
            atol=0.0,
            rtol=1e-9,
        )

    for w, L, y0 in _CHAIN_CASES:
        y_last, want = _torch_chain(w, L, y0)
        what = f"iterate_tanh(y0, w={w}, L={L})"
        for kind in ("Dual", "Scalar"):
            node = ad.Dual(y0, 1.0) if kind == "Dual" else ad.Scalar(y0)
            try:
                out = attempt(iterate_tanh, node, w, L)
            except Incorrect as err:
                raise Incorrect(
                    f"{err} (for an ad.{kind} input: use the node's own "
                    f"`.tanh()` and `*`, not math.tanh or np.tanh on floats)"
                ) from None
            expect(
                isinstance(out, type(node)),
                f"{what} should return an ad.{kind} for an ad.{kind} input, got "
                f"{type(out).__name__} (return the node, not its value)",
            )
            if kind == "Dual":
                value, deriv = out.value, out.tangent
            else:
                value, deriv = out.value, ad.gradient(out, [node])[0]
            expect_answer(
                value,
                y_last,
                f"the value of {what}",
                wrong={
                    "one iteration short: apply y <- tanh(w y) exactly L times": _iterates(
                        w, L, y0
                    )[-2]
                    if L
                    else math.nan,
                    "one iteration too many: apply y <- tanh(w y) exactly L times": math.tanh(
                        w * _iterates(w, L, y0)[-1]
                    ),
                    "the step is y <- tanh(w y), not w tanh(y)": _w_tanh(w, L, y0),
                },
                atol=0.0,
                rtol=1e-12,
            )
            expect_answer(deriv, want, f"dy_L/dy_0 of {what} by ad.{kind}", atol=0.0, rtol=1e-9)
    return (
        "the product formula, dual numbers and the reverse sweep agree with torch.autograd "
        "for w = 0.5, 1, 2, 4 at L = 50, a negative w, and L = 0"
    )


def _w_tanh(w: float, L: int, y0: float) -> float:
    y = y0
    for _ in range(L):
        y = w * math.tanh(y)
    return y


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# the reference answers, looked up when called: a wrong answer replaces one of them
chain_derivative = _ref("10.3", "chain_derivative")
iterate_tanh = _ref("10.3", "iterate_tanh")


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


MISTAKES = {
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
