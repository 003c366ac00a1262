"""Checks of the exercises of chapter 35 (reward models, PPO and RLHF).

The references are independent of :mod:`mlbook.posttraining.rlhf`: the clipped objective's
derivative by autograd of ``torch.minimum`` and ``torch.clamp`` (35.1); PPO's loss by its case
analysis, min(r, 1 + eps) A for A >= 0 and max(r, 1 - eps) A for A < 0, and its gradient by
autograd (35.2); the Bradley-Terry gradient by autograd of ``F.logsigmoid`` (35.3); and the optimal
policy of a 0/1 reward as two-outcome distributions with logit(pi*) = logit(p) + 1 / beta, its KL
summed term by term (35.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import (
    as_number,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_guess,
    expect_tuple,
)

F64 = torch.float64


# --- 35.1 ----------------------------------------------------------------------------------------


def guess_zero():
    return 0.0


def guess_plus_one():
    return 1.0


def guess_times_ratio():
    return -1.5


@exercise("35.1", "predict_clip_gradient")
def predict_clip_gradient(answer) -> str:
    """dL^CLIP/dr at A = -1, r = 1.5, eps = 0.2, by autograd."""
    guess = as_number(attempt(answer), "predict_clip_gradient()")
    r = torch.tensor(1.5, dtype=F64, requires_grad=True)
    a = torch.tensor(-1.0, dtype=F64)
    (grad,) = torch.autograd.grad(torch.minimum(r * a, r.clamp(0.8, 1.2) * a), r)
    want = float(grad)
    expect_guess(
        guess,
        want,
        "predict_clip_gradient()",
        {
            0.0: "the clip silences only the side the advantage asks for (r < 0.8 when A < 0); "
            "here r A = -1.5 is below clip(r) A = -1.2, so the minimum is r A and its slope A "
            "counts",
            1.0: "the sign: L^CLIP = r A has slope A = -1, which pushes the ratio back down",
            -1.5: "that is A r, the derivative with respect to log pi (eq. 35.5), not r",
        },
    )
    return (
        f"autograd gives {want:g}: at r = 1.5 with A < 0 the unclipped term r A is the minimum, "
        "so a sample that moved the wrong way keeps its full gradient"
    )


# --- 35.2 ----------------------------------------------------------------------------------------


def _ratio(logp, logp_old):
    return torch.exp(logp - logp_old)


def _clip_cases(logp, logp_old, adv, eps):
    """The case analysis: min(r, 1 + eps) A where A >= 0, max(r, 1 - eps) A where A < 0."""
    r = _ratio(logp, logp_old)
    pos = torch.clamp(r, max=1 + eps) * adv
    neg = torch.clamp(r, min=1 - eps) * adv
    return -torch.where(adv >= 0, pos, neg).mean()


def loss_without_clip(logp, logp_old, advantages, eps):
    return -(_ratio(logp, logp_old) * advantages).mean()


def loss_clip_only(logp, logp_old, advantages, eps):
    return -(_ratio(logp, logp_old).clamp(1 - eps, 1 + eps) * advantages).mean()


def loss_max(logp, logp_old, advantages, eps):
    r = _ratio(logp, logp_old)
    return -torch.maximum(r * advantages, r.clamp(1 - eps, 1 + eps) * advantages).mean()


def loss_no_minus(logp, logp_old, advantages, eps):
    return -_clip_cases(logp, logp_old, advantages, eps)


def loss_sum(logp, logp_old, advantages, eps):
    return _clip_cases(logp, logp_old, advantages, eps) * len(logp)


def loss_log_quotient(logp, logp_old, advantages, eps):
    r = logp / logp_old
    return -torch.minimum(r * advantages, r.clamp(1 - eps, 1 + eps) * advantages).mean()


WRONG_LOSS = {
    "the ratio is never clipped: clip r to [1 - eps, 1 + eps] in the second term": (
        loss_without_clip
    ),
    "the minimum with the unclipped term r A is missing: clip(r) A alone has no gradient on "
    "either side of the band": loss_clip_only,
    "take the minimum of r A and clip(r) A, not the maximum (the bound must be pessimistic)": (
        loss_max
    ),
    "the sign: return the loss, minus the objective, so that gradient descent increases it": (
        loss_no_minus
    ),
    "average over the batch (mean), not a sum": loss_sum,
    "the ratio is exp(logp - logp_old), not logp / logp_old": loss_log_quotient,
}


def _loss_cases():
    gen = torch.Generator().manual_seed(352)
    for B, spread in ((64, 0.5), (16, 0.05), (40, 1.5)):
        logp_old = -torch.rand(B, generator=gen, dtype=F64) * 3 - 0.1
        logp = logp_old + spread * torch.randn(B, generator=gen, dtype=F64)
        adv = torch.randn(B, generator=gen, dtype=F64)
        yield B, logp, logp_old, adv


@exercise("35.2", "clipped_surrogate_loss")
def clipped_surrogate_loss(answer) -> str:
    """Value and gradient against the case analysis, on three batches and two eps."""
    for B, logp, logp_old, adv in _loss_cases():
        for eps in (0.2, 0.1):
            what = f"clipped_surrogate_loss(logp, logp_old, advantages, eps={eps}) for B = {B}"
            lp = logp.clone().requires_grad_(True)
            got = attempt(answer, lp, logp_old.clone(), adv.clone(), eps)
            wrong = {fb: fn(logp, logp_old, adv, eps) for fb, fn in WRONG_LOSS.items()}
            expect_answer(got, _clip_cases(logp, logp_old, adv, eps), what, wrong=wrong, atol=1e-12)
            expect(
                isinstance(got, torch.Tensor) and got.requires_grad,
                f"{what} carries no gradient with respect to logp (was it detached?)",
            )
            (g,) = torch.autograd.grad(got, lp)
            ref = logp.clone().requires_grad_(True)
            (g_ref,) = torch.autograd.grad(_clip_cases(ref, logp_old, adv, eps), ref)
            expect_answer(g, g_ref, f"the gradient of {what}", atol=1e-12)
    return (
        "value and gradient match the case analysis min(r, 1 + ε) A / max(r, 1 - ε) A on 3 "
        "batches with ratios on both sides of the band, for ε = 0.2 and 0.1"
    )


# --- 35.3 ----------------------------------------------------------------------------------------


def _bt_grad(w, dx):
    w = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(-F.logsigmoid(dx @ w).mean(), w)
    return g


def grad_wrong_label(w, dx):
    """The gradient of -log(1 - sigma(d)): sigma(d) in place of sigma(-d)."""
    return -(torch.sigmoid(dx @ w)[:, None] * dx).mean(0)


def grad_flipped(w, dx):
    return -_bt_grad(w, dx)


def grad_summed(w, dx):
    return _bt_grad(w, dx) * len(dx)


WRONG_GRAD = {
    "ℓ'(d) = -σ(-d) = -(1 - σ(d)): with σ(d) you have the gradient for the opposite label": (
        grad_wrong_label
    ),
    "the sign is flipped: that is the gradient of the log-likelihood, not of the loss": (
        grad_flipped
    ),
    "the loss is a mean over the N pairs: divide the sum by N": grad_summed,
}


@exercise("35.3", "bt_loss_grad")
def bt_loss_grad(answer) -> str:
    """The Bradley-Terry gradient against autograd of F.logsigmoid, at three points."""
    gen = torch.Generator().manual_seed(353)
    for N, D in ((200, 4), (30, 7)):
        dx = torch.randn(N, D, generator=gen, dtype=F64)
        for scale in (0.0, 1.0, 4.0):
            w = scale * torch.randn(D, generator=gen, dtype=F64)
            what = f"bt_loss_grad(w, dx) for N = {N}, D = {D}, |w| ~ {scale:g}"
            got = attempt(answer, w.clone(), dx.clone())
            wrong = {fb: fn(w, dx) for fb, fn in WRONG_GRAD.items()}
            expect_answer(got, _bt_grad(w, dx), what, wrong=wrong, atol=1e-12)
    return (
        "matches autograd of -mean log σ(dx w) for N = 200 and 30 pairs, at w = 0 and at two "
        "random points: -mean_i σ(-w·Δx_i) Δx_i"
    )


# --- 35.4 ----------------------------------------------------------------------------------------


def _frontier(p, betas, *, reverse_kl=False, no_log_z=False, beta_times=False):
    rewards, kls = [], []
    for b in betas:
        shift = b if beta_times else 1 / b  # e^(r beta) in place of e^(r / beta)
        q = torch.sigmoid(torch.logit(p) + shift)  # pi*(right): logit(q) = logit(p) + 1 / beta
        two_q, two_p = torch.stack([q, 1 - q], -1), torch.stack([p, 1 - p], -1)  # (P, 2)
        if reverse_kl:
            kl = (two_p * (two_p / two_q).log()).sum(-1)
        elif no_log_z:
            kl = q / b
        else:
            kl = (two_q * (two_q / two_p).log()).sum(-1)
        rewards.append(float(q.mean()))
        kls.append(float(kl.mean()))
    return rewards, kls


def frontier_reverse_kl(p_right, betas):
    return _frontier(p_right, betas, reverse_kl=True)


def frontier_without_log_z(p_right, betas):
    return _frontier(p_right, betas, no_log_z=True)


def frontier_beta_times_r(p_right, betas):
    return _frontier(p_right, betas, beta_times=True)


WRONG_FRONTIER = {
    "that is KL(π_ref || π*); eq. 35.2 penalises KL(π* || π_ref), the expectation under π*": (
        frontier_reverse_kl
    ),
    "log π*/π_ref = r/β - log Z: the KL is E[r]/β - log Z, the log Z is missing": (
        frontier_without_log_z
    ),
    "the optimal policy weights by e^(r/β), not e^(rβ)": frontier_beta_times_r,
}


@exercise("35.4", "kl_reward_frontier")
def kl_reward_frontier(answer) -> str:
    """Frontier points against two-outcome distributions with logit(q) = logit(p) + 1 / beta."""
    from ...models import checkpoints
    from ...posttraining import task

    train, _ = task.split()
    tokens, mask = task.batch(train)
    with torch.no_grad():
        p = task.completion_log_probs(checkpoints.load("base"), tokens, mask).exp()  # (70,)
    betas = [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]
    what = f"kl_reward_frontier(p_right, betas={betas}) on the 70 training prompts"
    got = expect_tuple(attempt(answer, p.clone(), list(betas)), what, ("rewards", "kls"))
    want = _frontier(p, betas)
    wrong = {fb: fn(p, betas) for fb, fn in WRONG_FRONTIER.items()}
    for j, part in enumerate(("rewards", "kls")):
        expect_answer(
            as_tensor(got[j], f"{what}: {part}"),
            want[j],
            f"{what}: {part}",
            wrong={fb: w[j] for fb, w in wrong.items()},
            atol=1e-9,
            rtol=1e-7,
        )
    pts = ", ".join(f"({k:.2f}, {r:.2f})" for r, k in zip(*want, strict=True))
    return (
        f"matches the two-outcome optimum; (KL, reward) for β = {betas}: {pts}; from β = 0.2 to "
        f"0.05 the reward gains {want[0][0] - want[0][2]:.3f} for {want[1][0] - want[1][2]:.3f} "
        "more nats"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

MISTAKES = {
    "35.1": [
        (guess_zero, "silences only the side"),
        (guess_plus_one, "the sign"),
        (guess_times_ratio, "derivative with respect to log pi"),
    ],
    "35.2": [
        (loss_without_clip, "never clipped"),
        (loss_clip_only, "minimum with the unclipped term"),
        (loss_max, "not the maximum"),
        (loss_no_minus, "the sign"),
        (loss_sum, "not a sum"),
        (loss_log_quotient, "not logp / logp_old"),
    ],
    "35.3": [
        (grad_wrong_label, "opposite label"),
        (grad_flipped, "sign is flipped"),
        (grad_summed, "divide the sum by N"),
    ],
    "35.4": [
        (frontier_reverse_kl, "KL(π_ref || π*)"),
        (frontier_without_log_z, "log Z is missing"),
        (frontier_beta_times_r, "not e^(rβ)"),
    ],
}
