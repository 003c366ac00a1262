"""Group relative policy optimisation with a verifiable reward (chapter 37).

For each prompt the policy samples a group of G completions; a verifier scores each one
(exact match: 1 or 0). The advantage of a completion is its reward relative to its own group:
normalised by the group's mean and standard deviation (eq. 37.1) or, leave-one-out, relative to
the mean of the other G - 1 (eq. 37.5). The policy then takes a few gradient steps on PPO's
clipped surrogate of the importance ratio to the sampling policy (eqs. 37.2-37.3), with a KL
penalty to the reference estimated per sample by k3 (eq. 37.4). Ratios are per completion: the
log-probability of a completion is the sum of its token log-probabilities.
Naive references: :func:`group_advantages_naive`, :func:`rloo_advantages_naive`,
:func:`clipped_surrogate_naive`.

Shape legend
    P prompts;  G completions per prompt (the group);  N = P G completions, prompt-major
    r (P, G) rewards;  A (P, G) advantages
    logp, logp_old, logp_ref (N,): log pi(y_i | x) of each completion under the policy being
        trained, the policy that sampled it, and the frozen reference
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import torch

from ..models.decoder import Decoder
from ..nn.optim import Optimizer, OptimizerConfig
from ..validation import float_tensor, integer, number, positive, positive_int, same_shape
from . import task

__all__ = [
    "group_advantages",
    "group_advantages_naive",
    "rloo_advantages",
    "rloo_advantages_naive",
    "importance_ratio",
    "clipped_surrogate",
    "clipped_surrogate_naive",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "grpo_loss",
    "train_grpo",
]


def _rewards(r: torch.Tensor, min_group: int) -> torch.Tensor:
    float_tensor(r, "r", ndim=2, all_finite=True, not_empty=True)
    integer(r.shape[1], "the group size G = r.shape[1]", low=min_group)
    return r


def group_advantages(r: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(P, G) A_i = (r_i - mean) / (std + eps) within each group (row) of r (P, G), with the
    sample standard deviation (divisor G - 1), as TRL's GRPO trainer computes it.
    Implements eq. 37.1."""
    _rewards(r, 2)
    eps = number(eps, "eps", 0.0)
    mean = r.mean(1, keepdim=True)  # (P, 1)
    return (r - mean) / (r.std(1, keepdim=True) + eps)


def group_advantages_naive(r: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """:func:`group_advantages` group by group with Python's ``statistics``."""
    _rewards(r, 2)
    out = []
    for row in r.tolist():
        m, s = statistics.fmean(row), statistics.stdev(row)
        out.append([(x - m) / (s + eps) for x in row])
    return torch.tensor(out, dtype=r.dtype)


def rloo_advantages(r: torch.Tensor) -> torch.Tensor:
    """(P, G) A_i = r_i - mean of the other G - 1 rewards of its group: a baseline that does not
    depend on r_i. Implements eq. 37.5."""
    _rewards(r, 2)
    G = r.shape[1]
    return r - (r.sum(1, keepdim=True) - r) / (G - 1)


def rloo_advantages_naive(r: torch.Tensor) -> torch.Tensor:
    """:func:`rloo_advantages` with an explicit loop over the others j != i."""
    _rewards(r, 2)
    out = []
    for row in r.tolist():
        G = len(row)
        out.append([row[i] - sum(row[j] for j in range(G) if j != i) / (G - 1) for i in range(G)])
    return torch.tensor(out, dtype=r.dtype)


def importance_ratio(logp: torch.Tensor, logp_old: torch.Tensor) -> torch.Tensor:
    """(N,) rho_i = exp(log pi_theta(y_i) - log pi_old(y_i)). Implements eq. 37.2."""
    same_shape(logp, logp_old, ("logp", "logp_old"))
    return torch.exp(logp - logp_old)


def clipped_surrogate(logp, logp_old, adv, clip_eps: float = 0.2) -> torch.Tensor:
    """(N,) L_i = -min(rho_i A_i, clip(rho_i, 1 - eps, 1 + eps) A_i). Implements eq. 37.3.

    logp: (N,) under the policy being trained; logp_old: (N,) under the sampling policy;
    adv: (N,) advantages; clip_eps in (0, 1).
    """
    same_shape(logp, adv, ("logp", "adv"))
    eps = number(clip_eps, "clip_eps", 0.0, 1.0, open_low=True, open_high=True)
    rho = importance_ratio(logp, logp_old)
    return -torch.minimum(rho * adv, rho.clamp(1 - eps, 1 + eps) * adv)


def clipped_surrogate_naive(logp, logp_old, adv, clip_eps: float = 0.2) -> torch.Tensor:
    """:func:`clipped_surrogate` sample by sample in Python floats, with the clip written out."""
    same_shape(logp, adv, ("logp", "adv"))
    same_shape(logp, logp_old, ("logp", "logp_old"))
    out = []
    for lp, lo, a in zip(logp.tolist(), logp_old.tolist(), adv.tolist(), strict=True):
        rho = math.exp(lp - lo)
        clipped = min(max(rho, 1 - clip_eps), 1 + clip_eps)
        out.append(-min(rho * a, clipped * a))
    return torch.tensor(out, dtype=logp.dtype)


def _log_u(logp, logp_ref):
    same_shape(logp, logp_ref, ("logp", "logp_ref"))
    return logp_ref - logp  # log u, u = pi_ref / pi_theta


def kl_k1(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k1 = -log u = log pi_theta(y) - log pi_ref(y): unbiased for KL(pi_theta || pi_ref) when
    y ~ pi_theta, but often negative."""
    return -_log_u(logp, logp_ref)


def kl_k2(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k2 = (log u)^2 / 2: non-negative, biased (exact to second order)."""
    return 0.5 * _log_u(logp, logp_ref) ** 2


def kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """k3 = (u - 1) - log u, u = pi_ref(y) / pi_theta(y): unbiased and non-negative.
    Implements eq. 37.4 (expm1 keeps u - 1 accurate when u is near 1)."""
    log_u = _log_u(logp, logp_ref)
    return torch.expm1(log_u) - log_u


def grpo_loss(logp, logp_old, logp_ref, adv, clip_eps: float = 0.2, beta: float = 0.04):
    """() mean over the N completions of the clipped surrogate (eq. 37.3) plus beta k3 (eq. 37.4).

    logp, logp_old, logp_ref, adv: (N,); beta >= 0 weights the KL penalty to the reference.
    """
    beta = number(beta, "beta", 0.0)
    return (clipped_surrogate(logp, logp_old, adv, clip_eps) + beta * kl_k3(logp, logp_ref)).mean()


def train_grpo(
    policy: Decoder,
    reference: Decoder,
    pairs: Sequence[tuple[int, int]],
    steps: int = 30,
    group_size: int = 8,
    prompts_per_step: int = 16,
    inner_steps: int = 2,
    lr: float = 3e-3,
    clip_eps: float = 0.2,
    beta: float = 0.04,
    advantages: Callable[[torch.Tensor], torch.Tensor] = group_advantages,
    generator: torch.Generator | None = None,
    callback: Callable[[int], None] | None = None,
) -> dict[str, list[float]]:
    """GRPO with the exact-match reward of :func:`mlbook.posttraining.task.rewards`.

    Each step draws ``prompts_per_step`` problems of ``pairs``, samples ``group_size``
    completions of each from the current policy (tau = 1), scores them, computes
    ``advantages`` per group (eq. 37.1 by default) and takes ``inner_steps`` Adam steps on
    :func:`grpo_loss`. ``callback(step)`` runs before each step and once after the last
    (step = steps), e.g. to measure accuracy. Returns per step the mean reward of the samples,
    the share of groups whose rewards all agree (zero advantage), the mean k3 KL to the
    reference and the share of clipped ratios in the last inner step.
    """
    G, P = (
        positive_int(group_size, "group_size"),
        positive_int(prompts_per_step, "prompts_per_step"),
    )
    positive(lr, "lr")
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = Optimizer(params, OptimizerConfig("adam", lr=lr))
    hist: dict[str, list[float]] = {"reward": [], "flat_groups": [], "kl": [], "clipped": []}
    for step in range(positive_int(steps, "steps")):
        if callback is not None:
            callback(step)
        pick = torch.randperm(len(pairs), generator=generator)[:P].tolist()
        batch = [pairs[i] for i in pick]
        policy.eval()
        with torch.no_grad():
            tokens, mask = task.sample(policy, batch, G, 1.0, generator)  # (P G, 8), (P G, 7)
            logp_ref = task.completion_log_probs(reference, tokens, mask)  # (P G,)
        r = task.rewards(tokens).view(len(batch), G).double()  # (P, G)
        adv = advantages(r).reshape(-1)  # (P G,)
        policy.train()
        logp_old = None
        for _ in range(positive_int(inner_steps, "inner_steps")):
            logp = task.completion_log_probs(policy, tokens, mask)  # (P G,)
            if logp_old is None:  # the first pass is the sampling policy's: rho = 1
                logp_old = logp.detach()
            loss = grpo_loss(logp, logp_old, logp_ref, adv, clip_eps, beta)
            opt.zero_grad()
            loss.backward()
            opt.step()
        rho = importance_ratio(logp.detach(), logp_old)
        hist["reward"].append(r.mean().item())
        hist["flat_groups"].append((r.std(1) == 0).double().mean().item())
        hist["kl"].append(kl_k3(logp.detach(), logp_ref).mean().item())
        hist["clipped"].append(((rho - 1).abs() > clip_eps).double().mean().item())
    policy.eval()
    if callback is not None:
        callback(steps)
    return hist
