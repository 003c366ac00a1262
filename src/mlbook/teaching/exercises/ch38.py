"""Checks of the exercises of chapter 38 (distillation and reasoning models).

The references are independent of :mod:`mlbook.posttraining.distillation` and
:mod:`mlbook.posttraining.reasoning`: the smallest n with 1 - (1 - p)^n >= 0.99 found by counting
(38.1); the distillation loss as PyTorch's ``T**2 * F.kl_div`` recipe and its gradient by float64
autograd (38.2); and the probability that a plurality vote of n draws returns the mode, summed
exactly over all count vectors of the multinomial distribution (38.3); an estimator's exact
expectation over the binomial number of right samples (38.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from . import (
    Incorrect,
    as_number,
    attempt,
    exercise,
    expect,
    expect_answer,
    paired_mistakes,
    wrong_values,
)
from . import reference_answer as _ref

F64 = torch.float64

# --- 38.1 ----------------------------------------------------------------------------------------


def _samples_needed(p: float, target: float) -> int:
    """The smallest n with 1 - (1 - p)^n >= target, by counting up."""
    n, fail = 1, 1 - p
    while 1 - fail < target:
        n, fail = n + 1, fail * (1 - p)
    return n


def guess_one_over_p():
    return 10


def guess_ninety_nine():
    return 99


@exercise("38.1", "predict_samples_needed")
def samples_needed(answer) -> str:
    """Best-of-n at p = 0.1: the number of samples that solves 99 % of such questions."""
    guess = as_number(attempt(answer), "predict_samples_needed()", " of samples")
    p, target = 0.1, 0.99
    n = _samples_needed(p, target)
    seen = (
        f"1 - 0.9^n first reaches 0.99 at n = {n} (0.9^{n} = {0.9**n:.4f}); after 1/p = 10 "
        f"samples only {1 - 0.9**10:.0%} of the questions are solved"
    )
    if abs(guess - n) > 0.1 * n:
        if guess < n:
            why = (
                "too few: 1/p = 10 is the expected wait for the first right sample, but the "
                "failure probability (1 - p)^n only falls by 0.9 per sample, so 99 % needs "
                "n = ln 100 / -ln 0.9 samples, 4.4 times 1/p"
            )
        else:
            why = (
                "too many: n p = 0.99 would be the expected number of right samples if they were "
                "counted, not the chance of at least one; (1 - p)^n halves every 6.6 samples"
            )
        raise Incorrect(f"you predicted {guess:g} samples; {seen}: {why}")
    return f"right within 10 %: {seen}"


# --- 38.2 ----------------------------------------------------------------------------------------


def _loss_ref(z_s, z_t, T):
    """T^2 KL(q_T || p_T) per position, PyTorch's recipe."""
    log_p = F.log_softmax(z_s / T, dim=-1)
    return T**2 * F.kl_div(log_p, F.softmax(z_t / T, dim=-1), reduction="none").sum(-1)


def _grad_ref(z_s, z_t, T):
    """The gradient of the summed per-position losses, by float64 autograd."""
    z = z_s.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_loss_ref(z, z_t, T).sum(), z)
    return g


def loss_without_T2(z_s, z_t, T):
    return _loss_ref(z_s, z_t, T) / T**2


def loss_times_T(z_s, z_t, T):
    return _loss_ref(z_s, z_t, T) / T


def loss_reverse_kl(z_s, z_t, T):
    return _loss_ref(z_t, z_s, T)


def loss_averaged(z_s, z_t, T):
    return _loss_ref(z_s, z_t, T).mean()


def grad_without_T(z_s, z_t, T):
    return torch.softmax(z_s / T, -1) - torch.softmax(z_t / T, -1)


def grad_T_squared(z_s, z_t, T):
    return T * _grad_ref(z_s, z_t, T)


def grad_flipped(z_s, z_t, T):
    return -_grad_ref(z_s, z_t, T)


def grad_of_the_kl(z_s, z_t, T):
    return _grad_ref(z_s, z_t, T) / T**2


WRONG_LOSS = [
    (loss_without_T2, "the factor T² is missing: L_KD = T² KL(q_T || p_T)"),
    (loss_times_T, "the factor is T², not T"),
    (loss_reverse_kl, "the KL is the wrong way round: KL(q_T || p_T) weights by the teacher's q_T"),
    (loss_averaged, "return the loss of every position, shape (...), not its mean"),
]
WRONG_GRAD = [
    (grad_without_T, "the factor T is missing: the gradient is T (p_T - q_T)"),
    (grad_T_squared, "one factor T too many: T² (p_T - q_T) / T is T (p_T - q_T)"),
    (grad_flipped, "the sign is flipped: the gradient is T (p_T - q_T), student minus teacher"),
    (grad_of_the_kl, "that is the gradient of the KL alone; the loss has the factor T²"),
]


@exercise("38.2", "distill_loss", "distill_grad")
def distillation(loss, grad) -> str:
    """The per-position T^2 KL and its gradient against F.kl_div and float64 autograd."""
    for seed, T, shape in ((381, 1.0, (2, 5, 7)), (382, 2.5, (4, 9)), (383, 0.5, (3, 6))):
        gen = torch.Generator().manual_seed(seed)
        z_s = 2 * torch.randn(*shape, generator=gen, dtype=F64)
        z_t = 3 * torch.randn(*shape, generator=gen, dtype=F64)
        expect_answer(
            attempt(loss, z_s.clone(), z_t.clone(), T, name="distill_loss"),
            _loss_ref(z_s, z_t, T),
            f"distill_loss(z_s, z_t, T={T}) for logits of shape {shape}",
            wrong=wrong_values(WRONG_LOSS, z_s, z_t, T),
            atol=1e-10,
            rtol=1e-10,
        )
        expect_answer(
            attempt(grad, z_s.clone(), z_t.clone(), T, name="distill_grad"),
            _grad_ref(z_s, z_t, T),
            f"distill_grad(z_s, z_t, T={T}) for logits of shape {shape}",
            wrong=wrong_values(WRONG_GRAD, z_s, z_t, T),
            atol=1e-10,
            rtol=1e-10,
        )
    return (
        "the loss matches T² F.kl_div per position and the gradient float64 autograd, for "
        "T = 1, 2.5 and 0.5"
    )


# --- 38.3 ----------------------------------------------------------------------------------------


def _vote_exact(probs: list[float], mode: int, n: int) -> float:
    """P(the plurality of n i.i.d. draws is `mode`), ties broken uniformly at random, summed
    over every count vector (c_1, ..., c_k) of the multinomial distribution."""
    k = len(probs)
    total = 0.0
    for cut in itertools.combinations(range(n + k - 1), k - 1):  # stars and bars
        bounds = (-1, *cut, n + k - 1)
        counts = [bounds[i + 1] - bounds[i] - 1 for i in range(k)]
        top = max(counts)
        if counts[mode] != top:
            continue
        ways = math.factorial(n)
        for c in counts:
            ways //= math.factorial(c)
        prob = ways * math.prod(p**c for p, c in zip(probs, counts, strict=True))
        total += prob / sum(c == top for c in counts)
    return total


def _chain_model():
    """The chain-of-thought model of 7 + 8 + 5 of section 38.7, as tensors."""
    from ...posttraining.reasoning import sum_chain_model

    return sum_chain_model(7, 8, 5)


def vote_smallest_id(p_z, p_y_z, ns, reps, seed):
    """A vote whose ties go to the smallest answer (argmax of the counts)."""
    gen = torch.Generator().manual_seed(seed)
    mode = int((p_z @ p_y_z).argmax())
    out = []
    for n in ns:
        z = torch.multinomial(p_z, reps * n, replacement=True, generator=gen)
        y = torch.multinomial(p_y_z[z], 1, generator=gen).view(reps, n)
        counts = torch.zeros(reps, p_y_z.shape[1]).scatter_add_(1, y, torch.ones(reps, n))
        out.append(float((counts.argmax(1) == mode).double().mean()))
    return out


def vote_most_likely_chain(p_z, p_y_z, ns, reps, seed):
    """The answer of the most probable chain, for every n."""
    joint = p_z[:, None] * p_y_z
    y_star = int(joint.argmax()) % joint.shape[1]
    mode = int((p_z @ p_y_z).argmax())
    return [float(y_star == mode) for _ in ns]


def vote_one_chain(p_z, p_y_z, ns, reps, seed):
    """The probability of the mode for one chain, whatever n."""
    m = p_z @ p_y_z
    return [float(m.max()) for _ in ns]


@exercise("38.3", "vote_success")
def vote_success(answer) -> str:
    """Simulated vote success against the exact multinomial sum, within 4 standard errors."""
    p_z, p_y_z, _ = _chain_model()
    marginal = p_z @ p_y_z  # (Y,)
    support = [int(y) for y in torch.nonzero(marginal > 0).view(-1)]
    probs = [float(marginal[y]) for y in support]
    mode = support.index(int(marginal.argmax()))
    ns, reps = [1, 2, 3, 4, 5, 9, 15], 2000
    got = attempt(answer, p_z.clone(), p_y_z.clone(), list(ns), reps, 0, name="vote_success")
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(ns),
        f"vote_success should return a list of {len(ns)} fractions (one per n), got {got!r}",
    )
    exact = [_vote_exact(probs, mode, n) for n in ns]
    values = [as_number(v, "each entry of vote_success(...)") for v in got]
    if all(v in (0.0, 1.0) for v in values) and len(set(values)) == 1:
        raise Incorrect(
            "every entry is the same 0 or 1: that is the answer of one fixed chain; sample "
            "`reps` groups of n chains with R.sample_chains and vote with R.plurality_vote"
        )
    if max(values) - min(values) < 1e-9:
        raise Incorrect(
            "the fraction does not change with n: vote over all n chains of a group, not one"
        )
    for n, v, e in zip(ns, values, exact, strict=True):
        se = math.sqrt(e * (1 - e) / reps)
        if abs(v - e) > 4 * se + 1e-12:
            raise Incorrect(
                f"for n = {n} the vote returned the mode in {v:.3f} of the groups; the exact "
                f"probability (random tie-breaking) is {e:.3f}, {abs(v - e) / se:.1f} standard "
                "errors away. Break ties at random (R.plurality_vote does, for samples in random "
                "order), vote over answers, not chains, and compare with the marginal's mode"
            )
    listed = ", ".join(f"n = {n}: {e:.3f}" for n, e in zip(ns, exact, strict=True))
    return (
        f"within 4 standard errors of the exact multinomial sums at every n ({listed}); "
        "P(mode) rises towards 1"
    )


# --- 38.4 ----------------------------------------------------------------------------------------


def _expected(estimator, m: int, n: int, p: float) -> float:
    """E[estimator(m, c, n)] over c ~ Binomial(m, p), summed exactly with math.comb."""
    return sum(
        math.comb(m, c) * p**c * (1 - p) ** (m - c) * estimator(m, c, n) for c in range(m + 1)
    )


def estimate_plug_in(m, c, n):
    return 1 - (1 - c / m) ** n


def estimate_linear(m, c, n):
    return min(1.0, n * c / m)


def estimate_with_c(m, c, n):
    return 1 - math.comb(m - c, n) / math.comb(m, c) if c <= m else 0.0


WRONG_ESTIMATE = [
    (
        estimate_plug_in,
        "that is eq. 38.4 at p = c/m (the plug-in): 1 - (1 - p)^n is concave in p, so its "
        "average over c falls short of 1 - (1 - p)^n; draw the n samples from the m without "
        "replacement",
    ),
    (estimate_linear, "n c / m counts right samples; best-of-n needs P(at least one right)"),
    (estimate_with_c, "divide by C(m, n), the number of ways to choose the n samples"),
]


@exercise("38.4", "best_of_n_estimate")
def best_of_n_estimate(answer) -> str:
    """The estimator's exact expectation over c ~ Binomial(m, p) against 1 - (1 - p)^n."""
    cases = ((10, 1, 0.3), (10, 4, 0.1), (20, 5, 0.05), (32, 8, 0.4), (6, 6, 0.7))
    for m, n, p in cases:
        got = [
            as_number(attempt(answer, m, c, n), f"best_of_n_estimate({m}, {c}, {n})")
            for c in range(m + 1)
        ]
        mean = sum(math.comb(m, c) * p**c * (1 - p) ** (m - c) * g for c, g in enumerate(got))
        want = 1 - (1 - p) ** n
        if abs(mean - want) > 1e-10:
            wrong = {fb: _expected(fn, m, n, p) for fn, fb in WRONG_ESTIMATE}
            for fb, v in wrong.items():
                if abs(mean - v) <= 1e-10:
                    raise Incorrect(f"best_of_n_estimate(m={m}, c, n={n}): {fb}")
            raise Incorrect(
                f"for m = {m}, n = {n}, p = {p} the estimate averages to {mean:.6f} over "
                f"c ~ Binomial(m, p), but 1 - (1 - p)^n = {want:.6f}: it is biased"
            )
    bias = _expected(estimate_plug_in, 10, 4, 0.1) - (1 - 0.9**4)
    return (
        "unbiased: its average over c ~ Binomial(m, p) is exactly 1 - (1 - p)^n for 5 settings "
        f"(the plug-in at m = 10, n = 4, p = 0.1 is off by {bias:.4f})"
    )


MISTAKES = {
    "38.1": [
        (guess_one_over_p, "expected wait for the first right sample"),
        (guess_ninety_nine, "too many"),
    ],
    "38.2": paired_mistakes(
        _ref("38.2", "distill_loss"),
        _ref("38.2", "distill_grad"),
        WRONG_LOSS,
        WRONG_GRAD,
    ),
    "38.3": [
        (vote_most_likely_chain, "one fixed chain"),
        (vote_one_chain, "does not change with n"),
        (vote_smallest_id, "Break ties at random"),
    ],
    "38.4": [
        (estimate_plug_in, "plug-in"),
        (estimate_linear, "counts right samples"),
        (estimate_with_c, "divide by C(m, n)"),
    ],
}
