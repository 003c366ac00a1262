"""Online softmax: the softmax statistics computed in one streaming pass (chapter 26).

A softmax over n scores needs two numbers, the maximum ``m`` and the shifted sum ``l`` (eq. 26.1).
Both can be computed block by block, keeping only a running pair (m, l): when a block arrives
with its own pair (m_B, l_B), the old sum is rescaled to the new maximum and the two are added
(eq. 26.2). The same rescaling carries a running, unnormalised attention output ``n`` (eq. 26.3),
and dividing by ``l`` at the very end gives exact attention (eq. 26.4). Because the merge is
associative, partial states can be combined in any grouping: sequentially (FlashAttention's
inner loop), as a tree, or across devices (split-K / "flash decoding").

Shape legend
    (...)  leading axes: independent rows (queries, heads, batch)
    n      number of scores in a row (keys)
    B      number of scores in one block
    d_v    width of a value vector
    s      (..., n) scores;  v  (n, d_v) or (..., n, d_v) values
    m, l   (...) running maximum and running sum of exp(s - m)
    acc    (..., d_v) running numerator sum_j exp(s_j - m) v_j  (called n in eq. 26.3)

A score of ``-inf`` is a masked key: it contributes nothing. A row whose scores are *all* ``-inf``
has m = -inf and l = 0; every merge below keeps such a row at exactly (m, l, acc) = (-inf, 0, 0)
instead of producing ``nan`` from ``-inf - (-inf)``.
"""

from __future__ import annotations

import torch

__all__ = [
    "softmax_stats",
    "merge_stats",
    "streaming_stats",
    "streaming_softmax",
    "block_state",
    "merge_states",
    "streaming_attention",
    "finalize",
]


# --- validation ----------------------------------------------------------------------------------


def _check_scores(s, name: str = "s") -> None:
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(s).__name__}")
    if not s.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {s.dtype}")
    if s.ndim < 1 or s.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (..., n) with n >= 1, got {tuple(s.shape)}")
    if torch.isnan(s).any() or (s == float("inf")).any():
        raise ValueError(f"{name} must not contain nan or +inf (-inf marks a masked entry)")


def _check_block_size(block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    return block_size


def _check_pair(m, l, name: str) -> None:
    for x, what in ((m, "m"), (l, "l")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what}_{name} must be a torch.Tensor, got {type(x).__name__}")
    if m.shape != l.shape:
        raise ValueError(
            f"m_{name} and l_{name} must have the same shape, got {tuple(m.shape)} and "
            f"{tuple(l.shape)}"
        )


def _rescale(m_old: torch.Tensor, m_new: torch.Tensor) -> torch.Tensor:
    """exp(m_old - m_new), defined as 0 where m_old = -inf (an empty state; avoids -inf + inf)."""
    return torch.where(m_old == float("-inf"), torch.zeros_like(m_old), torch.exp(m_old - m_new))


# --- eq. 26.1: the two statistics of a softmax ---------------------------------------------------


def softmax_stats(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The maximum and the shifted sum of a row of scores: m = max_i s_i, l = sum_i e^(s_i - m).

    softmax(s)_i = e^(s_i - m) / l, and log-sum-exp(s) = m + log l. Implements eq. 26.1.

    Args:
        s: (..., n) scores; -inf marks masked entries.

    Returns:
        m: (...) row maxima (-inf for an all-masked row).
        l: (...) sums of exp(s - m), in [1, n] (0 for an all-masked row).
    """
    _check_scores(s)
    m = s.max(dim=-1).values  # (...)
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    l = torch.exp(s - m_safe[..., None]).sum(dim=-1)  # (..., n) -> (...)
    return m, l


# --- eq. 26.2: merging two partial (m, l) pairs ---------------------------------------------------


def merge_stats(m_a, l_a, m_b, l_b) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine the statistics of two disjoint parts of a row into those of their union.

    m = max(m_a, m_b) and l = e^(m_a - m) l_a + e^(m_b - m) l_b. Implements eq. 26.2 (with
    (m_old, l_old) = (m_a, l_a) and (m_B, l_B) = (m_b, l_b)). The operation is associative and
    commutative, with identity (-inf, 0).

    Args:
        m_a, l_a: (...) statistics of the first part.
        m_b, l_b: (...) statistics of the second part (same shape).

    Returns:
        (m, l): (...) statistics of both parts together.
    """
    _check_pair(m_a, l_a, "a")
    _check_pair(m_b, l_b, "b")
    if m_a.shape != m_b.shape:
        raise ValueError(
            f"the two states must have one shape, got {tuple(m_a.shape)} and {tuple(m_b.shape)}"
        )
    m = torch.maximum(m_a, m_b)
    return m, _rescale(m_a, m) * l_a + _rescale(m_b, m) * l_b


def streaming_stats(s: torch.Tensor, block_size: int, history: bool = False):
    """(m, l) of eq. 26.1 computed block by block with the update of eq. 26.2.

    The row is read once, ``block_size`` scores at a time (the last block may be shorter); only
    the running pair is kept. Implements eqs. 26.1-26.2.

    Args:
        s: (..., n) scores.
        block_size: number of scores per block, any positive int (need not divide n).
        history: also return the running pair after every block.

    Returns:
        (m, l): (...) as :func:`softmax_stats`; with ``history=True`` also a list with one
        (m, l) pair per block.
    """
    _check_scores(s)
    _check_block_size(block_size)
    m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
    l = torch.zeros(s.shape[:-1], dtype=s.dtype, device=s.device)
    steps = []
    for start in range(0, s.shape[-1], block_size):
        m_b, l_b = softmax_stats(s[..., start : start + block_size])  # the block's own eq. 26.1
        m, l = merge_stats(m, l, m_b, l_b)  # eq. 26.2
        if history:
            steps.append((m.clone(), l.clone()))
    return (m, l, steps) if history else (m, l)


def streaming_softmax(s: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(s) along the last axis from the streamed statistics: e^(s_i - m) / l.

    One streaming pass for (m, l) (eqs. 26.1-26.2), one pass to normalise: two reads of s
    instead of the three of the textbook softmax (max, sum, normalise). An all-masked row gives
    zeros.

    Args:
        s: (..., n) scores.
        block_size: as :func:`streaming_stats`.

    Returns:
        (..., n) probabilities.
    """
    m, l = streaming_stats(s, block_size)
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    l_safe = torch.where(l == 0, torch.ones_like(l), l)
    return torch.exp(s - m_safe[..., None]) / l_safe[..., None]


# --- eqs. 26.3-26.4: the same recurrence carrying the attention numerator ------------------------


def block_state(s: torch.Tensor, v: torch.Tensor):
    """The partial state (m, l, acc) of one block of keys: its eq. 26.1 and sum_j e^(s_j - m) v_j.

    Args:
        s: (..., B) scores of the block's keys.
        v: (..., B, d_v) or (B, d_v) the block's values (broadcast over the leading axes).

    Returns:
        m, l: (...) as :func:`softmax_stats`.
        acc: (..., d_v) the unnormalised numerator of the block.
    """
    _check_scores(s)
    if not isinstance(v, torch.Tensor) or v.ndim < 2 or v.shape[-2] != s.shape[-1]:
        raise ValueError(
            f"v must have shape (..., B, d_v) with B = {s.shape[-1]} (from s), got "
            f"{tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__}"
        )
    m, l = softmax_stats(s)
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    p = torch.exp(s - m_safe[..., None])  # (..., B)
    acc = (p[..., None, :] @ v)[..., 0, :]  # (..., 1, B) @ (B, d_v) -> (..., d_v)
    return m, l, acc


def merge_states(state_a, state_b):
    """Combine two partial attention states (m, l, acc) over disjoint key sets.

    m = max(m_a, m_b);  l as eq. 26.2;  acc = e^(m_a - m) acc_a + e^(m_b - m) acc_b.
    Implements eqs. 26.2-26.3 (acc is the vector n of eq. 26.3; the block's sum
    sum_{j in B} e^(s_j - m_B) v_j is the acc_b that :func:`block_state` returns).

    Args:
        state_a, state_b: tuples (m (...), l (...), acc (..., d_v)).

    Returns:
        the merged tuple (m, l, acc).
    """
    for st, name in ((state_a, "state_a"), (state_b, "state_b")):
        if not (isinstance(st, tuple) and len(st) == 3):
            raise TypeError(f"{name} must be a tuple (m, l, acc), got {type(st).__name__}")
        if st[2].shape[:-1] != st[0].shape:
            raise ValueError(
                f"{name}: acc {tuple(st[2].shape)} must be m's shape "
                f"{tuple(st[0].shape)} plus a value axis"
            )
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = state_a, state_b
    m, l = merge_stats(m_a, l_a, m_b, l_b)
    alpha, beta = _rescale(m_a, m), _rescale(m_b, m)
    return m, l, alpha[..., None] * acc_a + beta[..., None] * acc_b


def finalize(acc: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """attn = acc / l, the normalised attention output; 0 for an all-masked row. Eq. 26.4.

    Args:
        acc: (..., d_v) numerator;  l: (...) denominator.
    """
    if not isinstance(acc, torch.Tensor) or not isinstance(l, torch.Tensor):
        raise TypeError("acc and l must be torch tensors")
    if acc.shape[:-1] != l.shape:
        raise ValueError(
            f"acc {tuple(acc.shape)} must be l's shape {tuple(l.shape)} plus a value axis"
        )
    l_safe = torch.where(l == 0, torch.ones_like(l), l)
    return acc / l_safe[..., None]


def streaming_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, scale: float | None = None
) -> torch.Tensor:
    """Attention of queries over keys streamed in blocks: eqs. 26.1-26.4 in one loop.

    For each block of keys: scores s = scale * q k_B^T, the block's state (:func:`block_state`),
    merged into the running state (:func:`merge_states`); at the end acc / l (:func:`finalize`).
    No (T_q, n) score matrix exists at any time, only (T_q, B) blocks.

    Args:
        q: (..., d) one query or (..., T_q, d) several.
        k: (n, d) keys;  v: (n, d_v) values.
        block_size: keys per block, any positive int.
        scale: score multiplier, default 1/sqrt(d).

    Returns:
        (..., d_v) or (..., T_q, d_v): softmax(scale q k^T) v.
    """
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point torch.Tensor")
    if k.ndim != 2 or v.ndim != 2 or k.shape[0] != v.shape[0] or k.shape[0] == 0:
        raise ValueError(
            f"k and v must be (n, d) and (n, d_v) with n >= 1, got "
            f"{tuple(k.shape)} and {tuple(v.shape)}"
        )
    if q.ndim < 1 or q.shape[-1] != k.shape[1]:
        raise ValueError(f"q {tuple(q.shape)} must end in d = {k.shape[1]} (from k)")
    _check_block_size(block_size)
    c = q.shape[-1] ** -0.5 if scale is None else float(scale)
    batch = q.shape[:-1]
    state = (
        torch.full(batch, float("-inf"), dtype=q.dtype, device=q.device),
        torch.zeros(batch, dtype=q.dtype, device=q.device),
        torch.zeros(batch + (v.shape[1],), dtype=q.dtype, device=q.device),
    )
    for start in range(0, k.shape[0], block_size):
        k_b, v_b = k[start : start + block_size], v[start : start + block_size]
        s = c * (q @ k_b.T)  # (..., d) @ (d, B) -> (..., B)
        state = merge_states(state, block_state(s, v_b))
    m, l, acc = state
    return finalize(acc, l)
