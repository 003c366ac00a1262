"""Checks of the exercises of chapter 45 (convolutional networks).

The references are independent of :mod:`mlbook.beyond.convolution`: the output size and the
receptive field of a stack measured by running it with ``F.conv2d`` and ``F.avg_pool2d`` and
taking the gradient of one output unit (45.1); ``F.conv2d`` itself (45.2); the receptive field in
closed form, 1 + (k - 1) sum_l d_l, and the reachable offsets of a dilated stack from
``np.convolve`` of 0/1 tap patterns (45.3); and float64 autograd through ``F.conv2d`` (45.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

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


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


# --- 45.1 ----------------------------------------------------------------------------------------

# The stack of the exercise: (kind, kernel, stride, padding, dilation), applied to 32 x 32.
STACK = (
    ("conv", 3, 1, 1, 1),
    ("conv", 3, 2, 1, 1),
    ("conv", 3, 1, 2, 2),
    ("pool", 2, 2, 0, 1),
    ("conv", 3, 1, 0, 1),
)
STACK_INPUT = 32


def _run_stack(x: torch.Tensor) -> torch.Tensor:
    """The stack with all-ones kernels; the max pool's geometry run as an average pool (its
    gradient reaches every pixel of a window, so the support is the receptive field)."""
    for kind, k, s, p, d in STACK:
        if kind == "conv":
            x = F.conv2d(x, x.new_ones(1, 1, k, k), None, s, p, d)
        else:
            x = F.avg_pool2d(x, k, s, p)
    return x


def _measured_stack() -> tuple[int, int]:
    """(output size on 32 x 32, receptive field width) measured by running the stack."""
    size = _run_stack(torch.zeros(1, 1, STACK_INPUT, STACK_INPUT, dtype=F64)).shape[-1]
    x = torch.zeros(1, 1, 96, 96, dtype=F64, requires_grad=True)  # large: no border in the way
    y = _run_stack(x)
    c = y.shape[-1] // 2
    (g,) = torch.autograd.grad(y[0, 0, c, c], x)
    cols = torch.nonzero(g[0, 0].abs().sum(0)).flatten()
    return size, int(cols[-1] - cols[0]) + 1


def guess_without_jumps():
    return 6, 12


def guess_without_dilation():
    return 6, 19


def guess_last_layer_padded():
    return 8, 23


def guess_without_pooling():
    return 6, 17


@exercise("45.1", "predict_stack")
def stack_prediction(answer) -> str:
    """Run the stack, measure its output size and receptive field, and reveal both."""
    got = expect_tuple(attempt(answer), "predict_stack()", ("size", "receptive_field"))
    size = as_int(got[0], "predict_stack()'s size", "pixels along one side")
    field = as_int(got[1], "predict_stack()'s receptive field", "input pixels along one side")
    want_size, want_field = _measured_stack()
    seen = (
        f"the stack maps {STACK_INPUT} x {STACK_INPUT} to {want_size} x {want_size}, and the "
        f"gradient of one output unit reaches {want_field} x {want_field} input pixels"
    )
    if size != want_size:
        hint = (
            "the last 3 x 3 convolution has no padding: it removes 2 pixels (eq. 45.2)"
            if size == want_size + 2
            else "apply eq. 45.2 layer by layer, the pooling layer included"
        )
        raise Incorrect(f"you predicted a size of {size}; {seen}. {hint}")
    if field != want_field:
        hints = {
            12: "adding k - 1 per layer ignores the jumps: after the stride-2 layer one step of "
            "a kernel is 2 input pixels, after the pooling 4 (eq. 45.5)",
            19: "the dilated 3 x 3 kernel spans d (k - 1) + 1 = 5 positions, not 3",
            17: "the 2 x 2 pooling window is a layer of the recursion too (k = 2, s = 2)",
        }
        hint = hints.get(field, "apply eq. 45.5 layer by layer: r += d (k - 1) j, then j *= s")
        raise Incorrect(f"you predicted a receptive field of {field}; {seen}. {hint}")
    return (
        f"right: {seen}. Adding k - 1 per layer would give 12: the strided layers multiply "
        f"the step of every later kernel"
    )


# --- 45.2 ----------------------------------------------------------------------------------------


def conv_flipped(x, w, b, stride, padding, dilation):
    return F.conv2d(x, w.flip(-2, -1), b, stride, padding, dilation)


def conv_channels_last(x, w, b, stride, padding, dilation):
    """The kernel flattened as (k, k, C) against im2col rows ordered (C, k, k)."""
    o, c, k, _ = w.shape
    w_mixed = w.permute(0, 2, 3, 1).reshape(o, c, k, k)  # the same numbers, read in another order
    return F.conv2d(x, w_mixed, b, stride, padding, dilation)


def conv_without_bias(x, w, b, stride, padding, dilation):
    return F.conv2d(x, w, None, stride, padding, dilation)


def conv_without_dilation(x, w, b, stride, padding, dilation):
    return F.conv2d(x, w, b, stride, padding, 1)


def conv_without_stride(x, w, b, stride, padding, dilation):
    return F.conv2d(x, w, b, 1, padding, dilation)


WRONG_CONV = {
    "the kernel is flipped: a convolution layer computes the cross-correlation of eq. 45.1, "
    "x[s i + d u - p, s j + d v - p] times w[u, v], nothing reversed": conv_flipped,
    "the rows of the im2col matrix run over (channel, kernel row, kernel column); flatten w in "
    "the same order, w.reshape(O, C k k)": conv_channels_last,
    "the bias b_o is missing": conv_without_bias,
    "the dilation is ignored: kernel entry (u, v) reads the input d u rows and d v columns from "
    "the window's corner": conv_without_dilation,
    "the stride is ignored: the window moves s pixels from one output to the next, so there "
    "are fewer outputs (eq. 45.2)": conv_without_stride,
}

CONV_CASES = (  # (seed, (B, C, H, W), (O, k), stride, padding, dilation)
    (451, (2, 3, 7, 9), (4, 3), 1, 1, 1),
    (452, (1, 2, 11, 8), (3, 3), 2, 1, 1),
    (453, (2, 3, 10, 10), (5, 3), 1, 2, 2),
    (454, (1, 1, 9, 12), (2, 2), 3, 0, 2),
    (455, (3, 4, 6, 5), (1, 1), 1, 0, 1),
)


@exercise("45.2", "conv2d_im2col")
def conv_by_im2col(answer) -> str:
    """The reader's im2col convolution against F.conv2d on five settings."""
    for seed, (B, C, H, W), (O, k), s, p, d in CONV_CASES:
        gen = torch.Generator().manual_seed(seed)
        x, w, b = _randn(gen, B, C, H, W), _randn(gen, O, C, k, k), _randn(gen, O)
        args = (s, p, d)
        expect_answer(
            attempt(answer, x.clone(), w.clone(), b.clone(), *args),
            F.conv2d(x, w, b, s, p, d),
            f"conv2d_im2col(x {tuple(x.shape)}, w {tuple(w.shape)}, b, stride={s}, "
            f"padding={p}, dilation={d})",
            wrong={fb: fn(x, w, b, *args) for fb, fn in WRONG_CONV.items()},
            atol=1e-10,
        )
    return (
        "matches F.conv2d for 5 settings: non-square inputs, 1 to 4 channels, kernels of 1 to 3, "
        "strides 1 to 3, padding 0 to 2 and dilation 1 and 2"
    )


# --- 45.3 ----------------------------------------------------------------------------------------


def _offsets(k: int, dilations) -> np.ndarray:
    """0/1 array over the offsets 0 .. sum d (k - 1) that one output unit reaches (1-D)."""
    reach = np.ones(1)
    for d in dilations:
        taps = np.zeros(d * (k - 1) + 1)
        taps[::d] = 1.0  # the k taps of a dilated kernel
        reach = (np.convolve(reach, taps) > 0).astype(float)
    return reach


def _sweep(k, stacks, *, use_dilation=True, full=False, count=False):
    widths, coverage = [], []
    for dilations in stacks:
        ds = dilations if use_dilation else [1] * len(dilations)
        reach = _offsets(k, ds)
        widths.append(float(len(reach)))
        share = float(reach.mean()) ** 2  # the 2-D pattern is the outer product of two 1-D ones
        coverage.append(1.0 if full else share * len(reach) ** 2 if count else share)
    return widths, coverage


def sweep_without_dilation(k, stacks):
    return _sweep(k, stacks, use_dilation=False)


def sweep_full_coverage(k, stacks):
    return _sweep(k, stacks, full=True)


def sweep_coverage_count(k, stacks):
    return _sweep(k, stacks, count=True)


WRONG_SWEEP = {
    "widths": {
        "the widths ignore the dilation: a layer with dilation d widens the field by "
        "d (k - 1), not k - 1 (eq. 45.5)": sweep_without_dilation,
    },
    "coverages": {
        "not every pixel of the box is reached: equal dilations skip pixels (gridding), so the "
        "coverage is the share of the box whose gradient is non-zero": sweep_full_coverage,
        "the coverage is a share of the box (between 0 and 1), not a count of pixels": (
            sweep_coverage_count
        ),
    },
}

SWEEP_STACKS = ([1, 1, 1, 1], [1, 2, 4, 8], [2, 2, 2], [1, 2, 3], [4, 4], [1, 1, 2, 2, 4, 4])


@exercise("45.3", "dilation_sweep")
def dilation_sweep(answer) -> str:
    """Receptive-field widths and coverages against the closed form and np.convolve."""
    for k in (3, 2):
        stacks = [list(s) for s in SWEEP_STACKS]
        what = f"dilation_sweep(k={k}, stacks)"
        got = expect_tuple(
            attempt(answer, k, [list(s) for s in stacks]), what, ("widths", "coverages")
        )
        want = _sweep(k, stacks)
        closed = [1 + (k - 1) * sum(s) for s in stacks]
        expect(want[0] == [float(c) for c in closed], "internal: the widths disagree")
        for j, part in enumerate(("widths", "coverages")):
            expect_answer(
                got[j],
                torch.tensor(want[j], dtype=F64),
                f"{what}: {part}",
                wrong={fb: fn(k, stacks)[j] for fb, fn in WRONG_SWEEP[part].items()},
                atol=1e-9,
            )
    widths, cover = _sweep(3, [list(s) for s in SWEEP_STACKS])
    listing = ", ".join(
        f"{s}: {int(w)} ({100 * c:.0f} %)"
        for s, w, c in zip(SWEEP_STACKS, widths, cover, strict=True)
    )
    return (
        f"widths match 1 + (k - 1) sum d and coverages the reachable offsets for k = 3 and 2; "
        f"k = 3: {listing}"
    )


# --- 45.4 ----------------------------------------------------------------------------------------


def _value_or_none(fn, *args):
    """fn(*args), or None where that mistake cannot be made for these shapes (it raises)."""
    try:
        return fn(*args)
    except RuntimeError:
        return None


def _autograd_grads(x, w, g, padding):
    """dL/dx and dL/dw of L = <g, conv(x, w)> by float64 autograd."""
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = F.conv2d(x, w, None, 1, padding)
    return torch.autograd.grad(y, (x, w), g)


def input_grad_not_flipped(g, w, padding):
    k = w.shape[-1]
    return F.conv2d(g, w.transpose(0, 1), None, 1, k - 1 - padding)


def input_grad_not_swapped(g, w, padding):
    k = w.shape[-1]
    return F.conv2d(g, w.flip(-2, -1), None, 1, k - 1 - padding)


def input_grad_same_padding(g, w, padding):
    return F.conv2d(g, w.flip(-2, -1).transpose(0, 1), None, 1, padding)


def _weight_grad(x, g, padding):
    return F.conv2d(x.transpose(0, 1), g.transpose(0, 1), None, 1, padding).transpose(0, 1)


def weight_grad_mean(x, g, padding):
    return _weight_grad(x, g, padding) / x.shape[0]


def weight_grad_flipped(x, g, padding):
    return _weight_grad(x, g, padding).flip(-2, -1)


def weight_grad_first_example(x, g, padding):
    return _weight_grad(x[:1], g[:1], padding)


WRONG_INPUT_GRAD = {
    "the kernel must be rotated by 180 degrees: input pixel m meets kernel entry u at output "
    "m - u + p, so the backward pass runs over u in reverse": input_grad_not_flipped,
    "the roles of the channels swap: the kernel of the backward pass maps O channels to C, "
    "w.transpose(0, 1)": input_grad_not_swapped,
    "the backward pass pads by k - 1 - p, not by p (it is a 'full' correlation when p = 0)": (
        input_grad_same_padding
    ),
}
WRONG_WEIGHT_GRAD = {
    "the loss is a sum over the batch, so its gradient sums the examples' contributions "
    "(no division by B)": weight_grad_mean,
    "the weight gradient is not rotated: dL/dw[u, v] = sum x_pad[i + u, j + v] g[i, j], the "
    "correlation of the input with g": weight_grad_flipped,
    "every example of the batch contributes to dL/dw, not only the first": (
        weight_grad_first_example
    ),
}

GRAD_CASES = (  # (seed, (B, C, H, W), (O, k), padding); O == C first (the unswapped kernel fits)
    (456, (2, 3, 6, 7), (3, 3), 1),
    (457, (3, 2, 8, 6), (4, 3), 0),
    (458, (2, 3, 5, 5), (2, 3), 2),
    (459, (1, 2, 7, 7), (3, 5), 1),
)


@exercise("45.4", "conv_input_grad", "conv_weight_grad")
def conv_gradients(input_grad, weight_grad) -> str:
    """Both gradients against float64 autograd through F.conv2d, for four settings."""
    for seed, (B, C, H, W), (O, k), p in GRAD_CASES:
        gen = torch.Generator().manual_seed(seed)
        x, w = _randn(gen, B, C, H, W), _randn(gen, O, C, k, k)
        g = _randn(gen, *F.conv2d(x, w, None, 1, p).shape)
        want_x, want_w = _autograd_grads(x, w, g, p)
        shapes = f"x {tuple(x.shape)}, w {tuple(w.shape)}, padding={p}"
        expect_answer(
            attempt(input_grad, g.clone(), w.clone(), p),
            want_x,
            f"conv_input_grad(g, w, {p}) for {shapes}",
            wrong={fb: _value_or_none(fn, g, w, p) for fb, fn in WRONG_INPUT_GRAD.items()},
            atol=1e-10,
        )
        expect_answer(
            attempt(weight_grad, x.clone(), g.clone(), p),
            want_w,
            f"conv_weight_grad(x, g, {p}) for {shapes}",
            wrong={fb: fn(x, g, p) for fb, fn in WRONG_WEIGHT_GRAD.items()},
            atol=1e-10,
        )
    return (
        "both gradients match float64 autograd through F.conv2d for 4 settings (padding 0 to 2, "
        "kernels 3 and 5, C != O)"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

INPUT_GRAD = _ref("45.4", "conv_input_grad")
WEIGHT_GRAD = _ref("45.4", "conv_weight_grad")

MISTAKES = {
    "45.1": [
        (guess_without_jumps, "ignores the jumps"),
        (guess_without_dilation, "spans d (k - 1) + 1 = 5"),
        (guess_last_layer_padded, "removes 2 pixels"),
        (guess_without_pooling, "pooling window is a layer"),
    ],
    "45.2": [
        (conv_flipped, "the kernel is flipped"),
        (conv_channels_last, "flatten w in the same order"),
        (conv_without_bias, "bias b_o is missing"),
        (conv_without_dilation, "dilation is ignored"),
        (conv_without_stride, "stride is ignored"),
    ],
    "45.3": [
        (sweep_without_dilation, "widths ignore the dilation"),
        (sweep_full_coverage, "gridding"),
        (sweep_coverage_count, "not a count of pixels"),
    ],
    "45.4": paired_mistakes(
        INPUT_GRAD,
        WEIGHT_GRAD,
        [
            (input_grad_not_flipped, "rotated by 180 degrees"),
            (input_grad_not_swapped, "roles of the channels swap"),
            (input_grad_same_padding, "pads by k - 1 - p"),
        ],
        [
            (weight_grad_mean, "no division by B"),
            (weight_grad_flipped, "weight gradient is not rotated"),
            (weight_grad_first_example, "not only the first"),
        ],
    ),
}
