"""Checks of the exercises of chapter 36 (direct preference optimisation).

The references are independent of :mod:`mlbook.posttraining.dpo`: the tilted probability
computed with ``math.exp`` (36.1); the loss from ``F.binary_cross_entropy_with_logits`` and its
gradient from float64 autograd (36.2); the optimal policies, their rewards and KL divergences in
NumPy (36.3).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import (
    Incorrect,
    as_number,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
)
from . import reference_answer as _ref

F64 = torch.float64

# --- 36.1 ----------------------------------------------------------------------------------------


def _tilted() -> float:
    """pi*(y_2) for pi0 = (0.9, 0.1), r = (0, 1), beta = 0.5."""
    a, b = 0.9, 0.1 * math.exp(1 / 0.5)
    return b / (a + b)


def guess_reward_maximiser():
    return 1.0


def guess_softmax_of_reward():
    return 1 / (1 + math.exp(-2.0))


def guess_reference():
    return 0.1


_WRONG_TILT = {
    1.0: "that is the reward maximiser: the KL term keeps pi* near pi0, so the better outcome "
    "gets pi0(y) e^(r/β) / Z, not everything",
    1 / (1 + math.exp(-2.0)): "that is softmax(r / β), which forgets the reference: the tilt "
    "e^(r/β) multiplies pi0, and pi0 gives the better outcome only 0.1",
    0.1: "that is pi0 itself: the reward of 1 = 2β multiplies the better outcome's weight by e^2",
    1 / (1 + math.exp(-1.0)): "that forgets β: the tilt is e^(r/β) = e^2, not e^r",
}


@exercise("36.1", "predict_tilted_probability")
def tilted_probability(answer) -> str:
    """The optimal policy of a two-outcome space, from eq. 36.2 with math.exp."""
    guess = as_number(attempt(answer), "predict_tilted_probability()", " (a probability)")
    want = _tilted()
    seen = f"pi*(y_2) = 0.1 e^2 / (0.9 + 0.1 e^2) = {want:.3f}"
    if abs(guess - want) > 0.05 * want:
        for value, why in _WRONG_TILT.items():
            if abs(guess - value) <= 0.02:
                raise Incorrect(f"you predicted {guess:g}; {seen}: {why}")
        raise Incorrect(
            f"you predicted {guess:g}; {seen}: the better outcome's weight is multiplied by "
            "e^(r/β) = e^2 ≈ 7.4 and then everything is renormalised"
        )
    return f"right within 5 %: {seen}; the tilt is strong, but pi0 started at 1/9 of the other"


# --- 36.2 ----------------------------------------------------------------------------------------


def _pairs(seed: int, B: int):
    gen = torch.Generator().manual_seed(seed)
    return tuple(2 * torch.randn(B, generator=gen, dtype=F64) for _ in range(4))


def _reference_loss_grad(lw, ll, rw, rl, beta):
    lw = lw.clone().requires_grad_(True)
    u = beta * ((lw - rw) - (ll - rl))
    loss = F.binary_cross_entropy_with_logits(u, torch.ones_like(u))
    (grad,) = torch.autograd.grad(loss, lw)
    return loss.detach(), grad


def loss_grad_without_reference(lw, ll, rw, rl, beta):
    return _reference_loss_grad(lw, ll, torch.zeros_like(rw), torch.zeros_like(rl), beta)


def loss_grad_flipped_margin(lw, ll, rw, rl, beta):
    return _reference_loss_grad(ll, lw, rl, rw, beta)


def loss_grad_summed(lw, ll, rw, rl, beta):
    loss, grad = _reference_loss_grad(lw, ll, rw, rl, beta)
    return loss * lw.shape[0], grad * lw.shape[0]


def loss_grad_without_beta(lw, ll, rw, rl, beta):
    loss, grad = _reference_loss_grad(lw, ll, rw, rl, beta)
    return loss, grad / beta


def loss_grad_wrong_weight(lw, ll, rw, rl, beta):
    loss, _ = _reference_loss_grad(lw, ll, rw, rl, beta)
    u = beta * ((lw - rw) - (ll - rl))
    return loss, -beta * torch.sigmoid(u) / lw.shape[0]


WRONG_LOSS = {
    "the implicit reward is β log(pi / pi0): subtract the reference log-probabilities "
    "ref_w and ref_l": loss_grad_without_reference,
    "the margin is r_w - r_l (chosen minus rejected), not r_l - r_w": loss_grad_flipped_margin,
    "average the loss over the B pairs instead of summing it": loss_grad_summed,
}
WRONG_GRAD = {
    "the gradient is missing the factor β (du/dlog pi_w = β)": loss_grad_without_beta,
    "each pair is weighted by σ(r_l - r_w) = σ(-u), the probability of the wrong order, not "
    "by σ(u)": loss_grad_wrong_weight,
    "average the loss over the B pairs instead of summing it": loss_grad_summed,
    "the implicit reward is β log(pi / pi0): subtract the reference log-probabilities "
    "ref_w and ref_l": loss_grad_without_reference,
    "the margin is r_w - r_l (chosen minus rejected), not r_l - r_w": loss_grad_flipped_margin,
}


@exercise("36.2", "dpo_loss_and_grad")
def dpo_loss_and_grad(answer) -> str:
    """The DPO loss against binary cross-entropy, its gradient against float64 autograd."""
    for seed, B, beta in ((361, 16, 0.1), (362, 5, 2.0)):
        args = _pairs(seed, B)
        what = f"dpo_loss_and_grad(...) for B = {B}, β = {beta}"
        loss, grad = expect_tuple(
            attempt(answer, *(a.clone() for a in args), beta), what, ("loss", "grad_w")
        )
        want_loss, want_grad = _reference_loss_grad(*args, beta)
        wrong_l = {fb: fn(*args, beta)[0] for fb, fn in WRONG_LOSS.items()}
        wrong_g = {fb: fn(*args, beta)[1] for fb, fn in WRONG_GRAD.items()}
        expect_answer(loss, want_loss, f"{what}: loss", wrong=wrong_l, atol=1e-10, rtol=1e-8)
        expect_answer(grad, want_grad, f"{what}: grad_w", wrong=wrong_g, atol=1e-10, rtol=1e-8)
    return (
        "the loss matches F.binary_cross_entropy_with_logits of the margin and grad_w float64 "
        "autograd, for 2 batches of pairs (β = 0.1 and 2)"
    )


# --- 36.3 ----------------------------------------------------------------------------------------


def _frontier(pi0, r, betas, kl_reversed=False, tilt=lambda r, b: r / b):
    p0, rr = pi0.numpy(), r.numpy()
    rewards, kls = [], []
    for b in betas:
        z = np.log(p0) + tilt(rr, b)
        p = np.exp(z - z.max())
        p /= p.sum()
        rewards.append(float(p @ rr))
        kl = p0 @ (np.log(p0) - np.log(p)) if kl_reversed else p @ (np.log(p) - np.log(p0))
        kls.append(float(kl))
    return rewards, kls


def frontier_kl_reversed(pi0, r, betas):
    return _frontier(pi0, r, betas, kl_reversed=True)


def frontier_times_beta(pi0, r, betas):
    return _frontier(pi0, r, betas, tilt=lambda r, b: r * b)


def frontier_without_reference(pi0, r, betas):
    return _frontier(torch.full_like(pi0, 1.0 / len(pi0)), r, betas)


WRONG_FRONTIER = {
    "that is KL(pi0 || pi*); the objective penalises KL(pi* || pi0), the expectation under the "
    "new policy": frontier_kl_reversed,
    "the tilt is e^(r/β): small β means a strong tilt, not a weak one": frontier_times_beta,
    "pi* tilts the reference: start from log pi0, not from a uniform policy": (
        frontier_without_reference
    ),
}


@exercise("36.3", "reward_kl_frontier")
def reward_kl_frontier(answer) -> str:
    """Expected reward and KL of the optimal policies against a NumPy computation."""
    gen = torch.Generator().manual_seed(363)
    Y = 50
    pi0 = torch.softmax(1.5 * torch.randn(Y, generator=gen, dtype=F64), -1)
    r = torch.randn(Y, generator=gen, dtype=F64)
    betas = [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0]
    what = f"reward_kl_frontier(pi0, r, betas) for Y = {Y}"
    got = expect_tuple(attempt(answer, pi0.clone(), r.clone(), list(betas)), what, ("rew", "kl"))
    want = _frontier(pi0, r, betas)
    wrong = {fb: fn(pi0, r, betas) for fb, fn in WRONG_FRONTIER.items()}
    for j, part in enumerate(("expected rewards", "KL divergences")):
        expect_answer(
            got[j],
            torch.tensor(want[j], dtype=F64),
            f"{what}: {part}",
            wrong={fb: torch.tensor(w[j], dtype=F64) for fb, w in wrong.items()},
            atol=1e-9,
            rtol=1e-7,
        )
    rew, kl = np.array(want[0]), np.array(want[1])
    expect(bool(np.all(np.diff(kl) < 0)), "the KL must fall as β grows")
    slopes = np.diff(rew) / np.diff(kl)
    mid = np.sqrt(np.array(betas[1:]) * np.array(betas[:-1]))
    return (
        f"matches NumPy for {len(betas)} values of β; the reward rises from "
        f"{rew[-1]:.2f} (β = 50) to {rew[0]:.2f} (β = 0.02, max r = {r.max().item():.2f}) while "
        f"the KL grows from {kl[-1]:.3f} to {kl[0]:.2f} nats; the slope dE[r]/dKL between "
        f"neighbouring β is {', '.join(f'{s:.2g}' for s in slopes[::3])} at β ≈ "
        f"{', '.join(f'{m:.2g}' for m in mid[::3])}: close to β"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

MISTAKES = {
    "36.1": [
        (guess_reward_maximiser, "reward maximiser"),
        (guess_softmax_of_reward, "forgets the reference"),
        (guess_reference, "that is pi0 itself"),
    ],
    "36.2": [
        (loss_grad_without_reference, "subtract the reference"),
        (loss_grad_flipped_margin, "not r_l - r_w"),
        (loss_grad_summed, "instead of summing"),
        (loss_grad_without_beta, "missing the factor β"),
        (loss_grad_wrong_weight, "not by σ(u)"),
    ],
    "36.3": [
        (frontier_kl_reversed, "KL(pi0 || pi*)"),
        (frontier_times_beta, "the tilt is e^(r/β)"),
        (frontier_without_reference, "start from log pi0"),
    ],
}

_ = _ref  # reference answers are not needed: every wrong answer above is built independently
