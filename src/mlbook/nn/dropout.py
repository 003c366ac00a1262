"""Inverted dropout (chapter 16, eq. 16.4): keep each unit with probability p_keep, divide by it.

torch's ``F.dropout(x, p)`` takes the *drop* probability p = 1 - p_keep.

Shape legend
    (...)  any shape: dropout acts elementwise
"""

from __future__ import annotations

import torch

from ..validation import float_tensor, number

__all__ = ["dropout_mask", "dropout", "dropout_moments"]


def dropout_mask(
    shape: tuple[int, ...], p_keep: float, gen: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A mask m of independent Bernoulli(p_keep) entries (1 = keep), of the given shape."""
    p_keep = number(p_keep, "p_keep", 0.0, 1.0, open_low=True)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) < p_keep).to(dtype)


def dropout(
    x: torch.Tensor, p_keep: float, gen: torch.Generator, training: bool = True
) -> torch.Tensor:
    """Dropout(x) = m * x / p_keep in training, x at evaluation. Implements eq. 16.4.

    x: (...) floating point; p_keep in (0, 1]; gen draws the mask."""
    float_tensor(x, "x")
    p_keep = number(p_keep, "p_keep", 0.0, 1.0, open_low=True)
    if not training or p_keep == 1.0:
        return x
    m = dropout_mask(tuple(x.shape), p_keep, gen, x.dtype)
    return m * x / p_keep


def dropout_moments(x: torch.Tensor, p_keep: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact mean x and variance x^2 (1 - p_keep) / p_keep of inverted dropout at fixed x (...)."""
    float_tensor(x, "x")
    p_keep = number(p_keep, "p_keep", 0.0, 1.0, open_low=True)
    return x.clone(), x * x * (1 - p_keep) / p_keep
