"""Argument checks shared by several modules (private: the public functions name the offending
argument, shape or value in their own errors through these helpers)."""

from __future__ import annotations

import torch


def float_tensor(x, name: str, ndim: int | None = None, min_ndim: int = 0) -> torch.Tensor:
    """``x`` must be a floating-point torch tensor, with ``ndim`` (or >= ``min_ndim``) axes."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {tuple(x.shape)}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes, got shape {tuple(x.shape)}")
    return x


def positive_int(v, name: str) -> int:
    """``v`` must be a positive int (bool excluded); anything else is a ValueError."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def int_at_least_one(v, name: str) -> int:
    """``v`` must be an int (TypeError otherwise, bool excluded) and at least 1 (ValueError)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return v
