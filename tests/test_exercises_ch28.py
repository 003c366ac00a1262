"""Typical wrong answers to the exercises of chapter 28 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.architectures import linear_attention as la
from mlbook.architectures import ssm


def _ref(eid, name):
    return reference(eid)[name]


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


def _ssd_ref(q, k, v, gamma):
    return _ref("28.1", "retention_ssd")(q, k, v, gamma)


def _loop_ref(q, k, v, gamma):
    return _ref("28.1", "retention_recurrent")(q, k, v, gamma)


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


def _write_ref(S, k, v, beta):
    return _ref("28.2", "delta_write")(S, k, v, beta)


def _read_ref(S, k, v, beta):
    return _ref("28.2", "read_after_write")(S, k, v, beta)


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


def _bbar_ref(delta, A, B):
    return _ref("28.3", "zoh_bbar")(delta, A, B)


def _gap_ref(delta, A, B):
    return _ref("28.3", "bbar_gap_leading")(delta, A, B)


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


def _conv_ref(K, x, n):
    return _ref("28.4", "fft_conv")(K, x, n)


def _error_ref(K, x, n):
    return _ref("28.4", "wrap_error")(K, x, n)


WRONG = {
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


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
