"""Mixture of depths: each routed block processes only the top-C tokens of a sequence (ch. 27).

A mixture-of-depths (MoD) transformer gives some of its blocks a router, a scalar score
r_t = x_t . w per token. The block then runs only on the C tokens with the highest scores; the
other T - C tokens skip it along the residual path. The selected tokens' update is multiplied
by their score, which keeps the router on the gradient path:

    x_t <- x_t + r_t f(X_S)_t   if t in S = TopK(r, C),     x_t <- x_t   otherwise.

C is fixed in advance, so the shapes (and the FLOPs) of every routed block are static.

Shape legend
    B      batch size
    T      sequence length
    C      capacity: tokens a routed block processes per sequence, 1 <= C <= T
    S      length of the sequence a block actually sees (T for dense blocks, C for routed ones)
    d      model width
    h      hidden width of the block's MLP
    x      (B, T, d) residual stream
    r      (B, T) router scores; idx (B, C) the selected positions, ascending

A block here is a single-head causal self-attention followed by a ReLU MLP, both added to the
residual stream (no normalisation layers: they cost no matmul FLOPs and change nothing in the
routing). :func:`mod_block` (gather with top-k indices, scatter back) sits beside its naive
reference :func:`mod_block_naive` (a per-sequence loop with a boolean mask). FLOPs are counted
two ways: analytically (:func:`block_flops`, :func:`stack_flops`) and by recording the matrix
multiplications that actually execute (:func:`count_flops`, torch's ``FlopCounterMode``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..nn.softmax import softmax
from ..validation import float_tensor as _float_tensor
from ..validation import positive_int as _positive_int

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


# --- validation ----------------------------------------------------------------------------------


def _check_capacity(capacity, seq_len: int) -> int:
    _positive_int(capacity, "capacity")
    if capacity > seq_len:
        raise ValueError(f"capacity={capacity} exceeds the sequence length T={seq_len}")
    return capacity


_KEYS = {"Wq": 2, "Wk": 2, "Wv": 2, "Wo": 2, "W1": 2, "W2": 2}


def _check_block(params, d: int) -> int:
    if not isinstance(params, dict) or set(params) != set(_KEYS):
        raise ValueError(f"params must be a dict with keys {sorted(_KEYS)}")
    for name in _KEYS:
        _float_tensor(params[name], name, 2)
    h = params["W1"].shape[1]
    shapes = {"Wq": (d, d), "Wk": (d, d), "Wv": (d, d), "Wo": (d, d), "W1": (d, h), "W2": (h, d)}
    for name, shape in shapes.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(
                f"{name} must have shape {shape} for d={d}, got {tuple(params[name].shape)}"
            )
    return h


def _check_router(w, d: int) -> None:
    _float_tensor(w, "w_router", 1)
    if w.shape[0] != d:
        raise ValueError(f"w_router must have shape ({d},), got {tuple(w.shape)}")


# --- routing: P(t in Layer_k) = TopK(R(x_t), C) --------------------------------------------------


def mod_capacity(seq_len: int, fraction: float) -> int:
    """C = max(1, floor(fraction * T)): the per-sequence capacity of a routed block.

    The MoD paper's best models use fraction = 1/8 (12.5 %) in every other block.
    """
    _positive_int(seq_len, "seq_len")
    fr = float(fraction)
    if not (0 < fr <= 1):
        raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
    return max(1, math.floor(fr * seq_len + 1e-9))


def mod_select(scores: torch.Tensor, capacity: int) -> torch.Tensor:
    """S = TopK(r, C) per sequence, returned in ascending position order (causal order kept).

    Args:
        scores: (B, T) router scores.
        capacity: C, 1 <= C <= T.

    Returns:
        (B, C) int64 positions of the selected tokens, sorted ascending.
    """
    _float_tensor(scores, "scores", 2)
    _check_capacity(capacity, scores.shape[1])
    idx = torch.topk(scores.detach(), capacity, dim=1).indices  # (B, C) by score
    return idx.sort(dim=1).values  # (B, C) by position


def mod_select_naive(scores: torch.Tensor, capacity: int) -> torch.Tensor:
    """Reference for :func:`mod_select` as a mask: t is kept iff fewer than C scores beat r_t.

    Assumes distinct scores within a sequence (true almost surely for continuous scores).

    Returns:
        (B, T) bool.
    """
    _float_tensor(scores, "scores", 2)
    _check_capacity(capacity, scores.shape[1])
    beaten_by = (scores[:, None, :] > scores[:, :, None]).sum(dim=2)  # (B, T): # higher scores
    return beaten_by < capacity


# --- the block -----------------------------------------------------------------------------------


def init_block(
    d: int, h: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Random block parameters with N(0, 1/fan_in) entries: Wq, Wk, Wv, Wo (d, d), W1 (d, h),
    W2 (h, d)."""
    _positive_int(d, "d")
    _positive_int(h, "h")

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
    """The block's update f(x) = a + m, a = causal attention(x), m = MLP(x + a).

    Args:
        x: (B, S, d) the tokens the block sees, in causal order.
        params: see :func:`init_block`.

    Returns:
        (B, S, d): the amount the block adds to the residual stream.
    """
    _float_tensor(x, "x", 3)
    _check_block(params, x.shape[2])
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
    """A routed block: only the top-C tokens of each sequence run f; the rest skip it.

    r = x w; S = TopK(r, C); y_t = x_t + r_t f(X_S)_t for t in S, y_t = x_t otherwise. The
    selected tokens form a shorter sequence (in their original order) on which attention is
    causal as usual.

    Args:
        x: (B, T, d) residual stream.
        params: block parameters (:func:`init_block`).
        w_router: (d,) router weights.
        capacity: C, 1 <= C <= T.

    Returns:
        (B, T, d).
    """
    _float_tensor(x, "x", 3)
    _check_router(w_router, x.shape[2])
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
    _float_tensor(x, "x", 3)
    _check_router(w_router, x.shape[2])
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
    """Run a stack of blocks; block l is routed (capacity C) where routers[l] is not None.

    Args:
        x: (B, T, d).
        blocks: L block parameter dicts.
        routers: L entries, each a (d,) router weight or None for a dense block.
        capacity: C for the routed blocks.

    Returns:
        (B, T, d).
    """
    if len(blocks) != len(routers):
        raise ValueError(f"{len(blocks)} blocks but {len(routers)} router entries")
    for params, w in zip(blocks, routers, strict=True):
        x = dense_block(x, params) if w is None else mod_block(x, params, w, capacity)
    return x


# --- FLOPs ---------------------------------------------------------------------------------------


def block_flops(seq_len: int, d: int, h: int, batch: int = 1) -> int:
    """Matmul FLOPs of :func:`block_delta` on B sequences of length S (2 per multiply-add).

    Projections q, k, v, o: 4 * 2 S d^2; scores Q K^T and weights times V: 2 * 2 S^2 d;
    MLP: 2 * 2 S d h. Elementwise work (softmax, ReLU, additions) is not counted.
    """
    for name, v in (("seq_len", seq_len), ("d", d), ("h", h), ("batch", batch)):
        _positive_int(v, name)
    s = seq_len
    return batch * (8 * s * d * d + 4 * s * s * d + 4 * s * d * h)


def stack_flops(
    seq_len: int, d: int, h: int, routed: Sequence[bool], capacity: int, batch: int = 1
) -> int:
    """Matmul FLOPs of :func:`stack_forward`: dense blocks see T tokens, routed ones see C
    tokens plus the router's 2 T d."""
    _check_capacity(capacity, seq_len)
    total = 0
    for is_routed in routed:
        if is_routed:
            total += batch * 2 * seq_len * d + block_flops(capacity, d, h, batch)
        else:
            total += block_flops(seq_len, d, h, batch)
    return total


def count_flops(fn: Callable, *args, **kwargs) -> int:
    """Run ``fn(*args, **kwargs)`` and return the FLOPs of the matmuls that executed.

    Uses ``torch.utils.flop_counter.FlopCounterMode``, which records every aten matmul
    (mm, bmm, addmm, matmul, ...) as 2 * m * n * k: a deterministic count of what ran.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())
