"""Absolute and bias-based positional information for attention (chapter 21).

Attention (eq. 21.1) treats its input as a set: permute the tokens and the outputs are permuted
the same way. Position has to be put in from outside, in one of three places:

* added to the token embeddings before the projections: the fixed sinusoidal table (eqs. 21.2 and
  21.3) or a learned table (:class:`LearnedPositionalEmbedding`);
* applied to the queries and keys as a rotation: RoPE, in :mod:`mlbook.attention.rope` (eq. 21.4);
* added to the attention scores as a bias that falls with distance: ALiBi (eq. 21.5).

Shape legend
    T      sequence length (``Tq`` queries, ``Tk`` keys)
    d      model width of an absolute encoding, or head width ``d_h`` of attention
    d_v    value width
    H      number of attention heads
    ...    any leading batch dimensions, e.g. (B, H)

Conventions: positions count from 0; the sinusoidal table interleaves its pairs exactly as the
formula sheet writes eq. 21.2 (column ``2i`` holds the sine and column ``2i+1`` the cosine of
``t * theta_i``). Naive references sit beside the vectorised functions:
:func:`sinusoidal_encoding_naive` and :func:`alibi_bias_naive` (Python loops).
"""

from __future__ import annotations

import math

import torch
from torch import nn

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


def _check_width(d, name: str = "d") -> None:
    if isinstance(d, bool) or not isinstance(d, int):
        raise TypeError(f"{name} must be an int, got {type(d).__name__}")
    if d < 2 or d % 2:
        raise ValueError(f"{name} must be even and >= 2 (pairs of dimensions), got {d}")


def _check_base(base) -> None:
    if not isinstance(base, (int, float)) or isinstance(base, bool):
        raise TypeError(f"base must be a number, got {type(base).__name__}")
    if not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1, got {base}")


def _as_positions(positions) -> torch.Tensor:
    """An int T means positions 0..T-1; a 1-D tensor of positions is used as given (float64)."""
    if isinstance(positions, bool):
        raise TypeError("positions must be an int or a 1-D tensor, got bool")
    if isinstance(positions, int):
        if positions < 1:
            raise ValueError(f"need at least one position, got T={positions}")
        return torch.arange(positions, dtype=torch.float64)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(
            f"positions must be an int or a torch.Tensor, got {type(positions).__name__}"
        )
    if positions.ndim != 1 or positions.numel() == 0:
        raise ValueError(
            f"positions must be a non-empty 1-D tensor, got shape {tuple(positions.shape)}"
        )
    if positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be real numbers, got {positions.dtype}")
    return positions.to(torch.float64)


# --- eq. 21.1: attention, and where a positional bias enters ---------------------------------


def biased_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Scaled dot-product attention with an optional additive score bias.

    ``softmax(q k^T / sqrt(d_h) + bias) v``. Implements eq. 21.1; ``bias`` is where ALiBi
    (eq. 21.5) and the causal mask (``-inf`` above the diagonal) enter. (Chapter 19's
    :func:`mlbook.attention.dot_product.scaled_dot_product_attention` takes boolean masks only; positional
    biases are real numbers, hence this variant.)

    Args:
        q: (..., Tq, d_h) queries.
        k: (..., Tk, d_h) keys.
        v: (..., Tk, d_v) values.
        bias: optional, broadcastable to (..., Tq, Tk); ``-inf`` entries are masked out.

    Returns:
        (..., Tq, d_v) the attention outputs.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim < 2 or not t.is_floating_point():
            raise ValueError(
                f"{name} must be a floating tensor (..., T, width), got "
                f"shape {tuple(t.shape)} and dtype {t.dtype}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same width, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v need the same length, got k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor, got {type(bias).__name__}")
        try:
            torch.broadcast_shapes(bias.shape, scores.shape)
        except RuntimeError:
            raise ValueError(
                f"bias of shape {tuple(bias.shape)} does not broadcast to the "
                f"scores' shape {tuple(scores.shape)}"
            ) from None
        scores = scores + bias
    return torch.softmax(scores, dim=-1) @ v


def causal_bias(t_q: int, t_k: int | None = None, dtype: torch.dtype = torch.float64):
    """The causal mask as an additive bias: 0 where key s <= query t, ``-inf`` where s > t.

    With ``t_k > t_q`` the queries are the *last* ``t_q`` positions (as in a KV cache).

    Returns:
        (Tq, Tk) bias.
    """
    t_k = t_q if t_k is None else t_k
    for name, n in (("t_q", t_q), ("t_k", t_k)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")
    if t_k < t_q:
        raise ValueError(f"need t_k >= t_q (queries are the last positions), got {t_q}, {t_k}")
    t = torch.arange(t_k - t_q, t_k)[:, None]  # (Tq, 1) absolute query positions
    s = torch.arange(t_k)[None, :]  # (1, Tk) key positions
    zeros = torch.zeros(t_q, t_k, dtype=dtype)
    return zeros.masked_fill(s > t, float("-inf"))


# --- eqs. 21.2 and 21.3: the sinusoidal table and its frequency ladder -------------------------


def inverse_frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """The geometric ladder of angular frequencies ``theta_i = base^(-2i/d)``, i = 0..d/2-1.

    Implements eq. 21.3. Pair ``i`` turns by ``theta_i`` radians per position: pair 0 once every
    2*pi positions, the last pair once every ``2*pi*base^((d-2)/d)`` positions.

    Returns:
        (d/2,) float64 frequencies, decreasing from 1.
    """
    _check_width(d)
    _check_base(base)
    i = torch.arange(d // 2, dtype=torch.float64)
    return base ** (-2.0 * i / d)


def sinusoidal_encoding(positions, d: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed sinusoidal position table of the original Transformer.

    ``p[t, 2i] = sin(t * theta_i)`` and ``p[t, 2i+1] = cos(t * theta_i)``: implements eq. 21.2
    with the frequencies of eq. 21.3.

    Args:
        positions: an int T (positions 0..T-1) or a (T,) tensor of positions (may be fractional).
        d: the model width, even.

    Returns:
        (T, d) float64 table; row t is added to the embedding of the token at position t.
    """
    t = _as_positions(positions)
    theta = inverse_frequencies(d, base)
    angles = t[:, None] * theta[None, :]  # (T, d/2)
    pairs = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d/2, 2)
    return pairs.reshape(len(t), d)  # (T, d/2, 2) -> (T, d)


def sinusoidal_encoding_naive(positions, d: int, base: float = 10000.0) -> torch.Tensor:
    """Reference for :func:`sinusoidal_encoding`: two Python loops and ``math.sin``/``math.cos``."""
    t = _as_positions(positions)
    _check_width(d)
    _check_base(base)
    out = torch.empty(len(t), d, dtype=torch.float64)
    for row, pos in enumerate(t.tolist()):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            out[row, 2 * i] = math.sin(angle)
            out[row, 2 * i + 1] = math.cos(angle)
    return out


def sinusoidal_shift_matrix(k: float, d: int, base: float = 10000.0) -> torch.Tensor:
    """The linear map that moves a sinusoidal encoding ``k`` positions: ``p[t+k] = M_k p[t]``.

    By the angle-addition formulas each (sin, cos) pair is rotated:
    ``[sin(a+b), cos(a+b)] = [[cos b, sin b], [-sin b, cos b]] [sin a, cos a]`` with
    ``b = k * theta_i``. ``M_k`` is block diagonal with these 2x2 blocks and does not depend on t.

    Returns:
        (d, d) float64 matrix (column-vector convention: ``p[t+k] = M_k @ p[t]``).
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)):
        raise TypeError(f"k must be a number, got {type(k).__name__}")
    b = k * inverse_frequencies(d, base)  # (d/2,) rotation angles
    m = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(d // 2)
    m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = b.cos(), b.sin()
    m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -b.sin(), b.cos()
    return m


# --- learned absolute positions ----------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """A learned table of ``max_len`` position vectors (BERT, GPT-2): an ``nn.Embedding``.

    Each position has its own free vector, trained like a token embedding. The table has no
    row for a position at or beyond ``max_len``: such a sequence cannot even be embedded, and
    nothing relates row 17 to row 18 except what training happened to put there.

    Args:
        max_len: number of positions in the table.
        d: model width.
    """

    def __init__(self, max_len: int, d: int):
        super().__init__()
        for name, n in (("max_len", max_len), ("d", d)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be a positive int, got {n!r}")
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions: (...,) int tensor in [0, max_len). Returns (..., d) position vectors."""
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got {positions.dtype}")
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= self.max_len):
            raise ValueError(
                f"positions must lie in [0, {self.max_len}): this table was built for at most "
                f"{self.max_len} positions, got range "
                f"[{int(positions.min())}, {int(positions.max())}]"
            )
        return self.table(positions)


# --- eq. 21.5: ALiBi ---------------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes: ``m_h = 2^(-8h/H)`` for h = 1..H when H is a power of two.

    For other H, the recipe of Press et al.: the slopes of the largest power of two
    ``P < H``, followed by every other slope of ``2P`` heads (the ones that fall between them),
    until there are H.

    Returns:
        (H,) float64 slopes, decreasing.
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")

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
    """ALiBi's additive score bias for ``t`` positions, one (T, T) matrix per head.

    ``form="relative"``: ``-m_h (t - s)`` for key s <= query t (implements eq. 21.5).
    ``form="key"``: ``+m_h s``, the cheaper form used in practice; the two differ by
    ``-m_h t``, a constant in each query row, which the softmax ignores.
    With ``causal=True`` entries with s > t are ``-inf`` (masked); with ``causal=False`` the
    relative form becomes the symmetric ``-m_h |t - s|`` (and the key form is no longer
    equivalent to it).

    Args:
        slopes: (H,) positive slopes.
        t: sequence length T.

    Returns:
        (H, T, T) float64 bias, to add to the (..., H, T, T) scores.
    """
    if not isinstance(slopes, torch.Tensor):
        raise TypeError(f"slopes must be a torch.Tensor, got {type(slopes).__name__}")
    if slopes.ndim != 1 or slopes.numel() == 0 or not bool((slopes > 0).all()):
        raise ValueError(
            f"slopes must be a non-empty 1-D tensor of positive numbers, got shape "
            f"{tuple(slopes.shape)}"
        )
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError(f"t must be a positive int, got {t!r}")
    if form not in ("relative", "key"):
        raise ValueError(f"form must be 'relative' or 'key', got {form!r}")
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
    if not isinstance(slopes, torch.Tensor) or slopes.ndim != 1:
        raise TypeError("slopes must be a 1-D torch.Tensor")
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError(f"t must be a positive int, got {t!r}")
    out = torch.empty(len(slopes), t, t, dtype=torch.float64)
    for h, m in enumerate(slopes.tolist()):
        for i in range(t):
            for j in range(t):
                out[h, i, j] = -m * (i - j) if j <= i else float("-inf")
    return out
