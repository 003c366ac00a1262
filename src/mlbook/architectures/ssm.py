"""State-space models (chapter 28): discretisation, FFT convolution, scans, selectivity, SSD.

An LTI system h_t = Abar h_{t-1} + Bbar x_t, y_t = C h_t is a causal convolution with the kernel
K_j = C Abar^j Bbar; a selective one (input-dependent matrices) is an associative scan; written
out, it is multiplication by a semiseparable matrix M_ij = C_i^T (A_i ... A_{j+1}) B_j (SSD).

Shape legend
    T      sequence length;  N state size;  D channels of a selective SSM
    P      channels of an SSD head that share a_t, B_t, C_t
    (...)  leading axes (batch for LTI inputs; state axes of a scan), kept as they are
    A      continuous state matrix (N, N); diagonal selective A stored as (D, N)
    B, C   LTI: (N,) vectors; selective and SSD: (T, N), one per step
    x      LTI input (..., T); selective input (T, D); SSD input (T,) or (T, P)
    K      convolution kernel (T,);  a, b scan coefficients (T, ...): h_t = a_t h_{t-1} + b_t
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..validation import (
    float_tensor,
    integer,
    one_of,
    positive,
    positive_entries,
    positive_int,
    same_shape,
    shape_is,
)

__all__ = [
    "discretize_zoh",
    "discretize_bilinear",
    "ssm_recurrent",
    "ssm_kernel",
    "causal_conv_direct",
    "causal_conv_fft",
    "combine",
    "scan_sequential",
    "scan_hillis_steele",
    "scan_blelloch",
    "scan_combines",
    "selective_params",
    "selective_discretize",
    "selective_scan_sequential",
    "selective_scan_parallel",
    "segsum",
    "ssd_matrix_naive",
    "ssd_matrix",
    "ssd_recurrent",
]

Pair = tuple[torch.Tensor, torch.Tensor]


# --- discretisation (eq. 28.5 with constant matrices) --------------------------------------------


def discretize_zoh(A: torch.Tensor, B: torch.Tensor, delta: float) -> Pair:
    """Zero-order hold: Abar = exp(delta A), Bbar = (int_0^delta exp(s A) ds) B (eq. 28.5, LTI).

    Both blocks come from one matrix exponential of delta [[A, B], [0, 0]] (no inverse of A).

    Args:
        A: (N, N); B: (N,); delta: step > 0.

    Returns:
        (Abar: (N, N), Bbar: (N,)).
    """
    n = float_tensor(A, "A", ndim=2).shape[0]
    shape_is(A, "A", (n, n))
    shape_is(B, "B", (n,))
    delta = positive(delta, "delta")
    block = A.new_zeros(n + 1, n + 1)  # [[A, B], [0, 0]]
    block[:n, :n] = A
    block[:n, n] = B
    e = torch.linalg.matrix_exp(delta * block)  # [[Abar, Bbar], [0, 1]]
    return e[:n, :n], e[:n, n]


def discretize_bilinear(A: torch.Tensor, B: torch.Tensor, delta: float) -> Pair:
    """Bilinear (Tustin) discretisation, as in S4 (eq. 28.5, LTI).

    Abar = (I - delta/2 A)^{-1} (I + delta/2 A), Bbar = (I - delta/2 A)^{-1} delta B.

    Args:
        A: (N, N); B: (N,); delta: step > 0.

    Returns:
        (Abar: (N, N), Bbar: (N,)).
    """
    n = float_tensor(A, "A", ndim=2).shape[0]
    shape_is(A, "A", (n, n))
    shape_is(B, "B", (n,))
    delta = positive(delta, "delta")
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    left = eye - 0.5 * delta * A
    Abar = torch.linalg.solve(left, eye + 0.5 * delta * A)
    Bbar = torch.linalg.solve(left, delta * B[:, None])[:, 0]
    return Abar, Bbar


# --- the LTI recurrence and its convolution kernel -------------------------------------------


def ssm_recurrent(
    Abar: torch.Tensor,
    Bbar: torch.Tensor,
    C: torch.Tensor,
    x: torch.Tensor,
    h0: torch.Tensor | None = None,
    return_states: bool = False,
):
    """h_t = Abar h_{t-1} + Bbar x_t, y_t = C h_t, step by step. Implements eq. 28.5 (LTI).

    Args:
        Abar: (N, N); Bbar, C: (N,); x: (..., T); h0: (..., N) initial state (default 0).
        return_states: also return the states h_1..h_T.

    Returns:
        y: (..., T), and h: (..., T, N) if ``return_states``.
    """
    float_tensor(x, "x", min_ndim=1)
    n = Abar.shape[0]
    shape_is(Bbar, "Bbar", (n,))
    h = x.new_zeros(*x.shape[:-1], n) if h0 is None else shape_is(h0, "h0", (*x.shape[:-1], n))
    hs = []
    for t in range(x.shape[-1]):
        h = h @ Abar.T + x[..., t, None] * Bbar  # (..., N)
        hs.append(h)
    states = torch.stack(hs, dim=-2)  # (..., T, N)
    y = states @ C  # (..., T)
    return (y, states) if return_states else y


def ssm_kernel(Abar: torch.Tensor, Bbar: torch.Tensor, C: torch.Tensor, T: int) -> torch.Tensor:
    """The convolution kernel K_j = C Abar^j Bbar, j = 0..T-1, of an LTI SSM.

    Args:
        Abar: (N, N); Bbar, C: (N,); T >= 1.

    Returns:
        K: (T,).
    """
    positive_int(T, "T")
    ks, v = [], Bbar
    for _ in range(T):
        ks.append(C @ v)
        v = Abar @ v  # Abar^{j+1} Bbar
    return torch.stack(ks)


def causal_conv_direct(K: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """y_t = sum_{j=0}^{t} K_j x_{t-j} by the (T, T) Toeplitz matrix: the O(T^2) reference.

    Args:
        K: (T,); x: (..., T).

    Returns:
        y: (..., T).
    """
    t = shape_is(K, "K", (x.shape[-1],)).shape[0]
    idx = torch.arange(t)
    lag = idx[:, None] - idx[None, :]  # (T, T): i - j
    toeplitz = torch.where(lag >= 0, K[lag.clamp(min=0)], K.new_zeros(()))
    return x @ toeplitz.T


def causal_conv_fft(K: torch.Tensor, x: torch.Tensor, n_fft: int | None = None) -> torch.Tensor:
    """The causal convolution of :func:`causal_conv_direct` by FFT in O(T log T).

    Args:
        K: (T,); x: (..., T); n_fft: FFT length >= 2T - 1, so that the circular convolution does
            not wrap around (default: the next power of two).

    Returns:
        y: (..., T).
    """
    t = shape_is(K, "K", (x.shape[-1],)).shape[0]
    if n_fft is None:
        n_fft = 1 << (2 * t - 2).bit_length()  # next power of 2 >= 2T-1
    integer(n_fft, "n_fft", 2 * t - 1)
    y = torch.fft.irfft(torch.fft.rfft(K, n=n_fft) * torch.fft.rfft(x, n=n_fft), n=n_fft)
    return y[..., :t]


# --- associative scans ------------------------------------------------------------------------


def combine(e1: Pair, e2: Pair) -> Pair:
    """The scan operator (a1, b1) o (a2, b2) = (a1 a2, a2 b1 + b2): apply e1, then e2."""
    (a1, b1), (a2, b2) = e1, e2
    return a1 * a2, a2 * b1 + b2


def scan_sequential(
    a: torch.Tensor, b: torch.Tensor, op: Callable[[Pair, Pair], Pair] = combine
) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t with h_0 = 0, one combine at a time (depth T - 1).

    Args:
        a, b: (T, ...); op: the combine operator (pass a wrapper to count calls).

    Returns:
        h: (T, ...).
    """
    same_shape(a, b, ("a", "b"))
    acc = (a[0:1], b[0:1])  # (1, ...): e_1
    hs = [b[0:1]]
    for t in range(1, a.shape[0]):
        acc = op(acc, (a[t : t + 1], b[t : t + 1]))  # e_1 o ... o e_{t+1}
        hs.append(acc[1])
    return torch.cat(hs)


def scan_hillis_steele(
    a: torch.Tensor, b: torch.Tensor, op: Callable[[Pair, Pair], Pair] = combine
) -> torch.Tensor:
    """Inclusive scan by Hillis-Steele: ceil(log2 T) rounds, O(T log T) combines.

    Args and result as :func:`scan_sequential`.
    """
    same_shape(a, b, ("a", "b"))
    t, shift = a.shape[0], 1
    while shift < t:
        na, nb = op((a[:-shift], b[:-shift]), (a[shift:], b[shift:]))  # earlier o later
        a = torch.cat([a[:shift], na])
        b = torch.cat([b[:shift], nb])
        shift *= 2
    return b


def scan_blelloch(
    a: torch.Tensor, b: torch.Tensor, op: Callable[[Pair, Pair], Pair] = combine
) -> torch.Tensor:
    """Work-efficient inclusive scan (Blelloch): 2(n - 1) combines, depth 2 log2 n.

    The input is padded with the identity (a=1, b=0) to the next power of two n; an up-sweep
    builds the reduction tree, a down-sweep turns it into prefixes. Args and result as
    :func:`scan_sequential`.
    """
    same_shape(a, b, ("a", "b"))
    t = a.shape[0]
    n = 1 << (t - 1).bit_length()  # next power of 2 >= T
    pad = (n - t,) + tuple(a.shape[1:])
    a = torch.cat([a, a.new_ones(pad)])  # (n, ...)
    b = torch.cat([b, b.new_zeros(pad)])
    half = 1
    while half < n:  # up-sweep
        r = slice(2 * half - 1, n, 2 * half)  # right children
        left = slice(half - 1, n, 2 * half)
        a[r], b[r] = op((a[left], b[left]), (a[r], b[r]))
        half *= 2
    total_b = b[n - 1].clone()
    a[n - 1], b[n - 1] = 1.0, 0.0  # identity at the root
    half = n // 2
    while half >= 1:  # down-sweep
        r = slice(2 * half - 1, n, 2 * half)
        left = slice(half - 1, n, 2 * half)
        la, lb = a[left].clone(), b[left].clone()  # left subtree totals
        a[left], b[left] = a[r], b[r]  # parent's prefix
        a[r], b[r] = op((a[r], b[r]), (la, lb))  # prefix o left subtree
        half //= 2
    return torch.cat([b[1:t], total_b[None]]) if t == n else b[1 : t + 1]


def scan_combines(T: int, method: str) -> tuple[int, int]:
    """(element combines, parallel depth in rounds) of a scan of length T by ``method``.

    sequential: (T - 1, T - 1); hillis_steele: (sum_r (T - 2^r), ceil(log2 T)); blelloch:
    (2 (n - 1), 2 log2 n), n the next power of two >= T.
    """
    positive_int(T, "T")
    one_of(method, "method", ("sequential", "hillis_steele", "blelloch"))
    if method == "sequential":
        return T - 1, T - 1
    if method == "hillis_steele":
        work, shift, depth = 0, 1, 0
        while shift < T:
            work, shift, depth = work + T - shift, 2 * shift, depth + 1
        return work, depth
    m = (T - 1).bit_length()
    return 2 * ((1 << m) - 1), 2 * m


# --- selective (Mamba-style) SSM: eq. 28.5 with input-dependent matrices ---------------------


def selective_params(
    x: torch.Tensor,
    W_delta: torch.Tensor,
    b_delta: torch.Tensor,
    W_B: torch.Tensor,
    W_C: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Delta = softplus(x W_delta + b_delta), B = x W_B, C = x W_C (input-dependent, eq. 28.5).

    Args:
        x: (T, D); W_delta: (D, D); b_delta: (D,); W_B, W_C: (D, N).

    Returns:
        (Delta: (T, D) > 0, B: (T, N), C: (T, N)).
    """
    d = float_tensor(x, "x", ndim=2).shape[1]
    shape_is(W_delta, "W_delta", (d, d))
    shape_is(b_delta, "b_delta", (d,))
    return F.softplus(x @ W_delta + b_delta), x @ W_B, x @ W_C


def selective_discretize(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> Pair:
    """Zero-order hold for a diagonal A and a per-step step size: Abar_t = exp(Delta_t A),
    Bbar_t = (exp(Delta_t A) - 1) / A * B_t.

    Args:
        delta: (T, D) > 0; A: (D, N), no zero entry; B: (T, N).

    Returns:
        (Abar: (T, D, N), Bbar: (T, D, N)).
    """
    t, d = positive_entries(float_tensor(delta, "delta", ndim=2), "delta").shape
    shape_is(positive_entries(A.abs(), "|A|"), "A", (d, None))  # ZOH divides by A
    shape_is(B, "B", (t, A.shape[1]))
    dA = delta[:, :, None] * A[None]  # (T, D, N)
    Abar = torch.exp(dA)
    Bbar = torch.expm1(dA) / A[None] * B[:, None, :]  # (T, D, N)
    return Abar, Bbar


def selective_scan_sequential(
    x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    """Selective SSM by its recurrence, one step at a time. Implements eq. 28.5.

    For every channel: h_t = Abar_t h_{t-1} + Bbar_t x_t, y_t = C_t^T h_t.

    Args:
        x: (T, D); delta: (T, D) > 0; A: (D, N) diagonal entries; B, C: (T, N).

    Returns:
        y: (T, D).
    """
    same_shape(float_tensor(x, "x", ndim=2), delta, ("x", "delta"))
    same_shape(C, B, ("C", "B"))
    Abar, Bbar = selective_discretize(delta, A, B)
    h = x.new_zeros(A.shape)  # (D, N)
    ys = []
    for t in range(x.shape[0]):
        h = Abar[t] * h + Bbar[t] * x[t, :, None]
        ys.append(h @ C[t])  # (D,)
    return torch.stack(ys)


def selective_scan_parallel(
    x: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    scan: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = scan_blelloch,
) -> torch.Tensor:
    """Selective SSM by an associative scan over time (log depth). Implements eq. 28.5.

    Args and result as :func:`selective_scan_sequential`; ``scan``: :func:`scan_blelloch` or
    :func:`scan_hillis_steele`.
    """
    same_shape(float_tensor(x, "x", ndim=2), delta, ("x", "delta"))
    same_shape(C, B, ("C", "B"))
    Abar, Bbar = selective_discretize(delta, A, B)
    h = scan(Abar, Bbar * x[:, :, None])  # (T, D, N)
    return torch.einsum("tdn,tn->td", h, C)


# --- state-space duality: the semiseparable matrix ----------------------------------------------


def segsum(log_a: torch.Tensor) -> torch.Tensor:
    """out[..., i, j] = sum_{k=j+1}^{i} log_a[..., k] for i >= j, -inf above the diagonal.

    Masked cumulative sums (no differences of large prefix sums): exp(segsum(log a)) is the
    matrix of products a_i ... a_{j+1}.

    Args:
        log_a: (..., T).

    Returns:
        (..., T, T).
    """
    float_tensor(log_a, "log_a", min_ndim=1)
    t = log_a.shape[-1]
    x = log_a[..., None, :].expand(*log_a.shape, t).transpose(-1, -2)  # (..., T, T): x[i, j]=l_i
    strict = torch.ones(t, t, dtype=torch.bool, device=log_a.device).tril(-1)
    x = torch.cumsum(x.masked_fill(~strict, 0.0), dim=-2)  # sum_{j<k<=i} l_k
    return x.masked_fill(~torch.ones_like(strict).tril(), -math.inf)


def ssd_matrix_naive(a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """M_ij = C_i^T (A_i ... A_{j+1}) B_j for i >= j, else 0, by explicit loops: O(T^3 N).

    Args:
        a: (T,) scalar A_t = a_t I, or (T, N) diagonal A_t; B, C: (T, N).

    Returns:
        M: (T, T), lower triangular.
    """
    same_shape(C, float_tensor(B, "B", ndim=2), ("C", "B"))
    t, n = B.shape
    one_of(tuple(a.shape), "a.shape", ((t,), (t, n)))
    diag = a[:, None].expand(t, n) if a.ndim == 1 else a  # (T, N)
    M = B.new_zeros(t, t)
    for i in range(t):
        for j in range(i + 1):
            prod = torch.ones(n, dtype=B.dtype)
            for k in range(j + 1, i + 1):
                prod = prod * diag[k]
            M[i, j] = (C[i] * prod * B[j]).sum()
    return M


def ssd_matrix(a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The semiseparable matrix of :func:`ssd_matrix_naive`, vectorised with :func:`segsum`.

    Scalar a_t: M = exp(segsum(log a)) * (C B^T); diagonal a_t: M_ij = sum_n C_in L_nij B_jn
    with L_n = exp(segsum(log a_n)). Args and result as :func:`ssd_matrix_naive`, a > 0.
    """
    same_shape(C, float_tensor(B, "B", ndim=2), ("C", "B"))
    t, n = B.shape
    one_of(tuple(a.shape), "a.shape", ((t,), (t, n)))
    positive_entries(a, "a")  # log a is taken
    if a.ndim == 1:
        return torch.exp(segsum(torch.log(a))) * (C @ B.T)  # (T, T)
    L = torch.exp(segsum(torch.log(a).T))  # (N, T, T)
    return torch.einsum("in,nij,jn->ij", C, L, B)


def ssd_recurrent(
    a: torch.Tensor, B: torch.Tensor, C: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """h_t = A_t h_{t-1} + B_t x_t, y_t = C_t^T h_t, step by step. Implements eq. 28.5 (SSD).

    Args:
        a: (T,) or (T, N) as in :func:`ssd_matrix_naive`; B, C: (T, N); x: (T,) or (T, P),
            P channels sharing a, B, C (the state is then (N, P)).

    Returns:
        y: x's shape.
    """
    same_shape(C, float_tensor(B, "B", ndim=2), ("C", "B"))
    t, n = B.shape
    one_of(tuple(a.shape), "a.shape", ((t,), (t, n)))
    shape_is(x, "x", (t,) if x.ndim == 1 else (t, None))
    xp = x[:, None] if x.ndim == 1 else x  # (T, P)
    diag = a[:, None].expand(t, n) if a.ndim == 1 else a  # (T, N)
    h = x.new_zeros(n, xp.shape[1])  # (N, P)
    ys = []
    for i in range(t):
        h = diag[i, :, None] * h + B[i, :, None] * xp[i, None, :]
        ys.append(C[i] @ h)  # (P,)
    y = torch.stack(ys)
    return y[:, 0] if x.ndim == 1 else y
