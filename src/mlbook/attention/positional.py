"""Absolute and bias-based positional information for attention (chapter 21).

Sinusoidal tables (eqs. 21.2-21.3; column 2i sine, 2i+1 cosine), learned tables, and ALiBi's
score bias (eq. 21.5), entering attention by :func:`biased_attention` (eq. 21.1).

Shape legend
    T  length (Tq queries, Tk keys);  d  width;  H  heads;  ...  leading axes, e.g. (B, H)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..validation import (
    broadcasts_to,
    even_int,
    float_tensor,
    index_tensor,
    nonempty,
    number,
    one_of,
    positive_entries,
    positive_int,
    shape_is,
)

__all__ = [
    "biased_attention",
    "causal_bias",
    "inverse_frequencies",
    "sinusoidal_encoding",
    "sinusoidal_encoding_naive",
    "sinusoidal_shift_matrix",
    "LearnedPositionalEmbedding",
    "alibi_slopes",
    "alibi_bias",
    "alibi_bias_naive",
]


def _positions(positions) -> torch.Tensor:
    """An int T means positions 0..T-1; a (T,) tensor is used as given; float64."""
    if isinstance(positions, torch.Tensor):
        return nonempty(shape_is(positions, "positions", (None,)), "positions").double()
    return torch.arange(positive_int(positions, "positions"), dtype=torch.float64)


# --- eq. 21.1: attention, and where a positional bias enters ---------------------------------


def biased_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d_h) + bias) v``. Implements eq. 21.1.

    q: (..., Tq, d_h);  k: (..., Tk, d_h);  v: (..., Tk, d_v);  bias: broadcastable to
    (..., Tq, Tk).
    """
    q, k, v = (float_tensor(t, n, min_ndim=2) for t, n in zip((q, k, v), "qkv", strict=True))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if bias is not None:
        scores = scores + broadcasts_to(bias, "bias", scores.shape)
    return torch.softmax(scores, dim=-1) @ v


def causal_bias(t_q: int, t_k: int | None = None, dtype: torch.dtype = torch.float64):
    """The causal mask as an additive bias: 0 where key s <= query t, ``-inf`` where s > t.

    With ``t_k > t_q`` the queries are the last ``t_q`` positions (as in a KV cache).
    Returns (Tq, Tk) bias.
    """
    t_q = positive_int(t_q, "t_q")
    t_k = t_q if t_k is None else positive_int(t_k, "t_k")
    if t_k < t_q:  # the first queries would see no key at all: a row of nan
        raise ValueError(f"need t_k >= t_q (queries are the last positions), got {t_q}, {t_k}")
    t = torch.arange(t_k - t_q, t_k)[:, None]  # (Tq, 1) absolute query positions
    s = torch.arange(t_k)[None, :]  # (1, Tk) key positions
    zeros = torch.zeros(t_q, t_k, dtype=dtype)
    return zeros.masked_fill(s > t, float("-inf"))


# --- eqs. 21.2 and 21.3: the sinusoidal table and its frequency ladder -------------------------


def inverse_frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """The frequency ladder ``theta_i = base^(-2i/d)``, i = 0..d/2-1. Implements eq. 21.3.

    Returns (d/2,) float64 frequencies, decreasing from 1.
    """
    d = even_int(d, "d")
    base = number(base, "base", 1.0, open_low=True)
    i = torch.arange(d // 2, dtype=torch.float64)
    return base ** (-2.0 * i / d)


def sinusoidal_encoding(positions, d: int, base: float = 10000.0) -> torch.Tensor:
    """The (T, d) sinusoidal table, ``p[t, 2i] = sin(t theta_i)``, ``cos`` at 2i+1. Eqs. 21.2-21.3.

    positions: an int T (0..T-1) or a (T,) tensor;  d: even.
    """
    t = _positions(positions)
    theta = inverse_frequencies(d, base)
    angles = t[:, None] * theta[None, :]  # (T, d/2)
    pairs = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d/2, 2)
    return pairs.reshape(len(t), d)  # (T, d/2, 2) -> (T, d)


def sinusoidal_encoding_naive(positions, d: int, base: float = 10000.0) -> torch.Tensor:
    """Reference for :func:`sinusoidal_encoding`: two Python loops and ``math.sin``/``math.cos``."""
    t = _positions(positions)
    d = even_int(d, "d")
    base = number(base, "base", 1.0, open_low=True)
    out = torch.empty(len(t), d, dtype=torch.float64)
    for row, pos in enumerate(t.tolist()):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            out[row, 2 * i] = math.sin(angle)
            out[row, 2 * i + 1] = math.cos(angle)
    return out


def sinusoidal_shift_matrix(k: float, d: int, base: float = 10000.0) -> torch.Tensor:
    """The linear map moving a sinusoidal encoding by ``k`` positions: ``p[t+k] = M_k p[t]``.

    Block diagonal, one 2x2 rotation by ``k theta_i`` per (sin, cos) pair; independent of t.
    Returns (d, d) float64 matrix (column-vector convention).
    """
    b = number(k, "k") * inverse_frequencies(d, base)  # (d/2,) rotation angles
    m = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(d // 2)
    m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = b.cos(), b.sin()
    m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -b.sin(), b.cos()
    return m


# --- learned absolute positions ----------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """A learned table of ``max_len`` position vectors (BERT, GPT-2): an ``nn.Embedding``.

    max_len: number of positions in the table (no row for a position beyond it);  d: model width.
    """

    def __init__(self, max_len: int, d: int):
        super().__init__()
        self.max_len = positive_int(max_len, "max_len")
        self.table = nn.Embedding(max_len, positive_int(d, "d"))

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions: (...,) int tensor in [0, max_len). Returns (..., d) position vectors."""
        return self.table(index_tensor(positions, "positions", self.max_len))


# --- eq. 21.5: ALiBi ---------------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes, the paper's rule for any number of heads H.

    H a power of two: the geometric sequence ``2^(-8/H), 2^(-16/H), ..., 2^(-8)``, i.e.
    ``m_h = 2^(-8h/H)`` for h = 1..H, decreasing. Other H (the paper's code): the P slopes of
    ``P = 2^floor(log2 H)`` heads, then the first H - P of the slopes ``2^(-4/P), 2^(-12/P),
    ...`` (every other slope of 2P heads), which fall between them: not sorted.
    Returns (H,) float64 slopes in that order.
    """
    n_heads = positive_int(n_heads, "n_heads")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(p)
    if p < n_heads:
        slopes += power_of_two(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(
    slopes: torch.Tensor, t: int, *, form: str = "relative", causal: bool = True
) -> torch.Tensor:
    """ALiBi's (H, T, T) score bias from (H,) slopes. Implements eq. 21.5.

    form: ``"relative"`` (-m_h |t - s|) or ``"key"`` (+m_h s, equal after the softmax when causal);
    causal: entries with s > t are ``-inf``.
    """
    slopes = positive_entries(nonempty(shape_is(slopes, "slopes", (None,)), "slopes"), "slopes")
    t = positive_int(t, "t")
    one_of(form, "form", ("relative", "key"))
    pos = torch.arange(t, dtype=torch.float64)
    if form == "relative":
        dist = (pos[:, None] - pos[None, :]).abs()  # (T, T) |t - s|
        bias = -slopes.double()[:, None, None] * dist[None]  # (H, T, T)
    else:
        bias = slopes.double()[:, None, None] * pos[None, None, :].expand(1, t, t)  # (H, T, T)
    if causal:
        bias = bias + causal_bias(t)[None]
    return bias


def alibi_bias_naive(slopes: torch.Tensor, t: int) -> torch.Tensor:
    """Reference for the causal, relative :func:`alibi_bias`: three Python loops."""
    slopes = shape_is(slopes, "slopes", (None,))
    out = torch.empty(len(slopes), positive_int(t, "t"), t, dtype=torch.float64)
    for h, m in enumerate(slopes.tolist()):
        for i in range(t):
            for j in range(t):
                out[h, i, j] = -m * (i - j) if j <= i else float("-inf")
    return out
