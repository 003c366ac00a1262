"""Checks of the exercises of Appendix A (notation and shapes).

The references are independent of :mod:`mlbook.foundations.matrix_calculus`: the bias gradient
from torch.autograd and the Jacobian's size from the shapes of its definition (A.1);
``torch.nn.Linear``'s own gradients (A.2); the FLOPs of a ReLU MLP's training step from the
formulas 2 b d_l d_(l+1) per product, with the first layer's input gradient left out (A.3).

Each typical wrong answer is written once, as a function below; the checks compare the reader's
answer with those functions' results to name the mistake, and ``MISTAKES`` lists them.
"""

from __future__ import annotations

import torch

from . import (
    Incorrect,
    as_int,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    paired_mistakes,
)
from . import reference_answer as _ref

F64 = torch.float64


# --- A.1 ------------------------------------------------------------------------------------------

_A1_SHAPES = {"x": (4, 8, 16), "W": (16, 48), "b": (48,)}


def _bias_grad_and_jacobian_size() -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """b_bar's shape (autograd), the Jacobian's size (from y.shape + W.shape), y's shape."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*_A1_SHAPES["x"], generator=gen, dtype=F64)
    W = torch.randn(*_A1_SHAPES["W"], generator=gen, dtype=F64, requires_grad=True)
    b = torch.randn(*_A1_SHAPES["b"], generator=gen, dtype=F64, requires_grad=True)
    y = x @ W + b
    (y**2).sum().backward()
    jacobian_shape = tuple(y.shape) + tuple(W.shape)  # one entry per (entry of y, entry of W)
    return tuple(b.grad.shape), int(torch.Size(jacobian_shape).numel()), tuple(y.shape)


def bias_shape_of_y():
    return (4, 8, 48)


def bias_shape_of_w():
    return (16, 48)


def entries_of_w_bar():
    return 16 * 48


def entries_of_y():
    return 4 * 8 * 48


_SHAPE_WRONG = [
    (bias_shape_of_y, "(4, 8, 48) is the shape of y and of y_bar; b_bar has b's shape (48,)"),
    (bias_shape_of_w, "(16, 48) is W's shape; b_bar has b's shape (48,)"),
]
_ENTRIES_WRONG = [
    (entries_of_w_bar, "768 entries are W_bar's; the Jacobian has one entry per pair"),
    (entries_of_y, "1536 entries are y's; the Jacobian has one entry per pair"),
]


@exercise("A.1", "predict_bias_grad_shape", "predict_jacobian_entries")
def grad_shapes(predict_shape, predict_entries) -> str:
    """b_bar's shape (autograd) and the size of the Jacobian dy/dW (its definition)."""
    want_shape, want_entries, y_shape = _bias_grad_and_jacobian_size()
    raw = attempt(predict_shape, name="predict_bias_grad_shape")
    if isinstance(raw, torch.Size):
        raw = tuple(raw)
    expect(
        isinstance(raw, (tuple, list)) and all(isinstance(n, int) for n in raw),
        f"predict_bias_grad_shape() should return a tuple of ints, got {raw!r}",
    )
    got = tuple(raw)
    for wrong, feedback in _SHAPE_WRONG:
        if got == wrong() != want_shape:
            raise Incorrect(f"predict_bias_grad_shape(): {feedback}")
    expect(got == want_shape, f"predict_bias_grad_shape(): b_bar has shape {want_shape}, got {got}")
    entries = as_int(
        attempt(predict_entries, name="predict_jacobian_entries"),
        "predict_jacobian_entries()",
        "entries",
    )
    for wrong, feedback in _ENTRIES_WRONG:
        if entries == wrong() != want_entries:
            raise Incorrect(
                f"predict_jacobian_entries(): {feedback} (entry of y, entry of W), "
                f"{y_shape} + (16, 48): {want_entries:,}"
            )
    expect(
        entries == want_entries,
        f"predict_jacobian_entries(): the Jacobian of y {y_shape} w.r.t. W (16, 48) has shape "
        f"{y_shape + (16, 48)}, {want_entries:,} entries; got {entries:,}",
    )
    return (
        f"b_bar has b's shape {want_shape} (autograd), and the Jacobian dy/dW would have "
        f"{want_entries:,} entries, {want_entries // (16 * 48)} times W_bar's 768: reverse mode "
        f"never forms it, and W_bar = x^T y_bar costs {2 * 4 * 8 * 16 * 48:,} FLOPs"
    )


# --- A.2 ------------------------------------------------------------------------------------------


def _torch_linear_grads(x, weight, y_bar):
    """x_bar, weight_bar, bias_bar of nn.Linear by autograd (weight stored (out, in))."""
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=F64)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.zero_()
    xs = x.clone().requires_grad_(True)
    layer(xs).backward(y_bar)
    return xs.grad, layer.weight.grad, layer.bias.grad


def book_layout_x_bar(x, weight, y_bar):
    rows_x, rows_y = x.reshape(-1, x.shape[-1]), y_bar.reshape(-1, y_bar.shape[-1])
    return y_bar @ weight.T, rows_y.T @ rows_x, rows_y.sum(0)


def weight_bar_book_layout(x, weight, y_bar):
    rows_x, rows_y = x.reshape(-1, x.shape[-1]), y_bar.reshape(-1, y_bar.shape[-1])
    return y_bar @ weight, rows_x.T @ rows_y, rows_y.sum(0)


def bias_bar_mean(x, weight, y_bar):
    rows_x, rows_y = x.reshape(-1, x.shape[-1]), y_bar.reshape(-1, y_bar.shape[-1])
    return y_bar @ weight, rows_y.T @ rows_x, rows_y.mean(0)


def bias_bar_first_axis(x, weight, y_bar):
    rows_x, rows_y = x.reshape(-1, x.shape[-1]), y_bar.reshape(-1, y_bar.shape[-1])
    return y_bar @ weight, rows_y.T @ rows_x, y_bar.sum(0)


def weight_bar_last_rows_only(x, weight, y_bar):
    x2, y2 = x.reshape(-1, x.shape[-2], x.shape[-1]), y_bar.reshape(-1, *y_bar.shape[-2:])
    return y_bar @ weight, y2[-1].T @ x2[-1], y_bar.reshape(-1, y_bar.shape[-1]).sum(0)


_A2_WRONG = [
    (
        book_layout_x_bar,
        "x_bar = y_bar @ weight.T is the book's layout; nn.Linear's weight is "
        "(out, in), so x_bar = y_bar @ weight",
    ),
    (
        weight_bar_book_layout,
        "weight_bar must be in nn.Linear's layout (out, in) = y_bar^T x, "
        "the transpose of the book's x^T y_bar",
    ),
    (bias_bar_mean, "bias_bar is the sum of y_bar's rows, not their mean"),
    (
        weight_bar_last_rows_only,
        "weight_bar sums the outer products over every row of every leading axis",
    ),
]


def _if_defined(wrong, *args):
    """The wrong answer's triple, or None where its shapes do not even multiply."""
    try:
        return wrong(*args)
    except RuntimeError:
        return None


@exercise("A.2", "linear_backward_torch_layout")
def torch_layout_backward(fn) -> str:
    """The three adjoints against nn.Linear's autograd, square weight first (a transpose that
    keeps the shape must be caught by its values)."""
    gen = torch.Generator().manual_seed(2)
    cases = [((2, 3), 4, 4), ((6,), 3, 5), ((2, 2, 3), 4, 2), ((5,), 4, 4)]
    for lead, d_in, d_out in cases:
        x = torch.randn(*lead, d_in, generator=gen, dtype=F64)
        weight = torch.randn(d_out, d_in, generator=gen, dtype=F64)
        y_bar = torch.randn(*lead, d_out, generator=gen, dtype=F64)
        want = _torch_linear_grads(x, weight, y_bar)
        out = expect_tuple(
            attempt(
                fn, x.clone(), weight.clone(), y_bar.clone(), name="linear_backward_torch_layout"
            ),
            "linear_backward_torch_layout(x, weight, y_bar)",
            ("x_bar", "weight_bar", "bias_bar"),
        )
        wrong_triples = [(fb, _if_defined(w, x, weight, y_bar)) for w, fb in _A2_WRONG]
        for i, name in enumerate(("x_bar", "weight_bar", "bias_bar")):
            expect_answer(
                out[i],
                want[i],
                f"{name} for x of shape {tuple(x.shape)} and weight {tuple(weight.shape)}",
                wrong={fb: t[i] for fb, t in wrong_triples if t and t[i].shape == want[i].shape},
                atol=1e-12,
                rtol=1e-10,
            )
    return (
        "x_bar = y_bar W, W_bar = y_bar^T x (out, in) and b_bar = the sum of y_bar's rows match "
        "nn.Linear's autograd for square and rectangular weights and 1 to 3 leading axes"
    )


# --- A.3 ------------------------------------------------------------------------------------------


def _mlp_counts(widths, batch) -> tuple[int, int]:
    """Forward 2 b sum d_l d_(l+1); backward twice that minus the first layer's input gradient."""
    products = sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=False))
    return 2 * batch * products, 4 * batch * products - 2 * batch * widths[0] * widths[1]


def counts_with_input_gradient(widths, batch):
    products = sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=False))
    return 2 * batch * products, 4 * batch * products


def counts_one_flop_per_madd(widths, batch):
    f, b = _mlp_counts(widths, batch)
    return f // 2, b // 2


_A3_WRONG = [
    (
        counts_with_input_gradient,
        "the input is data: the backward pass of the first layer "
        "computes only W_bar, 2 b d_0 d_1 FLOPs, not its input's adjoint",
    ),
    (
        counts_one_flop_per_madd,
        "FlopCounterMode counts a multiply-add as 2 FLOPs; these are multiply-adds",
    ),
]


@exercise("A.3", "mlp_step_flops")
def mlp_flops(fn) -> str:
    """Counted FLOPs of three MLPs against the closed-form counts."""
    lines = []
    for widths, batch in (([8, 16, 4], 5), ([32, 8, 8, 8, 3], 7), ([6, 40, 40, 40, 40, 2], 3)):
        out = expect_tuple(
            attempt(fn, list(widths), batch, name="mlp_step_flops"),
            f"mlp_step_flops({widths}, {batch})",
            ("forward", "backward"),
        )
        got = [
            as_int(v, f"mlp_step_flops({widths}, {batch}) {n}", "FLOPs")
            for v, n in zip(out, ("forward", "backward"), strict=True)
        ]
        want = _mlp_counts(widths, batch)
        wrong = {fb: w(widths, batch) for w, fb in _A3_WRONG}
        expect_answer(
            torch.tensor(got, dtype=F64),
            torch.tensor(want, dtype=F64),
            f"(forward, backward) FLOPs of mlp_step_flops({widths}, {batch})",
            wrong={fb: torch.tensor(v, dtype=F64) for fb, v in wrong.items()},
            atol=0.5,
            rtol=0,
        )
        lines.append(f"{want[1] / want[0]:.3f}")
    return (
        "forward and backward FLOPs match 2 b Σ d_l d_(l+1) and twice that minus the first "
        f"layer's input gradient; backward / forward = {', '.join(lines)} for the three networks"
    )


MISTAKES = {
    "A.1": paired_mistakes(
        _ref("A.1", "predict_bias_grad_shape"),
        _ref("A.1", "predict_jacobian_entries"),
        _SHAPE_WRONG,
        _ENTRIES_WRONG,
    ),
    "A.2": [
        (book_layout_x_bar, "x_bar = y_bar @ weight.T is the book's layout"),
        (weight_bar_book_layout, "weight_bar must be in nn.Linear's layout"),
        (bias_bar_mean, "not their mean"),
        (weight_bar_last_rows_only, "every row of every leading axis"),
        (bias_bar_first_axis, "should have shape (4,)"),
    ],
    "A.3": [
        (counts_with_input_gradient, "the input is data"),
        (counts_one_flop_per_madd, "counts a multiply-add as 2 FLOPs"),
    ],
}
