"""Checks of the exercises of Appendix C (the matrix calculus cookbook).

The references are independent of :mod:`mlbook.foundations.matrix_calculus`: cross-entropy's
gradient at zero logits by torch.autograd through ``F.cross_entropy`` (C.1); the adjoints of the
inverse and of the log-determinant by torch.autograd through ``torch.linalg.inv`` and
``torch.linalg.slogdet`` (C.2); attention's FLOPs from the sizes of its products, counted by hand
(C.3).

Each typical wrong answer is written once, as a function below; the checks compare the reader's
answer with those functions' results to name the mistake, and ``MISTAKES`` lists them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import (
    as_int,
    as_tensor,
    attempt,
    exercise,
    expect_answer,
    expect_tuple,
    paired_mistakes,
    wrong_values,
)
from . import reference_answer as _ref

F64 = torch.float64


# --- C.1 ------------------------------------------------------------------------------------------

_B, _K = 8, 10


def _zero_logit_grad() -> torch.Tensor:
    """Z_bar of the mean cross-entropy at zero logits, (B, K), by autograd."""
    z = torch.zeros(_B, _K, dtype=F64, requires_grad=True)
    t = torch.arange(_B) % _K
    F.cross_entropy(z, t).backward()
    return z.grad, t


def without_the_mean():
    return 1 / _K - 1


def without_its_probability():
    return -1 / _B


def a_wrong_class():
    return 1 / (_K * _B)


_C1_WRONG = [
    (without_the_mean, "-0.9 is p_t - 1 without the 1/B of the mean over the batch"),
    (without_its_probability, "the correct class has probability 1/K too: (1/K - 1)/B"),
    (a_wrong_class, "that is the entry of a wrong class, (1/K)/B"),
]


@exercise("C.1", "predict_correct_class_grad")
def correct_class_grad(predict) -> str:
    """The entry of Z_bar at the correct class, against autograd through F.cross_entropy."""
    z_bar, t = _zero_logit_grad()
    want = z_bar[0, t[0]]
    guess = as_tensor(attempt(predict, name="predict_correct_class_grad"), "your guess", ())
    expect_answer(
        guess,
        want,
        "predict_correct_class_grad()",
        wrong=wrong_values(_C1_WRONG),
        atol=1e-6,
        rtol=0,
    )
    other = float(z_bar[0, (t[0] + 1) % _K])
    return (
        f"right: autograd gives {float(want):.4f} at the correct class and {other:.4f} at the "
        f"others, (softmax - onehot) / B with softmax = 1/{_K} and B = {_B}; each row sums to 0"
    )


# --- C.2 ------------------------------------------------------------------------------------------


def _cases():
    gen = torch.Generator().manual_seed(5)
    for n, s_bar in ((4, 0.7), (3, -2.0), (5, 1.3)):
        M = 2 * torch.eye(n, dtype=F64) + 0.6 * torch.randn(n, n, generator=gen, dtype=F64)
        yield M, torch.randn(n, n, generator=gen, dtype=F64), s_bar


def _autograd(fn, M, adjoint):
    Ms = M.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(Ms), Ms, torch.as_tensor(adjoint, dtype=F64))
    return g


def inverse_without_transposes(M, Y_bar):
    Y = torch.linalg.inv(M)
    return -Y @ Y_bar @ Y


def inverse_without_sign(M, Y_bar):
    Y_t = torch.linalg.inv(M).T
    return Y_t @ Y_bar @ Y_t


def inverse_one_transpose(M, Y_bar):
    Y = torch.linalg.inv(M)
    return -Y.T @ Y_bar @ Y


def logdet_without_transpose(M, s_bar):
    return s_bar * torch.linalg.inv(M)


def logdet_without_s_bar(M, s_bar):
    return torch.linalg.inv(M).T


def logdet_times_det(M, s_bar):
    return s_bar * torch.linalg.det(M) * torch.linalg.inv(M).T


_INV_WRONG = [
    (
        inverse_without_transposes,
        "-M^-1 Y_bar M^-1 misses the transposes: M_bar = -M^-T Y_bar M^-T",
    ),
    (inverse_without_sign, "the sign is lost: dY = -Y dM Y"),
    (inverse_one_transpose, "both factors are transposed: M_bar = -Y^T Y_bar Y^T"),
]
_LOGDET_WRONG = [
    (logdet_without_transpose, "M^-1 is right only for a symmetric M: M_bar = s_bar M^-T"),
    (logdet_without_s_bar, "multiply by the upstream adjoint s_bar"),
    (logdet_times_det, "that is the gradient of det M; log|det M| has s_bar M^-T"),
]


@exercise("C.2", "inverse_vjp", "logdet_vjp")
def inverse_and_logdet(inv_fn, logdet_fn) -> str:
    """Both rules against autograd on non-symmetric matrices of sizes 4, 3 and 5."""
    for M, Y_bar, s_bar in _cases():
        n = M.shape[0]
        expect_answer(
            attempt(inv_fn, M.clone(), Y_bar.clone(), name="inverse_vjp"),
            _autograd(torch.linalg.inv, M, Y_bar),
            f"inverse_vjp(M, Y_bar) for a non-symmetric {n} x {n} M",
            wrong=wrong_values(_INV_WRONG, M, Y_bar),
            atol=1e-10,
            rtol=1e-10,
        )
        expect_answer(
            attempt(logdet_fn, M.clone(), s_bar, name="logdet_vjp"),
            _autograd(lambda m: torch.linalg.slogdet(m)[1], M, s_bar),
            f"logdet_vjp(M, s_bar={s_bar}) for a non-symmetric {n} x {n} M",
            wrong=wrong_values(_LOGDET_WRONG, M, s_bar),
            atol=1e-10,
            rtol=1e-10,
        )
    return (
        "M_bar = -M^-T Y_bar M^-T and s_bar M^-T match autograd through torch.linalg.inv and "
        "slogdet for non-symmetric matrices of sizes 3 to 5"
    )


# --- C.3 ------------------------------------------------------------------------------------------

_C3_SIZES = [(6, 6, 4, 4), (5, 9, 3, 7), (8, 8, 8, 8), (16, 16, 8, 8)]


def _attention_counts(T_q, T_k, d_k, d_v) -> tuple[int, int]:
    """Forward: Q K^T and A V; backward: A^T O_bar, O_bar V^T, S_bar K, S_bar^T Q (2 per madd)."""
    forward = 2 * T_q * T_k * d_k + 2 * T_q * T_k * d_v
    backward = 2 * T_k * T_q * d_v + 2 * T_q * d_v * T_k + 2 * T_q * T_k * d_k + 2 * T_k * T_q * d_k
    return forward, backward


def counted_products(T_q, T_k, d_k, d_v):
    return 2, 4


def backward_through_autograd(T_q, T_k, d_k, d_v):
    return _attention_counts(T_q, T_k, d_k, d_v)[0], 0


def multiply_adds(T_q, T_k, d_k, d_v):
    f, b = _attention_counts(T_q, T_k, d_k, d_v)
    return f // 2, b // 2


_C3_WRONG = [
    (
        counted_products,
        "those are the numbers of products (counter.n), not their FLOPs (counter.flops)",
    ),
    (
        backward_through_autograd,
        "a backward pass of 0 FLOPs: CountMatmuls sees the products that "
        "Python code calls, so count dot_product.attention_backward, not loss.backward()",
    ),
    (multiply_adds, "those are multiply-adds; the book counts 2 FLOPs for each"),
]


@exercise("C.3", "attention_flops")
def attention_cost(fn) -> str:
    """Counted forward and backward FLOPs of attention against the products counted by hand."""
    for T_q, T_k, d_k, d_v in _C3_SIZES:
        out = expect_tuple(
            attempt(fn, T_q, T_k, d_k, d_v, name="attention_flops"),
            f"attention_flops({T_q}, {T_k}, {d_k}, {d_v})",
            ("forward", "backward"),
        )
        got = [as_int(v, f"attention_flops({T_q}, {T_k}, {d_k}, {d_v})", "FLOPs") for v in out]
        expect_answer(
            torch.tensor(got, dtype=F64),
            torch.tensor(_attention_counts(T_q, T_k, d_k, d_v), dtype=F64),
            f"(forward, backward) of attention_flops({T_q}, {T_k}, {d_k}, {d_v})",
            wrong={fb: torch.tensor(w(T_q, T_k, d_k, d_v), dtype=F64) for w, fb in _C3_WRONG},
            atol=0.5,
            rtol=0,
        )
    f8, f16 = _attention_counts(8, 8, 8, 8)[0], _attention_counts(16, 16, 8, 8)[0]
    return (
        "forward 2 T_q T_k (d_k + d_v) and backward twice that for all four sizes; doubling T "
        f"from 8 to 16 multiplies both by {f16 // f8}"
    )


MISTAKES = {
    "C.1": [
        (without_the_mean, "without the 1/B of the mean"),
        (without_its_probability, "the correct class has probability 1/K too"),
        (a_wrong_class, "the entry of a wrong class"),
    ],
    "C.2": paired_mistakes(
        _ref("C.2", "inverse_vjp"),
        _ref("C.2", "logdet_vjp"),
        [(w, fb.split(":")[0]) for w, fb in _INV_WRONG],
        [(w, fb.split(":")[0]) for w, fb in _LOGDET_WRONG],
    ),
    "C.3": [
        (counted_products, "not their FLOPs"),
        (backward_through_autograd, "a backward pass of 0 FLOPs"),
        (multiply_adds, "those are multiply-adds"),
    ],
}
