"""Checks of the exercises of chapter 37 (GRPO and verifiable rewards).

The references are independent of :mod:`mlbook.posttraining.grpo`: a simulation of groups of
Bernoulli rewards (37.1); the group-normalised clipped loss written in NumPy (37.2); the three KL
estimators written in NumPy (37.3).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import numpy as np
import torch

from . import (
    Incorrect,
    as_number,
    as_tensor,
    attempt,
    exercise,
    expect_answer,
    expect_tuple,
)

F64 = torch.float64

# --- 37.1 ----------------------------------------------------------------------------------------


def guess_all_right_only():
    return 1 / 16


def guess_never_flat():
    return 0.0


def guess_half():
    return 0.5


@exercise("37.1", "predict_flat_share")
def flat_share(answer) -> str:
    """Simulated groups of 4 Bernoulli(0.5) rewards: the share with identical rewards."""
    guess = as_number(attempt(answer), "predict_flat_share()", " (a share of groups)")
    gen = torch.Generator().manual_seed(371)
    r = (torch.rand(200_000, 4, generator=gen) < 0.5).float()
    share = float((r.std(1) == 0).float().mean())
    seen = f"in 200,000 simulated groups {share:.3f} were flat (exact: 0.5^4 + 0.5^4 = 0.125)"
    if abs(guess - 0.125) > 0.0125:
        if abs(guess - 1 / 16) < 0.01:
            why = "that counts only the all-right groups; all-wrong groups are just as flat"
        elif guess < 0.02:
            why = "even a fair coin gives four equal outcomes in 2 of 16 cases"
        else:
            why = "a group is flat when all G rewards agree: p^G + (1 - p)^G"
        raise Incorrect(f"you predicted {guess:g}; {seen}: {why}")
    return f"right within 10 %: {seen}; an eighth of the samples teach nothing even at p = 0.5"


# --- 37.2 ----------------------------------------------------------------------------------------


def _surrogate_np(logp, logp_old, r, eps, ddof=1, per_group=True, pick=np.minimum, clip=True):
    lp, lo, rr = logp.numpy(), logp_old.numpy(), r.numpy()
    if per_group:
        A = (rr - rr.mean(1, keepdims=True)) / (rr.std(1, ddof=ddof, keepdims=True) + 1e-6)
    else:
        A = (rr - rr.mean()) / (rr.std(ddof=ddof) + 1e-6)
    A = A.reshape(-1)
    rho = np.exp(lp - lo)
    clipped = np.clip(rho, 1 - eps, 1 + eps) if clip else rho
    return torch.tensor(float(-pick(rho * A, clipped * A).mean()), dtype=F64)


def surrogate_population_std(logp, logp_old, r, eps):
    return _surrogate_np(logp, logp_old, r, eps, ddof=0)


def surrogate_batch_normalised(logp, logp_old, r, eps):
    return _surrogate_np(logp, logp_old, r, eps, per_group=False)


def surrogate_max(logp, logp_old, r, eps):
    return _surrogate_np(logp, logp_old, r, eps, pick=np.maximum)


def surrogate_unclipped(logp, logp_old, r, eps):
    return _surrogate_np(logp, logp_old, r, eps, clip=False)


def surrogate_clips_advantage(logp, logp_old, r, eps):
    rr = r.numpy()
    A = (rr - rr.mean(1, keepdims=True)) / (rr.std(1, ddof=1, keepdims=True) + 1e-6)
    A = A.reshape(-1)
    rho = np.exp(logp.numpy() - logp_old.numpy())
    return torch.tensor(float(-np.minimum(rho * A, rho * np.clip(A, 1 - eps, 1 + eps)).mean()))


WRONG_SURROGATE = {
    "the standard deviation is the sample one (divisor G - 1, torch's default), not the "
    "population one": surrogate_population_std,
    "normalise each group (row of r) by its own mean and std, not the whole batch": (
        surrogate_batch_normalised
    ),
    "take the minimum of the two products (the pessimistic bound), not the maximum": (
        surrogate_max
    ),
    "the ratio must be clipped to [1 - eps, 1 + eps]": surrogate_unclipped,
    "clip the ratio rho, not the advantage": surrogate_clips_advantage,
}


@exercise("37.2", "grpo_surrogate")
def grpo_surrogate(answer) -> str:
    """The clipped loss with group advantages against a NumPy computation."""
    for seed, (P, G, eps) in ((372, (5, 6, 0.2)), (373, (3, 4, 0.1))):
        gen = torch.Generator().manual_seed(seed)
        r = torch.randint(0, 2, (P, G), generator=gen).to(F64)
        r[0] = 1.0  # a flat group
        r[1, 0], r[1, 1:] = 1.0, 0.0  # an informative one
        logp_old = -2 + torch.randn(P * G, generator=gen, dtype=F64)
        logp = logp_old + 0.5 * torch.randn(P * G, generator=gen, dtype=F64)  # many clipped
        what = f"grpo_surrogate(logp, logp_old, r, {eps}) for P = {P}, G = {G}"
        got = attempt(answer, logp.clone(), logp_old.clone(), r.clone(), eps)
        wrong = {fb: fn(logp, logp_old, r, eps) for fb, fn in WRONG_SURROGATE.items()}
        expect_answer(
            as_tensor(got, what).reshape(()),
            _surrogate_np(logp, logp_old, r, eps),
            what,
            wrong=wrong,
            atol=1e-9,
            rtol=1e-7,
        )
    return (
        "matches a NumPy computation for 2 batches with a flat group and ratios on both sides "
        "of the clip band (eps = 0.2 and 0.1)"
    )


# --- 37.3 ----------------------------------------------------------------------------------------


def _table_np(p, q, ys, flip=False, half=True, ddof=1):
    lp, lq = np.log(p.numpy())[ys.numpy()], np.log(q.numpy())[ys.numpy()]
    log_u = (lp - lq) if flip else (lq - lp)
    ks = [-log_u, (0.5 if half else 1.0) * log_u**2, np.expm1(log_u) - log_u]
    return [float(k.mean()) for k in ks], [float(k.std(ddof=ddof)) for k in ks]


def table_ratio_flipped(p, q, ys):
    return _table_np(p, q, ys, flip=True)


def table_k2_without_half(p, q, ys):
    return _table_np(p, q, ys, half=False)


def table_population_std(p, q, ys):
    return _table_np(p, q, ys, ddof=0)


WRONG_TABLE = {
    "u = pi_ref(y) / pi_theta(y) = q / p, not p / q": table_ratio_flipped,
    "k2 = (log u)^2 / 2: the factor 1/2 is missing": table_k2_without_half,
    "use the sample standard deviation (divisor n - 1)": table_population_std,
}


@exercise("37.3", "kl_estimator_table")
def kl_estimator_table(answer) -> str:
    """Means and spreads of k1, k2, k3 against NumPy, for reference policies near and far."""
    gen = torch.Generator().manual_seed(374)
    Y, n = 30, 40
    z = torch.randn(Y, generator=gen, dtype=F64)
    noise = torch.randn(Y, generator=gen, dtype=F64)
    p = torch.softmax(z, -1)
    lines = []
    for shift in (0.2, 1.0, 2.5):
        q = torch.softmax(z + shift * noise, -1)
        ys = torch.multinomial(p, n, replacement=True, generator=gen)
        what = f"kl_estimator_table(p, q, ys) at shift {shift}"
        got = expect_tuple(attempt(answer, p.clone(), q.clone(), ys.clone()), what, ("m", "s"))
        want = _table_np(p, q, ys)
        wrong = {fb: fn(p, q, ys) for fb, fn in WRONG_TABLE.items()}
        for j, part in enumerate(("means", "standard deviations")):
            expect_answer(
                got[j],
                torch.tensor(want[j], dtype=F64),
                f"{what}: {part}",
                wrong={fb: torch.tensor(w[j], dtype=F64) for fb, w in wrong.items()},
                atol=1e-10,
                rtol=1e-8,
            )
        kl = float((p * (p.log() - q.log())).sum())
        lines.append(
            f"shift {shift}: KL {kl:.3f}, means {', '.join(f'{m:.3f}' for m in want[0])}, "
            f"stds {', '.join(f'{s:.3f}' for s in want[1])}"
        )
    return f"matches NumPy on {n} samples each (k1, k2, k3) — " + "; ".join(lines)


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

MISTAKES = {
    "37.1": [
        (guess_all_right_only, "only the all-right groups"),
        (guess_never_flat, "even a fair coin"),
        (guess_half, "p^G + (1 - p)^G"),
    ],
    "37.2": [
        (surrogate_population_std, "not the population one"),
        (surrogate_batch_normalised, "not the whole batch"),
        (surrogate_max, "not the maximum"),
        (surrogate_unclipped, "must be clipped"),
        (surrogate_clips_advantage, "clip the ratio rho"),
    ],
    "37.3": [
        (table_ratio_flipped, "not p / q"),
        (table_k2_without_half, "factor 1/2 is missing"),
        (table_population_std, "divisor n - 1"),
    ],
}
