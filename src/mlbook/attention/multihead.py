"""Multi-head attention: heads by view and transpose, the MHA module, cross-attention, costs.

Chapter 20. Weights act from the right, Q = x_q W_Q + b_Q (torch stores the transpose).

Shape legend
    B  batch;  T_q, T_k  query and key tokens;  d  model width;  d_kv  key/value input width
    H  heads;  d_h = d / H;  x_q  (B, T_q, d);  x_k, x_v  (B, T_k, d_kv);  y  (B, T_q, d)
    heads  (B, H, T, d_h);  A  (B, H, T_q, T_k);  mask  bool (T_q, T_k), (B, T_q, T_k) or
    (B, 1 or H, T_q, T_k), True = may attend
"""

from __future__ import annotations

import torch
from torch import nn

from ..validation import bool_tensor, divides, float_tensor, positive_int, shape_is
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
    "mha_flops",
]


# --- splitting and merging heads ------------------------------------------------------------------


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the last axis into H slices of width d_h and move heads before tokens (a view).

    x: (..., T, d), d divisible by H, last axis contiguous;  num_heads: H.
    Returns (..., H, T, d_h), a view of x; head h sees columns h*d_h ... (h+1)*d_h - 1.
    """
    x = float_tensor(x, "x", min_ndim=2)
    *lead, T, d = x.shape
    divides(positive_int(num_heads, "num_heads"), "num_heads", d, "the width d of x")
    # (..., T, d) -> (..., T, H, d_h) -> (..., H, T, d_h)
    return x.view(*lead, T, num_heads, d // num_heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`split_heads`: (..., H, T, d_h) -> (..., T, H * d_h), contiguous."""
    *lead, H, T, d_h = float_tensor(x, "x", min_ndim=3).shape
    # (..., H, T, d_h) -> (..., T, H, d_h) -> (..., T, H * d_h)
    return x.transpose(-3, -2).contiguous().view(*lead, T, H * d_h)


def split_heads_naive(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Reference for :func:`split_heads`: slice the columns of every head and stack them."""
    d = float_tensor(x, "x", min_ndim=2).shape[-1]
    divides(positive_int(num_heads, "num_heads"), "num_heads", d, "the width d of x")
    d_h = d // num_heads
    return torch.stack([x[..., h * d_h : (h + 1) * d_h] for h in range(num_heads)], dim=-3)


def merge_heads_naive(x: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`merge_heads`: ``concat(O_1, ..., O_H)`` along the last axis."""
    x = float_tensor(x, "x", min_ndim=3)
    return torch.cat([x[..., h, :, :] for h in range(x.shape[-3])], dim=-1)


# --- the module -----------------------------------------------------------------------------------


def _head_mask(mask):
    """A (B, T_q, T_k) mask gets a head axis (B, 1, T_q, T_k); other shapes pass unchanged."""
    if mask is not None and bool_tensor(mask, "mask").ndim == 3:
        return mask[:, None]  # (B, T_q, T_k) -> (B, 1, T_q, T_k): the same mask for every head
    return mask


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections W_Q, W_K, W_V, W_O. Implements eqs. 20.1-20.3.

    d_model: d;  num_heads: H, dividing d;  bias: learn b_Q, b_K, b_V, b_O;  d_kv: key/value width.
    """

    def __init__(self, d_model: int, num_heads: int, *, bias: bool = True, d_kv: int | None = None):
        super().__init__()
        d, H = positive_int(d_model, "d_model"), positive_int(num_heads, "num_heads")
        divides(H, "num_heads", d, "d_model")
        d_kv = d if d_kv is None else positive_int(d_kv, "d_kv")
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
        x_q, x_k, x_v = (
            float_tensor(x, n, ndim=3) for x, n in ((x_q, "x_q"), (x_k, "x_k"), (x_v, "x_v"))
        )
        shape_is(x_k, "x_k", (x_q.shape[0], None, None))  # a batch of 1 would broadcast
        shape_is(x_v, "x_v", (x_q.shape[0], x_k.shape[1], None))
        return x_q, x_k, x_v

    @staticmethod
    def _affine(x, W, b):
        y = x @ W  # (B, T, d_in) @ (d_in, d_out) -> (B, T, d_out)
        return y if b is None else y + b

    def project(self, x_q, x_k=None, x_v=None):
        """Q = x_q W_Q + b_Q, K = x_k W_K + b_K, V = x_v W_V + b_V, before the split (eq. 20.1).

        Returns Q (B, T_q, d), K (B, T_k, d), V (B, T_k, d).
        """
        x_q, x_k, x_v = self._inputs(x_q, x_k, x_v)
        return (
            self._affine(x_q, self.W_Q, self.b_Q),
            self._affine(x_k, self.W_K, self.b_K),
            self._affine(x_v, self.W_V, self.b_V),
        )

    def forward(self, x_q, x_k=None, x_v=None, *, mask=None, is_causal: bool = False):
        """Y = concat(O_1, ..., O_H) W_O + b_O, O_h the attention of head h. Eqs. 20.1-20.3.

        x_q: (B, T_q, d);  x_k, x_v: (B, T_k, d_kv) (default x_q, then x_k);  mask: as the legend.
        Returns y (B, T_q, d) and weights (B, H, T_q, T_k).
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

    Eq. 20.3 as a sum over heads, sum_h O_h W_O[rows of h]; args and returns as ``forward``.
    """
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
        mask_h = mask if mask is None or mask.ndim <= 2 else mask[:, min(h, mask.shape[1] - 1)]
        o_h, a_h = scaled_dot_product_attention(q, k, v, mask=mask_h, is_causal=is_causal)
        y = y + o_h @ mha.W_O[cols, :]  # (B, T_q, d_h) @ (d_h, d): head h's share of the output
        weights.append(a_h)
    if mha.b_O is not None:
        y = y + mha.b_O
    return y, torch.stack(weights, dim=1)  # H x (B, T_q, T_k) -> (B, H, T_q, T_k)


def from_torch(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` with the (transposed) weights of a torch MHA module.

    Only kdim == vdim, no ``bias_k``/``bias_v`` and ``add_zero_attn=False`` are supported.
    Returns A new module with the same dtype as ``torch_mha``.
    """
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
    """Parameters of multi-head attention: 2 d^2 + 2 d_kv d (+ 4 d biases), whatever H. Eq. 20.4."""
    d = positive_int(d_model, "d_model")
    d_kv = d if d_kv is None else positive_int(d_kv, "d_kv")
    return 2 * d * d + 2 * d_kv * d + (4 * d if bias else 0)


def mha_flops(
    batch: int, T_q: int, d_model: int, *, T_k: int | None = None, d_kv: int | None = None
) -> dict[str, int]:
    """FLOPs of the matrix products of an MHA forward pass, 2 per multiply-add. Eq. 20.4.

    The book's one convention (as ``torch.utils.flop_counter.FlopCounterMode`` counts): a
    multiply-add is 2 FLOPs, so self-attention costs 2 (4 B T d^2 + 2 B T^2 d). Softmax, scaling
    and biases are not matrix products and are not counted.
    Returns {"Q projection", "K projection", "V projection", "scores QK^T", "weights x V", "output
    projection", "total"}: FLOPs.
    """
    B, Tq, d = (
        positive_int(batch, "batch"),
        positive_int(T_q, "T_q"),
        positive_int(d_model, "d_model"),
    )
    Tk = Tq if T_k is None else positive_int(T_k, "T_k")
    dkv = d if d_kv is None else positive_int(d_kv, "d_kv")
    macs = {  # multiply-adds of each product
        "Q projection": B * Tq * d * d,
        "K projection": B * Tk * dkv * d,
        "V projection": B * Tk * dkv * d,
        "scores QK^T": B * Tq * Tk * d,  # H heads x (T_q, d_h) @ (d_h, T_k)
        "weights x V": B * Tq * Tk * d,  # H heads x (T_q, T_k) @ (T_k, d_h)
        "output projection": B * Tq * d * d,
    }
    flops = {name: 2 * n for name, n in macs.items()}
    flops["total"] = sum(flops.values())
    return flops
