"""The one module of argument checks; every module of the package uses these and no others.

The rule: check where bad input would otherwise give a *silent wrong result* (NaN, a broadcast
that hides a shape mismatch, an empty batch, a probability vector that does not sum to one) or
an error deep inside torch that does not name the user's argument. Do not restate a check that
torch already makes with a clear message. Each check returns its (possibly converted) argument,
so a call reads ``x = float_tensor(x, "x", ndim=4)``.

Type errors (not a tensor, not an int, an integer tensor where floats are needed) raise
``TypeError``; bad values (out of range, wrong shape, NaN, empty) raise ``ValueError``. Every
message starts with the argument's name.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import torch

__all__ = [
    "float_tensor",
    "index_tensor",
    "finite",
    "nonempty",
    "shape_is",
    "same_shape",
    "integer",
    "positive_int",
    "number",
    "positive",
    "probability",
    "distribution",
    "one_of",
    "divides",
    "bool_tensor",
    "broadcasts_to",
    "positive_entries",
    "finite_or_neg_inf",
    "float_array",
    "unit_interval",
    "binary",
    "even_int",
    "distinct",
    "nonsingular",
    "fresh_id",
    "cell_weights",
]


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape)


def float_tensor(
    x,
    name: str,
    ndim: int | None = None,
    min_ndim: int = 0,
    *,
    all_finite: bool = False,
    not_empty: bool = False,
) -> torch.Tensor:
    """``x`` must be a floating-point tensor with ``ndim`` (or at least ``min_ndim``) axes;
    optionally also non-empty and free of NaN/inf."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {_shape(x)}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes, got shape {_shape(x)}")
    if not_empty:
        nonempty(x, name)
    if all_finite:
        finite(x, name)
    return x


def index_tensor(x, name: str, high: int | None = None, ndim: int | None = None) -> torch.Tensor:
    """``x`` must be an integer tensor of indices in ``[0, high)`` (token ids, class labels)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {_shape(x)}")
    if x.numel() and (x.min() < 0 or (high is not None and x.max() >= high)):
        bound = f"[0, {high})" if high is not None else "non-negative"
        raise ValueError(f"{name} must hold indices in {bound}, got {x.min()}..{x.max()}")
    return x


def finite(x, name: str):
    """``x`` (a tensor or a number) must hold no NaN or infinity."""
    ok = bool(torch.isfinite(x).all()) if isinstance(x, torch.Tensor) else math.isfinite(x)
    if not ok:
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    return x


def nonempty(x, name: str):
    """``x`` must hold at least one element (an empty batch would average to NaN)."""
    if isinstance(x, torch.Tensor | np.ndarray):
        if x.size == 0 if isinstance(x, np.ndarray) else x.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {_shape(x)}")
    elif len(x) == 0:
        raise ValueError(f"{name} must not be empty, got an empty {type(x).__name__}")
    return x


def shape_is(x, name: str, shape: Sequence[int | None]) -> torch.Tensor:
    """``x`` must have exactly ``shape``; ``None`` entries match any size."""
    if len(x.shape) != len(shape) or any(
        s is not None and s != n for s, n in zip(shape, x.shape, strict=True)
    ):
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {_shape(x)}")
    return x


def same_shape(a, b, names: tuple[str, str]) -> None:
    """``a`` and ``b`` must have the same shape: no broadcast may hide a mismatch."""
    if _shape(a) != _shape(b):
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same shape, got {_shape(a)} and {_shape(b)}"
        )


def integer(v, name: str, low: int | None = None, high: int | None = None) -> int:
    """``v`` must be an integer (a Python or NumPy int; bool excluded) in ``[low, high]``;
    returned as a Python int."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def positive_int(v, name: str) -> int:
    """``v`` must be an integer >= 1 (a Python or NumPy int); returned as a Python int."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(v).__name__}")
    v = int(v)
    if v < 1:
        raise ValueError(f"{name} must be a positive int, got {v}")
    return v


def number(
    v,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``v`` must be a finite real number in the interval from ``low`` to ``high``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if not (isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_complex()):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    v = float(v)
    bad = not math.isfinite(v)
    bad |= low is not None and (v <= low if open_low else v < low)
    bad |= high is not None and (v >= high if open_high else v > high)
    if bad:
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        interval = f"{'(' if open_low else '['}{lo}, {hi}{')' if open_high else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {v}")
    return v


def positive(v, name: str) -> float:
    """``v`` must be a finite number > 0 (a learning rate, a temperature, a scale)."""
    return number(v, name, 0.0, open_low=True)


def probability(v, name: str) -> float:
    """``v`` must be a number in [0, 1]."""
    return number(v, name, 0.0, 1.0)


def distribution(p, name: str, dim: int = -1, atol: float = 1e-6) -> torch.Tensor:
    """``p`` must be non-negative and sum to one along ``dim`` (a probability vector or table)."""
    p = float_tensor(p, name, min_ndim=1, all_finite=True, not_empty=True)
    if bool((p < 0).any()):
        raise ValueError(f"{name} must be non-negative, got a minimum of {p.min().item():.3g}")
    err = (p.sum(dim) - 1).abs().max().item()
    if err > atol:
        raise ValueError(f"{name} must sum to one along dim {dim}, off by up to {err:.3g}")
    return p


def one_of(v, name: str, options: Iterable):
    """``v`` must be one of ``options``."""
    options = tuple(options)
    if v not in options:
        raise ValueError(f"{name} must be one of {options}, got {v!r}")
    return v


def divides(a: int, a_name: str, b: int, b_name: str) -> None:
    """``a`` must divide ``b`` (heads into a width, KV groups into heads)."""
    if b % a:
        raise ValueError(f"{a_name}={a} must divide {b_name}={b}")


def bool_tensor(x, name: str) -> torch.Tensor:
    """``x`` must be a bool tensor (a mask: True = keep); 0/1 integers or floats are refused."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bool:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a bool tensor, got {got}")
    return x


def broadcasts_to(x, name: str, shape: Sequence[int]) -> torch.Tensor:
    """``x`` must broadcast to exactly ``shape``: it may not enlarge it (a hidden broadcast)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    try:  # NumPy's rule is torch's, and it spares torch's first-call import of sympy
        ok = np.broadcast_shapes(_shape(x), tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {_shape(x)} does not broadcast to {tuple(shape)}")
    return x


def positive_entries(x, name: str) -> torch.Tensor:
    """Every entry of the tensor ``x`` must be > 0 (a step size; a value whose log is taken)."""
    if not bool((x > 0).all()):
        raise ValueError(
            f"{name} must be positive everywhere, got a minimum of {x.min().item():.3g}"
        )
    return x


def finite_or_neg_inf(x, name: str) -> torch.Tensor:
    """The tensor ``x`` must hold no NaN and no +inf; -inf (the log of a probability 0) is fine."""
    if bool(torch.isnan(x).any()) or bool((x == math.inf).any()):
        raise ValueError(f"{name} must not contain NaN or +inf")
    return x


def even_int(v, name: str) -> int:
    """``v`` must be an even int >= 2 (a width split into pairs of coordinates)."""
    if integer(v, name, low=2) % 2:
        raise ValueError(f"{name} must be even (pairs of coordinates), got {v}")
    return v


def float_array(
    x, name: str, ndim: int | None = None, *, all_finite: bool = False, not_empty: bool = False
) -> np.ndarray:
    """``x`` (a number, list, NumPy array or tensor) as a float64 NumPy array with ``ndim`` axes;
    optionally also non-empty and free of NaN/inf. The NumPy counterpart of ``float_tensor``."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = np.array(arr, dtype=np.float64, order="C")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {arr.shape}")
    if not_empty and arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    if all_finite and not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or infinity")
    return arr


def unit_interval(x, name: str):
    """Every entry of ``x`` (a number, array or tensor) must lie in [0, 1]; NaN is refused."""
    inside = (x >= 0) & (x <= 1)
    if not bool(inside.all() if hasattr(inside, "all") else inside):
        raise ValueError(f"{name} must lie in [0, 1]")
    return x


def binary(x, name: str):
    """Every entry of ``x`` (an array or tensor) must be 0 or 1 (0/1 outcomes)."""
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError(f"{name} must hold 0/1 outcomes only")
    return x


def fresh_id(v, name: str, *used) -> int:
    """``v`` must be an int >= 0 that occurs in none of the id collections ``used`` (a new token
    id equal to an existing one would make the result ambiguous)."""
    v = integer(v, name, low=0)
    if any(v in ids for ids in used):
        raise ValueError(f"{name}={v} collides with an id already in use: a new id must be fresh")
    return v


def distinct(x, name: str) -> torch.Tensor:
    """The entries of ``x`` along its last axis must differ (the k experts of one token): a
    repeated entry would silently overwrite or double-count."""
    srt = x.sort(dim=-1).values
    dup = (srt[..., 1:] == srt[..., :-1]).any(-1)  # one truth value per row
    if bool(dup.any()):
        row = [int(i) for i in dup.nonzero()[0]] if dup.ndim else []
        where = f"row {row[0] if len(row) == 1 else tuple(row)}" if row else "it"
        raise ValueError(f"{name} must hold distinct entries along its last axis: {where} repeats")
    return x


def nonsingular(m, name: str) -> torch.Tensor:
    """The square matrix ``m`` must be invertible to working precision (condition number below
    1/eps of its dtype): a solve with it would fail deep in torch or return noise."""
    cond = float(torch.linalg.cond(m))
    if not math.isfinite(cond) or cond * torch.finfo(m.dtype).eps > 1:
        detail = f" (condition number {cond:.3g})" if math.isfinite(cond) else ""
        raise ValueError(f"{name} must be invertible, got a singular matrix{detail}")
    return m


def cell_weights(x, h, W_ih, W_hh, b_ih, b_hh, gates: int) -> None:
    """A recurrent cell's weights in PyTorch's layout, ``gates`` blocks of H rows stacked:
    x (B, I), h (B, H), W_ih (gates H, I), W_hh (gates H, H), b_ih, b_hh (gates H,). Weights of
    another kind of cell would otherwise split silently into the wrong gates."""
    float_tensor(x, "x", ndim=2)
    H = float_tensor(h, "h", ndim=2).shape[1]
    shape_is(h, "h", (x.shape[0], H))
    shape_is(W_ih, "W_ih", (gates * H, x.shape[1]))
    shape_is(W_hh, "W_hh", (gates * H, H))
    shape_is(b_ih, "b_ih", (gates * H,))
    shape_is(b_hh, "b_hh", (gates * H,))
