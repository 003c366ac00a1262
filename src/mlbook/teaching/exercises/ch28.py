"""Checks of the exercises of chapter 28 (linear attention and state-space models).

The references are independent of :mod:`mlbook.architectures.linear_attention` and
:mod:`mlbook.architectures.ssm`: retention as the decay-masked quadratic form built with
``torch.tril``; the delta rule as an explicit gradient step computed by autograd; the ZOH input
matrix from ``scipy.special.exprel``; FFT convolutions against the circular convolution folded
together from ``np.convolve``.
"""

from __future__ import annotations

import numpy as np
import scipy.special
import torch
import torch.nn.functional as F

from ...architectures import linear_attention as la
from ...architectures import ssm
from . import attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


# --- 28.1 ----------------------------------------------------------------------------------------


def _decay_mask(T: int, gamma: float) -> torch.Tensor:
    """L[t, j] = gamma^(t - j) for j <= t, else 0."""
    lag = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (T, T)
    return torch.tril(torch.tensor(gamma, dtype=F64) ** lag.clamp(min=0).to(F64))


@exercise("28.1", "retention_recurrent", "retention_ssd")
def retention(recurrent, ssd) -> str:
    """Both forms of retention against (L ⊙ φ(Q) φ(K)^T) V with a tril decay mask."""
    for seed, (T, D, Dv, gamma) in (
        (281, (40, 6, 3, 0.9)),
        (282, (7, 4, 2, 0.5)),
        (283, (16, 5, 4, 1.0)),
    ):
        gen = torch.Generator().manual_seed(seed)
        q, k, v = _randn(gen, T, D), _randn(gen, T, D), _randn(gen, T, Dv)
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
        L = _decay_mask(T, gamma)
        W = L * (phi_q @ phi_k.T)  # (T, T)
        want = W @ v
        wrong = {
            "retention has no normaliser: y_t = φ(q_t)^T S_t, not divided by a running sum": want
            / W.sum(1, keepdim=True),
            "the decay multiplies only the old state, S_t = γ S_{t-1} + φ(k_t) v_t^T: the "
            "newest write enters with weight 1, token j with γ^(t-j)": gamma * want,
            "apply the feature map φ = elu + 1 to q and k": (L * (q @ k.T)) @ v,
            "γ is ignored: the state must forget, S_t = γ S_{t-1} + ...": torch.tril(
                phi_q @ phi_k.T
            )
            @ v,
            "q and k are swapped: the keys write (B_t = φ(k_t)) and the queries read "
            "(C_t = φ(q_t))": (L * (phi_k @ phi_q.T)) @ v,
            "the matrix is transposed: M must be lower triangular, so that y_t sees only "
            "tokens j <= t": W.T @ v,
        }
        for fn, name in ((recurrent, "retention_recurrent"), (ssd, "retention_ssd")):
            expect_answer(
                attempt(fn, q.clone(), k.clone(), v.clone(), gamma, name=name),
                want,
                f"{name}(q, k, v, gamma={gamma}) for T = {T}",
                wrong=wrong,
                atol=1e-10,
                rtol=1e-10,
            )
    return (
        "the loop and the SSD product both match the decay-masked quadratic form for "
        "γ = 0.9, 0.5 and 1"
    )


# --- 28.2 ----------------------------------------------------------------------------------------


def _sgd_write(S: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: float) -> torch.Tensor:
    """S - beta * grad of 0.5 ||S^T k - v||^2, by autograd."""
    S_var = S.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(0.5 * ((S_var.T @ k - v) ** 2).sum(), S_var)
    return S - beta * grad


@exercise("28.2", "delta_write", "read_after_write")
def delta_rule(write, read) -> str:
    """One delta-rule write against an autograd gradient step; the closed-form read after it."""
    gen = torch.Generator().manual_seed(28)
    D, Dv = 6, 4
    S = sum(torch.outer(F.normalize(_randn(gen, D), dim=0), _randn(gen, Dv)) for _ in range(3))
    k_unit = F.normalize(_randn(gen, D), dim=0)
    k_long = 1.7 * F.normalize(_randn(gen, D), dim=0)  # not unit: eq. 28.4 holds
    v = _randn(gen, Dv)
    for k, beta, key in (
        (k_unit, 0.3, "unit"),
        (k_unit, 2.0, "unit"),
        (k_long, 0.5, "non-unit"),
        (k_unit, 1.0, "unit"),
    ):
        want = _sgd_write(S, k, v, beta)
        err = v - S.T @ k
        got = expect_answer(
            attempt(write, S.clone(), k.clone(), v.clone(), beta),
            want,
            f"delta_write(S, k, v, beta={beta}) for a {key} key",
            wrong={
                "that adds β k v^T like plain linear attention; the delta rule writes the error "
                "v - S^T k of the current read": S + beta * torch.outer(k, v),
                "the error is v - S^T k (target minus current read); with the opposite sign "
                "the write moves the read away from v": S - beta * torch.outer(k, err),
                "β scales the write: S + β k (v - S^T k)^T": S + torch.outer(k, err),
            },
            atol=1e-12,
            rtol=1e-10,
        )
    u = _randn(gen, D)
    u = u - (u @ k_unit) * k_unit  # u orthogonal to k
    expect(
        torch.allclose(got.T @ k_unit, v, atol=1e-12, rtol=0)
        and torch.allclose(got.T @ u, S.T @ u, atol=1e-12, rtol=0),
        "after a write with β = 1 the read along k must be v exactly, and reads orthogonal "
        "to k must not change",
    )
    for beta in (0.3, 2.0, 1.0):
        old = S.T @ k_unit
        want = _sgd_write(S, k_unit, v, beta).T @ k_unit
        expect_answer(
            attempt(read, S.clone(), k_unit.clone(), v.clone(), beta),
            want,
            f"read_after_write(S, k, v, beta={beta})",
            wrong={
                "S_t^T k = v only for β = 1; for other β the old read keeps the weight 1 - β": v,
                "the old read S^T k is missing: it keeps the weight 1 - β": beta * v,
                "that is the read after a plain linear-attention write, S^T k + β v": old
                + beta * v,
                "the weights are swapped: the read moves the fraction β of the way from the old "
                "read S^T k to v": beta * old + (1 - beta) * v,
            },
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "delta_write matches an autograd gradient step for β = 0.3, 0.5, 1, 2 (overwrite "
        "exact and orthogonal reads unchanged at β = 1); read_after_write matches for "
        "β = 0.3, 1, 2"
    )


# --- 28.3 ----------------------------------------------------------------------------------------


@exercise("28.3", "zoh_bbar", "bbar_gap_leading")
def zoh_input_matrix(bbar, gap) -> str:
    """ZOH Bbar against Δ b exprel(Δ a); its leading gap to Δ B; the orders 2 and 3."""
    A = -torch.linspace(0.25, 4.0, 8, dtype=F64)
    B = _randn(torch.Generator().manual_seed(283), 8)
    for delta in (0.05, 0.5, 3.0, 1e-6):
        dA = delta * A
        want = delta * B * torch.from_numpy(scipy.special.exprel(dA.numpy()))
        expect_answer(
            attempt(bbar, delta, A.clone(), B.clone()),
            want,
            f"zoh_bbar(delta={delta:g}, A, B)",
            wrong={
                "that is the first-order shortcut Δ B that the exercise compares with": delta * B,
                "that is Abar B = e^(ΔA) B; Bbar integrates e^(sA) B over the step": torch.exp(dA)
                * B,
                "multiply by A^(-1), not by A": torch.expm1(dA) * A * B,
                "the sign is flipped: (e^(Δa) - 1) / a is positive": -want,
                "torch.exp(delta * A) - 1 loses digits to cancellation when Δa is small: use "
                "torch.expm1": (torch.exp(dA) - 1) / A * B,
            },
            atol=0,
            rtol=1e-12,
        )
    for delta in (0.05, 0.01):
        want = 0.5 * delta**2 * A * B
        exact_gap = torch.expm1(delta * A) / A * B - delta * B
        expect_answer(
            attempt(gap, delta, A.clone(), B.clone()),
            want,
            f"bbar_gap_leading(delta={delta:g}, A, B)",
            wrong={
                "the Taylor term of e^(Δa) - 1 is (Δa)^2 / 2: the factor 1/2 is missing": delta**2
                * A
                * B,
                "the sign is flipped: for a < 0 the ZOH Bbar is smaller than Δ b": -want,
                "the gap is second order in Δ: Δ^2, not Δ": 0.5 * delta * A * B,
                "one factor a cancels against the division by a: (1/2) Δ^2 a b, not "
                "(1/2) Δ^2 a^2 b": 0.5 * delta**2 * A**2 * B,
                "that is the whole gap ZOH - Δ B; return only its leading term": exact_gap,
            },
            atol=0,
            rtol=1e-10,
        )
    deltas = np.array([0.05, 0.025, 0.0125, 0.00625])
    gaps, rests = [], []
    for delta in deltas:
        diff = torch.as_tensor(attempt(bbar, float(delta), A.clone(), B.clone())) - delta * B
        gaps.append(float(diff.abs().max()))
        rests.append(float((diff - 0.5 * delta**2 * A * B).abs().max()))
    slope2 = np.polyfit(np.log(deltas), np.log(gaps), 1)[0]
    slope3 = np.polyfit(np.log(deltas), np.log(rests), 1)[0]
    expect(
        1.9 < slope2 < 2.1 and 2.8 < slope3 < 3.2,
        "the gap ZOH - Δ B should fall like Δ^2 and the rest after its leading term like Δ^3",
    )
    return (
        "zoh_bbar matches Δ b exprel(Δa) to 1e-12 for Δ from 1e-6 to 3, the leading gap is "
        "(1/2) Δ^2 a b, and the log-log slopes of the gap and of the rest are 2 and 3"
    )


# --- 28.4 ----------------------------------------------------------------------------------------


def _fold(K: np.ndarray, x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the first T entries of the length-n circular convolution, the causal convolution)."""
    T = K.shape[0]
    rows = x.reshape(-1, T)
    circ, causal = [], []
    for row in rows:
        full = np.convolve(K, row)  # (2T - 1,)
        folded = np.zeros(n)
        np.add.at(folded, np.arange(2 * T - 1) % n, full)
        circ.append(folded[:T])
        causal.append(full[:T])
    shape = x.shape
    return np.array(circ).reshape(shape), np.array(causal).reshape(shape)


@exercise("28.4", "fft_conv", "wrap_error")
def fft_padding(conv, error) -> str:
    """FFT convolution of length n and its wrap-around error against np.convolve, folded."""
    for seed, (T, batch) in ((284, (20, (3,))), (285, (33, (2,))), (286, (8, ()))):
        gen = torch.Generator().manual_seed(seed)
        K = 0.9 ** torch.arange(T, dtype=F64) * _randn(gen, T)
        x = _randn(gen, *batch, T)
        for n in (2 * T - 1, 2 * T - 2, T, T + 5, 1 << (2 * T - 2).bit_length()):
            circ, causal = _fold(K.numpy(), x.numpy(), n)
            circ, causal = torch.from_numpy(circ), torch.from_numpy(causal)
            y_n = torch.fft.irfft(torch.fft.rfft(K, n=n) * torch.fft.rfft(x, n=n), n=n)
            no_n = torch.fft.irfft(torch.fft.rfft(K, n=n) * torch.fft.rfft(x, n=n))
            expect_answer(
                attempt(conv, K.clone(), x.clone(), n),
                circ,
                f"fft_conv(K, x, n={n}) for T = {T}",
                wrong={
                    "torch.fft.irfft needs n=n: without it the inverse has length 2 (n // 2), "
                    "which is not n when n is odd": no_n[..., :T],
                    "return only the first T outputs, shape (..., T)": y_n,
                    "the causal outputs are the first T entries, not the last T": y_n[..., -T:],
                    "n is ignored: with a short n the FFT convolution wraps around, and "
                    "fft_conv must show it": causal,
                },
                atol=1e-12,
                rtol=1e-10,
            )
            want = circ - causal
            full = torch.from_numpy(
                np.stack([np.convolve(K.numpy(), r) for r in x.numpy().reshape(-1, T)])
            ).reshape(*batch, 2 * T - 1)
            one_early = torch.zeros_like(x)
            early_tail = full[..., n - 1 :]  # wrongly from t + n - 1
            one_early[..., : early_tail.shape[-1]] = early_tail
            whole_tail = torch.zeros_like(x)
            whole_tail[..., : T - 1] = full[..., T:]
            expect_answer(
                attempt(error, K.clone(), x.clone(), n),
                want,
                f"wrap_error(K, x, n={n}) for T = {T}",
                wrong={
                    "the sign is flipped: return fft_conv minus the causal convolution": -want,
                    "output t receives the linear-convolution entry t + n, not t + n - "
                    "1": one_early,
                    "the wrapped entries depend on n: only the entries t + n <= 2T - 2 wrap "
                    "onto position t": whole_tail,
                },
                atol=1e-12,
                rtol=1e-10,
            )
    return (
        "fft_conv matches the folded np.convolve and wrap_error its difference to the causal "
        "convolution, for T = 20, 33, 8 and n = 2T - 1, 2T - 2, T, T + 5 and a power of two"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# --- 28.1 ----------------------------------------------------------------------------------------


def retention_normalised(q, k, v, gamma):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    S, c, ys = (
        torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype),
        torch.zeros(q.shape[1], dtype=q.dtype),
        [],
    )
    for t in range(q.shape[0]):
        S = gamma * S + torch.outer(phi_k[t], v[t])
        c = gamma * c + phi_k[t]
        ys.append(phi_q[t] @ S / (phi_q[t] @ c))
    return torch.stack(ys)


def retention_decays_the_write(q, k, v, gamma):
    phi_q, phi_k = la.elu_plus_one(q), la.elu_plus_one(k)
    S, ys = torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype), []
    for t in range(q.shape[0]):
        S = gamma * (S + torch.outer(phi_k[t], v[t]))
        ys.append(phi_q[t] @ S)
    return torch.stack(ys)


def retention_without_features(q, k, v, gamma):
    a = torch.full((q.shape[0],), gamma, dtype=q.dtype)
    return ssm.ssd_matrix(a, k, q) @ v


def retention_swapped(q, k, v, gamma):
    a = torch.full((q.shape[0],), gamma, dtype=q.dtype)
    return ssm.ssd_matrix(a, la.elu_plus_one(q), la.elu_plus_one(k)) @ v


def retention_transposed(q, k, v, gamma):
    a = torch.full((q.shape[0],), gamma, dtype=q.dtype)
    return ssm.ssd_matrix(a, la.elu_plus_one(k), la.elu_plus_one(q)).T @ v


def retention_without_decay(q, k, v, gamma):
    return la.linear_attention_recurrent(q, k, v, normalize=False)


_ssd_ref = _ref("28.1", "retention_ssd")
_loop_ref = _ref("28.1", "retention_recurrent")


# --- 28.2 ----------------------------------------------------------------------------------------


def write_linear_attention(S, k, v, beta):
    return S + beta * torch.outer(k, v)


def write_error_flipped(S, k, v, beta):
    return S + beta * torch.outer(k, S.T @ k - v)


def write_projection_ignoring_beta(S, k, v, beta):
    P = torch.eye(k.shape[0], dtype=S.dtype) - torch.outer(k, k)
    return P @ S + torch.outer(k, v)


def write_transposed(S, k, v, beta):
    return _ref("28.2", "delta_write")(S, k, v, beta).T


def read_is_v(S, k, v, beta):
    return v


def read_beta_v(S, k, v, beta):
    return beta * v


def read_linear_attention(S, k, v, beta):
    return S.T @ k + beta * v


def read_weights_swapped(S, k, v, beta):
    return beta * (S.T @ k) + (1 - beta) * v


_write_ref = _ref("28.2", "delta_write")
_read_ref = _ref("28.2", "read_after_write")


# --- 28.3 ----------------------------------------------------------------------------------------


def bbar_first_order(delta, A, B):
    return delta * B


def bbar_naive_exp(delta, A, B):
    return (torch.exp(delta * A) - 1) / A * B


def bbar_times_A(delta, A, B):
    return torch.expm1(delta * A) * A * B


def bbar_abar_times_b(delta, A, B):
    return torch.exp(delta * A) * B


def gap_without_half(delta, A, B):
    return delta**2 * A * B


def gap_first_power(delta, A, B):
    return 0.5 * delta * A * B


def gap_exact(delta, A, B):
    return torch.expm1(delta * A) / A * B - delta * B


def gap_a_squared(delta, A, B):
    return 0.5 * delta**2 * A**2 * B


_bbar_ref = _ref("28.3", "zoh_bbar")
_gap_ref = _ref("28.3", "bbar_gap_leading")


# --- 28.4 ----------------------------------------------------------------------------------------


def conv_irfft_without_n(K, x, n):
    return torch.fft.irfft(torch.fft.rfft(K, n=n) * torch.fft.rfft(x, n=n))[..., : K.shape[0]]


def conv_unsliced(K, x, n):
    return torch.fft.irfft(torch.fft.rfft(K, n=n) * torch.fft.rfft(x, n=n), n=n)


def conv_last_entries(K, x, n):
    return conv_unsliced(K, x, n)[..., -K.shape[0] :]


def conv_ignores_n(K, x, n):
    return ssm.causal_conv_fft(K, x)


def error_flipped(K, x, n):
    return -_ref("28.4", "wrap_error")(K, x, n)


def error_one_early(K, x, n):
    return _ref("28.4", "wrap_error")(K, x, n - 1)


def error_whole_tail(K, x, n):
    return _ref("28.4", "wrap_error")(K, x, K.shape[0])


_conv_ref = _ref("28.4", "fft_conv")
_error_ref = _ref("28.4", "wrap_error")


MISTAKES = {
    "28.1": [
        ((retention_normalised, _ssd_ref), "no normaliser"),
        ((retention_decays_the_write, _ssd_ref), "decay multiplies only the old state"),
        ((_loop_ref, retention_without_features), "apply the feature map"),
        ((_loop_ref, retention_swapped), "q and k are swapped"),
        ((_loop_ref, retention_transposed), "must be lower triangular"),
        ((retention_without_decay, _ssd_ref), "γ is ignored"),
    ],
    "28.2": [
        ((write_linear_attention, _read_ref), "like plain linear attention"),
        ((write_error_flipped, _read_ref), "opposite sign"),
        ((write_projection_ignoring_beta, _read_ref), "β scales the write"),
        ((write_transposed, _read_ref), "looks transposed"),
        ((_write_ref, read_is_v), "only for β = 1"),
        ((_write_ref, read_beta_v), "old read S^T k is missing"),
        ((_write_ref, read_linear_attention), "plain linear-attention write"),
        ((_write_ref, read_weights_swapped), "weights are swapped"),
    ],
    "28.3": [
        ((bbar_first_order, _gap_ref), "first-order shortcut"),
        ((bbar_naive_exp, _gap_ref), "use torch.expm1"),
        ((bbar_times_A, _gap_ref), "not by A"),
        ((bbar_abar_times_b, _gap_ref), "that is Abar B"),
        ((_bbar_ref, gap_without_half), "factor 1/2 is missing"),
        ((_bbar_ref, gap_first_power), "Δ^2, not Δ"),
        ((_bbar_ref, gap_exact), "whole gap"),
        ((_bbar_ref, gap_a_squared), "one factor a cancels"),
    ],
    "28.4": [
        ((conv_irfft_without_n, _error_ref), "irfft needs n=n"),
        ((conv_unsliced, _error_ref), "only the first T outputs"),
        ((conv_last_entries, _error_ref), "not the last T"),
        ((conv_ignores_n, _error_ref), "n is ignored"),
        ((_conv_ref, error_flipped), "sign is flipped"),
        ((_conv_ref, error_one_early), "not t + n - 1"),
        ((_conv_ref, error_whole_tail), "depend on n"),
    ],
}
