"""Numerical checks: compare an implementation with an independent reference, print one line.

Every check in the book prints exactly one deterministic line,

    check <what>: <error measure> <= <bound> (tol <tolerance>) ok

and raises :class:`CheckFailed` (an ``AssertionError``) with the offending numbers when it fails.
The checks return ``None``, so that a cell ending in a check shows only its printed line.
Errors are printed as an order of magnitude ("< 1e-15"), never as raw floats: the last bits of a
float64 result change with the CPU and the thread count, and the stored outputs of the notebooks
must reproduce on a reader's machine. A check whose error is far below its tolerance prints the
floor ``< tol * 1e-3`` so that tiny machine-dependent differences never show.

Shape legend: any shapes, as long as ``actual`` and ``expected`` broadcast to the same shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "CheckFailed",
    "as_numpy",
    "check_close",
    "check_true",
    "check_interval",
    "check_mc_mean",
    "fmt",
    "magnitude",
]


class CheckFailed(AssertionError):
    """A numerical check did not hold; the message names the quantity and the numbers."""


def as_numpy(x) -> np.ndarray:
    """Convert a number, sequence, NumPy array or torch tensor to a float64/complex NumPy array."""
    if hasattr(x, "detach"):  # torch.Tensor without importing torch here
        x = x.detach().cpu()
        return x.numpy().astype(np.complex128) if x.is_complex() else x.double().numpy()
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"cannot compare non-numeric values (dtype {arr.dtype})")
    return arr.astype(np.complex128 if np.iscomplexobj(arr) else np.float64)


def fmt(x: float, digits: int = 4) -> str:
    """Format a float with ``digits`` significant digits (the book's rule for printed numbers)."""
    if not math.isfinite(x):
        return str(x)
    return f"{x:.{digits}g}"


def magnitude(err: float, tol: float) -> str:
    """The order of magnitude of ``err`` as printed by the checks: ``< 1e-k`` or ``= 0``.

    Errors below ``tol * 1e-3`` print as ``< tol*1e-3`` so that differences between machines in
    the last bits never reach the stored outputs.
    """
    if not math.isfinite(err):
        return f"= {err}"
    floor = tol * 1e-3
    if err == 0 and floor == 0:
        return "= 0"
    if err < floor:
        return f"< {floor:.0e}"
    return f"< 1e{math.floor(math.log10(err)) + 1:d}"


def _fail(what: str, detail: str) -> CheckFailed:
    return CheckFailed(f"check {what} FAILED: {detail}")


def check_close(
    what: str,
    actual,
    expected,
    *,
    atol: float = 1e-10,
    rtol: float = 0.0,
    quiet: bool = False,
) -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise; print one line.

    Args:
        what: what is being compared, e.g. ``"softmax Jacobian vs autograd (float64)"``.
        actual: the book's implementation, any shape.
        expected: the independent reference, broadcastable to ``actual``.
        atol, rtol: the tolerance (choose them per dtype and say why in the text).
        quiet: compute and raise, but do not print (for loops of many checks).
    """
    if atol < 0 or rtol < 0:
        raise ValueError(f"tolerances must be non-negative, got atol={atol}, rtol={rtol}")
    a, e = as_numpy(actual), as_numpy(expected)
    try:
        shape = np.broadcast_shapes(a.shape, e.shape)
    except ValueError:
        raise ValueError(f"check {what}: shapes {a.shape} and {e.shape} do not broadcast") from None
    if a.size == 0 and e.size == 0:
        raise ValueError(f"check {what}: nothing to compare (empty arrays)")
    a, e = np.broadcast_to(a, shape), np.broadcast_to(e, shape)
    # Non-finite entries (nan, +-inf) must agree exactly; finite ones are compared numerically.
    fa, fe = np.isfinite(a), np.isfinite(e)
    same_nonfinite = (a == e) | (np.isnan(a) & np.isnan(e))
    mismatch = (fa != fe) | (~fa & ~fe & ~same_nonfinite)
    if mismatch.any():
        idx = tuple(int(i) for i in np.argwhere(mismatch)[0])
        raise _fail(
            what, f"non-finite mismatch at index {idx}: actual {a[idx]!r}, expected {e[idx]!r}"
        )
    diff = np.where(fa, np.abs(np.where(fa, a, 0) - np.where(fe, e, 0)), 0.0)
    bound = atol + rtol * np.abs(np.where(fe, e, 0))
    finite = fa
    bad = finite & (diff > bound)
    err = float(diff[finite].max()) if finite.any() else 0.0
    tol = atol if rtol == 0 else max(atol, float(np.max(bound)))
    if bad.any():
        idx = np.unravel_index(int(np.argmax(np.where(bad, diff - bound, -np.inf))), shape)
        raise _fail(
            what,
            f"max abs error {err:.3e} > tolerance (atol={atol:g}, rtol={rtol:g}); "
            f"worst at index {tuple(int(i) for i in idx)}: actual {a[idx]!r}, expected {e[idx]!r}",
        )
    if not quiet:
        tol_text = f"atol {atol:.0e}" + (f", rtol {rtol:.0e}" if rtol else "")
        print(f"check {what}: max abs error {magnitude(err, tol)} ({tol_text}) ok")


def check_true(what: str, condition: bool, detail: str = "") -> None:
    """Assert a logical fact (e.g. "all samples are non-negative") and print one line."""
    if not bool(condition):
        raise _fail(what, detail or "condition is false")
    print(f"check {what}: holds" + (f" ({detail})" if detail else "") + " ok")


def check_interval(what: str, value: float, low: float, high: float, digits: int = 4) -> None:
    """Assert ``low <= value <= high`` and print the value with ``digits`` significant digits."""
    if not low <= high:
        raise ValueError(f"check {what}: empty interval [{low}, {high}]")
    value = float(value)
    if not low <= value <= high:
        raise _fail(what, f"{value!r} is outside [{low!r}, {high!r}]")
    print(f"check {what}: {fmt(value, digits)} in [{fmt(low, digits)}, {fmt(high, digits)}] ok")


def check_mc_mean(
    what: str,
    samples: Sequence[float] | np.ndarray,
    expected: float,
    *,
    z: float = 4.0,
    digits: int = 4,
) -> None:
    """Monte Carlo check: the sample mean lies within ``z`` standard errors of ``expected``.

    With a fixed seed the check is deterministic; ``z = 4`` means a correct estimator fails for
    fewer than 1 seed in 15,000 (normal approximation to the mean), while a biased one whose bias
    exceeds 4 standard errors fails.

    Args:
        samples: (N,) independent draws of the estimator.
        expected: the exact value it should average to.
    """
    x = as_numpy(samples).reshape(-1)
    if x.size < 2:
        raise ValueError(f"check {what}: need at least 2 samples, got {x.size}")
    if z <= 0:
        raise ValueError(f"check {what}: z must be positive, got {z}")
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(x.size))
    if abs(mean - expected) > z * se:
        raise _fail(
            what,
            f"Monte Carlo mean {mean:.6g} is {abs(mean - expected) / max(se, 1e-300):.1f} standard"
            f" errors from the exact {expected:.6g} (N={x.size}, allowed {z} SE)",
        )
    print(
        f"check {what}: MC mean {fmt(mean, digits)} vs exact {fmt(expected, digits)},"
        f" |diff| <= {z:g} SE (SE {fmt(se, 2)}, N={x.size}) ok"
    )
