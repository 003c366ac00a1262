"""Mixture of depths (chapter 27): a routed block runs only on the top-C tokens of a sequence.

x_t <- x_t + r_t f(X_S)_t for t in S = TopK(r, C), else x_t, with router scores r_t = x_t . w;
a block is single-head causal attention plus a ReLU MLP.

Shape legend
    B batch;  T sequence length;  C capacity, 1 <= C <= T;  d model width;  h MLP width
    S tokens a block sees (T dense, C routed);  x (B, T, d);  r (B, T);  idx (B, C)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..nn.softmax import softmax
from ..validation import float_tensor, integer, number, positive_int, shape_is

__all__ = [
    "mod_capacity",
    "mod_select",
    "mod_select_naive",
    "init_block",
    "block_delta",
    "dense_block",
    "mod_block",
    "mod_block_naive",
    "stack_forward",
    "block_flops",
    "stack_flops",
    "count_flops",
]


# --- routing: P(t in Layer_k) = TopK(R(x_t), C) --------------------------------------------------


def mod_capacity(seq_len: int, fraction: float) -> int:
    """C = max(1, floor(fraction T)): the per-sequence capacity of a routed block."""
    positive_int(seq_len, "seq_len")
    fr = number(fraction, "fraction", 0.0, 1.0, open_low=True)
    return max(1, math.floor(fr * seq_len + 1e-9))


def mod_select(scores: torch.Tensor, capacity: int) -> torch.Tensor:
    """S = TopK(r, C) per sequence, in position order: scores (B, T) -> idx (B, C) int64."""
    integer(capacity, "capacity", 1, float_tensor(scores, "scores", ndim=2).shape[1])
    idx = torch.topk(scores.detach(), capacity, dim=1).indices  # (B, C) by score
    return idx.sort(dim=1).values  # (B, C) by position


def mod_select_naive(scores: torch.Tensor, capacity: int) -> torch.Tensor:
    """Reference for :func:`mod_select` as a (B, T) bool mask: fewer than C scores beat r_t."""
    integer(capacity, "capacity", 1, float_tensor(scores, "scores", ndim=2).shape[1])
    beaten_by = (scores[:, None, :] > scores[:, :, None]).sum(dim=2)  # (B, T): # higher scores
    return beaten_by < capacity


# --- the block -----------------------------------------------------------------------------------


def init_block(
    d: int, h: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Random block parameters, N(0, 1/fan_in): Wq, Wk, Wv, Wo (d, d), W1 (d, h), W2 (h, d)."""
    positive_int(d, "d")
    positive_int(h, "h")

    def rnd(rows, cols):
        return torch.randn(rows, cols, generator=generator, dtype=dtype) / math.sqrt(rows)

    return {
        "Wq": rnd(d, d),
        "Wk": rnd(d, d),
        "Wv": rnd(d, d),
        "Wo": rnd(d, d),
        "W1": rnd(d, h),
        "W2": rnd(h, d),
    }


def block_delta(x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """The block's update f(x) = a + m, a = causal attention(x), m = MLP(x + a): (B, S, d)."""
    float_tensor(x, "x", ndim=3)
    s, d = x.shape[1], x.shape[2]
    q, k, v = x @ params["Wq"], x @ params["Wk"], x @ params["Wv"]  # (B, S, d) each
    scores = q @ k.transpose(1, 2) / math.sqrt(d)  # (B, S, S)
    future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
    attn = softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (B, S, S)
    a = (attn @ v) @ params["Wo"]  # (B, S, d)
    m = torch.relu((x + a) @ params["W1"]) @ params["W2"]  # (B, S, d)
    return a + m


def dense_block(x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """x + f(x): an ordinary residual block on all T tokens."""
    return x + block_delta(x, params)


def mod_block(
    x: torch.Tensor, params: dict[str, torch.Tensor], w_router: torch.Tensor, capacity: int
) -> torch.Tensor:
    """A routed block: y_t = x_t + r_t f(X_S)_t for t in S = TopK(x w, C), else y_t = x_t.

    x: (B, T, d); params: :func:`init_block`; w_router: (d,); capacity: C. Returns y: (B, T, d).
    """
    shape_is(w_router, "w_router", (float_tensor(x, "x", ndim=3).shape[2],))
    b, t, d = x.shape
    r = (x @ w_router[:, None]).squeeze(2)  # (B, T, 1) -> (B, T)
    idx = mod_select(r, capacity)  # (B, C)
    idx_d = idx[:, :, None].expand(b, capacity, d)  # (B, C, d)
    xs = x.gather(1, idx_d)  # (B, C, d)
    update = r.gather(1, idx)[:, :, None] * block_delta(xs, params)  # (B, C, d)
    return x.scatter_add(1, idx_d, update)


def mod_block_naive(
    x: torch.Tensor, params: dict[str, torch.Tensor], w_router: torch.Tensor, capacity: int
) -> torch.Tensor:
    """Reference for :func:`mod_block`: loop over sequences, select with a boolean mask."""
    shape_is(w_router, "w_router", (float_tensor(x, "x", ndim=3).shape[2],))
    y = x.clone()
    for i in range(x.shape[0]):
        r = (x[i] @ w_router[:, None]).squeeze(1)  # (T, 1) -> (T,)
        keep = mod_select_naive(r[None], capacity)[0]  # (T,) bool
        delta = block_delta(x[i][keep][None], params)[0]  # (C, d)
        y[i][keep] = x[i][keep] + r[keep][:, None] * delta
    return y


def stack_forward(
    x: torch.Tensor,
    blocks: Sequence[dict[str, torch.Tensor]],
    routers: Sequence[torch.Tensor | None],
    capacity: int,
) -> torch.Tensor:
    """Run L blocks: routed (capacity C) where routers[l] is a (d,) weight, dense where None."""
    for params, w in zip(blocks, routers, strict=True):
        x = dense_block(x, params) if w is None else mod_block(x, params, w, capacity)
    return x


# --- FLOPs ---------------------------------------------------------------------------------------


def block_flops(seq_len: int, d: int, h: int, batch: int = 1) -> int:
    """Matmul FLOPs of :func:`block_delta` on B sequences of length S: B (8Sd^2 + 4S^2 d + 4Sdh)."""
    for name, v in (("seq_len", seq_len), ("d", d), ("h", h), ("batch", batch)):
        positive_int(v, name)
    s = seq_len
    return batch * (8 * s * d * d + 4 * s * s * d + 4 * s * d * h)


def stack_flops(
    seq_len: int, d: int, h: int, routed: Sequence[bool], capacity: int, batch: int = 1
) -> int:
    """Matmul FLOPs of :func:`stack_forward`: routed blocks see C tokens and add 2 T d."""
    integer(capacity, "capacity", 1, seq_len)
    total = 0
    for is_routed in routed:
        if is_routed:
            total += batch * 2 * seq_len * d + block_flops(capacity, d, h, batch)
        else:
            total += block_flops(seq_len, d, h, batch)
    return total


def count_flops(fn: Callable, *args, **kwargs) -> int:
    """The FLOPs of the matmuls that ``fn(*args, **kwargs)`` executes (FlopCounterMode)."""
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())
