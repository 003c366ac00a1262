"""Inverted dropout (formula sheet, chapter 16, eq. 16.4).

During training each unit is kept with probability p_keep and the survivors are divided by
p_keep, so the expected output equals the input and nothing needs rescaling at evaluation time,
when dropout is the identity. torch's ``F.dropout(x, p)`` takes the *drop* probability
p = 1 - p_keep.

Shape legend
    (...)  any shape: dropout acts elementwise
"""

from __future__ import annotations

import math

import torch

__all__ = ["dropout_mask", "dropout", "dropout_moments"]


def _check_p_keep(p_keep) -> float:
    if (
        isinstance(p_keep, bool)
        or not isinstance(p_keep, (int, float))
        or not math.isfinite(p_keep)
        or not 0 < p_keep <= 1
    ):
        raise ValueError(f"p_keep must be in (0, 1], got {p_keep!r}")
    return float(p_keep)


def dropout_mask(
    shape: tuple[int, ...], p_keep: float, gen: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A mask m of independent Bernoulli(p_keep) entries (1 = keep), of the given shape."""
    p_keep = _check_p_keep(p_keep)
    if not isinstance(gen, torch.Generator):
        raise TypeError(f"gen must be a torch.Generator, got {type(gen).__name__}")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape):
        raise ValueError(f"shape must be non-negative ints, got {shape!r}")
    return (torch.rand(shape, generator=gen, dtype=torch.float64) < p_keep).to(dtype)


def dropout(
    x: torch.Tensor, p_keep: float, gen: torch.Generator, training: bool = True
) -> torch.Tensor:
    """Dropout(x) = m * x / p_keep in training, x at evaluation. Implements eq. 16.4.

    Args:
        x: any shape, floating point.
        p_keep: the keep probability in (0, 1].
        gen: the generator that draws the mask.
        training: False returns x unchanged.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point torch.Tensor")
    p_keep = _check_p_keep(p_keep)
    if not training or p_keep == 1.0:
        return x
    m = dropout_mask(tuple(x.shape), p_keep, gen, x.dtype)
    return m * x / p_keep


def dropout_moments(x: torch.Tensor, p_keep: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact mean and variance of inverted dropout for a fixed input x.

    E[m x / p_keep] = x and Var[m x / p_keep] = x^2 (1 - p_keep) / p_keep = x^2 p / (1 - p)
    with the drop probability p = 1 - p_keep.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point torch.Tensor")
    p_keep = _check_p_keep(p_keep)
    return x.clone(), x * x * (1 - p_keep) / p_keep
