"""Rotary position embeddings (RoPE): rotate queries and keys by their positions (chapter 21).

RoPE splits a head of width d into d/2 planes and turns the 2-D vector in plane i by the angle
``m * theta_i`` at position m, with the frequency ladder ``theta_i = b^(-2i/d)`` (eq. 21.3).
Rotations compose, ``R_m^T R_n = R_(n-m)``, so the score of a rotated query and a rotated key
depends on their positions only through ``n - m`` (eq. 21.4).

Pairing conventions (which two coordinates form plane i)
    half-split   (x[i], x[i + d/2])   "rotate-half": GPT-NeoX, Hugging Face Llama/Mistral/Qwen.
                 :func:`apply_rope` uses it; it needs no complex numbers and no strided access.
    interleaved  (x[2i], x[2i + 1])   the RoFormer paper and Meta's original Llama code, which views
                 the pairs as complex numbers.
    The two are the same map up to a fixed permutation of the coordinates,
    ``perm = interleave_permutation(d)``:
    ``apply_rope_complex(x, ..., pairing="interleaved")
    == apply_rope(x[..., perm], ...)[..., inverse(perm)]``. Checkpoint converters permute the rows
    of W_q and W_k once, so that a model trained in one convention runs in the other.

Context extension (:func:`rope_frequencies`, ``scale = s = new context / trained context``)
    ``"pi"``    position interpolation: every frequency divided by s (positions squeezed by s).
    ``"ntk"``   NTK-aware base scaling: ``b -> b * s^(d/(d-2))``; the fastest pair is unchanged,
                the slowest is divided by exactly s, the ones between by a geometric blend.
    ``"yarn"``  YaRN's NTK-by-parts: pairs that turn more than ``beta_fast`` times within the
                trained context keep their frequency, pairs that turn fewer than ``beta_slow``
                times are interpolated by s, a linear ramp in the pair index in between; pair it
                with :func:`yarn_attention_factor`.

Shape legend
    d      head width (even); d/2 rotation planes
    T      number of positions
    x      (..., T, d) queries or keys, e.g. (B, H, T, d)
    positions  (T,) positions (int or float), or any shape broadcastable to x.shape[:-1]
    freqs  (d/2,) angular frequencies theta_i, radians per position

Naive references: :func:`apply_rope_complex` (complex multiplication) and
:func:`rope_rotation_matrix` (the explicit block rotation matrix, built with Python loops).
"""

from __future__ import annotations

import math

import torch

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

_METHODS = ("pi", "ntk", "yarn")


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
    """RoPE's angular frequencies ``theta_i = base^(-2i/d)``, optionally scaled for longer contexts.

    Implements eq. 21.3; ``scale = 1`` returns it unchanged for every ``method``.

    Args:
        d: head width, even.
        base: the base b (10000 in RoFormer and Llama 2, 500000 in Llama 3).
        scale: s >= 1, the factor by which the context is extended.
        method: ``"pi"`` (position interpolation), ``"ntk"`` (NTK-aware base scaling) or
            ``"yarn"`` (NTK-by-parts, as in the YaRN reference code and Hugging Face).
        original_max_len: the trained context length L (``"yarn"`` only).
        beta_fast, beta_slow: YaRN's rotation counts bounding the ramp (defaults 32 and 1).

    Returns:
        (d/2,) float64 frequencies.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a number, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale < 1:
        raise ValueError(f"scale must be a finite number >= 1 (a context extension), got {scale}")
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    theta = inverse_frequencies(d, base)  # validates d and base
    if method == "pi":
        return theta / scale
    if method == "ntk":
        return inverse_frequencies(d, base * scale ** (d / (d - 2)))
    if (
        isinstance(original_max_len, bool)
        or not isinstance(original_max_len, int)
        or original_max_len < 1
    ):
        raise ValueError(
            f"method='yarn' needs original_max_len, a positive int, got {original_max_len!r}"
        )
    if not 0 < beta_slow < beta_fast:
        raise ValueError(f"need 0 < beta_slow < beta_fast, got {beta_slow}, {beta_fast}")

    def pair_index(rotations: float) -> float:
        # The (fractional) pair index i at which L * theta_i / (2 pi) equals `rotations`.
        return d * math.log(original_max_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_index(beta_fast)), 0)
    high = min(math.ceil(pair_index(beta_slow)), d - 1)
    if high == low:
        high += 0.001  # avoid a zero-width ramp
    i = torch.arange(d // 2, dtype=torch.float64)
    ramp = ((i - low) / (high - low)).clamp(0, 1)  # 0: keep, 1: interpolate
    return theta * (1 - ramp) + theta / scale * ramp


def yarn_attention_factor(scale: float) -> float:
    """YaRN's attention temperature correction ``0.1 ln s + 1`` (1 for s <= 1).

    It multiplies cos and sin, that is both the rotated queries and keys, so the attention
    logits grow by its square: longer contexts spread the softmax, and this sharpens it back.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    return 1.0 if scale <= 1 else 0.1 * math.log(scale) + 1.0


def _angles(x: torch.Tensor, positions, freqs: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    """Validate the arguments and return the angles m * theta_i, (..., T, d/2) in ``work``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., T, d), got {tuple(x.shape)}")
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"the head width d must be even (pairs of coordinates), got {d}")
    if not isinstance(freqs, torch.Tensor):
        raise TypeError(f"freqs must be a torch.Tensor, got {type(freqs).__name__}")
    if freqs.shape != (d // 2,):
        raise ValueError(
            f"freqs must have shape (d/2,) = ({d // 2},) for x of width {d}, got "
            f"{tuple(freqs.shape)}"
        )
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be real numbers, got {positions.dtype}")
    try:
        shape = torch.broadcast_shapes(positions.shape, x.shape[:-1])
    except RuntimeError:
        shape = None
    if shape != x.shape[:-1]:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not broadcast to "
            f"x.shape[:-1] = {tuple(x.shape[:-1])}"
        )
    return positions.to(work)[..., None] * freqs.to(device=x.device, dtype=work)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last axis: a quarter turn of each plane.

    Args:
        x: (..., d) with d even. Returns (..., d).
    """
    if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] % 2:
        raise ValueError("rotate_half needs a tensor whose last axis has even length")
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate each plane ``(x[i], x[i+d/2])`` of x by ``m * theta_i`` (half-split pairing).

    ``x * cos + rotate_half(x) * sin`` with cos and sin repeated over both halves: the
    rotate-half form of eq. 21.4, as in GPT-NeoX and Llama. Angles are formed in float32
    (float64 for float64 input) and the result is returned in x's dtype.

    Args:
        x: (..., T, d) queries or keys.
        positions: (T,) positions, or broadcastable to x.shape[:-1] (e.g. (B, 1, T)).
        freqs: (d/2,) frequencies from :func:`rope_frequencies`.

    Returns:
        (..., T, d) rotated x.
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
    """Reference RoPE: view each plane as a complex number and multiply by ``exp(i m theta_i)``.

    Implements eq. 21.4 literally (a rotation of the plane is a multiplication by a unit complex
    number). ``pairing="half"`` pairs ``(x[i], x[i+d/2])`` and equals :func:`apply_rope`;
    ``pairing="interleaved"`` pairs ``(x[2i], x[2i+1])`` as in RoFormer and Meta's Llama code.

    Args:
        x: (..., T, d); positions: (T,) or broadcastable to x.shape[:-1]; freqs: (d/2,).

    Returns:
        (..., T, d) rotated x, in x's dtype.
    """
    if pairing not in ("half", "interleaved"):
        raise ValueError(f"pairing must be 'half' or 'interleaved', got {pairing!r}")
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

    ``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]``: plane i's coordinates (2i, 2i+1) move to
    (i, i + d/2). Its inverse is ``torch.argsort(perm)``.

    Returns:
        (d,) int64 permutation.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 2 or d % 2:
        raise ValueError(f"d must be an even int >= 2, got {d!r}")
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def rope_rotation_matrix(position: float, freqs: torch.Tensor) -> torch.Tensor:
    """The explicit d x d rotation ``R_m`` of RoPE (half-split layout), built with Python loops.

    ``apply_rope(x, m, freqs) == x @ R_m.T`` for row vectors x; ``R_m^T R_n = R_(n-m)``.

    Args:
        position: m (int or float).
        freqs: (d/2,) frequencies.

    Returns:
        (d, d) float64 block rotation matrix.
    """
    if isinstance(position, bool) or not isinstance(position, (int, float)):
        raise TypeError(f"position must be a number, got {type(position).__name__}")
    if not isinstance(freqs, torch.Tensor) or freqs.ndim != 1 or freqs.numel() == 0:
        raise ValueError("freqs must be a non-empty 1-D tensor")
    h = len(freqs)
    r = torch.zeros(2 * h, 2 * h, dtype=torch.float64)
    for i, theta in enumerate(freqs.tolist()):
        c, s = math.cos(position * theta), math.sin(position * theta)
        r[i, i], r[i, i + h] = c, -s
        r[i + h, i], r[i + h, i + h] = s, c
    return r


def rope_score_kernel(distances: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Expected RoPE score of a vector with itself at distance n - m, relative to distance 0.

    For q with independent zero-mean coordinates of equal variance,
    ``E[<R_m q, R_n q>] / E[|q|^2] = mean_i cos((n - m) theta_i)``: 1 at distance 0, then an
    oscillating decay as the planes fall out of phase. It is also the similarity of two
    sinusoidal encodings, ``<p_t, p_(t+k)> / (d/2)``.

    Args:
        distances: (N,) relative distances n - m (any real numbers).
        freqs: (d/2,) frequencies.

    Returns:
        (N,) float64 kernel values in [-1, 1].
    """
    for name, t in (("distances", distances), ("freqs", freqs)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 1 or t.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 1-D tensor, got shape {tuple(t.shape)}")
    return torch.cos(distances.double()[:, None] * freqs.double()[None, :]).mean(dim=1)
