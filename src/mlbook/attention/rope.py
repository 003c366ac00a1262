"""Rotary position embeddings (RoPE): rotate queries and keys by their positions (chapter 21).

Half-split pairing ``(x[i], x[i + d/2])`` (GPT-NeoX, Hugging Face Llama); the interleaved one
``(x[2i], x[2i + 1])`` differs by ``interleave_permutation(d)``. Context extension: "pi",
"ntk", "yarn". Naive references: :func:`apply_rope_complex`, :func:`rope_rotation_matrix`.

Shape legend
    x  (..., T, d) queries or keys, d even;  positions  (T,) or broadcastable to x.shape[:-1]
    freqs  (d/2,) angular frequencies theta_i
"""

from __future__ import annotations

import math

import torch

from ..validation import (
    broadcasts_to,
    float_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_int,
    shape_is,
)
from .positional import inverse_frequencies

__all__ = [
    "rope_frequencies",
    "yarn_attention_factor",
    "rotate_half",
    "apply_rope",
    "apply_rope_complex",
    "interleave_permutation",
    "rope_rotation_matrix",
    "rope_score_kernel",
]


def rope_frequencies(
    d: int,
    base: float = 10000.0,
    scale: float = 1.0,
    *,
    method: str = "pi",
    original_max_len: int | None = None,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> torch.Tensor:
    """RoPE's frequencies ``theta_i = base^(-2i/d)``, scaled by s for longer contexts. Eq. 21.3.

    method: ``"pi"`` (theta / s), ``"ntk"`` (base s^(d/(d-2))) or ``"yarn"`` (a ramp between
    ``beta_fast`` and ``beta_slow`` rotations in ``original_max_len``). Returns (d/2,) float64.
    """
    scale = number(scale, "scale", 1.0)
    one_of(method, "method", ("pi", "ntk", "yarn"))
    theta = inverse_frequencies(d, base)  # checks d and base
    if method == "pi":
        return theta / scale
    if method == "ntk":
        return inverse_frequencies(d, base * scale ** (d / (d - 2)))
    L = positive_int(original_max_len, "original_max_len")
    if not 0 < beta_slow < beta_fast:
        raise ValueError(f"need 0 < beta_slow < beta_fast, got {beta_slow}, {beta_fast}")

    def pair_index(rotations: float) -> float:
        # The (fractional) pair index i at which L * theta_i / (2 pi) equals `rotations`.
        return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_index(beta_fast)), 0)
    high = min(math.ceil(pair_index(beta_slow)), d - 1)
    if high == low:
        high += 0.001  # avoid a zero-width ramp
    i = torch.arange(d // 2, dtype=torch.float64)
    ramp = ((i - low) / (high - low)).clamp(0, 1)  # 0: keep, 1: interpolate
    return theta * (1 - ramp) + theta / scale * ramp


def yarn_attention_factor(scale: float) -> float:
    """YaRN's temperature correction ``0.1 ln s + 1`` (1 for s <= 1), applied to cos and sin."""
    scale = positive(scale, "scale")
    return 1.0 if scale <= 1 else 0.1 * math.log(scale) + 1.0


def _angles(x: torch.Tensor, positions, freqs: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    """The angles m * theta_i, (..., T, d/2) in ``work``."""
    x = float_tensor(x, "x", min_ndim=2)
    if x.shape[-1] % 2:
        raise ValueError(f"the head width d must be even (pairs of coordinates), got {x.shape}")
    shape_is(float_tensor(freqs, "freqs"), "freqs", (x.shape[-1] // 2,))
    broadcasts_to(positions, "positions", x.shape[:-1])
    return positions.to(work)[..., None] * freqs.to(device=x.device, dtype=work)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the halves of the last axis: a quarter turn of each plane.

    x: (..., d), d even.
    Returns (..., d).
    """
    if x.shape[-1] % 2:  # an odd width would silently shift the halves
        raise ValueError(f"x must have an even last axis, got shape {tuple(x.shape)}")
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate each plane ``(x[i], x[i+d/2])`` by ``m * theta_i``. Implements eq. 21.4.

    x: (..., T, d);  positions: (T,) or broadcastable to x.shape[:-1];  freqs: (d/2,).
    """
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = _angles(x, positions, freqs, work)  # (..., T, d/2)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)  # (..., T, d)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)  # (..., T, d)
    xw = x.to(work)
    return (xw * cos + rotate_half(xw) * sin).to(x.dtype)


def apply_rope_complex(
    x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor, *, pairing: str = "half"
) -> torch.Tensor:
    """Reference RoPE: each plane times ``exp(i m theta_i)``. Implements eq. 21.4.

    ``pairing``: ``"half"`` (as :func:`apply_rope`) or ``"interleaved"`` (x[2i], x[2i+1]).
    """
    one_of(pairing, "pairing", ("half", "interleaved"))
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = _angles(x, positions, freqs, work)  # (..., T, d/2)
    xw = x.to(work)
    h = x.shape[-1] // 2
    if pairing == "half":
        z = torch.complex(xw[..., :h], xw[..., h:])  # (..., T, d/2)
    else:
        z = torch.view_as_complex(xw.reshape(*x.shape[:-1], h, 2).contiguous())  # (..., T, d/2)
    z = z * torch.polar(torch.ones_like(angles), angles)  # rotate every plane
    if pairing == "half":
        out = torch.cat([z.real, z.imag], dim=-1)  # (..., T, d)
    else:
        out = torch.view_as_real(z).reshape(x.shape)  # (..., T, d/2, 2)->(..., T, d)
    return out.to(x.dtype)


def interleave_permutation(d: int) -> torch.Tensor:
    """Index turning an interleaved layout into a half-split one: ``x_half = x_inter[..., perm]``.

    Returns (d,) int64 ``[0, 2, ..., d-2, 1, 3, ..., d-1]``; its inverse is ``torch.argsort(perm)``.
    """
    if integer(d, "d", low=2) % 2:
        raise ValueError(f"d must be even, got {d}")
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def rope_rotation_matrix(position: float, freqs: torch.Tensor) -> torch.Tensor:
    """The explicit (d, d) rotation ``R_m`` of RoPE, half-split layout, built with loops.

    ``apply_rope(x, m, freqs) == x @ R_m.T``. Args: position m;  freqs (d/2,).
    Returns (d, d) float64 block rotation matrix.
    """
    position = number(position, "position")
    freqs = float_tensor(freqs, "freqs", ndim=1, not_empty=True)
    h = len(freqs)
    r = torch.zeros(2 * h, 2 * h, dtype=torch.float64)
    for i, theta in enumerate(freqs.tolist()):
        c, s = math.cos(position * theta), math.sin(position * theta)
        r[i, i], r[i, i + h] = c, -s
        r[i + h, i], r[i + h, i + h] = s, c
    return r


def rope_score_kernel(distances: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Expected RoPE score at distance n - m relative to distance 0: ``mean_i cos(k theta_i)``.

    distances: (N,) relative distances k = n - m;  freqs: (d/2,).
    Returns (N,) float64 values in [-1, 1].
    """
    for name, t in (("distances", distances), ("freqs", freqs)):
        nonempty(shape_is(t, name, (None,)), name)  # (N, 1) would broadcast to (N, d/2)
    return torch.cos(distances.double()[:, None] * freqs.double()[None, :]).mean(dim=1)
