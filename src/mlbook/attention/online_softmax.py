"""Online softmax: the softmax statistics computed in one streaming pass (chapter 26).

Running (m, l) merged block by block (eqs. 26.1-26.2), carrying the attention numerator
(eq. 26.3), normalised at the end (eq. 26.4). An all-masked row (l = 0) finalises to 0, never nan.
For float16 and bfloat16 inputs the statistics and the numerator are float32, as FlashAttention
keeps them: l lies between 1 and n, and a float16 sum overflows beyond 65504.

Shape legend
    s  (..., n) scores, -inf = masked;  v  (n, d_v) or (..., n, d_v)
    m, l  (...) running max and sum of exp(s - m);  acc  (..., d_v) running numerator
"""

from __future__ import annotations

import torch

from ..validation import finite_or_neg_inf, float_tensor, positive_int, same_shape, shape_is

__all__ = [
    "state_dtype",
    "softmax_stats",
    "merge_stats",
    "streaming_stats",
    "streaming_softmax",
    "block_state",
    "merge_states",
    "streaming_attention",
    "finalize",
]


def _scores(s, name: str = "s") -> torch.Tensor:
    """Checked scores: -inf marks a masked key; nan or +inf would poison every merge."""
    return finite_or_neg_inf(float_tensor(s, name, min_ndim=1, not_empty=True), name)


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the running state for inputs of ``dtype``: float32 for float16 and bfloat16."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _rescale(m_old: torch.Tensor, m_new: torch.Tensor) -> torch.Tensor:
    """exp(m_old - m_new), defined as 0 where m_old = -inf (an empty state; avoids -inf + inf)."""
    return torch.where(m_old == float("-inf"), torch.zeros_like(m_old), torch.exp(m_old - m_new))


# --- eq. 26.1: the two statistics of a softmax ---------------------------------------------------


def softmax_stats(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row maximum m = max_i s_i and shifted sum l = sum_i e^(s_i - m). Implements eq. 26.1.

    s: (..., n) scores; -inf marks masked entries.
    Returns m, l: (...) each, float32 for float16/bfloat16 s; (-inf, 0) for an all-masked row.
    """
    s = _scores(s)
    s = s.to(state_dtype(s.dtype))  # l <= n: a float16 sum would overflow past 65504
    m = s.max(dim=-1).values  # (...)
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    l = torch.exp(s - m_safe[..., None]).sum(dim=-1)  # (..., n) -> (...)
    return m, l


# --- eq. 26.2: merging two partial (m, l) pairs ---------------------------------------------------


def merge_stats(m_a, l_a, m_b, l_b) -> tuple[torch.Tensor, torch.Tensor]:
    """Statistics of the union of two disjoint parts of a row. Implements eq. 26.2.

    m_a, l_a, m_b, l_b: (...) the two parts' statistics, all of one shape.
    Returns (m, l): (...) with m = max(m_a, m_b), l = e^(m_a - m) l_a + e^(m_b - m) l_b.
    """
    for x, name in ((l_a, "l_a"), (m_b, "m_b"), (l_b, "l_b")):
        same_shape(m_a, x, ("m_a", name))  # no broadcast may mix rows
    m = torch.maximum(m_a, m_b)
    return m, _rescale(m_a, m) * l_a + _rescale(m_b, m) * l_b


def streaming_stats(s: torch.Tensor, block_size: int, history: bool = False):
    """(m, l) of s (..., n) block by block. Implements eqs. 26.1-26.2.

    Returns (m, l), (...) each (float32 for float16/bfloat16 s); with ``history=True`` also the
    running pair after every block.
    """
    s = _scores(s)
    block_size = positive_int(block_size, "block_size")
    w = state_dtype(s.dtype)
    m = torch.full(s.shape[:-1], float("-inf"), dtype=w, device=s.device)
    l = torch.zeros(s.shape[:-1], dtype=w, device=s.device)
    steps = []
    for start in range(0, s.shape[-1], block_size):
        m_b, l_b = softmax_stats(s[..., start : start + block_size])  # the block's own eq. 26.1
        m, l = merge_stats(m, l, m_b, l_b)  # eq. 26.2
        if history:
            steps.append((m.clone(), l.clone()))
    return (m, l, steps) if history else (m, l)


def streaming_softmax(s: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(s) along the last axis, e^(s_i - m) / l, from the streamed statistics.

    s: (..., n) scores;  block_size: as :func:`streaming_stats`.
    Returns (..., n) probabilities in s's dtype; an all-masked row gives zeros.
    """
    m, l = streaming_stats(s, block_size)
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    l_safe = torch.where(l == 0, torch.ones_like(l), l)
    return (torch.exp(s.to(m.dtype) - m_safe[..., None]) / l_safe[..., None]).to(s.dtype)


# --- eqs. 26.3-26.4: the same recurrence carrying the attention numerator ------------------------


def block_state(s: torch.Tensor, v: torch.Tensor):
    """The partial state (m, l, acc) of one block of keys, acc = sum_j e^(s_j - m) v_j.

    s: (..., B) scores of the block's keys;  v: (..., B, d_v) or (B, d_v) the block's values.
    Returns m, l: (...);  acc: (..., d_v); float32 for float16/bfloat16 s.
    """
    s = _scores(s)
    m, l = softmax_stats(s)
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    p = torch.exp(s.to(m.dtype) - m_safe[..., None])  # (..., B)
    acc = (p[..., None, :] @ v.to(m.dtype))[..., 0, :]  # (..., 1, B) @ (B, d_v) -> (..., d_v)
    return m, l, acc


def merge_states(state_a, state_b):
    """Merge two partial attention states (m, l, acc) over disjoint keys. Implements eqs. 26.2-26.3.

    state_a, state_b: tuples (m (...), l (...), acc (..., d_v)).
    Returns the merged (m, l, acc).
    """
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = state_a, state_b
    same_shape(acc_a, acc_b, ("acc_a", "acc_b"))
    m, l = merge_stats(m_a, l_a, m_b, l_b)
    alpha, beta = _rescale(m_a, m), _rescale(m_b, m)
    return m, l, alpha[..., None] * acc_a + beta[..., None] * acc_b


def finalize(acc: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """attn = acc / l. Implements eq. 26.4.

    acc: (..., d_v) numerator;  l: (...) denominator.
    Returns (..., d_v) attention output. A row with l = 0 (no key seen, or every key masked)
    gives 0, never 0/0 = nan: the book's convention for a fully masked row (chapter 19).
    """
    same_shape(acc[..., 0], l, ("acc[..., 0]", "l"))  # no broadcast may mix rows
    empty = (l == 0)[..., None]  # (..., 1)
    return torch.where(empty, torch.zeros_like(acc), acc / torch.where(empty, 1, l[..., None]))


def streaming_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, scale: float | None = None
) -> torch.Tensor:
    """softmax(scale q k^T) v with keys streamed in blocks. Implements eqs. 26.1-26.4.

    q: (..., d);  k: (n, d);  v: (n, d_v);  scale: default 1/sqrt(d).
    Returns (..., d_v) in q's dtype; the running state is float32 for float16/bfloat16 q.
    """
    k = float_tensor(k, "k", ndim=2, not_empty=True)
    v = shape_is(float_tensor(v, "v", ndim=2), "v", (k.shape[0], None))  # one value per key
    block_size = positive_int(block_size, "block_size")
    c = q.shape[-1] ** -0.5 if scale is None else float(scale)
    batch, w = q.shape[:-1], state_dtype(q.dtype)
    state = (
        torch.full(batch, float("-inf"), dtype=w, device=q.device),
        torch.zeros(batch, dtype=w, device=q.device),
        torch.zeros(batch + (v.shape[1],), dtype=w, device=q.device),
    )
    for start in range(0, k.shape[0], block_size):
        k_b, v_b = k[start : start + block_size], v[start : start + block_size]
        s = c * (q @ k_b.T).to(w)  # (..., d) @ (d, B) -> (..., B)
        state = merge_states(state, block_state(s, v_b))
    m, l, acc = state
    return finalize(acc, l).to(q.dtype)
