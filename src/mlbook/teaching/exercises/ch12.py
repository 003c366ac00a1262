"""Checks of the exercises of chapter 12 (softmax and cross-entropy).

Every reference below is computed with torch's own functions (autograd, ``torch.log_softmax``,
``F.binary_cross_entropy_with_logits``), independent of the reader's answer and of
:mod:`mlbook.nn.softmax`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import attempt, exercise, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _logit_cases() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(12)
    return [
        torch.tensor([2.0, 1.0, 0.1, -1.0, 3.0, 0.5], dtype=F64),
        torch.randn(5, generator=gen, dtype=F64) * 3,
        torch.tensor([100.0, 99.0, 98.5], dtype=F64),
    ]  # large logits: needs a stable softmax


@exercise("12.1", "entropy_slope")
def entropy_slope(answer) -> str:
    """dH/dβ of softmax(β z) at β = 1/T against autograd, for three logit vectors, three T."""
    for z in _logit_cases():
        for T in (0.5, 0.7, 2.0):
            beta = torch.tensor(1.0 / T, dtype=F64, requires_grad=True)
            logp = torch.log_softmax(beta * z, dim=0)
            (slope,) = torch.autograd.grad(-(logp.exp() * logp).sum(), beta)
            p = logp.detach().exp()
            var = (p * z**2).sum() - (p * z).sum() ** 2
            expect_answer(
                attempt(answer, z.clone(), T),
                slope,
                f"entropy_slope(z, T={T})",
                wrong={
                    "the sign is flipped: a larger β = 1/T sharpens p, so H falls and "
                    "dH/dβ = -β Var_p[z] <= 0": -slope,
                    "missing the factor β: log p_i = β z_i - log Z contributes β z_i": -var,
                    "that is dH/dT; the exercise asks for the derivative in β = 1/T "
                    "(dH/dT = -dH/dβ / T²)": -slope / T**2,
                    "Var_p[z] needs the mean under p: sum_i p_i z_i² - (sum_i p_i z_i)², "
                    "not the plain variance of z": -beta.detach() * z.var(unbiased=False),
                },
                atol=1e-10,
                rtol=1e-8,
            )
    return "dH/dβ = -β Var_p[z] matches autograd for 3 logit vectors at T = 0.5, 0.7, 2"


@exercise("12.2", "two_class_cross_entropy")
def two_class_cross_entropy(answer) -> str:
    """Per-element binary cross-entropy of the logits (a, 0), stable for |a| <= 50 in float32."""
    gen = torch.Generator().manual_seed(122)
    a = torch.linspace(-50, 50, 101)  # float32, on purpose
    y = torch.rand(101, generator=gen)
    ref = F.binary_cross_entropy_with_logits(a.double(), y.double(), reduction="none")
    swapped = F.binary_cross_entropy_with_logits(a.double(), 1 - y.double(), reduction="none")
    expect_answer(
        attempt(answer, a.clone(), y.clone()),
        ref,
        "two_class_cross_entropy(a, y) for a in [-50, 50] (float32)",
        wrong={
            "the classes are swapped: the first class has logit a and probability y": swapped,
            "that is the mean over the batch; return one loss per element "
            "(reduction='none')": ref.mean(),
        },
        atol=1e-4,
        rtol=1e-4,
    )
    return (
        "matches F.binary_cross_entropy_with_logits elementwise for a in [-50, 50] "
        "in float32, with no inf or nan"
    )


@exercise("12.3", "log_softmax_jacobian")
def log_softmax_jacobian(answer) -> str:
    """The (K, K) Jacobian ∂ log p_i / ∂ z_j against torch.autograd.functional.jacobian."""
    for z in _logit_cases():
        K = z.numel()
        J = torch.autograd.functional.jacobian(lambda x: torch.log_softmax(x, dim=0), z)
        p = torch.softmax(z, dim=0)
        eye = torch.eye(K, dtype=F64)
        expect_answer(
            attempt(answer, z.clone()),
            J,
            f"log_softmax_jacobian(z) for K = {K}",
            wrong={
                "this is the transpose: row i is ∂ log p_i / ∂ z, which is e_i - p, so every "
                "row subtracts the same p (I - 1 p^T)": J.T,
                "that is the Jacobian of softmax, diag(p) - p p^T; for log p_i = z_i - log Z "
                "divide row i by p_i": torch.diag(p) - torch.outer(p, p),
                "the identity is missing: ∂ z_i / ∂ z_j = δ_ij": J - eye,
            },
            atol=1e-10,
            rtol=1e-8,
        )
    return "I - 1 p^T matches autograd's Jacobian of log_softmax for K = 6, 5, 3"


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


def slope_flipped(z, T):
    return -_ref("12.1", "entropy_slope")(z, T)


def slope_without_beta(z, T):
    p = torch.softmax(z / T, dim=0)
    return -((p * z**2).sum() - (p * z).sum() ** 2)


def slope_in_T(z, T):
    return -_ref("12.1", "entropy_slope")(z, T) / T**2


def slope_plain_variance(z, T):
    return -(1 / T) * z.var(unbiased=False)


def bce_naive(a, y):
    s = torch.sigmoid(a)
    return -(y * torch.log(s) + (1 - y) * torch.log(1 - s))


def bce_swapped(a, y):
    return _ref("12.2", "two_class_cross_entropy")(a, 1 - y)


def bce_mean(a, y):
    return _ref("12.2", "two_class_cross_entropy")(a, y).mean()


def jac_transposed(z):
    return _ref("12.3", "log_softmax_jacobian")(z).T


def jac_of_softmax(z):
    p = torch.softmax(z, dim=0)
    return torch.diag(p) - torch.outer(p, p)


def jac_without_identity(z):
    p = torch.softmax(z, dim=0)
    return -p.expand(z.numel(), -1)


def jac_vector(z):
    return torch.softmax(z, dim=0)


MISTAKES = {
    "12.1": [
        (slope_flipped, "sign is flipped"),
        (slope_without_beta, "missing the factor β"),
        (slope_in_T, "that is dH/dT"),
        (slope_plain_variance, "mean under p"),
    ],
    "12.2": [
        (bce_naive, "nan or inf"),
        (bce_swapped, "classes are swapped"),
        (bce_mean, "that is the mean over the batch"),
    ],
    "12.3": [
        (jac_transposed, "transpose"),
        (jac_of_softmax, "Jacobian of softmax"),
        (jac_without_identity, "identity is missing"),
        (jac_vector, "shape (6, 6)"),
    ],
}
