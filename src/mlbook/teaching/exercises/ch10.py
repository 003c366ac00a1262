"""Checks of the exercises of chapter 10 (automatic differentiation).

Every reference is computed by ``torch.autograd`` in float64 (``torch.autograd.grad`` with
``grad_outputs`` for the vector-Jacobian products, a backward pass through the unrolled loop for the
derivative of the tanh iteration, a torch interpreter of the random programs for the tape), or in
closed form (the product formula of the tanh chain), independent of
:mod:`mlbook.foundations.autodiff`. The engine itself is used only to run the reader's iteration on
dual numbers and graph nodes, to draw the random programs, and to build the two-node graph whose
overwriting sweep the prediction of 10.4 is about; ``tracemalloc`` tells whether a softmax VJP
formed the K x K Jacobian.

Each typical wrong answer is written once, as a function next to its check: the check computes the
wrong value from it, and ``MISTAKES`` lists it.
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


def _sum_to(a, shape) -> np.ndarray:
    """``a`` summed over the axes that broadcasting added or stretched, back to ``shape``."""
    return torch.as_tensor(np.asarray(a, dtype=np.float64)).sum_to_size(shape).numpy()


def _div(z_bar, x, y, x_rule, y_rule):
    """(x_bar, y_bar) of z = x / y from the given rules, each summed back to its operand."""
    return _sum_to(x_rule(z_bar, x, y), np.shape(x)), _sum_to(y_rule(z_bar, x, y), np.shape(y))


def _x_rule(z_bar, x, y):
    return z_bar / y


def _y_rule(z_bar, x, y):
    return -z_bar * x / y**2


def div_product_rule(z_bar, x, y):
    return _div(z_bar, x, y, lambda zb, x_, y_: zb * y_, _y_rule)


def div_without_inverse(z_bar, x, y):
    return _div(z_bar, x, y, lambda zb, x_, y_: zb * np.ones_like(y_), _y_rule)


def div_sign_flipped(z_bar, x, y):
    return _div(z_bar, x, y, _x_rule, lambda zb, x_, y_: zb * x_ / y_**2)


def div_one_y_missing(z_bar, x, y):
    return _div(z_bar, x, y, _x_rule, lambda zb, x_, y_: -zb * x_ / y_)


def div_x_missing(z_bar, x, y):
    return _div(z_bar, x, y, _x_rule, lambda zb, x_, y_: -zb / y_**2)


def div_z_bar_z(z_bar, x, y):
    return _div(z_bar, x, y, _x_rule, lambda zb, x_, y_: zb * x_ / y_)


def div_swapped(z_bar, x, y):
    return _div(z_bar, x, y, _x_rule, _y_rule)[::-1]


def div_not_unbroadcast(z_bar, x, y):
    return _x_rule(z_bar, x, y), _y_rule(z_bar, x, y)  # the broadcast shape for both


_DIV_X_MISTAKES = [
    (div_product_rule, "that is the rule for a product, z_bar y; for x / y the factor is 1/y"),
    (div_without_inverse, "the factor 1/y is missing: dz/dx = 1/y"),
]
_DIV_Y_MISTAKES = [
    (div_sign_flipped, "the sign is flipped: dz/dy = -x / y^2"),
    (div_one_y_missing, "one factor 1/y is missing: dz/dy = -x / y^2, not -x / y"),
    (div_x_missing, "the factor x is missing: dz/dy = -x / y^2"),
    (div_z_bar_z, "that is z_bar z; the derivative is -z / y, so y_bar = -z_bar z / y"),
]
_SWAPPED = "x_bar and y_bar are swapped: return (x_bar, y_bar)"


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
        z_bar = torch.randn(torch.broadcast_shapes(x_shape, y_shape), generator=gen, dtype=F64)
        tx, ty = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        x_bar, y_bar = torch.autograd.grad(tx / ty, (tx, ty), grad_outputs=z_bar)
        args = (z_bar.numpy(), x.numpy(), y.numpy())
        got = expect_tuple(
            attempt(answer, *(a.copy() for a in args)), f"div_vjp for {what}", ("x_bar", "y_bar")
        )
        swapped = div_swapped(*args) if x_shape == y_shape else (None, None)
        for k, (operand, want, mistakes_) in enumerate(
            [("x", x_bar, _DIV_X_MISTAKES), ("y", y_bar, _DIV_Y_MISTAKES)]
        ):
            expect_answer(
                _adjoint(got[k], want, operand, f"div_vjp for {what}"),
                want,
                f"{operand}_bar of div_vjp for {what}",
                wrong={_SWAPPED: swapped[k], **{fb: m(*args)[k] for m, fb in mistakes_}},
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


def vjp_sign_flipped(z, s_bar):
    s = _softmax(z)
    return -s * (s_bar - (s_bar * s).sum(axis=-1, keepdims=True))


def vjp_batch_axis(z, s_bar):
    s = _softmax(z)
    return s * (s_bar - (s_bar * s).sum(axis=0))


def vjp_one_inner_product(z, s_bar):
    s = _softmax(z)
    return s * (s_bar - (s_bar * s).sum())


def vjp_naive_exp(z, s_bar):
    e = np.exp(z)
    s = e / e.sum(axis=-1, keepdims=True)
    return s * (s_bar - (s_bar * s).sum(axis=-1, keepdims=True))


def vjp_with_jacobian(z, s_bar):
    s = _softmax(z)
    jacobians = [np.diag(si) - np.outer(si, si) for si in s]  # B x (K, K)
    return np.stack([sb @ J for sb, J in zip(s_bar, jacobians, strict=True)])


_SOFTMAX_MISTAKES = [
    (
        vjp_without_inner,
        "the term -<s_bar, s> s is missing: J = diag(s) - s s^T has a rank-one part too",
    ),
    (
        vjp_sum_of_s_bar,
        "the inner product must weight s_bar by s: <s_bar, s>, not sum(s_bar)",
    ),
    (
        vjp_of_log_softmax,
        "that is the VJP of log-softmax, s_bar - s sum(s_bar); softmax's is "
        "s * (s_bar - <s_bar, s>)",
    ),
    (vjp_sign_flipped, "the sign is flipped: z_bar = s * (s_bar - <s_bar, s>)"),
    (
        vjp_batch_axis,
        "the inner product <s_bar, s> runs over the batch axis; take it over the last axis, one "
        "per row (keepdims=True)",
    ),
    (
        vjp_one_inner_product,
        "the inner product is one number for the whole batch; take one per row",
    ),
]


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
        (want,) = torch.autograd.grad(torch.softmax(tz, dim=-1), tz, grad_outputs=s_bar)
        got, peak = _peak_bytes(attempt, answer, z.numpy().copy(), s_bar.numpy().copy())
        expect_answer(
            got,
            want,
            f"softmax_vjp(z, s_bar) for {what}",
            wrong={fb: m(z.numpy(), s_bar.numpy()) for m, fb in _SOFTMAX_MISTAKES},
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


def derivative_with_y_k(w, L, y0):
    return math.prod(w * (1 - y * y) for y in _iterates(w, L, y0)[:-1])


def derivative_without_w(w, L, y0):
    return math.prod(1 - y * y for y in _iterates(w, L, y0)[1:])


def derivative_unsquared(w, L, y0):
    return math.prod(w * (1 - y) for y in _iterates(w, L, y0)[1:])


_DERIVATIVE_MISTAKES = [
    (
        derivative_with_y_k,
        "the factors use y_k; tanh'(w y_k) = 1 - y_{k+1}^2 is written with the NEXT iterate",
    ),
    (
        derivative_without_w,
        "the factor w is missing: d tanh(w y)/dy = w (1 - tanh^2(w y))",
    ),
    (derivative_unsquared, "tanh' = 1 - tanh^2: the iterate must be squared"),
]


def iterate_one_short(y, w, L):
    for _ in range(L - 1):
        y = (y * w).tanh()
    return y


def iterate_one_extra(y, w, L):
    for _ in range(L + 1):
        y = (y * w).tanh()
    return y


def iterate_w_outside(y, w, L):
    for _ in range(L):
        y = y.tanh() * w
    return y


def iterate_math_tanh(y, w, L):
    for _ in range(L):
        y = math.tanh(w * y)
    return y


_ITERATE_MISTAKES = [
    (iterate_one_short, "one iteration short: apply y <- tanh(w y) exactly L times"),
    (iterate_one_extra, "one iteration too many: apply y <- tanh(w y) exactly L times"),
    (iterate_w_outside, "the step is y <- tanh(w y), not w tanh(y)"),
]


@exercise("10.3", "chain_derivative", "iterate_tanh")
def tanh_chain(chain_derivative, iterate_tanh) -> str:
    """dy_L/dy_0 of y <- tanh(w y) against torch.autograd: the product formula, and the reader's
    iteration run in forward mode (ad.Dual) and in reverse mode (ad.Scalar)."""
    for w, L, y0 in _CHAIN_CASES:
        _, want = _torch_chain(w, L, y0)
        expect_answer(
            attempt(chain_derivative, w, L, y0),
            want,
            f"chain_derivative(w={w}, L={L}, y0={y0})",
            wrong={fb: m(w, L, y0) for m, fb in _DERIVATIVE_MISTAKES},
            atol=0.0,
            rtol=1e-9,
        )

    for w, L, y0 in _CHAIN_CASES:
        y_last, want = _torch_chain(w, L, y0)
        what = f"iterate_tanh(y0, w={w}, L={L})"
        wrong = {fb: m(ad.Dual(y0, 1.0), w, L).value for m, fb in _ITERATE_MISTAKES}
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
            expect_answer(value, y_last, f"the value of {what}", wrong=wrong, atol=0.0, rtol=1e-12)
            expect_answer(deriv, want, f"dy_L/dy_0 of {what} by ad.{kind}", atol=0.0, rtol=1e-9)
    return (
        "the product formula, dual numbers and the reverse sweep agree with torch.autograd "
        "for w = 0.5, 1, 2, 4 at L = 50, a negative w, and L = 0"
    )


# --- 10.4 · Predict: the overwriting sweep on x * x -------------------------------------------

_X0, _PREDICT_TOL = 3.0, 0.01


def _overwriting_sweep(x0: float) -> tuple[float, float]:
    """d(x * x)/dx at x0 by the overwriting sweep ('=' instead of '+='), written out here on an
    ad.Scalar graph, and the true derivative 2 x0."""
    x = ad.Scalar(x0)
    z = x * x  # one node whose two parents are both x
    x.grad, z.grad = 0.0, 1.0
    for parent, local in zip(z.parents, z.local_grads, strict=True):  # the reverse sweep
        parent.grad = z.grad * local  # '=': each share replaces the previous one
    return x.grad, 2 * x0


@exercise("10.4", "predict_overwrite_result")
def predict_overwrite_result(answer) -> str:
    """The guess of what the overwriting sweep returns for d(x * x)/dx at x = 3."""
    guess = as_tensor(attempt(answer), "predict_overwrite_result()")
    expect(guess.numel() == 1, "predict_overwrite_result() should return one number, a float")
    g = float(guess.reshape(()))
    got, true = _overwriting_sweep(_X0)
    reveal = (
        f"the overwriting sweep leaves x.grad = {got:g}, half of the true d(x^2)/dx = 2x = "
        f"{true:g}: both parents of the product are x, each share is z_bar * x = {got:g}, and "
        f"'=' keeps only the last one"
    )
    if abs(g - got) <= _PREDICT_TOL:
        return (
            f"your guess {g:g} is right: {reveal}. The usual guess, {true:g}, expects the bug "
            f"only when two different operations use x"
        )
    if abs(g - true) <= _PREDICT_TOL:
        raise Incorrect(
            f"your guess {g:g} is the true derivative: {reveal}. One operation that uses x twice "
            f"is fan-out too, so the bug strikes here"
        )
    if abs(g - _X0**2) <= _PREDICT_TOL:
        raise Incorrect(f"your guess {g:g} is the value x * x, not a derivative: {reveal}")
    raise Incorrect(f"your guess {g:g} is off by more than {_PREDICT_TOL}: {reveal}")


def guess_true_derivative():
    return 6.0


def guess_the_value():
    return 9.0


def guess_zero():
    return 0.0


# --- 10.5 · Implement: reverse mode on a tape -------------------------------------------------

_TORCH_OPS = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "log": torch.log,
    "relu": torch.relu,
}


def _torch_program_gradient(program, point) -> torch.Tensor:
    """The gradient of the program's output by torch.autograd, interpreted here in float64."""
    x = torch.tensor(point, dtype=F64, requires_grad=True)
    nodes = list(x.unbind())
    for op, args in program.instructions:
        nodes.append(_TORCH_OPS[op](*(nodes[a] for a in args)))
    out = sum(nodes[j] for j in program.outputs)
    return torch.autograd.grad(out, x, materialize_grads=True)[0]


_PRIMAL = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "tanh": math.tanh,
    "exp": math.exp,
    "log": math.log,
    "relu": lambda a: max(a, 0.0),
}
_LOCAL = {  # (x, other, out) -> the local derivatives with respect to the arguments
    "add": lambda x, o, out: (1.0, 1.0),
    "sub": lambda x, o, out: (1.0, -1.0),
    "mul": lambda x, o, out: (o, x),
    "tanh": lambda x, o, out: (1 - out * out,),
    "exp": lambda x, o, out: (out,),
    "log": lambda x, o, out: (1 / x,),
    "relu": lambda x, o, out: (float(x > 0),),
}


def _tape(program, point, *, overwrite=False, tanh_of_input=False, first_output=False, own=False):
    """Reverse mode on the instruction list, written out here, with switches for the typical
    mistakes: '=' for '+=', tanh' from the input, only the first output seeded, each input of a
    product getting itself instead of the other input."""
    n = program.n_inputs
    vals = [float(v) for v in point]
    for op, args in program.instructions:
        vals.append(_PRIMAL[op](*(vals[a] for a in args)))
    bar = [0.0] * len(vals)
    for j in program.outputs[:1] if first_output else program.outputs:
        bar[j] += 1.0
    for k in range(len(program.instructions) - 1, -1, -1):
        op, args = program.instructions[k]
        x, other, out = vals[args[0]], vals[args[-1]], vals[n + k]
        local = _LOCAL[op](x, other, out)
        if op == "mul" and own:
            local = (x, other)
        if op == "tanh" and tanh_of_input:
            local = (1 - x * x,)
        for a, d in zip(args, local, strict=True):
            if overwrite:
                bar[a] = bar[n + k] * d
            else:
                bar[a] += bar[n + k] * d
    return np.array(bar[:n])


def tape_overwrite(program, point):
    return _tape(program, point, overwrite=True)


def tape_tanh_of_input(program, point):
    return _tape(program, point, tanh_of_input=True)


def tape_first_output(program, point):
    return _tape(program, point, first_output=True)


def tape_product_own(program, point):
    return _tape(program, point, own=True)


_TAPE_MISTAKES = [
    (
        tape_overwrite,
        "the adjoints are overwritten ('='): a node used several times must receive the sum "
        "of its shares ('+=', eq. 10.3)",
    ),
    (
        tape_tanh_of_input,
        "tanh' = 1 - y^2 with y = tanh(x) the OUTPUT of the instruction, not 1 - x^2",
    ),
    (
        tape_first_output,
        "only the first output was seeded: the program's output is the SUM of the nodes in "
        "program.outputs, so each of them gets the adjoint 1",
    ),
    (
        tape_product_own,
        "each input of a product gets the OTHER input times the adjoint (eq. 10.4), not itself",
    ),
]


@exercise("10.5", "tape_gradient")
def tape_gradient(answer) -> str:
    """Reverse mode on the instruction list against torch.autograd on random programs."""
    rng = np.random.default_rng(105)
    for seed in range(6):
        program = ad.random_program(n_inputs=4, n_ops=30, seed=500 + seed)
        point = rng.uniform(-1, 1, 4)
        expect_answer(
            attempt(answer, program, point.copy()),
            _torch_program_gradient(program, point),
            f"tape_gradient on random program {seed} (4 inputs, 30 instructions, "
            f"{len(program.outputs)} outputs)",
            wrong={fb: m(program, point) for m, fb in _TAPE_MISTAKES},
            atol=1e-10,
            rtol=1e-9,
        )
    return (
        "the gradients match torch.autograd on 6 random programs with fan-out and several "
        "outputs (every primitive: add, sub, mul, tanh, exp, log, relu)"
    )


# --- 10.6 · Explore: the derivative of the tanh chain over weight and depth --------------------

_GRID_WS = [-1.5, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0]
_GRID_LS = [1, 3, 10, 30, 100]


def _log10_derivatives(ws, Ls, y0, *, shift=0, base=10.0, of_value=False) -> np.ndarray:
    """log10 |dy_L/dy_0| by the product formula, summed in logarithms (no underflow), with
    switches for the typical mistakes."""
    out = np.zeros((len(ws), len(Ls)))
    for i, w in enumerate(ws):
        ys = _iterates(w, max(Ls) + 1, y0)
        for j, L in enumerate(Ls):
            steps = L + shift
            if of_value:
                out[i, j] = math.log(abs(ys[steps]), base)
            else:
                out[i, j] = sum(math.log(abs(w * (1 - y * y)), base) for y in ys[1 : steps + 1])
    return out


def grid_natural_log(ws, Ls, y0):
    return _log10_derivatives(ws, Ls, y0, base=math.e)


def grid_one_short(ws, Ls, y0):
    return _log10_derivatives(ws, Ls, y0, shift=-1)


def grid_of_values(ws, Ls, y0):
    return _log10_derivatives(ws, Ls, y0, of_value=True)


def grid_without_abs(ws, Ls, y0):
    signs = np.array([[np.sign(w) ** L for L in Ls] for w in ws])  # the sign of the product
    return np.where(signs > 0, _log10_derivatives(ws, Ls, y0), np.nan)


_GRID_MISTAKES = [
    (grid_natural_log, "that is the natural logarithm; the exercise asks for log10"),
    (
        grid_one_short,
        "the derivatives are one step short: column j belongs to L = Ls[j] steps, row i to ws[i]",
    ),
    (grid_of_values, "that is log10 |y_L|, the value; the exercise asks for the derivative"),
]


@exercise("10.6", "derivative_grid")
def derivative_grid(answer) -> str:
    """log10 |dy_L/dy_0| over weights and depths against the product formula."""
    want = _log10_derivatives(_GRID_WS, _GRID_LS, 0.5)
    got = as_tensor(
        attempt(answer, list(_GRID_WS), list(_GRID_LS), 0.5),
        f"derivative_grid(ws, Ls, 0.5) for ws = {_GRID_WS}, Ls = {_GRID_LS}",
        want.shape,
    )
    negative = torch.from_numpy(np.isnan(grid_without_abs(_GRID_WS, _GRID_LS, 0.5)))
    if bool(torch.isnan(got).any()) and torch.equal(torch.isnan(got), negative):
        raise Incorrect(
            "derivative_grid is nan exactly where the derivative is negative (w < 0, odd L): "
            "take the logarithm of its absolute value"
        )
    expect_answer(
        got,
        want,
        f"derivative_grid(ws, Ls, 0.5) for ws = {_GRID_WS}, Ls = {_GRID_LS}",
        wrong={fb: m(_GRID_WS, _GRID_LS, 0.5) for m, fb in _GRID_MISTAKES},
        atol=1e-9,
        rtol=1e-9,
    )
    at_one = want[_GRID_WS.index(1.0)]
    slope = (at_one[-1] - at_one[-2]) / math.log10(_GRID_LS[-1] / _GRID_LS[-2])
    best = _GRID_WS[int(np.argmax(want[:, -1]))]
    return (
        f"log10 |dy_L/dy_0| matches the product formula for {len(_GRID_WS)} weights (one "
        f"negative) and L up to {_GRID_LS[-1]}; at L = {_GRID_LS[-1]} the derivative is largest "
        f"at w = {best:g}, where its log-log slope from L = 30 to 100 is {slope:.2f}"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# the reference answers, looked up when called: a wrong answer replaces one of them
chain_derivative = _ref("10.3", "chain_derivative")
iterate_tanh = _ref("10.3", "iterate_tanh")


def iterate_value(y, w, L):
    return _ref("10.3", "iterate_tanh")(y, w, L).value


MISTAKES = {
    "10.1": [(m, fb.split(":")[0]) for m, fb in _DIV_X_MISTAKES + _DIV_Y_MISTAKES]
    + [(div_not_unbroadcast, "ad.unbroadcast"), (div_swapped, "swapped")],
    "10.2": [(m, fb.split(":")[0]) for m, fb in _SOFTMAX_MISTAKES]
    + [(vjp_naive_exp, "nan or inf"), (vjp_with_jacobian, "formed a K x K matrix")],
    "10.3": [((m, iterate_tanh), fb.split(":")[0]) for m, fb in _DERIVATIVE_MISTAKES]
    + [((chain_derivative, m), fb.split(":")[0]) for m, fb in _ITERATE_MISTAKES]
    + [
        ((chain_derivative, iterate_math_tanh), "use the node's own `.tanh()`"),
        ((chain_derivative, iterate_value), "return the node, not its value"),
    ],
    "10.4": [
        (guess_true_derivative, "is the true derivative"),
        (guess_the_value, "the value x * x"),
        (guess_zero, "off by more than"),
    ],
    "10.5": [(m, fb.split(":")[0]) for m, fb in _TAPE_MISTAKES],
    "10.6": [(m, fb.split(":")[0]) for m, fb in _GRID_MISTAKES]
    + [(grid_without_abs, "absolute value")],
}
