"""Floating-point formats, mixed precision and gradient accumulation (chapter 16).

The numerics of training large models on limited memory: what a float16 or bfloat16 number can
hold, why an update smaller than half the spacing of a weight is lost, how float32 master
weights and loss scaling rescue training in 16 bits, and why S accumulated micro-batch
gradients equal the gradient of the large batch once divided by S (eq. 16.5).

Shape legend
    P      any parameter shape
    B      batch size; B_s the size of micro-batch s
    S      number of micro-batches that make one large batch
    (...)  any shape: rounding and spacing act elementwise

A format with e exponent bits and m stored mantissa bits (bias b = 2^(e-1) - 1) represents the
normal numbers (1 + f/2^m) 2^k with integer 0 <= f < 2^m and 1 - b <= k <= b, the subnormal
numbers (f/2^m) 2^(1-b), zero, infinities and NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..validation import finite, integer, number, one_of, positive, positive_int, shape_is

__all__ = [
    "FloatFormat",
    "FORMATS",
    "float_format",
    "round_to_format",
    "spacing",
    "accumulate_updates",
    "scaled_grads",
    "update_loss_scale",
    "micro_batches",
    "accumulate_gradients",
]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits``."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: torch.dtype

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1 and the next larger number, 2^-m."""
        return 2.0**-self.mantissa_bits

    @property
    def max(self) -> float:
        """The largest finite number, (2 - 2^-m) 2^b."""
        return (2.0 - 2.0**-self.mantissa_bits) * 2.0**self.bias

    @property
    def smallest_normal(self) -> float:
        """2^(1 - b): below it numbers lose precision (subnormals), then flush to zero."""
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        """2^(1 - b - m): half of it and less rounds to zero."""
        return 2.0 ** (1 - self.bias - self.mantissa_bits)


FORMATS = {
    "float64": FloatFormat("float64", 11, 52, torch.float64),
    "float32": FloatFormat("float32", 8, 23, torch.float32),
    "bfloat16": FloatFormat("bfloat16", 8, 7, torch.bfloat16),
    "float16": FloatFormat("float16", 5, 10, torch.float16),
}


def float_format(fmt) -> FloatFormat:
    """Look up a format by name (``"bfloat16"``), torch dtype or :class:`FloatFormat`."""
    if isinstance(fmt, FloatFormat):
        return fmt
    for f in FORMATS.values():
        if fmt == f.name or fmt is f.dtype:
            return f
    raise ValueError(f"unknown floating-point format {fmt!r}; known: {sorted(FORMATS)}")


def _exponent(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """floor(log2 |x|) clamped below at the smallest normal exponent 1 - b (exact, via frexp);
    zero and the subnormals share that exponent."""
    _, e = torch.frexp(x)  # |x| = mantissa 2^e, mantissa in [0.5, 1); frexp(0) gives e = 0
    e = torch.where(x == 0, 1 - fmt.bias, e.to(torch.float64) - 1)  # log2 0 = -inf
    return torch.clamp(e, min=1 - fmt.bias)


def round_to_format(x, fmt) -> torch.Tensor:
    """Round float64 values to the nearest number of ``fmt``, ties to even (naive reference).

    x: float or tensor (...) of any float dtype, read as float64. fmt: a name, torch dtype or
    :class:`FloatFormat`. Returns (...) float64 tensor whose values are exactly representable in
    ``fmt``."""
    fmt = float_format(fmt)
    x = torch.as_tensor(x, dtype=torch.float64)
    ulp = torch.exp2(_exponent(x, fmt) - fmt.mantissa_bits)
    q = torch.round(x / ulp) * ulp  # torch.round: half to even; exact in float64
    q = torch.where(q.abs() > fmt.max, torch.copysign(torch.full_like(q, math.inf), x), q)
    return torch.where(torch.isfinite(x), q, x)


def spacing(x, fmt) -> torch.Tensor:
    """The gap between |x| and the next larger number of ``fmt`` (one unit in the last place).

    x: float or (...) tensor of numbers representable in ``fmt``. At 0 it is the smallest
    subnormal, as ``numpy.spacing`` gives."""
    fmt = float_format(fmt)
    x = finite(torch.as_tensor(x, dtype=torch.float64), "x")
    return torch.exp2(_exponent(x, fmt) - fmt.mantissa_bits)


# --- mixed precision ----------------------------------------------------------------------------


def accumulate_updates(
    w0: float,
    update: float,
    steps: int,
    dtype: torch.dtype,
    master_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Apply w <- w + update ``steps`` times and return the weight the model sees after each.

    Returns (steps + 1,) float64 trajectory, starting at w0 rounded to ``dtype``."""
    steps = integer(steps, "steps", low=0)
    float_dtypes = [f.dtype for f in FORMATS.values()]  # an integer dtype would truncate
    (
        one_of(dtype, "dtype", float_dtypes),
        one_of(master_dtype, "master_dtype", [None, *float_dtypes]),
    )
    w0, update = number(w0, "w0"), number(update, "update")
    store = dtype if master_dtype is None else master_dtype
    w = torch.tensor(w0, dtype=store)
    u = torch.tensor(update, dtype=store)
    out = torch.empty(steps + 1, dtype=torch.float64)
    out[0] = w.to(dtype).double()
    for t in range(1, steps + 1):
        w = w + u  # rounded to the storage dtype
        out[t] = w.to(dtype).double()
    return out


def scaled_grads(
    loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor], scale: float
) -> tuple[list[torch.Tensor], bool]:
    """Loss scaling: backpropagate scale * loss, then divide the gradients by scale in float32.

    loss_fn: computes the scalar loss from ``params`` (any dtype inside). params: tensors with
    ``requires_grad``. scale: S > 0, usually a power of two (then scaling and unscaling are
    exact). Returns ``(grads, found_inf)``: float32 gradients, one per parameter, and whether any
    of them overflowed (then a step must be skipped and the scale lowered)."""
    scale = positive(scale, "scale")
    grads = torch.autograd.grad(loss_fn() * scale, list(params))
    unscaled = [g.float() / scale for g in grads]
    found_inf = any(not bool(torch.isfinite(g).all()) for g in unscaled)
    return unscaled, found_inf


def update_loss_scale(
    scale: float,
    growth_tracker: int,
    found_inf: bool,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> tuple[float, int]:
    """Dynamic loss scaling as in ``torch.amp.GradScaler``: back off on overflow, grow slowly.

    Returns ``(new_scale, new_growth_tracker)``."""
    scale, growth_tracker = positive(scale, "scale"), integer(growth_tracker, "growth_tracker", 0)
    number(growth_factor, "growth_factor", 1.0, open_low=True)
    number(backoff_factor, "backoff_factor", 0.0, 1.0, open_low=True, open_high=True)
    positive_int(growth_interval, "growth_interval")
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return scale, growth_tracker


# --- eq. 16.5: gradient accumulation ------------------------------------------------------------


def micro_batches(
    X: torch.Tensor, y: torch.Tensor, num_micro: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Split a batch into ``num_micro`` consecutive micro-batches (sizes differ by at most 1).

    X: (B, ...) inputs; y: (B, ...) targets."""
    shape_is(y, "y", (len(X), *y.shape[1:]))
    integer(num_micro, "num_micro", 1, len(X))
    parts_X = torch.tensor_split(X, num_micro)  # S tensors (B_s, ...)
    parts_y = torch.tensor_split(y, num_micro)
    return list(zip(parts_X, parts_y, strict=True))


def accumulate_gradients(
    loss_fn: Callable[..., torch.Tensor],
    params: Sequence[torch.Tensor],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    weighting: str = "equal",
) -> list[torch.Tensor]:
    """The large-batch gradient from S micro-batches, one backward pass each (eq. 16.5).

    Returns one gradient per parameter, shaped like it."""
    one_of(weighting, "weighting", ("equal", "size"))
    params = list(params)
    if len(batches) == 0:
        raise ValueError("batches must not be empty")
    S = len(batches)
    B = sum(Xs.shape[0] for Xs, _ in batches)
    total = [torch.zeros_like(p) for p in params]
    for Xs, ys in batches:
        loss = loss_fn(params, Xs, ys)
        weight = 1.0 if weighting == "equal" else Xs.shape[0] / B
        for acc, g in zip(total, torch.autograd.grad(loss, params), strict=True):
            acc += weight * g  # "equal": the running sum S g
    return [acc / S for acc in total] if weighting == "equal" else total
