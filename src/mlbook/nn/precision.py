"""Floating-point formats, mixed precision and gradient accumulation (formula sheet, chapter 16).

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


def _float64(x, name: str = "x") -> torch.Tensor:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return torch.tensor(float(x), dtype=torch.float64)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{name} must be a float or a floating-point torch.Tensor")
    return x.double()


def _exponent(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """floor(log2 |x|) clamped below at the smallest normal exponent 1 - b (exact, via frexp)."""
    _, e = torch.frexp(x)  # |x| = mantissa 2^e, mantissa in [0.5, 1)
    return torch.clamp(e.to(torch.float64) - 1, min=1 - fmt.bias)


def round_to_format(x, fmt) -> torch.Tensor:
    """Round float64 values to the nearest number of ``fmt``, ties to even (naive reference).

    With k = max(floor(log2|x|), 1 - b) the numbers of the format near x are the multiples of
    2^(k - m); round x / 2^(k - m) to the nearest integer (ties to even) and scale back. Results
    above the largest finite number become +-inf, as IEEE 754 rounding does.

    Args:
        x: float or tensor (...) of any float dtype, read as float64.
        fmt: a name, torch dtype or :class:`FloatFormat`.

    Returns:
        (...) float64 tensor whose values are exactly representable in ``fmt``.
    """
    fmt = float_format(fmt)
    x = _float64(x)
    ulp = torch.exp2(_exponent(x, fmt) - fmt.mantissa_bits)
    q = torch.round(x / ulp) * ulp  # torch.round: half to even; exact in float64
    q = torch.where(q.abs() > fmt.max, torch.copysign(torch.full_like(q, math.inf), x), q)
    return torch.where(torch.isfinite(x), q, x)


def spacing(x, fmt) -> torch.Tensor:
    """The gap between |x| and the next larger number of ``fmt`` (one unit in the last place).

    For |x| in [2^k, 2^(k+1)) it is 2^(k - m); below the normal range it is the subnormal gap.
    An update u > 0 with u < spacing(w)/2 leaves w + u == w in that format.

    Args:
        x: float or (...) tensor of numbers representable in ``fmt``.
    """
    fmt = float_format(fmt)
    x = _float64(x)
    if not bool(torch.isfinite(x).all()):
        raise ValueError("spacing is defined for finite numbers only")
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

    Without ``master_dtype`` the weight is stored and updated in ``dtype`` (every sum rounded
    to ``dtype``). With it, a master copy in ``master_dtype`` takes the updates and the model
    sees the master rounded to ``dtype`` (mixed-precision training with float32 master weights).

    Returns:
        (steps + 1,) float64 trajectory, starting at w0 rounded to ``dtype``.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    for d, name in ((dtype, "dtype"), (master_dtype, "master_dtype")):
        if d is not None and (not isinstance(d, torch.dtype) or not d.is_floating_point):
            raise TypeError(f"{name} must be a floating-point torch.dtype, got {d!r}")
    if not (math.isfinite(w0) and math.isfinite(update)):
        raise ValueError(f"w0 and update must be finite, got {w0!r}, {update!r}")
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

    Multiplying the loss by S multiplies every gradient on the way back by S, lifting values
    that would underflow in float16 into its range; dividing in float32 restores them.

    Args:
        loss_fn: computes the scalar loss from ``params`` (any dtype inside).
        params: tensors with ``requires_grad``.
        scale: S > 0, usually a power of two (then scaling and unscaling are exact).

    Returns:
        ``(grads, found_inf)``: float32 gradients, one per parameter, and whether any of them
        overflowed (then a step must be skipped and the scale lowered).
    """
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(f"scale must be a finite positive number, got {scale!r}")
    params = list(params)
    if not params or not all(isinstance(p, torch.Tensor) and p.requires_grad for p in params):
        raise ValueError("params must be a non-empty list of tensors that require grad")
    loss = loss_fn()
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError("loss_fn must return a scalar tensor")
    grads = torch.autograd.grad(loss * scale, params)
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

    On an overflow the scale is multiplied by ``backoff_factor`` and the count of good steps
    resets; after ``growth_interval`` consecutive good steps it is multiplied by
    ``growth_factor``.

    Returns:
        ``(new_scale, new_growth_tracker)``.
    """
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite positive number, got {scale!r}")
    if (
        isinstance(growth_tracker, bool)
        or not isinstance(growth_tracker, int)
        or growth_tracker < 0
    ):
        raise ValueError(f"growth_tracker must be a non-negative int, got {growth_tracker!r}")
    if not growth_factor > 1 or not 0 < backoff_factor < 1:
        raise ValueError(
            f"need growth_factor > 1 and 0 < backoff_factor < 1, got "
            f"{growth_factor!r}, {backoff_factor!r}"
        )
    if (
        isinstance(growth_interval, bool)
        or not isinstance(growth_interval, int)
        or growth_interval < 1
    ):
        raise ValueError(f"growth_interval must be a positive int, got {growth_interval!r}")
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

    Args:
        X: (B, ...) inputs; y: (B, ...) targets.
    """
    if not isinstance(X, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("X and y must be torch tensors")
    if X.ndim == 0 or y.ndim == 0 or X.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and y need the same first axis, got {tuple(X.shape)} and {tuple(y.shape)}"
        )
    if (
        isinstance(num_micro, bool)
        or not isinstance(num_micro, int)
        or not 1 <= num_micro <= X.shape[0]
    ):
        raise ValueError(f"num_micro must be an int in [1, B={X.shape[0]}], got {num_micro!r}")
    parts_X = torch.tensor_split(X, num_micro)  # S tensors (B_s, ...)
    parts_y = torch.tensor_split(y, num_micro)
    return list(zip(parts_X, parts_y, strict=True))


def accumulate_gradients(
    loss_fn: Callable[..., torch.Tensor],
    params: Sequence[torch.Tensor],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    weighting: str = "equal",
) -> list[torch.Tensor]:
    """The large-batch gradient from S micro-batches, one backward pass each.

    ``loss_fn(params, X_s, y_s)`` must return the *mean* loss over micro-batch s, with gradient
    g_s. Summing the S gradients gives S times the average gradient, so (eq. 16.5)

    - ``"equal"``: g = (sum_s g_s) / S, exact when all micro-batches have the same size;
    - ``"size"``:  g = sum_s (B_s / B) g_s, exact for any sizes (the mean over all B examples).

    Returns:
        One gradient per parameter, shaped like it.
    """
    if weighting not in ("equal", "size"):
        raise ValueError(f"weighting must be 'equal' or 'size', got {weighting!r}")
    params = list(params)
    if not params or not all(isinstance(p, torch.Tensor) and p.requires_grad for p in params):
        raise ValueError("params must be a non-empty list of tensors that require grad")
    if len(batches) == 0:
        raise ValueError("batches is empty")
    S = len(batches)
    B = sum(Xs.shape[0] for Xs, _ in batches)
    total = [torch.zeros_like(p) for p in params]
    for Xs, ys in batches:
        loss = loss_fn(params, Xs, ys)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("loss_fn must return a scalar tensor (the micro-batch mean)")
        weight = 1.0 if weighting == "equal" else Xs.shape[0] / B
        for acc, g in zip(total, torch.autograd.grad(loss, params), strict=True):
            acc += weight * g  # "equal": the running sum S g
    return [acc / S for acc in total] if weighting == "equal" else total
