"""Multi-head attention: heads by view and transpose, the MHA module, cross-attention, costs.

Chapter 20. Every head runs the scaled dot-product attention of chapter 19
(:func:`mlbook.attention.dot_product.scaled_dot_product_attention`) on its own slice of learned projections;
the heads are not separate tensors but a reshaping of one wide projection.

Shape legend
    B      batch size
    T_q    number of query tokens;  T_k  number of key/value tokens (T_q = T_k = T in
           self-attention)
    d      model width (the width of the query input and of the output)
    d_kv   width of the key/value input (cross-attention from another model; default d)
    H      number of heads;  d_h = d / H  the width of one head
    x_q    (B, T_q, d)     x_k, x_v  (B, T_k, d_kv)     y  (B, T_q, d)
    Q      (B, T_q, d)     K, V      (B, T_k, d)     projections before the split (eq. 20.1)
    heads  (B, H, T, d_h)  one slab of width d_h per head
    A      (B, H, T_q, T_k) attention weights of every head
    mask   bool, True = may attend; (T_q, T_k), (B, T_q, T_k) or (B, 1 or H, T_q, T_k)

Weights act from the right, as in the equations: Q = x_q W_Q + b_Q with W_Q of shape (d, d).
(``torch.nn.Linear`` and ``torch.nn.MultiheadAttention`` store the transpose; see
:func:`from_torch`.) Costs are counted in multiply-adds: a (m, n) @ (n, p) product is m n p of
them, 2 m n p floating-point operations.
"""

from __future__ import annotations

import torch
from torch import nn

from .dot_product import scaled_dot_product_attention

__all__ = [
    "split_heads",
    "merge_heads",
    "split_heads_naive",
    "merge_heads_naive",
    "MultiHeadAttention",
    "multihead_attention_naive",
    "from_torch",
    "param_count",
    "mha_cost",
]


def _check_int(n, name: str, low: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < low:
        raise ValueError(f"{name} must be >= {low}, got {n}")
    return n


def _check_float_tensor(x, name: str, min_ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} needs at least {min_ndim} axes, got shape {tuple(x.shape)}")


# --- splitting and merging heads ------------------------------------------------------------------


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the last axis into ``num_heads`` slices of width d_h and move heads before tokens.

    No data moves: ``view`` reinterprets the last axis as (H, d_h), ``transpose`` only swaps
    strides. Head h sees columns h*d_h ... (h+1)*d_h - 1 of x.

    Args:
        x: (..., T, d) with d divisible by ``num_heads``; the last axis must be contiguous.
        num_heads: H.

    Returns:
        (..., H, T, d_h), a (non-contiguous) view of x.
    """
    _check_float_tensor(x, "x", 2)
    H = _check_int(num_heads, "num_heads")
    *lead, T, d = x.shape
    if d % H:
        raise ValueError(f"width d={d} of x {tuple(x.shape)} is not divisible by {H} heads")
    # (..., T, d) -> (..., T, H, d_h) -> (..., H, T, d_h)
    return x.view(*lead, T, H, d // H).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`split_heads`: concatenate the heads along the feature axis.

    The heads' outputs come out of attention as a fresh (..., H, T, d_h) tensor, stored head by
    head. After the transpose to (..., T, H, d_h) the memory no longer runs token by token, so
    ``view`` cannot merge the last two axes; ``contiguous`` copies once (it is free when the
    input is still a view of :func:`split_heads`), then ``view`` merges.

    Args:
        x: (..., H, T, d_h).

    Returns:
        (..., T, H * d_h), contiguous; columns h*d_h ... (h+1)*d_h - 1 come from head h.
    """
    _check_float_tensor(x, "x", 3)
    *lead, H, T, d_h = x.shape
    # (..., H, T, d_h) -> (..., T, H, d_h) -> (..., T, H * d_h)
    return x.transpose(-3, -2).contiguous().view(*lead, T, H * d_h)


def split_heads_naive(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Reference for :func:`split_heads`: slice the columns of every head and stack them.

    Args and returns as :func:`split_heads` (a fresh tensor instead of a view).
    """
    _check_float_tensor(x, "x", 2)
    H = _check_int(num_heads, "num_heads")
    d = x.shape[-1]
    if d % H:
        raise ValueError(f"width d={d} of x {tuple(x.shape)} is not divisible by {H} heads")
    d_h = d // H
    return torch.stack([x[..., h * d_h : (h + 1) * d_h] for h in range(H)], dim=-3)


def merge_heads_naive(x: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`merge_heads`: ``concat(O_1, ..., O_H)`` along the last axis.

    Args:
        x: (..., H, T, d_h).

    Returns:
        (..., T, H * d_h).
    """
    _check_float_tensor(x, "x", 3)
    return torch.cat([x[..., h, :, :] for h in range(x.shape[-3])], dim=-1)


# --- the module -----------------------------------------------------------------------------------


def _head_mask(mask):
    """A (B, T_q, T_k) mask gets a head axis (B, 1, T_q, T_k); other shapes pass unchanged."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a bool torch.Tensor or None, got {type(mask).__name__}")
    if mask.ndim == 3:
        return mask[:, None]  # (B, T_q, T_k) -> (B, 1, T_q, T_k): the same mask for every head
    if mask.ndim not in (2, 4):
        raise ValueError(
            f"mask must have shape (T_q, T_k), (B, T_q, T_k) or (B, H, T_q, T_k), "
            f"got {tuple(mask.shape)}"
        )
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head attention with learned projections W_Q, W_K, W_V, W_O (eqs. 20.1-20.3).

    ``forward(x_q)`` is self-attention; ``forward(x_q, x_k)`` is cross-attention with keys and
    values from ``x_k``; ``forward(x_q, x_k, x_v)`` takes all three inputs separately.

    Args:
        d_model: d, the width of the queries' input and of the output.
        num_heads: H; d must be divisible by H.
        bias: learn biases b_Q, b_K, b_V, b_O (4 d parameters).
        d_kv: width of the key/value inputs (default d_model).

    Parameters (weights act from the right):
        W_Q (d, d), W_K (d_kv, d), W_V (d_kv, d), W_O (d, d); b_Q, b_K, b_V, b_O (d,).
    """

    def __init__(self, d_model: int, num_heads: int, *, bias: bool = True, d_kv: int | None = None):
        super().__init__()
        d = _check_int(d_model, "d_model")
        H = _check_int(num_heads, "num_heads")
        if d % H:
            raise ValueError(f"d_model={d} is not divisible by num_heads={H}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
        d_kv = d if d_kv is None else _check_int(d_kv, "d_kv")
        self.d_model, self.num_heads, self.d_head, self.d_kv = d, H, d // H, d_kv
        self.W_Q = nn.Parameter(torch.empty(d, d))
        self.W_K = nn.Parameter(torch.empty(d_kv, d))
        self.W_V = nn.Parameter(torch.empty(d_kv, d))
        self.W_O = nn.Parameter(torch.empty(d, d))
        for name in ("b_Q", "b_K", "b_V", "b_O"):
            self.register_parameter(name, nn.Parameter(torch.empty(d)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights and zero biases (the initialisation of torch's MHA)."""
        for w in (self.W_Q, self.W_K, self.W_V, self.W_O):
            nn.init.xavier_uniform_(w)
        for b in (self.b_Q, self.b_K, self.b_V, self.b_O):
            if b is not None:
                nn.init.zeros_(b)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, d_head={self.d_head}, "
            f"d_kv={self.d_kv}, bias={self.b_Q is not None}"
        )

    def _inputs(self, x_q, x_k, x_v):
        x_k = x_q if x_k is None else x_k
        x_v = x_k if x_v is None else x_v
        for x, name, width in (
            (x_q, "x_q", self.d_model),
            (x_k, "x_k", self.d_kv),
            (x_v, "x_v", self.d_kv),
        ):
            _check_float_tensor(x, name, 3)
            if x.ndim != 3 or x.shape[-1] != width:
                raise ValueError(f"{name} must have shape (B, T, {width}), got {tuple(x.shape)}")
            if x.dtype != self.W_Q.dtype:
                raise TypeError(f"{name} has dtype {x.dtype} but the weights {self.W_Q.dtype}")
        if x_k.shape[:2] != x_v.shape[:2]:
            raise ValueError(
                f"x_k {tuple(x_k.shape)} and x_v {tuple(x_v.shape)} need the same (B, T_k)"
            )
        if x_q.shape[0] != x_k.shape[0]:
            raise ValueError(f"batch sizes differ: x_q {tuple(x_q.shape)}, x_k {tuple(x_k.shape)}")
        return x_q, x_k, x_v

    @staticmethod
    def _affine(x, W, b):
        y = x @ W  # (B, T, d_in) @ (d_in, d_out) -> (B, T, d_out)
        return y if b is None else y + b

    def project(self, x_q, x_k=None, x_v=None):
        """Q = x_q W_Q + b_Q, K = x_k W_K + b_K, V = x_v W_V + b_V, before the split (eq. 20.1).

        Returns:
            Q (B, T_q, d), K (B, T_k, d), V (B, T_k, d).
        """
        x_q, x_k, x_v = self._inputs(x_q, x_k, x_v)
        return (
            self._affine(x_q, self.W_Q, self.b_Q),
            self._affine(x_k, self.W_K, self.b_K),
            self._affine(x_v, self.W_V, self.b_V),
        )

    def forward(self, x_q, x_k=None, x_v=None, *, mask=None, is_causal: bool = False):
        """Y = concat(O_1, ..., O_H) W_O + b_O with O_h = attention of head h (eqs. 20.1-20.3).

        Args:
            x_q: (B, T_q, d) the sequence that asks.
            x_k: (B, T_k, d_kv) the sequence that is looked at (default x_q: self-attention).
            x_v: (B, T_k, d_kv) values' input (default x_k).
            mask: bool, True = may attend: (T_q, T_k), (B, T_q, T_k) or (B, 1 or H, T_q, T_k).
            is_causal: also apply the causal mask of :func:`mlbook.attention.dot_product.causal_mask`.

        Returns:
            y: (B, T_q, d) outputs.
            weights: (B, H, T_q, T_k) attention weights of every head.
        """
        Q, K, V = self.project(x_q, x_k, x_v)
        H = self.num_heads
        q, k, v = split_heads(Q, H), split_heads(K, H), split_heads(V, H)  # (B, H, T, d_h)
        o, weights = scaled_dot_product_attention(
            q, k, v, mask=_head_mask(mask), is_causal=is_causal
        )  # (B, H, T_q, d_h)
        return self._affine(merge_heads(o), self.W_O, self.b_O), weights  # (B, T_q, d)


def multihead_attention_naive(
    mha: MultiHeadAttention, x_q, x_k=None, x_v=None, *, mask=None, is_causal: bool = False
):
    """Reference for :meth:`MultiHeadAttention.forward`: one head at a time, no reshapes.

    Head h uses the columns h*d_h ... (h+1)*d_h - 1 of W_Q, W_K, W_V (and of the biases) and the
    same rows of W_O, so concat(O_1, ..., O_H) W_O = sum_h O_h W_O[rows of h] (eq. 20.3 written
    as a sum over heads). Args and returns as the module's ``forward``.
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a MultiHeadAttention, got {type(mha).__name__}")
    x_q, x_k, x_v = mha._inputs(x_q, x_k, x_v)
    mask = _head_mask(mask)
    d_h = mha.d_head
    y = x_q.new_zeros(x_q.shape[0], x_q.shape[1], mha.d_model)
    weights = []
    for h in range(mha.num_heads):
        cols = slice(h * d_h, (h + 1) * d_h)
        q, k, v = (
            x @ W[:, cols] + (0 if b is None else b[cols])  # (B, T, d_h)
            for x, W, b in (
                (x_q, mha.W_Q, mha.b_Q),
                (x_k, mha.W_K, mha.b_K),
                (x_v, mha.W_V, mha.b_V),
            )
        )
        mask_h = mask if mask is None or mask.ndim == 2 else mask[:, min(h, mask.shape[1] - 1)]
        o_h, a_h = scaled_dot_product_attention(q, k, v, mask=mask_h, is_causal=is_causal)
        y = y + o_h @ mha.W_O[cols, :]  # (B, T_q, d_h) @ (d_h, d): head h's share of the output
        weights.append(a_h)
    if mha.b_O is not None:
        y = y + mha.b_O
    return y, torch.stack(weights, dim=1)  # H x (B, T_q, T_k) -> (B, H, T_q, T_k)


def from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` with the weights of a ``torch.nn.MultiheadAttention``.

    torch computes x W^T + b with W of shape (d_out, d_in) and stacks W_Q, W_K, W_V in
    ``in_proj_weight`` (3d, d) when the key/value width equals d (else in ``q_proj_weight``,
    ``k_proj_weight``, ``v_proj_weight``); the weights here are the transposes. Only torch
    modules with equal key and value widths, no ``bias_k``/``bias_v`` and no zero attention
    are supported.

    Returns:
        A new module with the same dtype as ``torch_mha``.
    """
    if not isinstance(torch_mha, nn.MultiheadAttention):
        raise TypeError(f"expected torch.nn.MultiheadAttention, got {type(torch_mha).__name__}")
    t = torch_mha
    if t.kdim != t.vdim or t.bias_k is not None or t.add_zero_attn:
        raise ValueError("only kdim == vdim, no bias_k/bias_v and add_zero_attn=False supported")
    d, bias = t.embed_dim, t.in_proj_bias is not None
    mha = MultiHeadAttention(d, t.num_heads, bias=bias, d_kv=t.kdim).to(t.out_proj.weight.dtype)
    with torch.no_grad():
        if t._qkv_same_embed_dim:
            w_q, w_k, w_v = t.in_proj_weight.split(d)  # (3d, d) -> 3 x (d, d), torch layout
        else:
            w_q, w_k, w_v = t.q_proj_weight, t.k_proj_weight, t.v_proj_weight  # (d, d_in)
        for mine, theirs in (
            (mha.W_Q, w_q),
            (mha.W_K, w_k),
            (mha.W_V, w_v),
            (mha.W_O, t.out_proj.weight),
        ):
            mine.copy_(theirs.T)  # torch: y = x W^T; here: y = x W
        if bias:
            for mine, theirs in zip(
                (mha.b_Q, mha.b_K, mha.b_V), t.in_proj_bias.split(d), strict=True
            ):
                mine.copy_(theirs)
            mha.b_O.copy_(t.out_proj.bias)
    return mha


# --- costs (eq. 20.4) -----------------------------------------------------------------------------


def param_count(d_model: int, *, bias: bool = True, d_kv: int | None = None) -> int:
    """Number of parameters of multi-head attention: 4 d^2 (+ 4 d biases) (eq. 20.4).

    With a key/value width d_kv: 2 d^2 + 2 d_kv d (+ 4 d). Independent of the number of heads:
    more heads cut the same d columns into narrower slices.
    """
    d = _check_int(d_model, "d_model")
    d_kv = d if d_kv is None else _check_int(d_kv, "d_kv")
    if not isinstance(bias, bool):
        raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
    return 2 * d * d + 2 * d_kv * d + (4 * d if bias else 0)


def mha_cost(
    batch: int, T_q: int, d_model: int, *, T_k: int | None = None, d_kv: int | None = None
) -> dict[str, int]:
    """Multiply-adds of every matrix product of a multi-head attention forward pass (eq. 20.4).

    Self-attention (T_k = T_q = T, d_kv = d) totals 4 B T d^2 + 2 B T^2 d: four projections of
    B T tokens by d x d matrices, and two (T x T) x d products summed over H heads of width
    d_h = d / H. Softmax, scaling and bias additions (O(B H T^2 + B T d)) are not counted.
    Floating-point operations are twice these numbers.

    Returns:
        {"Q projection", "K projection", "V projection", "scores QK^T", "weights x V",
        "output projection", "total"}: multiply-adds.
    """
    B, Tq, d = (
        _check_int(n, name) for n, name in ((batch, "batch"), (T_q, "T_q"), (d_model, "d_model"))
    )
    Tk = Tq if T_k is None else _check_int(T_k, "T_k")
    dkv = d if d_kv is None else _check_int(d_kv, "d_kv")
    cost = {
        "Q projection": B * Tq * d * d,
        "K projection": B * Tk * dkv * d,
        "V projection": B * Tk * dkv * d,
        "scores QK^T": B * Tq * Tk * d,  # H heads x (T_q, d_h) @ (d_h, T_k)
        "weights x V": B * Tq * Tk * d,  # H heads x (T_q, T_k) @ (T_k, d_h)
        "output projection": B * Tq * d * d,
    }
    cost["total"] = sum(cost.values())
    return cost
