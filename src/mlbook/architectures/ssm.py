"""State-space models: discretisation, convolution, associative scans, selectivity, SSD (ch. 28).

A continuous linear time-invariant (LTI) system ``h'(t) = A h(t) + B x(t)``, ``y(t) = C h(t)``
is discretised with a step ``delta`` into ``h_t = Abar h_{t-1} + Bbar x_t``, ``y_t = C h_t``
(eq. 28.5 with constant matrices). Unrolled, an LTI system is a causal convolution with the
kernel ``K = (C Bbar, C Abar Bbar, C Abar^2 Bbar, ...)``, applied by FFT. When the matrices
depend on the input (Mamba's *selective* SSM, eq. 28.5 with subscripts t) the convolution is
gone, but the recurrence ``h_t = a_t h_{t-1} + b_t`` is still an associative scan, computable in
O(log T) parallel depth. Written out, the whole map x -> y is multiplication by a lower-triangular
*semiseparable* matrix M (state-space duality, SSD): ``M_ij = C_i^T (A_i ... A_{j+1}) B_j``.

Shape legend
    T      sequence length (time)
    N      state size
    D      number of channels of a selective SSM (each with its own Delta, sharing B and C)
    P      channels of an SSD head that share a_t, B_t, C_t
    (...)  leading axes: batch for LTI inputs; the state axes of a scan, kept as they are
    A      continuous state matrix (N, N); for selective scans diagonal, stored as (D, N)
    B, C   LTI: (N,) vectors (one input, one output); selective/SSD: (T, N), one per step
    x      LTI input (..., T); selective input (T, D); SSD input (T,) or (T, P)
    K      convolution kernel (T,)
    a, b   scan coefficients, (T, ...): h_t = a_t * h_{t-1} + b_t elementwise

Every fast form sits beside its reference: :func:`causal_conv_fft` beside
:func:`causal_conv_direct`, :func:`scan_hillis_steele` and :func:`scan_blelloch` beside
:func:`scan_sequential`, :func:`selective_scan_parallel` beside :func:`selective_scan_sequential`,
and :func:`ssd_matrix` (segment sums, vectorised) beside :func:`ssd_matrix_naive` (explicit
products). Bad input raises ``TypeError`` or ``ValueError`` naming the offending shapes or values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..validation import float_tensor as _check_tensor

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


# --- validation ----------------------------------------------------------------------------------


def _check_delta(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise TypeError(f"delta must be a number, got {type(delta).__name__}")
    if not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be positive and finite, got {delta!r}")
    return float(delta)


def _check_AB(A, B) -> None:
    _check_tensor(A, "A", ndim=2)
    _check_tensor(B, "B", ndim=1)
    n = A.shape[0]
    if A.shape != (n, n) or n == 0:
        raise ValueError(f"A must be a non-empty square (N, N) matrix, got {tuple(A.shape)}")
    if B.shape != (n,):
        raise ValueError(f"B must have shape (N,) = ({n},) to match A, got {tuple(B.shape)}")


def _check_lti(Abar, Bbar, C) -> None:
    _check_AB(Abar, Bbar)
    _check_tensor(C, "C", ndim=1)
    if C.shape != Bbar.shape:
        raise ValueError(f"C must have shape (N,) = {tuple(Bbar.shape)}, got {tuple(C.shape)}")


# --- discretisation (eq. 28.5 with constant matrices) --------------------------------------------


def discretize_zoh(A: torch.Tensor, B: torch.Tensor, delta: float) -> Pair:
    """Zero-order hold: exact when x is constant over each step of length ``delta``.

    ``Abar = exp(delta A)`` and ``Bbar = (int_0^delta exp(s A) ds) B``, which equals
    ``A^{-1} (exp(delta A) - I) B`` when A is invertible. Both come from one matrix exponential
    of the block matrix ``delta [[A, B], [0, 0]]`` (Van Loan), which needs no inverse.

    Args:
        A: (N, N); B: (N,); delta: step > 0.

    Returns:
        (Abar: (N, N), Bbar: (N,)).
    """
    _check_AB(A, B)
    delta = _check_delta(delta)
    n = A.shape[0]
    block = A.new_zeros(n + 1, n + 1)  # [[A, B], [0, 0]]
    block[:n, :n] = A
    block[:n, n] = B
    e = torch.linalg.matrix_exp(delta * block)  # [[Abar, Bbar], [0, 1]]
    return e[:n, :n], e[:n, n]


def discretize_bilinear(A: torch.Tensor, B: torch.Tensor, delta: float) -> Pair:
    """Bilinear (Tustin, trapezoidal) discretisation, as in S4.

    ``Abar = (I - delta/2 A)^{-1} (I + delta/2 A)`` (the (1, 1) Pade approximant of
    ``exp(delta A)``: error O(delta^3) per step) and ``Bbar = (I - delta/2 A)^{-1} delta B``.

    Args:
        A: (N, N); B: (N,); delta: step > 0 (I - delta/2 A must be invertible).

    Returns:
        (Abar: (N, N), Bbar: (N,)).
    """
    _check_AB(A, B)
    delta = _check_delta(delta)
    eye = torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
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
    """Run ``h_t = Abar h_{t-1} + Bbar x_t``, ``y_t = C h_t`` (eq. 28.5, LTI) step by step.

    Args:
        Abar: (N, N); Bbar, C: (N,); x: (..., T); h0: (..., N) initial state (default 0).
        return_states: also return all states h_1..h_T.

    Returns:
        y: (..., T), and h: (..., T, N) if ``return_states``.
    """
    _check_lti(Abar, Bbar, C)
    _check_tensor(x, "x", min_ndim=1)
    n = Abar.shape[0]
    h = x.new_zeros(*x.shape[:-1], n) if h0 is None else h0
    if h.shape != (*x.shape[:-1], n):
        raise ValueError(
            f"h0 must have shape (..., N) = {(*x.shape[:-1], n)}, got {tuple(h.shape)}"
        )
    hs = []
    for t in range(x.shape[-1]):
        h = h @ Abar.T + x[..., t, None] * Bbar  # (..., N)
        hs.append(h)
    states = torch.stack(hs, dim=-2)  # (..., T, N)
    y = states @ C  # (..., T)
    return (y, states) if return_states else y


def ssm_kernel(Abar: torch.Tensor, Bbar: torch.Tensor, C: torch.Tensor, T: int) -> torch.Tensor:
    """The convolution kernel ``K_j = C Abar^j Bbar``, j = 0..T-1, of an LTI SSM.

    With h_0 = 0, ``y_t = sum_{j=0}^{t} K_j x_{t-j}``. Args: Abar (N, N); Bbar, C (N,); T >= 1.
    Returns (T,).
    """
    _check_lti(Abar, Bbar, C)
    if not isinstance(T, int) or isinstance(T, bool) or T < 1:
        raise ValueError(f"T must be a positive int, got {T!r}")
    ks, v = [], Bbar
    for _ in range(T):
        ks.append(C @ v)
        v = Abar @ v  # Abar^{j+1} Bbar
    return torch.stack(ks)


def _check_conv(K, x) -> None:
    _check_tensor(K, "K", ndim=1)
    _check_tensor(x, "x", min_ndim=1)
    if K.shape[0] != x.shape[-1] or K.shape[0] == 0:
        raise ValueError(
            f"K must have shape (T,) with T = x.shape[-1] = {x.shape[-1]}, got {tuple(K.shape)}"
        )


def causal_conv_direct(K: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Causal convolution ``y_t = sum_{j=0}^{t} K_j x_{t-j}`` by its (T, T) Toeplitz matrix.

    The O(T^2) reference for :func:`causal_conv_fft`. K: (T,); x: (..., T). Returns (..., T).
    """
    _check_conv(K, x)
    t = K.shape[0]
    idx = torch.arange(t)
    lag = idx[:, None] - idx[None, :]  # (T, T): i - j
    toeplitz = torch.where(lag >= 0, K[lag.clamp(min=0)], K.new_zeros(()))
    return x @ toeplitz.T


def causal_conv_fft(K: torch.Tensor, x: torch.Tensor, n_fft: int | None = None) -> torch.Tensor:
    """Causal convolution by FFT in O(T log T), zero-padded so nothing wraps around.

    The product of two length-n DFTs is the *circular* convolution modulo n. The linear
    convolution of two length-T signals has length 2T - 1, so with n >= 2T - 1 the circular
    one has no wrap-around and its first T entries are the causal outputs.

    Args:
        K: (T,); x: (..., T); n_fft: FFT length >= 2T - 1 (default: the next power of two).

    Returns:
        (..., T).
    """
    _check_conv(K, x)
    t = K.shape[0]
    if n_fft is None:
        n_fft = 1 << (2 * t - 2).bit_length()  # next power of 2 >= 2T-1
    if not isinstance(n_fft, int) or isinstance(n_fft, bool) or n_fft < 2 * t - 1:
        raise ValueError(
            f"n_fft must be an int >= 2T - 1 = {2 * t - 1} (else the circular "
            f"convolution wraps around), got {n_fft!r}"
        )
    y = torch.fft.irfft(torch.fft.rfft(K, n=n_fft) * torch.fft.rfft(x, n=n_fft), n=n_fft)
    return y[..., :t]


# --- associative scans ------------------------------------------------------------------------


def combine(e1: Pair, e2: Pair) -> Pair:
    """The scan operator ``(a1, b1) o (a2, b2) = (a1 a2, a2 b1 + b2)``, elementwise.

    Each pair is the affine map h -> a h + b; ``e1 o e2`` applies e1 first, then e2:
    ``a2 (a1 h + b1) + b2``. Composition of maps is associative, not commutative.
    """
    (a1, b1), (a2, b2) = e1, e2
    return a1 * a2, a2 * b1 + b2


def _check_scan(a, b) -> None:
    _check_tensor(a, "a", min_ndim=1)
    _check_tensor(b, "b", min_ndim=1)
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must have the same shape (T, ...), got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.shape[0] == 0:
        raise ValueError(f"empty sequence: a has shape {tuple(a.shape)}")


def scan_sequential(
    a: torch.Tensor, b: torch.Tensor, op: Callable[[Pair, Pair], Pair] = combine
) -> torch.Tensor:
    """``h_t = a_t h_{t-1} + b_t`` with h_0 = 0, one step at a time: T - 1 combines, depth T - 1.

    Args:
        a, b: (T, ...). op: the combine operator (pass a wrapper to count calls).

    Returns:
        h: (T, ...), h_t = the b-part of e_1 o ... o e_t.
    """
    _check_scan(a, b)
    acc = (a[0:1], b[0:1])  # (1, ...): e_1
    hs = [b[0:1]]
    for t in range(1, a.shape[0]):
        acc = op(acc, (a[t : t + 1], b[t : t + 1]))  # e_1 o ... o e_{t+1}
        hs.append(acc[1])
    return torch.cat(hs)


def scan_hillis_steele(
    a: torch.Tensor, b: torch.Tensor, op: Callable[[Pair, Pair], Pair] = combine
) -> torch.Tensor:
    """Inclusive scan by Hillis-Steele: ceil(log2 T) rounds, O(T log T) combines, any T.

    Round r combines every element with the one 2^r places earlier (all at once, in parallel),
    so after round r element t holds e_{t-2^{r+1}+1} o ... o e_t. Args and result as
    :func:`scan_sequential`.
    """
    _check_scan(a, b)
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
    """Work-efficient inclusive scan (Blelloch 1990): 2(n - 1) combines, depth 2 log2 n.

    The input is padded to the next power of two n with the identity element (a=1, b=0). The
    up-sweep builds the reduction tree; the down-sweep turns it into the exclusive prefixes (left
    child: the parent's prefix; right child: parent's prefix o left subtree). The inclusive scan
    is the exclusive one shifted by one place, with the total of the up-sweep at the end.
    Args and result as :func:`scan_sequential`.
    """
    _check_scan(a, b)
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
    """(number of element combines, parallel depth in rounds) of a scan of length T.

    sequential: (T - 1, T - 1); hillis_steele: (sum over rounds of T - 2^r, ceil(log2 T));
    blelloch: (2 (n - 1), 2 log2 n) with n the next power of two >= T (padding included).
    """
    if not isinstance(T, int) or isinstance(T, bool) or T < 1:
        raise ValueError(f"T must be a positive int, got {T!r}")
    if method == "sequential":
        return T - 1, T - 1
    if method == "hillis_steele":
        work, shift, depth = 0, 1, 0
        while shift < T:
            work, shift, depth = work + T - shift, 2 * shift, depth + 1
        return work, depth
    if method == "blelloch":
        m = (T - 1).bit_length()
        return 2 * ((1 << m) - 1), 2 * m
    raise ValueError(f"method must be 'sequential', 'hillis_steele' or 'blelloch', got {method!r}")


# --- selective (Mamba-style) SSM: eq. 28.5 with input-dependent matrices ---------------------


def selective_params(
    x: torch.Tensor,
    W_delta: torch.Tensor,
    b_delta: torch.Tensor,
    W_B: torch.Tensor,
    W_C: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Input-dependent step and matrices: ``Delta = softplus(x W_delta + b_delta)``, ``B = x W_B``,
    ``C = x W_C``.

    Args:
        x: (T, D); W_delta: (D, D); b_delta: (D,); W_B, W_C: (D, N).

    Returns:
        (Delta: (T, D) > 0, B: (T, N), C: (T, N)).
    """
    _check_tensor(x, "x", ndim=2)
    d = x.shape[1]
    for w, name, shape in ((W_delta, "W_delta", (d, d)), (b_delta, "b_delta", (d,))):
        _check_tensor(w, name)
        if w.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(w.shape)}")
    for w, name in ((W_B, "W_B"), (W_C, "W_C")):
        _check_tensor(w, name, ndim=2)
        if w.shape[0] != d:
            raise ValueError(f"{name} must have shape (D, N) with D = {d}, got {tuple(w.shape)}")
    return F.softplus(x @ W_delta + b_delta), x @ W_B, x @ W_C


def _check_selective(x, delta, A, B, C) -> None:
    _check_tensor(x, "x", ndim=2)
    _check_tensor(delta, "delta", ndim=2)
    _check_tensor(A, "A", ndim=2)
    _check_tensor(B, "B", ndim=2)
    _check_tensor(C, "C", ndim=2)
    t, d = x.shape
    n = A.shape[1]
    if delta.shape != (t, d):
        raise ValueError(f"delta must have x's shape (T, D) = {(t, d)}, got {tuple(delta.shape)}")
    if A.shape[0] != d:
        raise ValueError(f"A must have shape (D, N) with D = {d}, got {tuple(A.shape)}")
    if B.shape != (t, n) or C.shape != (t, n):
        raise ValueError(
            f"B and C must have shape (T, N) = {(t, n)}, got {tuple(B.shape)} and {tuple(C.shape)}"
        )
    if (delta <= 0).any():
        raise ValueError(f"delta must be positive, min is {delta.min().item():.3g}")
    if (A == 0).any():
        raise ValueError("the diagonal A must have no zero entries (ZOH divides by A)")


def selective_discretize(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> Pair:
    """Zero-order hold for a diagonal A with a per-step, per-channel step Delta_t.

    ``Abar_t = exp(Delta_t A)`` and ``Bbar_t = (exp(Delta_t A) - 1) / A * B_t`` (the diagonal
    case of :func:`discretize_zoh`; Mamba's code uses the first-order ``Delta_t B_t`` instead).

    Args:
        delta: (T, D) > 0; A: (D, N), nonzero (negative for a stable system); B: (T, N).

    Returns:
        (Abar: (T, D, N), Bbar: (T, D, N)).
    """
    for x, name in ((delta, "delta"), (A, "A"), (B, "B")):
        _check_tensor(x, name, ndim=2)
    if A.shape[0] != delta.shape[1] or B.shape != (delta.shape[0], A.shape[1]):
        raise ValueError(
            f"need delta (T, D), A (D, N), B (T, N); got {tuple(delta.shape)}, "
            f"{tuple(A.shape)}, {tuple(B.shape)}"
        )
    dA = delta[:, :, None] * A[None]  # (T, D, N)
    Abar = torch.exp(dA)
    Bbar = torch.expm1(dA) / A[None] * B[:, None, :]  # (T, D, N)
    return Abar, Bbar


def selective_scan_sequential(
    x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> torch.Tensor:
    """Selective SSM by its recurrence, one step at a time. Implements eq. 28.5.

    For every channel d: ``h_t = Abar_t h_{t-1} + Bbar_t x_t`` (Abar_t diagonal, from Delta_t)
    and ``y_t = C_t^T h_t``.

    Args:
        x: (T, D); delta: (T, D) > 0; A: (D, N) diagonal entries; B, C: (T, N).

    Returns:
        y: (T, D).
    """
    _check_selective(x, delta, A, B, C)
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
    """Selective SSM by an associative scan over time (log depth). Same contract as
    :func:`selective_scan_sequential`; ``scan`` is :func:`scan_blelloch` or
    :func:`scan_hillis_steele`.
    """
    _check_selective(x, delta, A, B, C)
    Abar, Bbar = selective_discretize(delta, A, B)
    h = scan(Abar, Bbar * x[:, :, None])  # (T, D, N)
    return torch.einsum("tdn,tn->td", h, C)


# --- state-space duality: the semiseparable matrix ----------------------------------------------


def segsum(log_a: torch.Tensor) -> torch.Tensor:
    """Segment sums ``out[..., i, j] = sum_{k=j+1}^{i} log_a[..., k]`` for i >= j, -inf above.

    Computed by masked cumulative sums (no subtraction of large prefix sums), so
    ``exp(segsum(log a))`` is the (T, T) matrix of products a_i ... a_{j+1} (1 on the diagonal).
    log_a: (..., T). Returns (..., T, T).
    """
    _check_tensor(log_a, "log_a", min_ndim=1)
    t = log_a.shape[-1]
    x = log_a[..., None, :].expand(*log_a.shape, t).transpose(-1, -2)  # (..., T, T): x[i, j]=l_i
    strict = torch.ones(t, t, dtype=torch.bool, device=log_a.device).tril(-1)
    x = torch.cumsum(x.masked_fill(~strict, 0.0), dim=-2)  # sum_{j<k<=i} l_k
    return x.masked_fill(~torch.ones_like(strict).tril(), -math.inf)


def _check_ssd(a, B, C) -> None:
    _check_tensor(B, "B", ndim=2)
    _check_tensor(C, "C", ndim=2)
    _check_tensor(a, "a", min_ndim=1)
    t, n = B.shape
    if C.shape != (t, n):
        raise ValueError(f"C must have B's shape (T, N) = {(t, n)}, got {tuple(C.shape)}")
    if a.shape not in ((t,), (t, n)):
        raise ValueError(
            f"a must have shape (T,) = ({t},) (scalar A_t = a_t I) or (T, N) = "
            f"{(t, n)} (diagonal A_t), got {tuple(a.shape)}"
        )


def ssd_matrix_naive(a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``M_ij = C_i^T (A_i ... A_{j+1}) B_j`` for i >= j, else 0, by explicit loops: O(T^3 N).

    Args:
        a: (T,) scalar A_t = a_t I, or (T, N) diagonal A_t; B, C: (T, N).

    Returns:
        M: (T, T), lower triangular.
    """
    _check_ssd(a, B, C)
    t, n = B.shape
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
    """The semiseparable matrix of a selective SSM, vectorised with :func:`segsum` (a > 0).

    Scalar a_t (Mamba-2): ``M = exp(segsum(log a)) * (C B^T)``, a decay-masked attention
    matrix. Diagonal a_t: ``M_ij = sum_n C_in exp(segsum(log a_n))_ij B_jn``. Same contract as
    :func:`ssd_matrix_naive`; a must be positive (it is exp(Delta A) in practice).
    """
    _check_ssd(a, B, C)
    if (a <= 0).any():
        raise ValueError(f"a must be positive (log a is taken), min is {a.min().item():.3g}")
    if a.ndim == 1:
        return torch.exp(segsum(torch.log(a))) * (C @ B.T)  # (T, T)
    L = torch.exp(segsum(torch.log(a).T))  # (N, T, T)
    return torch.einsum("in,nij,jn->ij", C, L, B)


def ssd_recurrent(
    a: torch.Tensor, B: torch.Tensor, C: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """``h_t = A_t h_{t-1} + B_t x_t``, ``y_t = C_t^T h_t`` step by step (eq. 28.5, SSD form).

    Args:
        a: (T,) or (T, N) as in :func:`ssd_matrix_naive`; B, C: (T, N); x: (T,) or (T, P),
            P channels sharing a, B, C (the state is then (N, P)).

    Returns:
        y with x's shape.
    """
    _check_ssd(a, B, C)
    _check_tensor(x, "x", min_ndim=1)
    t, n = B.shape
    if x.shape[0] != t or x.ndim > 2:
        raise ValueError(f"x must have shape (T,) or (T, P) with T = {t}, got {tuple(x.shape)}")
    xp = x[:, None] if x.ndim == 1 else x  # (T, P)
    diag = a[:, None].expand(t, n) if a.ndim == 1 else a  # (T, N)
    h = x.new_zeros(n, xp.shape[1])  # (N, P)
    ys = []
    for i in range(t):
        h = diag[i, :, None] * h + B[i, :, None] * xp[i, None, :]
        ys.append(C[i] @ h)  # (P,)
    y = torch.stack(ys)
    return y[:, 0] if x.ndim == 1 else y
