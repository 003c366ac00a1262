"""Checks of the exercises of chapter 28 (linear attention and state-space models).

The references are independent of :mod:`mlbook.architectures.linear_attention` and
:mod:`mlbook.architectures.ssm`: retention as the decay-masked quadratic form built with
``torch.tril`` (28.1); the delta rule as an explicit gradient step computed by autograd (28.2);
the ZOH input matrix from ``scipy.special.exprel`` (28.3); FFT convolutions against the circular
convolution folded together from ``np.convolve`` (28.4); the impulse response of the decaying
recurrence (28.5); the masked quadratic form of linear attention (28.6); and associative-memory
reads in closed form, through products of projections (28.7).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import numpy as np
import scipy.special
import torch
import torch.nn.functional as F

from . import Incorrect, as_number, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


def _phi(x: torch.Tensor) -> torch.Tensor:
    """The feature map elu + 1, written out."""
    return F.elu(x) + 1


# --- 28.1 ----------------------------------------------------------------------------------------


def _decay_mask(T: int, gamma: float) -> torch.Tensor:
    """L[t, j] = gamma^(t - j) for j <= t, else 0."""
    lag = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (T, T)
    return torch.tril(torch.tensor(gamma, dtype=F64) ** lag.clamp(min=0).to(F64))


def _retention_weights(q, k, gamma):
    """W = L ⊙ φ(Q) φ(K)^T: the weight of value j in output t, (T, T)."""
    return _decay_mask(q.shape[0], gamma) * (_phi(q) @ _phi(k).T)


def retention_normalised(q, k, v, gamma):
    W = _retention_weights(q, k, gamma)
    return (W @ v) / W.sum(1, keepdim=True)


def retention_decays_the_write(q, k, v, gamma):
    return gamma * (_retention_weights(q, k, gamma) @ v)


def retention_without_features(q, k, v, gamma):
    return (_decay_mask(q.shape[0], gamma) * (q @ k.T)) @ v


def retention_without_decay(q, k, v, gamma):
    return torch.tril(_phi(q) @ _phi(k).T) @ v


def retention_swapped(q, k, v, gamma):
    return _retention_weights(k, q, gamma) @ v


def retention_transposed(q, k, v, gamma):
    return _retention_weights(q, k, gamma).T @ v


WRONG_RETENTION = {
    "retention has no normaliser: y_t = φ(q_t)^T S_t, not divided by a running "
    "sum": retention_normalised,
    "the decay multiplies only the old state, S_t = γ S_{t-1} + φ(k_t) v_t^T: the newest write "
    "enters with weight 1, token j with γ^(t-j)": retention_decays_the_write,
    "apply the feature map φ = elu + 1 to q and k": retention_without_features,
    "γ is ignored: the state must forget, S_t = γ S_{t-1} + ...": retention_without_decay,
    "q and k are swapped: the keys write (B_t = φ(k_t)) and the queries read "
    "(C_t = φ(q_t))": retention_swapped,
    "the matrix is transposed: M must be lower triangular, so that y_t sees only tokens "
    "j <= t": retention_transposed,
}


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
        want = _retention_weights(q, k, gamma) @ v
        wrong = {fb: fn(q, k, v, gamma) for fb, fn in WRONG_RETENTION.items()}
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


def write_linear_attention(S, k, v, beta):
    return S + beta * torch.outer(k, v)


def write_error_flipped(S, k, v, beta):
    return S + beta * torch.outer(k, S.T @ k - v)


def write_ignoring_beta(S, k, v, beta):
    return S + torch.outer(k, v - S.T @ k)


def write_transposed(S, k, v, beta):
    return _sgd_write(S, k, v, beta).T


def read_is_v(S, k, v, beta):
    return v


def read_beta_v(S, k, v, beta):
    return beta * v


def read_linear_attention(S, k, v, beta):
    return S.T @ k + beta * v


def read_weights_swapped(S, k, v, beta):
    return beta * (S.T @ k) + (1 - beta) * v


WRONG_WRITE = {
    "that adds β k v^T like plain linear attention; the delta rule writes the error v - S^T k "
    "of the current read": write_linear_attention,
    "the error is v - S^T k (target minus current read); with the opposite sign the write "
    "moves the read away from v": write_error_flipped,
    "β scales the write: S + β k (v - S^T k)^T": write_ignoring_beta,
}
WRONG_READ = {
    "S_t^T k = v only for β = 1; for other β the old read keeps the weight 1 - β": read_is_v,
    "the old read S^T k is missing: it keeps the weight 1 - β": read_beta_v,
    "that is the read after a plain linear-attention write, S^T k + β v": read_linear_attention,
    "the weights are swapped: the read moves the fraction β of the way from the old read S^T k "
    "to v": read_weights_swapped,
}


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
        got = expect_answer(
            attempt(write, S.clone(), k.clone(), v.clone(), beta),
            _sgd_write(S, k, v, beta),
            f"delta_write(S, k, v, beta={beta}) for a {key} key",
            wrong={fb: fn(S, k, v, beta) for fb, fn in WRONG_WRITE.items()},
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
        expect_answer(
            attempt(read, S.clone(), k_unit.clone(), v.clone(), beta),
            _sgd_write(S, k_unit, v, beta).T @ k_unit,
            f"read_after_write(S, k, v, beta={beta})",
            wrong={fb: fn(S, k_unit, v, beta) for fb, fn in WRONG_READ.items()},
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "delta_write matches an autograd gradient step for β = 0.3, 0.5, 1, 2 (overwrite "
        "exact and orthogonal reads unchanged at β = 1); read_after_write matches for "
        "β = 0.3, 1, 2"
    )


# --- 28.3 ----------------------------------------------------------------------------------------


def _bbar_exprel(delta, A, B):
    """The ZOH Bbar = Δ b exprel(Δ a), with SciPy's exprel(z) = (e^z - 1) / z."""
    return delta * B * torch.from_numpy(scipy.special.exprel((delta * A).numpy()))


def bbar_first_order(delta, A, B):
    return delta * B


def bbar_abar_times_b(delta, A, B):
    return torch.exp(delta * A) * B


def bbar_times_A(delta, A, B):
    return torch.expm1(delta * A) * A * B


def bbar_flipped(delta, A, B):
    return -_bbar_exprel(delta, A, B)


def bbar_naive_exp(delta, A, B):
    return (torch.exp(delta * A) - 1) / A * B


def gap_without_half(delta, A, B):
    return delta**2 * A * B


def gap_flipped(delta, A, B):
    return -0.5 * delta**2 * A * B


def gap_first_power(delta, A, B):
    return 0.5 * delta * A * B


def gap_a_squared(delta, A, B):
    return 0.5 * delta**2 * A**2 * B


def gap_exact(delta, A, B):
    return _bbar_exprel(delta, A, B) - delta * B


WRONG_BBAR = {
    "that is the first-order shortcut Δ B that the exercise compares with": bbar_first_order,
    "that is Abar B = e^(ΔA) B; Bbar integrates e^(sA) B over the step": bbar_abar_times_b,
    "multiply by A^(-1), not by A": bbar_times_A,
    "the sign is flipped: (e^(Δa) - 1) / a is positive": bbar_flipped,
    "torch.exp(delta * A) - 1 loses digits to cancellation when Δa is small: use "
    "torch.expm1": bbar_naive_exp,
}
WRONG_GAP = {
    "the Taylor term of e^(Δa) - 1 is (Δa)^2 / 2: the factor 1/2 is missing": gap_without_half,
    "the sign is flipped: for a < 0 the ZOH Bbar is smaller than Δ b": gap_flipped,
    "the gap is second order in Δ: Δ^2, not Δ": gap_first_power,
    "one factor a cancels against the division by a: (1/2) Δ^2 a b, not "
    "(1/2) Δ^2 a^2 b": gap_a_squared,
    "that is the whole gap ZOH - Δ B; return only its leading term": gap_exact,
}


@exercise("28.3", "zoh_bbar", "bbar_gap_leading")
def zoh_input_matrix(bbar, gap) -> str:
    """ZOH Bbar against Δ b exprel(Δ a); its leading gap to Δ B; the orders 2 and 3."""
    A = -torch.linspace(0.25, 4.0, 8, dtype=F64)
    B = _randn(torch.Generator().manual_seed(283), 8)
    for delta in (0.05, 0.5, 3.0, 1e-6):
        expect_answer(
            attempt(bbar, delta, A.clone(), B.clone()),
            _bbar_exprel(delta, A, B),
            f"zoh_bbar(delta={delta:g}, A, B)",
            wrong={fb: fn(delta, A, B) for fb, fn in WRONG_BBAR.items()},
            atol=0,
            rtol=1e-12,
        )
    for delta in (0.05, 0.01):
        expect_answer(
            attempt(gap, delta, A.clone(), B.clone()),
            0.5 * delta**2 * A * B,
            f"bbar_gap_leading(delta={delta:g}, A, B)",
            wrong={fb: fn(delta, A, B) for fb, fn in WRONG_GAP.items()},
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


def _linear_conv(K, x) -> torch.Tensor:
    """The full linear convolution of K (T,) with every row of x (..., T): (..., 2T - 1)."""
    T = K.shape[0]
    rows = [np.convolve(K.numpy(), r) for r in x.numpy().reshape(-1, T)]
    return torch.from_numpy(np.stack(rows)).reshape(*x.shape[:-1], 2 * T - 1)


def _circular(K, x, n) -> torch.Tensor:
    """The first T entries of the length-n circular convolution: the linear one folded mod n."""
    T, full = K.shape[0], _linear_conv(K, x).numpy().reshape(-1, 2 * K.shape[0] - 1)
    folded = np.zeros((full.shape[0], n))
    np.add.at(folded, (slice(None), np.arange(2 * T - 1) % n), full)
    return torch.from_numpy(folded[:, :T]).reshape(x.shape)


def _tail(K, x, start) -> torch.Tensor:
    """Entries start, start + 1, ... of the linear convolution, placed at positions 0, 1, ..."""
    full, out = _linear_conv(K, x), torch.zeros_like(x)
    tail = full[..., start:]
    out[..., : tail.shape[-1]] = tail[..., : x.shape[-1]]
    return out


def _fft_product(K, x, n, inverse_length=True) -> torch.Tensor:
    prod = torch.fft.rfft(K, n=n) * torch.fft.rfft(x, n=n)
    return torch.fft.irfft(prod, n=n) if inverse_length else torch.fft.irfft(prod)


def conv_irfft_without_n(K, x, n):
    return _fft_product(K, x, n, inverse_length=False)[..., : K.shape[0]]


def conv_unsliced(K, x, n):
    return _fft_product(K, x, n)


def conv_last_entries(K, x, n):
    return _fft_product(K, x, n)[..., -K.shape[0] :]


def conv_ignores_n(K, x, n):
    return _linear_conv(K, x)[..., : K.shape[0]]


def error_flipped(K, x, n):
    return -_tail(K, x, n)


def error_one_early(K, x, n):
    return _tail(K, x, n - 1)


def error_whole_tail(K, x, n):
    return _tail(K, x, K.shape[0])


WRONG_CONV = {
    "torch.fft.irfft needs n=n: without it the inverse has length 2 (n // 2), which is not n "
    "when n is odd": conv_irfft_without_n,
    "return only the first T outputs, shape (..., T)": conv_unsliced,
    "the causal outputs are the first T entries, not the last T": conv_last_entries,
    "n is ignored: with a short n the FFT convolution wraps around, and fft_conv must show "
    "it": conv_ignores_n,
}
WRONG_WRAP = {
    "the sign is flipped: return fft_conv minus the causal convolution": error_flipped,
    "output t receives the linear-convolution entry t + n, not t + n - 1": error_one_early,
    "the wrapped entries depend on n: only the entries t + n <= 2T - 2 wrap onto position "
    "t": error_whole_tail,
}


@exercise("28.4", "fft_conv", "wrap_error")
def fft_padding(conv, error) -> str:
    """FFT convolution of length n and its wrap-around error against np.convolve, folded."""
    for seed, (T, batch) in ((284, (20, (3,))), (285, (33, (2,))), (286, (8, ()))):
        gen = torch.Generator().manual_seed(seed)
        K = 0.9 ** torch.arange(T, dtype=F64) * _randn(gen, T)
        x = _randn(gen, *batch, T)
        for n in (2 * T - 1, 2 * T - 2, T, T + 5, 1 << (2 * T - 2).bit_length()):
            circ = _circular(K, x, n)
            expect_answer(
                attempt(conv, K.clone(), x.clone(), n),
                circ,
                f"fft_conv(K, x, n={n}) for T = {T}",
                wrong={fb: fn(K, x, n) for fb, fn in WRONG_CONV.items()},
                atol=1e-12,
                rtol=1e-10,
            )
            expect_answer(
                attempt(error, K.clone(), x.clone(), n),
                circ - _linear_conv(K, x)[..., :T],
                f"wrap_error(K, x, n={n}) for T = {T}",
                wrong={fb: fn(K, x, n) for fb, fn in WRONG_WRAP.items()},
                atol=1e-12,
                rtol=1e-10,
            )
    return (
        "fft_conv matches the folded np.convolve and wrap_error its difference to the causal "
        "convolution, for T = 20, 33, 8 and n = 2T - 1, 2T - 2, T, T + 5 and a power of two"
    )


# --- 28.5 ----------------------------------------------------------------------------------------


def guess_time_constant():
    return 100


def guess_ten_thousand():
    return 10_000


def guess_never():
    return "never"


@exercise("28.5", "predict_memory_length")
def memory_length(answer) -> str:
    """The impulse response of h_t = 0.99 h_{t-1} + x_t, and the first lag below 1 %."""
    guess = as_number(attempt(answer), "predict_memory_length()", " of tokens")
    gamma, h, response = 0.99, 0.0, []
    for t in range(2000):  # the experiment: one impulse at t = 0, then nothing
        h = gamma * h + (1.0 if t == 0 else 0.0)
        response.append(h)
    lag = next(t for t, r in enumerate(response) if r <= 0.01)
    seen = (
        f"the impulse response 0.99^t first falls to 1 % at lag {lag}; at lag 100 it is still "
        f"{100 * response[100]:.0f} %"
    )
    if abs(guess - lag) > 0.1 * lag:
        why = (
            "1 / (1 - γ) = 100 is the time constant, where the weight has fallen to 1/e; 1 % "
            "takes ln 100 ≈ 4.6 time constants"
            if abs(guess - 100) <= 10
            else "each step multiplies the weight by γ, so after t steps it is "
            "γ^t = e^(t ln γ) ≈ e^(-t / 100), and 1 % needs t = ln 100 / 0.01"
        )
        raise Incorrect(f"you predicted {guess:g} tokens; {seen}: {why}")
    return f"right within 10 %: {seen}"


# --- 28.6 ----------------------------------------------------------------------------------------


def _linear_attention_masked(q, k, v, mask_diagonal=0):
    """The masked quadratic form (tril(φ(Q) φ(K)^T) V) / row sums, written out."""
    w = torch.tril(_phi(q) @ _phi(k).T, diagonal=mask_diagonal)  # (T, T)
    return (w @ v) / w.sum(1, keepdim=True).clamp_min(1e-300)


def _chunks(q, k, v, chunk, *, mask=True, state_first=False, chunk_normaliser=False, diag=0):
    """Chunked linear attention with switches that reproduce typical mistakes."""
    fq, fk = _phi(q), _phi(k)
    S, c, out = fq.new_zeros(fq.shape[1], v.shape[1]), fq.new_zeros(fq.shape[1]), []
    for s in range(0, q.shape[0], chunk):
        qc, kc, vc = fq[s : s + chunk], fk[s : s + chunk], v[s : s + chunk]
        if state_first:
            S, c = S + kc.T @ vc, c + kc.sum(0)
        w = qc @ kc.T
        w = torch.tril(w, diagonal=diag) if mask else w
        num, den = w @ vc + qc @ S, w.sum(1) + qc @ c
        if chunk_normaliser:
            num, den = w @ vc, w.sum(1)
        out.append(num / den[:, None].clamp_min(1e-300))
        if not state_first:
            S, c = S + kc.T @ vc, c + kc.sum(0)
    return torch.cat(out)


def chunks_without_mask(q, k, v, chunk):
    return _chunks(q, k, v, chunk, mask=False)


def chunks_state_first(q, k, v, chunk):
    return _chunks(q, k, v, chunk, state_first=True)


def chunks_local_only(q, k, v, chunk):
    return _chunks(q, k, v, chunk, chunk_normaliser=True)


def chunks_strict_mask(q, k, v, chunk):
    return _chunks(q, k, v, chunk, diag=-1)


WRONG_CHUNKS = {
    "inside a chunk a query may only see keys j <= i: mask the (C, C) block with "
    "torch.tril": chunks_without_mask,
    "add a chunk to the state after computing its outputs: the masked block already counts the "
    "current chunk, so it is counted twice": chunks_state_first,
    "the earlier chunks are missing: each output adds φ(q_i)^T S to the numerator and "
    "φ(q_i)^T c to the normaliser, with S, c summed over the earlier chunks": chunks_local_only,
    "the diagonal belongs to the mask: a query sees its own key (j <= i)": chunks_strict_mask,
}


@exercise("28.6", "chunked_linear_attention")
def chunked_linear_attention(answer) -> str:
    """The chunked form against the masked quadratic form, for chunks that divide T or not."""
    for seed, (T, D, Dv, chunk) in (
        (286, (24, 5, 3, 4)),
        (287, (23, 4, 2, 5)),
        (288, (10, 3, 4, 16)),
        (289, (9, 4, 3, 1)),
    ):
        gen = torch.Generator().manual_seed(seed)
        q, k, v = _randn(gen, T, D), _randn(gen, T, D), _randn(gen, T, Dv)
        expect_answer(
            attempt(answer, q.clone(), k.clone(), v.clone(), chunk),
            _linear_attention_masked(q, k, v),
            f"chunked_linear_attention(q, k, v, chunk={chunk}) for T = {T}",
            wrong={fb: fn(q, k, v, chunk) for fb, fn in WRONG_CHUNKS.items()},
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches the masked quadratic form (tril(φ(Q) φ(K)^T) V) / row sums for chunks of 4, 5 "
        "(not dividing T), 16 (longer than T) and 1"
    )


# --- 28.7 ----------------------------------------------------------------------------------------


def _recall(keys, values, n, *, delta, beta=1.0, relative=True, last_only=False):
    """Mean read-out error of n pairs written into a fixed-size state, in closed form.

    Linear attention: S = K^T V. Delta rule with unit keys: each write is
    S_t = (I - β k_t k_t^T) S_{t-1} + β k_t v_t^T, so S_n = sum_t P_{>t} β k_t v_t^T, where
    P_{>t} = (I - β k_n k_n^T) ... (I - β k_{t+1} k_{t+1}^T) is accumulated backwards.
    """
    K, V = keys[:, :n], values[:, :n]  # (trials, n, D), (trials, n, Dv)
    if delta:
        eye = torch.eye(K.shape[-1], dtype=K.dtype)
        P = eye.expand(K.shape[0], -1, -1).clone()  # product of the later projections
        S = torch.zeros(K.shape[0], K.shape[-1], V.shape[-1], dtype=K.dtype)
        for t in reversed(range(n)):
            k = K[:, t]  # (trials, D)
            S = S + beta * P @ (k[:, :, None] * V[:, t, None, :])  # P_{>t} β k_t v_t^T
            P = P @ (eye - beta * k[:, :, None] * k[:, None, :])
    else:
        S = K.transpose(1, 2) @ V
    err = (K @ S - V).norm(dim=-1)  # (trials, n)
    if relative:
        err = err / V.norm(dim=-1)
    return float((err[:, -1] if last_only else err).mean())


def _recall_curves(keys, values, ns, **kw):
    return (
        [_recall(keys, values, n, delta=False, **kw) for n in ns],
        [_recall(keys, values, n, delta=True, **kw) for n in ns],
    )


def recall_absolute_errors(keys, values, ns):
    return _recall_curves(keys, values, ns, relative=False)


def recall_last_pair_only(keys, values, ns):
    return _recall_curves(keys, values, ns, last_only=True)


def recall_half_strength(keys, values, ns):
    return _recall_curves(keys, values, ns, beta=0.5)


WRONG_RECALL = {
    "the error is relative: ||S^T k_i - v_i|| / ||v_i||, averaged over the n keys and the "
    "trials": recall_absolute_errors,
    "read back every one of the n keys written, not only the last one (the delta rule always "
    "gets the last one right)": recall_last_pair_only,
    "the delta rule writes with β = 1 here": recall_half_strength,
}


@exercise("28.7", "recall_errors")
def recall_errors(answer) -> str:
    """Read-out errors of linear attention and the delta rule against closed-form states."""
    gen = torch.Generator().manual_seed(287)
    trials, D, Dv, ns = 12, 32, 8, [2, 4, 8, 16, 32, 64]
    keys = F.normalize(_randn(gen, trials, max(ns), D), dim=-1)
    values = _randn(gen, trials, max(ns), Dv)
    what = f"recall_errors(keys, values, ns={ns}) for D = {D}"
    got = expect_tuple(
        attempt(answer, keys.clone(), values.clone(), list(ns)), what, ("linear", "delta")
    )
    want = _recall_curves(keys, values, ns)
    wrong = {fb: fn(keys, values, ns) for fb, fn in WRONG_RECALL.items()}
    for j, part in enumerate(("linear attention", "delta rule")):
        expect_answer(
            got[j],
            want[j],
            f"{what}: {part} errors",
            wrong={fb: w[j] for fb, w in wrong.items()},
            atol=1e-10,
            rtol=1e-8,
        )
    slope = np.polyfit(np.log(np.array(ns[:4]) - 1), np.log(want[0][:4]), 1)[0]
    fmt = ", ".join
    return (
        f"both curves match closed-form states for n = {ns}: linear attention "
        f"{fmt(f'{e:.2f}' for e in want[0])} (log-log slope against n - 1: {slope:.2f} for "
        f"n <= 16), delta rule "
        f"{fmt(f'{e:.2f}' for e in want[1])}"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

_ssd_ref = _ref("28.1", "retention_ssd")
_loop_ref = _ref("28.1", "retention_recurrent")
_write_ref = _ref("28.2", "delta_write")
_read_ref = _ref("28.2", "read_after_write")
_bbar_ref = _ref("28.3", "zoh_bbar")
_gap_ref = _ref("28.3", "bbar_gap_leading")
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
        ((write_ignoring_beta, _read_ref), "β scales the write"),
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
        ((bbar_flipped, _gap_ref), "(e^(Δa) - 1) / a is positive"),
        ((_bbar_ref, gap_without_half), "factor 1/2 is missing"),
        ((_bbar_ref, gap_flipped), "smaller than Δ b"),
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
    "28.5": [
        (guess_time_constant, "time constant"),
        (guess_ten_thousand, "multiplies the weight by γ"),
        (guess_never, "should return a number"),
    ],
    "28.6": [
        (chunks_without_mask, "mask the (C, C) block"),
        (chunks_state_first, "counted twice"),
        (chunks_local_only, "the earlier chunks are missing"),
        (chunks_strict_mask, "the diagonal belongs"),
    ],
    "28.7": [
        (recall_absolute_errors, "the error is relative"),
        (recall_last_pair_only, "not only the last one"),
        (recall_half_strength, "β = 1 here"),
    ],
}
