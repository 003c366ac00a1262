"""Floating-point numerics that deep-learning code relies on (Appendix B).

Broadcasting's shape rule, the overflowing log-sum-exp that the stable one of
:mod:`mlbook.nn.softmax` replaces, finite differences with their error model, Jacobians by
central differences, and machine epsilon measured by halving. The stable forms themselves live
where the book derives them: :func:`mlbook.nn.softmax.logsumexp` (eq. 12.2, B.1),
:func:`mlbook.nn.activations.softplus` (B.3), :func:`mlbook.foundations.autodiff.unbroadcast`
(the gradient of a broadcast), :data:`mlbook.nn.precision.FORMATS` (the float formats).

Shape legend
    (...)  any shape: finite differences and rounding act elementwise
    z      (..., n, ...) logits with n entries along ``dim``
    x      (n,) or any shape: the point where a derivative is taken; y = f(x) of shape (m,) or any
    J      y.shape + x.shape, the Jacobian: J[j..., i...] = d y_j / d x_i
    h      a step > 0 (a number); eps the machine epsilon of the format
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..validation import float_tensor, integer, one_of, positive

__all__ = [
    "broadcast_shape",
    "logsumexp_naive",
    "central_difference",
    "forward_difference",
    "central_difference_error",
    "optimal_central_step",
    "jacobian_central",
    "machine_epsilon",
]


# --- broadcasting ---------------------------------------------------------------------------------


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape of a broadcast result: align the shapes from the right; in every column the
    sizes must agree or be 1, and a missing size counts as 1.

    shapes: any number of shapes (tuples of ints). Raises ValueError naming the clash."""
    shapes = [tuple(integer(n, "a size", low=0) for n in s) for s in shapes]
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):  # from the left of the longest shape to the last axis
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            raise ValueError(
                f"shapes {shapes} do not broadcast: sizes {sorted(sizes)} meet on axis {axis}"
            )
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


# --- eq. B.1: log-sum-exp as written --------------------------------------------------------------


def logsumexp_naive(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log sum_i exp(z_i) as written: overflows to inf once a z_i exceeds log(largest float).

    The reference for :func:`mlbook.nn.softmax.logsumexp` (eq. B.1). z: (..., n, ...). Returns
    ``dim`` removed."""
    return torch.log(torch.exp(z).sum(dim=dim))


# --- eq. B.4: finite differences ------------------------------------------------------------------


def central_difference(f: Callable, x, h: float):
    """f'(x) ~ (f(x + h) - f(x - h)) / (2h), elementwise. Implements eq. B.4.

    f: an elementwise function; x: a number or tensor (...); h > 0. Returns f'(x)'s estimate."""
    h = positive(h, "h")
    return (f(x + h) - f(x - h)) / (2 * h)


def forward_difference(f: Callable, x, h: float):
    """f'(x) ~ (f(x + h) - f(x)) / h, elementwise: error O(h) + O(eps / h), for comparison.

    f, x, h as :func:`central_difference`."""
    h = positive(h, "h")
    return (f(x + h) - f(x)) / h


def central_difference_error(h, eps: float, f0: float, f3: float):
    """The error model of eq. B.4: truncation h^2 |f'''| / 6 plus rounding eps |f| / h.

    h: a step or a tensor of steps (...); eps: machine epsilon; f0, f3: f(x) and f'''(x).
    Returns the modelled error, shape of h."""
    return h**2 * abs(f3) / 6 + eps * abs(f0) / h


def optimal_central_step(eps: float, f0: float, f3: float) -> float:
    """The step that minimises :func:`central_difference_error`: (3 eps |f| / |f'''|)^(1/3),
    of the order eps^(1/3)."""
    return (3 * positive(eps, "eps") * abs(f0) / positive(abs(f3), "|f3|")) ** (1 / 3)


def jacobian_central(f: Callable, x: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """The Jacobian of f at x by central differences, one input coordinate at a time.

    f: maps a tensor shaped like x to a tensor y; x: float64 tensor (any shape). Returns
    J of shape y.shape + x.shape, J[j..., i...] ~ d y_j / d x_i (error O(h^2) + O(eps / h))."""
    x = float_tensor(x, "x", not_empty=True)
    h = positive(h, "h")
    flat = x.detach().reshape(-1)
    cols = []
    for i in range(flat.numel()):  # one coordinate direction e_i at a time
        e = torch.zeros_like(flat)
        e[i] = h
        plus, minus = f((flat + e).view_as(x)), f((flat - e).view_as(x))
        cols.append((plus - minus) / (2 * h))  # column i of J, shape of y
    return torch.stack(cols, dim=-1).reshape(cols[0].shape + x.shape)  # (y..., n) -> y + x


# --- machine epsilon ------------------------------------------------------------------------------

_FORMATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def machine_epsilon(dtype: torch.dtype) -> float:
    """The gap between 1 and the next larger number of ``dtype``, measured by halving:
    the smallest power of two eps such that 1 + eps/2 rounds back to 1 in that format.

    dtype: torch.float64, float32, float16 or bfloat16."""
    one_of(dtype, "dtype", _FORMATS)
    one = torch.ones((), dtype=dtype)
    eps = torch.ones((), dtype=dtype)
    while one + eps / 2 != one:  # each step is rounded to ``dtype``
        eps = eps / 2
    return float(eps)
