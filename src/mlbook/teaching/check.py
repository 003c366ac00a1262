"""Numerical checks: compare an implementation with an independent reference, print one line.

Every check prints one deterministic line, ``check <what>: <error> (<tolerance>) ok``, and
raises :class:`CheckFailed` (an ``AssertionError``) with the numbers when it fails. A check fails
on NaN or infinity, on an empty input and (``check_close``) on shapes that only broadcast, so
that no check passes vacuously. Errors are printed as an order of magnitude ("< 1e-15") so that
the stored outputs reproduce on other machines; checks return ``None``.

Inside ``with conformance("against torch"):`` the checks print nothing and the block prints one
tally line at its end ("31 checks against torch: all hold, largest error < 1e-15 (atol 1e-12)"):
a chapter keeps its pure conformance checks in one folded cell and only the checks that teach
inline.

Shape legend: ``actual`` and ``expected`` have the same shape, or ``expected`` is one number.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from ..validation import number, positive, positive_int

__all__ = [
    "CheckFailed",
    "as_numpy",
    "check_close",
    "check_true",
    "check_interval",
    "check_mc_mean",
    "conformance",
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
    """The order of magnitude of ``err`` as printed: ``< 1e-k``, ``= 0``, or the floor
    ``< tol*1e-3`` for errors below it (machine-dependent last bits never show)."""
    if not math.isfinite(err):
        return f"= {err}"
    floor = tol * 1e-3
    if err == 0 and floor == 0:
        return "= 0"
    if err < floor:
        return f"< {floor:.0e}"
    return f"< 1e{math.floor(math.log10(err)) + 1:d}"


class _Tally:
    """The checks run inside one :func:`conformance` block: how many, and the largest error."""

    def __init__(self) -> None:
        self.count = 0
        self.worst: tuple[float, float] | None = None  # (error / tolerance, ...) of the worst

    def add(self, err: float | None = None, tol: float | None = None) -> None:
        self.count += 1
        if err is not None and tol:
            if self.worst is None or self._key(err, tol) > self._key(*self.worst):
                self.worst = (err, tol)

    @staticmethod
    def _key(err: float, tol: float) -> tuple[float, float]:
        """Order checks by error / tolerance; below the printed floor (1e-3 of the tolerance)
        the last bits must not decide, so there the largest tolerance wins."""
        return (max(err / tol, 1e-3), tol)


_TALLIES: list[_Tally] = []  # the open conformance blocks, innermost last


def _report(line: str, err: float | None = None, tol: float | None = None) -> None:
    """Print a check's line, or count it in the innermost open conformance block."""
    if _TALLIES:
        _TALLIES[-1].add(err, tol)
    else:
        print(line)


@contextmanager
def conformance(reference: str) -> Iterator[None]:
    """Run the checks of the block quietly and print one tally line when it ends.

    Args:
        reference: what the checks compare with, e.g. ``"against torch"``; it is printed.

    A failing check still raises at once, with its full message. A block with no check in it
    fails (a tally of nothing would pass vacuously).
    """
    tally = _Tally()
    _TALLIES.append(tally)
    try:
        yield
    finally:
        _TALLIES.pop()
    if tally.count == 0:
        raise _fail(f"conformance {reference}", "the block ran no check")
    line = f"{tally.count} checks {reference}: all hold"
    if tally.worst is not None:  # the check closest to its tolerance
        err, tol = tally.worst
        tol_text = f"{tol:.0e}".replace("e-0", "e-").replace("e+0", "e+")
        line += f"; largest error {magnitude(err, tol)} (its tolerance {tol_text})"
    print(line)


def _fail(what: str, detail: str) -> CheckFailed:
    return CheckFailed(f"check {what} FAILED: {detail}")


def _values(what: str, x, name: str, *, allow_inf: bool = False) -> np.ndarray:
    """``x`` as a NumPy array; fails the check if it is empty, holds NaN or (unless allowed) inf."""
    a = as_numpy(x)
    if a.size == 0:
        raise _fail(what, f"{name} is empty (shape {a.shape}): nothing to compare")
    bad = np.isnan(a) if allow_inf else ~np.isfinite(a)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _fail(what, f"{name} is not finite at index {idx}: {a[idx]!r}")
    return a


def check_close(
    what: str,
    actual,
    expected,
    *,
    atol: float = 1e-10,
    rtol: float = 0.0,
    allow_inf: bool = False,
    quiet: bool = False,
) -> None:
    """Assert ``|actual - expected| <= atol + rtol |expected|`` elementwise; print one line.

    Args:
        what: what is compared, e.g. ``"softmax Jacobian vs autograd (float64)"``.
        actual: the book's implementation; expected: the independent reference, of the same
            shape, or one number that every entry must match.
        atol, rtol: the tolerance (chosen per dtype, explained in the text).
        allow_inf: infinities are legitimate (overflow, masks) and must match exactly.
        quiet: check and raise, but do not print (for loops of many checks); inside a
            :func:`conformance` block it is counted like any other.
    """
    number(atol, "atol", 0.0)
    number(rtol, "rtol", 0.0)
    a = _values(what, actual, "actual", allow_inf=allow_inf)
    e = _values(what, expected, "expected", allow_inf=allow_inf)
    if a.shape != e.shape and not (a.size == e.size == 1 or e.ndim == 0):
        raise _fail(what, f"actual has shape {a.shape}, expected {e.shape} (no broadcasting)")
    e = e.reshape(a.shape) if e.size == a.size else np.broadcast_to(e, a.shape)
    fa, fe = np.isfinite(a), np.isfinite(e)
    mismatch = (fa != fe) | (~fa & (a != e))  # infinities must agree in place and sign
    if mismatch.any():
        idx = tuple(int(i) for i in np.argwhere(mismatch)[0])
        raise _fail(
            what, f"non-finite mismatch at index {idx}: actual {a[idx]!r}, expected {e[idx]!r}"
        )
    diff = np.where(fa, np.abs(np.where(fa, a, 0) - np.where(fe, e, 0)), 0.0)
    bound = atol + rtol * np.abs(np.where(fe, e, 0))
    bad = fa & (diff > bound)
    err = float(diff[fa].max()) if fa.any() else 0.0
    tol = atol if rtol == 0 else max(atol, float(np.max(bound)))
    if bad.any():
        idx = np.unravel_index(int(np.argmax(np.where(bad, diff - bound, -np.inf))), a.shape)
        raise _fail(
            what,
            f"max abs error {err:.3e} > tolerance (atol={atol:g}, rtol={rtol:g}); "
            f"worst at index {tuple(int(i) for i in idx)}: actual {a[idx]!r}, expected {e[idx]!r}",
        )
    if _TALLIES or not quiet:  # a quiet check still counts in a conformance tally
        tol_text = f"atol {atol:.0e}" + (f", rtol {rtol:.0e}" if rtol else "")
        _report(f"check {what}: max abs error {magnitude(err, tol)} ({tol_text}) ok", err, tol)


def check_true(what: str, condition, detail: str = "") -> None:
    """Assert a logical fact (e.g. "all samples are non-negative") and print one line.

    ``condition``: a bool, or a one-element array or tensor; NaN and empty arrays fail.
    """
    if hasattr(condition, "shape"):  # an array or a tensor: exactly one truth value
        c = as_numpy(condition)
        if c.size != 1:
            raise _fail(what, f"condition must be one truth value, got shape {c.shape}")
        condition = c.item()
    if isinstance(condition, float) and math.isnan(condition):
        raise _fail(what, "condition is NaN")
    if not bool(condition):
        raise _fail(what, detail or "condition is false")
    _report(f"check {what}: holds" + (f" ({detail})" if detail else "") + " ok")


def check_interval(what: str, value: float, low: float, high: float, digits: int = 4) -> None:
    """Assert ``low <= value <= high`` (bounds may be infinite, the value may not); print it."""
    positive_int(digits, "digits")
    if not float(low) <= float(high):  # also false for a NaN bound
        raise ValueError(f"check {what}: empty interval [{low}, {high}]")
    v = _values(what, value, "value")
    if v.size != 1:
        raise _fail(what, f"value must be one number, got shape {v.shape}")
    value = float(v.item())
    if not low <= value <= high:
        raise _fail(what, f"{value!r} is outside [{low!r}, {high!r}]")
    _report(f"check {what}: {fmt(value, digits)} in [{fmt(low, digits)}, {fmt(high, digits)}] ok")


def check_mc_mean(
    what: str,
    samples: Sequence[float] | np.ndarray,
    expected: float,
    *,
    z: float = 4.0,
    digits: int = 4,
) -> None:
    """Monte Carlo check: the sample mean lies within ``z`` standard errors of ``expected``.

    With a fixed seed it is deterministic; ``z = 4`` fails a correct estimator for fewer than
    1 seed in 15,000 and a biased one whose bias exceeds 4 standard errors.

    Args:
        samples: (N,) independent draws of the estimator, N >= 2, all finite.
        expected: the exact value it should average to.
    """
    positive(z, "z")
    positive_int(digits, "digits")
    x = _values(what, samples, "samples").reshape(-1)
    expected = float(_values(what, expected, "expected").item())
    if x.size < 2:
        raise _fail(what, f"need at least 2 samples for a standard error, got {x.size}")
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(x.size))
    if abs(mean - expected) > z * se:
        raise _fail(
            what,
            f"Monte Carlo mean {mean:.6g} is {abs(mean - expected) / max(se, 1e-300):.1f} standard"
            f" errors from the exact {expected:.6g} (N={x.size}, allowed {z} SE)",
        )
    _report(
        f"check {what}: MC mean {fmt(mean, digits)} vs exact {fmt(expected, digits)},"
        f" |diff| <= {z:g} SE (SE {fmt(se, 2)}, N={x.size}) ok"
    )
