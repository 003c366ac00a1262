"""Checks of the exercises of chapter 12 (softmax and cross-entropy).

Every reference below is computed with torch's own functions (autograd, ``torch.log_softmax``,
``F.binary_cross_entropy_with_logits``, ``F.cross_entropy``, ``torch.softmax`` in float32 and
float64), independent of the reader's answer and of :mod:`mlbook.nn.softmax`.

Each typical wrong answer is written once, as a function of the exercise's arguments computed from
those references; a check passes the ones it names to ``expect_answer(wrong=...)``, and
``MISTAKES`` lists them for the tests.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, wrong_values

F64 = torch.float64


def _logit_cases() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(12)
    return [
        torch.tensor([2.0, 1.0, 0.1, -1.0, 3.0, 0.5], dtype=F64),
        torch.randn(5, generator=gen, dtype=F64) * 3,
        torch.tensor([100.0, 99.0, 98.5], dtype=F64),
    ]  # large logits: needs a stable softmax


# --- 12.1 ---------------------------------------------------------------------------------------


def _slope_autograd(z, T):
    """dH/dβ of the entropy of softmax(β z) at β = 1/T, by autograd (the reference)."""
    beta = torch.tensor(1.0 / T, dtype=F64, requires_grad=True)
    logp = torch.log_softmax(beta * z, dim=0)
    (slope,) = torch.autograd.grad(-(logp.exp() * logp).sum(), beta)
    return slope


def slope_flipped(z, T):
    return -_slope_autograd(z, T)


def slope_without_beta(z, T):
    p = torch.softmax(z / T, dim=0)
    return -((p * z**2).sum() - (p * z).sum() ** 2)


def slope_in_T(z, T):
    return -_slope_autograd(z, T) / T**2


def slope_plain_variance(z, T):
    return -(1 / T) * z.var(unbiased=False)


WRONG_12_1 = [
    (
        slope_flipped,
        "the sign is flipped: a larger β = 1/T sharpens p, so H falls and dH/dβ = -β Var_p[z] <= 0",
    ),
    (slope_without_beta, "missing the factor β: log p_i = β z_i - log Z contributes β z_i"),
    (
        slope_in_T,
        "that is dH/dT; the exercise asks for the derivative in β = 1/T (dH/dT = -dH/dβ / T²)",
    ),
    (
        slope_plain_variance,
        "Var_p[z] needs the mean under p: sum_i p_i z_i² - (sum_i p_i z_i)², not the plain "
        "variance of z",
    ),
]


@exercise("12.1", "entropy_slope")
def entropy_slope(answer) -> str:
    """dH/dβ of softmax(β z) at β = 1/T against autograd, for three logit vectors, three T."""
    for z in _logit_cases():
        for T in (0.5, 0.7, 2.0):
            expect_answer(
                attempt(answer, z.clone(), T),
                _slope_autograd(z, T),
                f"entropy_slope(z, T={T})",
                wrong=wrong_values(WRONG_12_1, z, T),
                atol=1e-10,
                rtol=1e-8,
            )
    return "dH/dβ = -β Var_p[z] matches autograd for 3 logit vectors at T = 0.5, 0.7, 2"


# --- 12.2 ---------------------------------------------------------------------------------------


def _bce_reference(a, y):
    return F.binary_cross_entropy_with_logits(a.double(), y.double(), reduction="none")


def bce_naive(a, y):
    s = torch.sigmoid(a)
    return -(y * torch.log(s) + (1 - y) * torch.log(1 - s))


def bce_swapped(a, y):
    return _bce_reference(a, 1 - y)


def bce_mean(a, y):
    return _bce_reference(a, y).mean()


WRONG_12_2 = [
    (bce_swapped, "the classes are swapped: the first class has logit a and probability y"),
    (bce_mean, "that is the mean over the batch; return one loss per element (reduction='none')"),
]


@exercise("12.2", "two_class_cross_entropy")
def two_class_cross_entropy(answer) -> str:
    """Per-element binary cross-entropy of the logits (a, 0), stable for |a| <= 50 in float32."""
    gen = torch.Generator().manual_seed(122)
    a = torch.linspace(-50, 50, 101)  # float32, on purpose
    y = torch.rand(101, generator=gen)
    expect_answer(
        attempt(answer, a.clone(), y.clone()),
        _bce_reference(a, y),
        "two_class_cross_entropy(a, y) for a in [-50, 50] (float32)",
        wrong=wrong_values(WRONG_12_2, a, y),
        atol=1e-4,
        rtol=1e-4,
    )
    return (
        "matches F.binary_cross_entropy_with_logits elementwise for a in [-50, 50] "
        "in float32, with no inf or nan"
    )


# --- 12.3 ---------------------------------------------------------------------------------------


def _log_softmax_jacobian(z):
    return torch.autograd.functional.jacobian(lambda x: torch.log_softmax(x, dim=0), z)


def jac_transposed(z):
    return _log_softmax_jacobian(z).T


def jac_of_softmax(z):
    p = torch.softmax(z, dim=0)
    return torch.diag(p) - torch.outer(p, p)


def jac_without_identity(z):
    p = torch.softmax(z, dim=0)
    return -p.expand(z.numel(), -1)


def jac_vector(z):
    return torch.softmax(z, dim=0)


WRONG_12_3 = [
    (
        jac_transposed,
        "this is the transpose: row i is ∂ log p_i / ∂ z, which is e_i - p, so every row "
        "subtracts the same p (I - 1 p^T)",
    ),
    (
        jac_of_softmax,
        "that is the Jacobian of softmax, diag(p) - p p^T; for log p_i = z_i - log Z divide row "
        "i by p_i",
    ),
    (jac_without_identity, "the identity is missing: ∂ z_i / ∂ z_j = δ_ij"),
]


@exercise("12.3", "log_softmax_jacobian")
def log_softmax_jacobian(answer) -> str:
    """The (K, K) Jacobian ∂ log p_i / ∂ z_j against torch.autograd.functional.jacobian."""
    for z in _logit_cases():
        expect_answer(
            attempt(answer, z.clone()),
            _log_softmax_jacobian(z),
            f"log_softmax_jacobian(z) for K = {z.numel()}",
            wrong=wrong_values(WRONG_12_3, z),
            atol=1e-10,
            rtol=1e-8,
        )
    return "I - 1 p^T matches autograd's Jacobian of log_softmax for K = 6, 5, 3"


# --- 12.4 ---------------------------------------------------------------------------------------

_VOCAB = 50257  # GPT-2's vocabulary


def _initial_loss() -> float:
    """The experiment: cross-entropy of 64 positions with logits N(0, 0.02²) over the vocabulary."""
    gen = torch.Generator().manual_seed(124)
    logits = 0.02 * torch.randn(64, _VOCAB, generator=gen)
    labels = torch.randint(0, _VOCAB, (64,), generator=gen)
    return F.cross_entropy(logits, labels).item()


def guess_zero():
    return 0.0


def guess_bits():
    return math.log2(_VOCAB)


def guess_one():
    return 1.0


WRONG_12_4 = [
    (
        guess_zero,
        "small logits do not make a small loss: they make a uniform prediction, p = 1/K for every "
        "token, whose cross-entropy is log K",
    ),
    (guess_bits, "that is log₂ K, in bits; torch's cross-entropy takes the natural log (nats)"),
    (
        guess_one,
        "a loss of 1 nat would mean p = 1/e for the right token; at initialisation it is 1/K",
    ),
]


@exercise("12.4", "predict_initial_loss")
def initial_loss(predict) -> str:
    """The reader's guess of the initial loss of a 50257-token model vs the measured loss."""
    measured = _initial_loss()
    guess = as_tensor(attempt(predict), "predict_initial_loss()", ())
    reveal = (
        f"the measured loss at step 0 is {fmt(measured)} nats, and log K = "
        f"{fmt(math.log(_VOCAB))} for K = {_VOCAB}"
    )
    for wrong, feedback in WRONG_12_4:
        if abs(float(guess) - wrong()) <= 0.1:
            raise Incorrect(f"predict_initial_loss(): {feedback} ({reveal})")
    expect(
        abs(float(guess) - measured) <= 0.1,
        f"predict_initial_loss() = {fmt(float(guess))} is not within 0.1 nats: {reveal}. "
        "Small logits make every token equally likely, p = 1/K, so -log p = log K",
    )
    return (
        f"your guess {fmt(float(guess))} is within 0.1 of the measured {fmt(measured)} nats "
        "= log K: a new model predicts the uniform distribution, so a first loss far from log K "
        "points to a bug in the logits or the labels"
    )


# --- 12.5 ---------------------------------------------------------------------------------------


def _smoothed_reference(z, y, eps):
    return F.cross_entropy(z.double(), y, label_smoothing=eps)


def smoothed_over_wrong_classes(z, y, eps):
    K = z.shape[1]
    target = (1 - eps) * F.one_hot(y, K).double() + eps / (K - 1) * (1 - F.one_hot(y, K).double())
    return F.cross_entropy(z.double(), target)


def smoothed_without_uniform(z, y, eps):
    return (1 - eps) * F.cross_entropy(z.double(), y)


def smoothed_eps_swapped(z, y, eps):
    return _smoothed_reference(z, y, 1 - eps)


def smoothed_sum(z, y, eps):
    return F.cross_entropy(z.double(), y, label_smoothing=eps, reduction="sum")


def smoothed_naive(z, y, eps):
    logp = torch.log(torch.exp(z) / torch.exp(z).sum(dim=1, keepdim=True))  # overflows
    return ((1 - eps) * -logp.gather(1, y[:, None]).squeeze(1) - eps * logp.mean(dim=1)).mean()


WRONG_12_5 = [
    (
        smoothed_over_wrong_classes,
        "this spreads ε over the K - 1 wrong classes only; eq. (12.5) mixes with the uniform "
        "distribution over all K classes (the right class keeps 1 - ε + ε/K), as "
        "F.cross_entropy(label_smoothing=ε) does",
    ),
    (
        smoothed_without_uniform,
        "the uniform part is missing: add ε times the mean of -log p_k over all K classes",
    ),
    (smoothed_eps_swapped, "ε and 1 - ε are swapped: the one-hot target keeps the weight 1 - ε"),
    (smoothed_sum, "that is the sum over the batch; return the mean"),
]


@exercise("12.5", "smoothed_cross_entropy")
def smoothed_cross_entropy(answer) -> str:
    """The label-smoothed cross-entropy vs F.cross_entropy(label_smoothing) in float64."""
    gen = torch.Generator().manual_seed(125)
    cases = [(16, 7, 0.1, 3.0), (5, 2, 0.3, 1.0), (8, 1000, 0.05, 2.0), (6, 5, 0.2, 1e4)]
    for N, K, eps, scale in cases:  # the last: float32 logits of size 1e4
        z = scale * torch.randn(N, K, generator=gen)
        y = torch.randint(0, K, (N,), generator=gen)
        what = f"smoothed_cross_entropy(z, y, eps={eps}) for N, K = {N}, {K}"
        if scale > 100:
            what += " and logits of size 1e4 (float32)"
        expect_answer(
            attempt(answer, z.clone(), y.clone(), eps),
            _smoothed_reference(z, y, eps),
            what,
            wrong=wrong_values(WRONG_12_5, z, y, eps),
            atol=1e-5,
            rtol=1e-5,
        )
    return (
        "matches F.cross_entropy(label_smoothing=ε) for 4 batches (K = 2 to 1000, ε = 0.05 to "
        "0.3), finite for float32 logits of size 1e4"
    )


# --- 12.6 ---------------------------------------------------------------------------------------

_FLOAT16_MAX = 65504.0


def _half_logits(K, spread):
    return (spread * torch.linspace(-1, 1, K, dtype=F64)).half()


def _relative_error(p, exact):
    return ((p.double() - exact).abs().max() / exact.max()).item()


def _half_errors(Ks, spread, *, exact_of=lambda z: z.double(), half=True, relative=True):
    """The measurements of 12.6, computed here: (len(Ks), 2) errors of the two softmaxes."""
    rows = []
    for K in Ks:
        z = _half_logits(K, spread)
        exact = torch.softmax(exact_of(z), dim=0)
        w = z if half else z.float()  # float16 throughout, unless the mistake widens it
        e = torch.exp(w - w.max())
        same = e / e.sum()
        acc = torch.softmax(z.float(), dim=0).half()  # sums in float32, as the package does
        scale = exact.max() if relative else 1.0
        rows.append(
            [
                ((same.double() - exact).abs().max() / scale).item(),
                ((acc.double() - exact).abs().max() / scale).item(),
            ]
        )
    return torch.tensor(rows, dtype=F64)


def half_in_float32(Ks, spread):
    return _half_errors(Ks, spread, half=False)


def half_absolute(Ks, spread):
    return _half_errors(Ks, spread, relative=False)


def half_unrounded_reference(Ks, spread):
    return _half_errors(
        Ks, spread, exact_of=lambda z: spread * torch.linspace(-1, 1, len(z), dtype=F64)
    )


WRONG_12_6 = [
    (
        half_in_float32,
        "the first column must compute every step (exp, sum, division) in float16; this one "
        "was computed in float32, so its sum never overflows",
    ),
    (half_absolute, "divide the largest absolute error by the largest exact probability"),
    (
        half_unrounded_reference,
        "compare with the float64 softmax of the same float16 logits, not of the unrounded "
        "ones: rounding the logits to float16 is not the softmax's error",
    ),
]


@exercise("12.6", "half_softmax_errors")
def half_softmax_errors(answer) -> str:
    """The two measured errors vs the same experiment run here; overflow where the sum > 65504."""
    Ks = [2**12, 2**15, 2**16, 2**17, 2**18]
    first_overflow = {}
    worst = 0.0
    for spread in (0.0, 1.0, 4.0):
        want = _half_errors(Ks, spread)
        got = expect_answer(
            attempt(answer, list(Ks), spread),
            want,
            f"half_softmax_errors(Ks, spread={spread:g}) for K = 2^12 to 2^18",
            wrong=wrong_values(WRONG_12_6, Ks, spread),
            atol=1e-7,
            rtol=0.05,
        )
        for i, K in enumerate(Ks):  # the story: float16 fails exactly where its sum overflows
            z = _half_logits(K, spread).double()
            overflow = torch.exp(z - z.max()).sum().item() > _FLOAT16_MAX
            expect(
                (float(got[i, 0]) == 1.0) == overflow,
                f"for K = {K}, spread {spread:g} the float16 softmax should "
                + ("be all zeros (error 1): its sum exceeds 65504" if overflow else "not overflow"),
            )
            if overflow and spread not in first_overflow:
                first_overflow[spread] = K
        worst = max(worst, float(got[:, 1].max()))
    where = ", ".join(
        f"K = 2^{int(math.log2(first_overflow[s]))} for spread {s:g}"
        if s in first_overflow
        else f"never up to 2^18 for spread {s:g}"
        for s in (0.0, 1.0, 4.0)
    )
    return (
        f"both errors match the experiment; float16 returns zeros exactly where sum_j "
        f"exp(z_j - m) > 65504 (from {where}); summing in float32 stays within float16's "
        f"rounding (largest relative error {fmt(worst, 2)})"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------

MISTAKES = {
    "12.1": WRONG_12_1,
    "12.2": WRONG_12_2 + [(bce_naive, "nan or inf")],
    "12.3": WRONG_12_3 + [(jac_vector, "shape (6, 6)")],
    "12.4": WRONG_12_4,
    "12.5": WRONG_12_5 + [(smoothed_naive, "nan or inf")],
    "12.6": WRONG_12_6,
}
