"""State-space models (chapter 28): discretisation, FFT convolution, scans, selectivity, SSD.

Shape legend
    T sequence length;  N state size;  D selective channels;  P SSD channels sharing a, B, C
    (...)  leading axes (batch for LTI inputs, state axes of a scan), kept as they are
    A      (N, N) continuous state matrix; a diagonal selective A is stored as (D, N)
    B, C   LTI: (N,);  selective and SSD: (T, N), one per step
    x      LTI (..., T);  selective (T, D);  SSD (T,) or (T, P)
    K      (T,) convolution kernel;  a, b (T, ...) scan coefficients, h_t = a_t h_{t-1} + b_t
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..validation import (
    float_tensor,
    integer,
    nonsingular,
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
    "exprel",
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
    """Zero-order hold: Abar = exp(delta A), Bbar = int_0^delta exp(sA) ds B. Eq. 28.5 (LTI).

    A: (N, N); B: (N,); delta > 0. Returns (Abar (N, N), Bbar (N,)), from one matrix exponential.
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
    """Bilinear (Tustin, S4): Abar = (I - dA/2)^{-1} (I + dA/2), Bbar = (I - dA/2)^{-1} d B.

    A: (N, N); B: (N,); delta = d > 0, with I - dA/2 invertible (no eigenvalue of A at 2/d).
    Returns (Abar (N, N), Bbar (N,)).
    """
    n = float_tensor(A, "A", ndim=2).shape[0]
    shape_is(A, "A", (n, n))
    shape_is(B, "B", (n,))
    delta = positive(delta, "delta")
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    left = eye - 0.5 * delta * A
    nonsingular(left, f"I - (delta/2) A, for the bilinear rule with delta = {delta:g},")
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

    Abar: (N, N); Bbar, C: (N,); x: (..., T); h0: (..., N) or None (zeros). Returns y: (..., T),
    and the states (..., T, N) if ``return_states``.
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
    """The convolution kernel K_j = C Abar^j Bbar, j < T: Abar (N, N), Bbar, C (N,) -> (T,)."""
    positive_int(T, "T")
    ks, v = [], Bbar
    for _ in range(T):
        ks.append(C @ v)
        v = Abar @ v  # Abar^{j+1} Bbar
    return torch.stack(ks)


def causal_conv_direct(K: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """y_t = sum_{j<=t} K_j x_{t-j} by a (T, T) Toeplitz matrix: K (T,), x (..., T) -> (..., T)."""
    t = shape_is(K, "K", (x.shape[-1],)).shape[0]
    idx = torch.arange(t)
    lag = idx[:, None] - idx[None, :]  # (T, T): i - j
    toeplitz = torch.where(lag >= 0, K[lag.clamp(min=0)], K.new_zeros(()))
    return x @ toeplitz.T


def causal_conv_fft(K: torch.Tensor, x: torch.Tensor, n_fft: int | None = None) -> torch.Tensor:
    """The causal convolution by FFT in O(T log T): K (T,), x (..., T) -> (..., T).

    n_fft >= 2T - 1, so that the circular convolution does not wrap (default: a power of two).
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
    """h_t = a_t h_{t-1} + b_t, h_0 = 0, one combine at a time: a, b (T, ...) -> h (T, ...).

    ``op``: the combine operator (pass a wrapper to count calls).
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
    """Inclusive scan by Hillis-Steele: ceil(log2 T) rounds, O(T log T) combines. As
    :func:`scan_sequential`.
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

    Padded with the identity (a=1, b=0) to n = 2^m >= T; an up-sweep builds the reduction tree, a
    down-sweep the prefixes. As :func:`scan_sequential`.
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
    """(combines, parallel depth) of a scan of length T by ``method``; blelloch counts padding."""
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

    x: (T, D); W_delta: (D, D); b_delta: (D,); W_B, W_C: (D, N). Returns Delta (T, D), B, C (T, N).
    """
    d = float_tensor(x, "x", ndim=2).shape[1]
    shape_is(W_delta, "W_delta", (d, d))
    shape_is(b_delta, "b_delta", (d,))
    return F.softplus(x @ W_delta + b_delta), x @ W_B, x @ W_C


def exprel(z: torch.Tensor) -> torch.Tensor:
    """(e^z - 1) / z elementwise, with its limit 1 (and slope 1/2) at z = 0; no cancellation.

    For |z| < 1e-5 the series 1 + z/2 + z^2/6 is exact to 1e-16 (the next term is z^3/24) and
    keeps the slope, which autograd through expm1(z) / z would lose to cancellation.
    """
    small = z.abs() < 1e-5
    safe = torch.where(small, torch.ones_like(z), z)  # no 0 / 0, not even in the unused branch
    return torch.where(small, 1 + z / 2 + z * z / 6, torch.expm1(safe) / safe)


def selective_discretize(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> Pair:
    """Zero-order hold per step: Abar_t = exp(Delta_t A), Bbar_t = Delta_t exprel(Delta_t A) B_t.

    exprel(z) = (e^z - 1) / z, so Bbar_t = (Abar_t - 1) / A B_t, and Delta_t B_t where A = 0.
    delta: (T, D) > 0; A: (D, N); B: (T, N). Returns (Abar, Bbar), (T, D, N) each.
    """
    t, d = float_tensor(delta, "delta", ndim=2).shape
    shape_is(A, "A", (d, None))
    shape_is(B, "B", (t, A.shape[1]))
    positive_entries(delta, "delta")
    dA = delta[:, :, None] * A[None]  # (T, D, N)
    Abar = torch.exp(dA)
    Bbar = delta[:, :, None] * exprel(dA) * B[:, None, :]  # (T, D, N), exact at A = 0
    return Abar, Bbar


def selective_scan_sequential(
    x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    """Selective SSM by its recurrence, one step at a time. Implements eq. 28.5.

    x: (T, D); delta: (T, D) > 0; A: (D, N) diagonal entries; B, C: (T, N). Returns y: (T, D).
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

    As :func:`selective_scan_sequential`; ``scan``: :func:`scan_blelloch` or Hillis-Steele.
    """
    same_shape(float_tensor(x, "x", ndim=2), delta, ("x", "delta"))
    same_shape(C, B, ("C", "B"))
    Abar, Bbar = selective_discretize(delta, A, B)
    h = scan(Abar, Bbar * x[:, :, None])  # (T, D, N)
    return torch.einsum("tdn,tn->td", h, C)


# --- state-space duality: the semiseparable matrix ----------------------------------------------


def segsum(log_a: torch.Tensor) -> torch.Tensor:
    """out[..., i, j] = sum_{j<k<=i} log_a[..., k], -inf for j > i: (..., T) -> (..., T, T)."""
    float_tensor(log_a, "log_a", min_ndim=1)
    t = log_a.shape[-1]
    x = log_a[..., None, :].expand(*log_a.shape, t).transpose(-1, -2)  # (..., T, T): x[i, j]=l_i
    strict = torch.ones(t, t, dtype=torch.bool, device=log_a.device).tril(-1)
    x = torch.cumsum(x.masked_fill(~strict, 0.0), dim=-2)  # sum_{j<k<=i} l_k
    return x.masked_fill(~torch.ones_like(strict).tril(), -math.inf)


def ssd_matrix_naive(a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """M_ij = C_i^T (A_i ... A_{j+1}) B_j for i >= j, else 0, by explicit loops (reference).

    a: (T,) scalar A_t = a_t I, or (T, N) diagonal A_t; B, C: (T, N). Returns M: (T, T).
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
    """The semiseparable matrix of :func:`ssd_matrix_naive` from exp(segsum(log a)); a > 0."""
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

    a: (T,) or (T, N); B, C: (T, N); x: (T,) or (T, P), P channels sharing a, B, C. Returns y (x's
    shape).
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
