"""Quantisation of weights and activations, and the arithmetic of decoding (chapter 40).

Absmax (symmetric) integer quantisation with one scale per tensor, per output channel or per
group of input rows (eqs. 40.1-40.2; naive reference :func:`fake_quantize_naive`), SmoothQuant's
migration of activation outliers into the weights (eq. 40.3), the quadratic error of a quantised
layer and GPTQ's column-by-column quantisation with optimal-brain-quantiser updates (eq. 40.4;
naive reference :func:`gptq_quantize_naive`), a decoder with all its block weights quantised, and
the arithmetic intensity of a decoding step with the roofline (eq. 40.5).

The book's decoder multiplies activations by weights as ``X @ W``, so a weight is stored
(d_in, d_out): an output channel is a *column*, and a group is a run of g consecutive input rows
of one column.

Shape legend
    W (d_in, d_out) a weight;  X (N, d_in) activations of N tokens;  b bits;  g group size
    grouped weight (n_g, g, d_out) with n_g = ceil(d_in / g);  scales s (n_g, 1, d_out)
    H (d_in, d_in) = X^T X the Hessian of the layer's squared output error
"""

from __future__ import annotations

import copy

import torch

from ..models.decoder import Decoder
from ..validation import float_tensor, integer, number, one_of, positive, positive_int

__all__ = [
    "qmax",
    "absmax_scale",
    "quantize",
    "dequantize",
    "quantize_weight",
    "dequantize_weight",
    "fake_quantize",
    "fake_quantize_naive",
    "quantize_activations",
    "smooth_scales",
    "smooth",
    "quadratic_error",
    "obq_step",
    "gptq_quantize",
    "gptq_quantize_naive",
    "quantize_decoder",
    "decode_intensity",
    "roofline",
]

GRANULARITIES = ("tensor", "channel", "group")


def qmax(bits: int) -> int:
    """The largest integer level, 2^(b-1) - 1 (127 for int8, 7 for int4): symmetric levels."""
    return 2 ** (integer(bits, "bits", low=2, high=16) - 1) - 1


def absmax_scale(x: torch.Tensor, bits: int, dim=None) -> torch.Tensor:
    """s = max_i |x_i| / (2^(b-1) - 1) over ``dim`` (None: the whole tensor), kept for
    broadcasting. Implements eq. 40.1. An all-zero slice gets s = 1 (its levels are all 0)."""
    x = float_tensor(x, "x")
    m = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    return torch.where(m > 0, m, torch.ones_like(m)) / qmax(bits)


def quantize(x: torch.Tensor, s: torch.Tensor, bits: int) -> torch.Tensor:
    """q = clamp(round(x / s), -qmax, qmax) as int32 (round half to even, as torch.round)."""
    Q = qmax(bits)
    return torch.clamp(torch.round(x / s), -Q, Q).to(torch.int32)


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """x_hat = s q. Implements eq. 40.2."""
    return s * q.to(s.dtype)


def _grouped(W: torch.Tensor, g: int) -> torch.Tensor:
    """(d_in, d_out) -> (n_g, g, d_out), zero-padded at the end (zeros never set a max)."""
    d_in, d_out = W.shape
    n_g = -(-d_in // g)
    padded = torch.cat([W, W.new_zeros(n_g * g - d_in, d_out)])  # (n_g g, d_out)
    return padded.reshape(n_g, g, d_out)


def quantize_weight(
    W: torch.Tensor, bits: int, granularity: str = "channel", group_size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absmax-quantise a weight with one scale per tensor, per output column or per group.

    W: (d_in, d_out). Returns q (n_g, g, d_out) int32 and s (n_g, 1, d_out); "tensor" and
    "channel" use one group of all d_in rows.
    """
    W = float_tensor(W, "W", ndim=2)
    one_of(granularity, "granularity", GRANULARITIES)
    g = positive_int(group_size, "group_size") if granularity == "group" else W.shape[0]
    Wg = _grouped(W, g)  # (n_g, g, d_out)
    s = absmax_scale(Wg, bits, dim=None if granularity == "tensor" else 1)  # eq. 40.1
    s = s.expand(Wg.shape[0], 1, Wg.shape[2]) if granularity == "tensor" else s
    return quantize(Wg, s, bits), s


def dequantize_weight(q: torch.Tensor, s: torch.Tensor, d_in: int) -> torch.Tensor:
    """(n_g, g, d_out) levels and scales back to the (d_in, d_out) weight (eq. 40.2)."""
    return dequantize(q, s).reshape(-1, q.shape[-1])[:d_in]


def fake_quantize(
    W: torch.Tensor, bits: int, granularity: str = "channel", group_size: int = 32
) -> torch.Tensor:
    """W rounded to its quantisation grid, in W's dtype: dequantize(quantize(W)). (d_in, d_out)."""
    q, s = quantize_weight(W, bits, granularity, group_size)
    return dequantize_weight(q, s, W.shape[0])


def fake_quantize_naive(
    W: torch.Tensor, bits: int, granularity: str = "channel", group_size: int = 32
) -> torch.Tensor:
    """:func:`fake_quantize` one column and one group at a time, in Python."""
    W = float_tensor(W, "W", ndim=2)
    one_of(granularity, "granularity", GRANULARITIES)
    Q = qmax(bits)
    d_in, d_out = W.shape
    g = group_size if granularity == "group" else d_in
    out = torch.empty_like(W)
    m_all = float(W.abs().max())
    for j in range(d_out):
        for start in range(0, d_in, g):
            block = W[start : start + g, j]
            m = m_all if granularity == "tensor" else float(block.abs().max())
            s = (m if m > 0 else 1.0) / Q
            out[start : start + g, j] = torch.clamp(torch.round(block / s), -Q, Q) * s
    return out


def quantize_activations(X: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """X rounded per token (one absmax scale per row), as dynamic activation quantisation does.
    X: (N, d_in) -> (N, d_in)."""
    s = absmax_scale(X, bits, dim=-1)  # (N, 1)
    return dequantize(quantize(X, s, bits), s)


def smooth_scales(X: torch.Tensor, W: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """SmoothQuant's s_j = max|X_:j|^alpha / max|W_j:|^(1 - alpha), one per input channel j.

    X: (N, d_in); W: (d_in, d_out). Returns (d_in,).
    """
    a = number(alpha, "alpha", 0.0, 1.0)
    x_max = X.abs().amax(0).clamp(min=1e-8)  # (d_in,)
    w_max = W.abs().amax(1).clamp(min=1e-8)  # (d_in,)
    return x_max**a / w_max ** (1 - a)


def smooth(X: torch.Tensor, W: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(X diag(s)^-1, diag(s) W): the same product X W, the scale moved. Implements eq. 40.3.

    X: (N, d_in); W: (d_in, d_out); s: (d_in,) positive.
    """
    s = float_tensor(s, "s", ndim=1)
    if bool((s <= 0).any()):
        raise ValueError("s must be positive (a zero or negative scale is not invertible)")
    return X / s, s[:, None] * W


def quadratic_error(W: torch.Tensor, Q: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """L = sum over output columns of (w - q)^T H (w - q). Implements eq. 40.4.

    W, Q: (d_in, d_out); H: (d_in, d_in). With H = X^T X it is ||X W - X Q||_F^2.
    """
    D = W - Q  # (d_in, d_out)
    return (D * (H @ D)).sum()


def obq_step(w: torch.Tensor, H_inv: torch.Tensor, j: int, q_j: float) -> torch.Tensor:
    """One optimal-brain-quantiser step: set w_j to q_j and move the other weights by
    delta = -(w_j - q_j) / [H^-1]_jj * H^-1[:, j], which minimises (w - w')^T H (w - w') given
    w'_j = q_j. w: (d_in,); H_inv: (d_in, d_in). Returns the new (d_in,) weights."""
    return w - (w[j] - q_j) / H_inv[j, j] * H_inv[:, j]


def _damped(H: torch.Tensor, damp: float) -> torch.Tensor:
    H = float_tensor(H, "H", ndim=2)
    lam = number(damp, "damp", 0.0) * H.diagonal().mean()
    return H + lam * torch.eye(H.shape[0], dtype=H.dtype)


def gptq_quantize(W: torch.Tensor, H: torch.Tensor, bits: int, damp: float = 0.01) -> torch.Tensor:
    """GPTQ: quantise the input rows of W one at a time (per-column absmax scales of the
    original W), spreading each row's rounding error over the rows not yet quantised with the
    inverse Hessian, read from the upper Cholesky factor of H^-1. W: (d_in, d_out);
    H: (d_in, d_in), damped by ``damp`` times its mean diagonal. Returns the fake-quantised W."""
    W = float_tensor(W, "W", ndim=2).clone()
    s = absmax_scale(W, bits, dim=0)  # (1, d_out) per output column
    U = torch.linalg.cholesky(torch.linalg.inv(_damped(H, damp)), upper=True)  # (d_in, d_in)
    Q = torch.empty_like(W)
    for j in range(W.shape[0]):
        Q[j] = dequantize(quantize(W[j], s[0], bits), s[0])  # (d_out,) round row j
        err = (W[j] - Q[j]) / U[j, j]  # (d_out,)
        W[j + 1 :] -= U[j, j + 1 :, None] * err[None, :]  # OBQ update of the later rows
    return Q


def gptq_quantize_naive(
    W: torch.Tensor, H: torch.Tensor, bits: int, damp: float = 0.01
) -> torch.Tensor:
    """:func:`gptq_quantize` by repeated :func:`obq_step`: the inverse Hessian of the rows not yet
    quantised is recomputed from scratch at every step."""
    W = float_tensor(W, "W", ndim=2).clone()
    Hd = _damped(H, damp)
    s = absmax_scale(W, bits, dim=0)[0]  # (d_out,)
    n = W.shape[0]
    for j in range(n):
        H_inv = torch.linalg.inv(Hd[j:, j:])  # (n - j, n - j) rows j.. still free
        q = dequantize(quantize(W[j], s, bits), s)  # (d_out,)
        for c in range(W.shape[1]):
            W[j:, c] = obq_step(W[j:, c], H_inv, 0, float(q[c]))
    return W


def quantize_decoder(
    model: Decoder, bits: int, granularity: str = "channel", group_size: int = 32
) -> Decoder:
    """A copy of ``model`` with every weight matrix of its blocks fake-quantised (the token
    embedding and the output head stay in full precision, as is usual)."""
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name.startswith("blocks.") and p.dim() == 2:
                p.copy_(fake_quantize(p, bits, granularity, group_size))
    return out


def decode_intensity(
    n_params: float, kv_bytes: float, batch: int = 1, bytes_per_param: float = 2.0
) -> float:
    """FLOPs per byte of one decoding step: 2 P B / (bytes_per_param P + B B_KV); for B = 1 and
    two-byte weights it is 2P / (2P + B_KV). Implements eq. 40.5.

    n_params: P weights read once per step; kv_bytes: the cache one sequence reads.
    """
    P = positive(n_params, "n_params")
    B = positive_int(batch, "batch")
    return 2 * P * B / (positive(bytes_per_param, "bytes_per_param") * P + B * kv_bytes)


def roofline(intensity, peak_flops: float, bandwidth: float):
    """Attainable FLOP/s = min(peak, intensity x bandwidth) (bytes/s)."""
    return torch.clamp(torch.as_tensor(intensity, dtype=torch.float64) * bandwidth, max=peak_flops)
