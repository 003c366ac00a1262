"""Reward models, the KL-regularised objective and PPO: RLHF (chapter 35).

A reward model is fitted to pairwise preferences with the Bradley-Terry likelihood (eq. 35.1);
the policy maximises the reward minus beta times its KL divergence from a frozen reference
(eq. 35.2), whose maximiser over a finite set of answers is pi_ref e^(r / beta) / Z; PPO
maximises that objective from samples of an older policy through the probability ratio
(eq. 35.3), clipped so that one batch cannot move the policy far (eq. 35.4), with the gradient
A r grad log pi (eq. 35.5). :func:`rlhf_ppo` runs the whole loop on the book's decoder and the
addition task of :mod:`mlbook.posttraining.task`. Naive references:
:func:`bradley_terry_loss_naive`, :func:`token_rewards_naive`, :func:`ppo_clip_loss_naive`,
:func:`clip_gradient_naive`.

Shape legend
    N  preference pairs;  D  reward features;  K  answers of a discrete space
    B  sampled completions;  G  completions per prompt (B = G x prompts, prompt-major)
    T  tokens of a sequence;  mask (B, T - 1) marks the completion's next-token predictions
    logp, logp_old, logp_ref (B,): log pi(y | x) of the policy, of the policy that sampled y,
    and of the frozen reference; advantages, rewards (B,)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..foundations.information import kl_k1
from ..models.decoder import Decoder
from ..nn.activations import softplus
from ..nn.optim import Optimizer, OptimizerConfig
from ..validation import (
    distribution,
    float_tensor,
    nonempty,
    number,
    positive,
    positive_int,
    same_shape,
    shape_is,
)
from . import task

__all__ = [
    "bradley_terry_prob",
    "bradley_terry_loss",
    "bradley_terry_loss_naive",
    "fit_linear_reward",
    "kl_regularised_objective",
    "optimal_policy",
    "kl_penalised_reward",
    "token_rewards",
    "token_rewards_naive",
    "probability_ratio",
    "ppo_clip_objective",
    "ppo_clip_loss",
    "ppo_clip_loss_naive",
    "clip_gradient",
    "clip_gradient_naive",
    "softmax_ratio_gradient",
    "group_advantages",
    "rlhf_ppo",
]


# --- eq. 35.1: Bradley-Terry preferences and the reward model's loss ----------------------------


def bradley_terry_prob(r_w: torch.Tensor, r_l: torch.Tensor) -> torch.Tensor:
    """P(y_w > y_l) = sigma(r_w - r_l). Implements eq. 35.1 (left). r_w, r_l: (N,) -> (N,)."""
    same_shape(r_w, r_l, ("r_w", "r_l"))
    return torch.sigmoid(r_w - r_l)


def bradley_terry_loss(r_w: torch.Tensor, r_l: torch.Tensor) -> torch.Tensor:
    """Mean -log sigma(r_w - r_l) = mean softplus(r_l - r_w), finite for any margin.

    Implements eq. 35.1 (right). r_w: (N,) rewards of the preferred answers, r_l: (N,) of the
    rejected ones (same shape, no broadcasting). Returns a scalar.
    """
    float_tensor(r_w, "r_w", not_empty=True)
    same_shape(r_w, r_l, ("r_w", "r_l"))
    return softplus(r_l - r_w).mean()


def bradley_terry_loss_naive(r_w: torch.Tensor, r_l: torch.Tensor) -> torch.Tensor:
    """Eq. 35.1 as written, -log(1 / (1 + exp(-(r_w - r_l)))), pair by pair (overflows)."""
    same_shape(nonempty(r_w, "r_w"), r_l, ("r_w", "r_l"))
    terms = [-torch.log(1 / (1 + torch.exp(-(w - l)))) for w, l in zip(r_w, r_l, strict=True)]
    return torch.stack(terms).mean()


def fit_linear_reward(dx: torch.Tensor, steps: int = 50, tol: float = 1e-12) -> torch.Tensor:
    """The maximum-likelihood w of the linear reward r(y) = w . x(y) under eq. 35.1, by Newton.

    dx: (N, D) feature differences x(y_w) - x(y_l) of N labelled pairs. The loss
    mean softplus(-dx w) is convex; Newton's method stops when the step is below ``tol``.
    Returns w: (D,). (A reward shifted by a constant has the same loss: only w is fitted.)
    """
    dx = float_tensor(dx, "dx", ndim=2, all_finite=True, not_empty=True)
    steps = positive_int(steps, "steps")
    w = dx.new_zeros(dx.shape[1])
    for _ in range(steps):
        p = torch.sigmoid(dx @ w)  # (N,) P(y_w > y_l) under w
        grad = -dx.T @ (1 - p) / len(dx)  # (D,)
        hess = (dx.T * (p * (1 - p))) @ dx / len(dx)  # (D, D)
        step = torch.linalg.solve(hess, grad)
        w = w - step
        if step.abs().max() < tol:
            break
    return w


# --- eq. 35.2: the KL-regularised objective and its optimum on a discrete space -----------------


def kl_regularised_objective(
    pi: torch.Tensor, pi_ref: torch.Tensor, r: torch.Tensor, beta: float
) -> torch.Tensor:
    """J = E_pi[r] - beta KL(pi || pi_ref) over K answers. Implements eq. 35.2.

    pi, pi_ref: (..., K) distributions (pi_ref > 0 where pi > 0); r: (K,) or (..., K).
    Returns (...). Terms with pi = 0 contribute 0 (0 log 0 = 0).
    """
    distribution(pi, "pi")
    distribution(pi_ref, "pi_ref")
    beta = number(beta, "beta", 0.0)
    log_ratio = torch.where(pi > 0, pi.clamp_min(1e-300).log() - pi_ref.log(), 0.0)
    return (pi * r).sum(-1) - beta * (pi * log_ratio).sum(-1)


def optimal_policy(pi_ref: torch.Tensor, r: torch.Tensor, beta: float) -> torch.Tensor:
    """The maximiser of eq. 35.2 over K answers: pi* = pi_ref e^(r / beta) / Z, (..., K).

    Computed as softmax(log pi_ref + r / beta), so that no e^(r / beta) overflows.
    """
    distribution(pi_ref, "pi_ref")
    return torch.softmax(pi_ref.log() + r / positive(beta, "beta"), dim=-1)


def kl_penalised_reward(
    reward: torch.Tensor, logp: torch.Tensor, logp_ref: torch.Tensor, beta: float
) -> torch.Tensor:
    """The reward PPO maximises, r(x, y) - beta log(pi(y | x) / pi_ref(y | x)), (B,).

    Its mean under y ~ pi is eq. 35.2's J. reward, logp, logp_ref: (B,), logp of the policy
    that sampled y (no gradient flows through the penalty: it is part of the reward).
    """
    same_shape(reward, logp, ("reward", "logp"))
    same_shape(logp, logp_ref, ("logp", "logp_ref"))
    return reward - number(beta, "beta", 0.0) * kl_k1(logp_ref - logp).detach()


def token_rewards(
    reward: torch.Tensor,
    logp_tok: torch.Tensor,
    logp_ref_tok: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """The per-token form of :func:`kl_penalised_reward`: -beta log(pi_t / pi_ref,t) at every
    completion token and the sequence's reward added at its last one, (B, T - 1).

    logp_tok, logp_ref_tok, mask: (B, T - 1); reward: (B,). Summed over tokens it is the
    sequence form (log pi(y | x) is the sum of the completion's token log-probabilities).
    """
    shape_is(mask, "mask", logp_tok.shape)
    same_shape(logp_tok, logp_ref_tok, ("logp_tok", "logp_ref_tok"))
    shape_is(reward, "reward", logp_tok.shape[:1])
    beta = number(beta, "beta", 0.0)
    last = mask * (mask.flip(-1).cumsum(-1).flip(-1) == 1)  # (B, T-1) one-hot: the last token
    return -beta * (logp_tok - logp_ref_tok).detach() * mask + reward[:, None] * last


def token_rewards_naive(reward, logp_tok, logp_ref_tok, mask, beta) -> torch.Tensor:
    """:func:`token_rewards` position by position, in loops (the reference)."""
    out = torch.zeros_like(logp_tok, dtype=torch.float64)
    for b in range(mask.shape[0]):
        positions = [t for t in range(mask.shape[1]) if mask[b, t] > 0]
        for t in positions:
            out[b, t] = -beta * float(logp_tok[b, t] - logp_ref_tok[b, t])
        if positions:
            out[b, positions[-1]] += float(reward[b])
    return out


# --- eqs. 35.3-35.5: the ratio, the clipped surrogate and its gradient ------------------------


def probability_ratio(logp: torch.Tensor, logp_old: torch.Tensor) -> torch.Tensor:
    """r = pi_theta(a | s) / pi_old(a | s) = exp(logp - logp_old), (B,). Implements eq. 35.3."""
    same_shape(logp, logp_old, ("logp", "logp_old"))
    return torch.exp(logp - logp_old.detach())


def ppo_clip_objective(ratio: torch.Tensor, advantages: torch.Tensor, eps: float) -> torch.Tensor:
    """L^CLIP = min(r A, clip(r, 1 - eps, 1 + eps) A), elementwise. Implements eq. 35.4.

    ratio, advantages: (B,) (same shape); eps in (0, 1). Returns (B,).
    """
    same_shape(ratio, advantages, ("ratio", "advantages"))
    eps = number(eps, "eps", 0.0, 1.0, open_low=True, open_high=True)
    return torch.minimum(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages)


def ppo_clip_loss(
    logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, eps: float = 0.2
) -> torch.Tensor:
    """PPO's loss, the mean of -min(r A, clip(r) A) with r = exp(logp - logp_old) (eqs. 35.3-35.4).

    logp: (B,) log pi_theta of the sampled actions (with gradient); logp_old: (B,) of the policy
    that sampled them; advantages: (B,). Returns a scalar to minimise.
    """
    float_tensor(logp, "logp", not_empty=True)
    same_shape(logp, advantages, ("logp", "advantages"))
    return -ppo_clip_objective(probability_ratio(logp, logp_old), advantages.detach(), eps).mean()


def ppo_clip_loss_naive(logp, logp_old, advantages, eps: float = 0.2) -> torch.Tensor:
    """:func:`ppo_clip_loss` case by case (the reference): for A >= 0 the objective is
    min(r, 1 + eps) A, for A < 0 it is max(r, 1 - eps) A."""
    terms = []
    for lp, lo, a in zip(logp, logp_old, advantages, strict=True):
        r = torch.exp(lp - lo)
        bound = torch.clamp(r, max=1 + eps) if a >= 0 else torch.clamp(r, min=1 - eps)
        terms.append(-bound * a)
    return torch.stack(terms).mean()


def clip_gradient(ratio: torch.Tensor, advantages: torch.Tensor, eps: float) -> torch.Tensor:
    """dL^CLIP / dr = A where the unclipped term is the minimum, else 0, (B,).

    The gradient vanishes only on the side that would push r further: r > 1 + eps with A > 0,
    r < 1 - eps with A < 0. (At the kinks r = 1 +- eps the value is one-sided; we take 0.)
    """
    same_shape(ratio, advantages, ("ratio", "advantages"))
    eps = number(eps, "eps", 0.0, 1.0, open_low=True, open_high=True)
    clipped = ((advantages > 0) & (ratio >= 1 + eps)) | ((advantages < 0) & (ratio <= 1 - eps))
    return torch.where(clipped, 0.0, advantages)


def clip_gradient_naive(ratio, advantages, eps: float) -> torch.Tensor:
    """:func:`clip_gradient` entry by entry, from the case analysis of min(r A, clip(r) A)."""
    out = []
    for r, a in zip(ratio.tolist(), advantages.tolist(), strict=True):
        if a > 0:
            out.append(a if r < 1 + eps else 0.0)
        elif a < 0:
            out.append(a if r > 1 - eps else 0.0)
        else:
            out.append(0.0)
    return torch.tensor(out, dtype=torch.float64)


def softmax_ratio_gradient(
    logits: torch.Tensor, actions: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """grad_z (r A) = A r grad_z log pi(a) = A r (onehot(a) - pi) for a softmax policy.

    Implements eq. 35.5. logits: (B, K) of pi_theta = softmax(z); actions: (B,) int;
    logp_old, advantages: (B,). Returns (B, K), one gradient row per sample.
    """
    float_tensor(logits, "logits", ndim=2)
    shape_is(actions, "actions", logits.shape[:1])
    pi = torch.softmax(logits, -1)  # (B, K)
    logp = pi.gather(1, actions[:, None]).squeeze(1).log()  # (B,)
    ratio = torch.exp(logp - logp_old)  # (B,)
    onehot = torch.nn.functional.one_hot(actions, logits.shape[1]).to(logits.dtype)
    return (advantages * ratio)[:, None] * (onehot - pi)  # (B, K)


# --- the loop: PPO on the book's decoder -------------------------------------------------------


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """A = r - (mean reward of the same prompt's G completions): a per-prompt baseline, (B,).

    rewards: (B,), prompt-major (B = G x prompts), as :func:`task.sample` orders them.
    """
    g = positive_int(group_size, "group_size")
    if rewards.ndim != 1 or len(rewards) % g:
        raise ValueError(
            f"rewards must be (B,) with B a multiple of {g}, got {tuple(rewards.shape)}"
        )
    grouped = rewards.reshape(-1, g)  # (prompts, G)
    return (grouped - grouped.mean(1, keepdim=True)).reshape(-1)


def rlhf_ppo(
    policy: Decoder,
    reference: Decoder,
    pairs: Sequence[tuple[int, int]],
    *,
    beta: float,
    iterations: int,
    group_size: int = 4,
    epochs: int = 2,
    eps: float = 0.2,
    lr: float = 3e-4,
    seed: int = 0,
    eval_pairs: Sequence[tuple[int, int]] | None = None,
) -> dict[str, list[float]]:
    """PPO on the KL-penalised exact-match reward; trains ``policy`` in place.

    Each iteration samples ``group_size`` completions of every prompt in ``pairs`` (tau = 1),
    scores them with :func:`task.rewards` minus beta log(pi_old / pi_ref) (eq. 35.2), takes the
    per-prompt baseline, and makes ``epochs`` Adam steps on :func:`ppo_clip_loss`. Returns, per
    iteration: the mean reward and KL estimate (mean log pi_old / pi_ref) of the samples, the
    fraction of samples whose ratio was clipped in the last epoch, and (if ``eval_pairs``) the
    greedy accuracy on ``eval_pairs`` after the update.
    """
    beta = number(beta, "beta", 0.0)
    lr = positive(lr, "lr")
    iterations = positive_int(iterations, "iterations")
    epochs = positive_int(epochs, "epochs")
    for p in reference.parameters():  # frozen
        p.requires_grad_(False)
    opt = Optimizer(policy.parameters(), OptimizerConfig(kind="adam", lr=lr))
    gen = torch.Generator().manual_seed(seed)
    hist: dict[str, list[float]] = {"reward": [], "kl": [], "clipped": [], "accuracy": []}
    for _ in range(iterations):
        with torch.no_grad():
            tokens, mask = task.sample(policy, pairs, group_size, 1.0, gen)  # (B, 8), (B, 7)
            logp_old = task.completion_log_probs(policy, tokens, mask)  # (B,)
            logp_ref = task.completion_log_probs(reference, tokens, mask)
        reward = task.rewards(tokens).double()
        adv = group_advantages(kl_penalised_reward(reward, logp_old, logp_ref, beta), group_size)
        for _ in range(epochs):
            logp = task.completion_log_probs(policy, tokens, mask)
            loss = ppo_clip_loss(logp, logp_old, adv, eps)
            opt.zero_grad()
            loss.backward()
            opt.step()
        ratio = probability_ratio(logp.detach(), logp_old)
        hist["reward"].append(reward.mean().item())
        hist["kl"].append((logp_old - logp_ref).mean().item())
        hist["clipped"].append(((ratio - 1).abs() > eps).double().mean().item())
        if eval_pairs is not None:
            hist["accuracy"].append(task.accuracy(policy, eval_pairs))
    return hist
