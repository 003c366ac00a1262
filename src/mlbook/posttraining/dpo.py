"""Direct preference optimisation (chapter 36): the KL-regularised objective, its optimal policy,
the implicit reward, the DPO loss and its gradient, on a discrete space and on the book's decoder.

The objective (eq. 36.1) trades reward against the KL divergence to a reference policy pi0; its
maximiser is pi0 tilted by exp(r / beta) (eq. 36.2). Solving that for r gives the implicit reward
beta log(pi / pi0) (eq. 36.3), and the Bradley-Terry likelihood of preference pairs written with
it is the DPO loss (eq. 36.4), whose gradient (eq. 36.5) weights each pair by how wrong the
implicit rewards still order it. Naive references: :func:`optimal_policy_naive`,
:func:`dpo_loss_naive`.

Shape legend
    Y   outcomes of a discrete space;  pi, pi0, r (..., Y): a policy, the reference, a reward
    B   preference pairs;  logp_w, logp_l, ref_w, ref_l (B,): log pi(y_w | x), log pi(y_l | x) of
        the policy and of the reference;  winners, losers (B,) int outcome ids
    tokens (2B, 8), mask (2B, 7): the chosen completions (rows :B) above the rejected (rows B:),
        in the layout of :func:`mlbook.posttraining.task.batch`
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..models.decoder import Decoder
from ..nn.optim import Optimizer, OptimizerConfig
from ..validation import (
    distribution,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    positive,
    positive_int,
    same_shape,
    shape_is,
)
from . import task

__all__ = [
    "kl_objective",
    "optimal_policy",
    "optimal_policy_naive",
    "log_partition",
    "implicit_reward",
    "dpo_loss",
    "dpo_loss_naive",
    "dpo_grad",
    "bradley_terry_pairs",
    "tabular_dpo",
    "preference_data",
    "train_dpo",
    "sampled_log_ratios",
]


def kl_objective(pi: torch.Tensor, pi0: torch.Tensor, r: torch.Tensor, beta: float):
    """(...,) J(pi) = E_pi[r] - beta KL(pi || pi0) on a discrete space. Implements eq. 36.1.

    pi, pi0: (..., Y) distributions (pi0 > 0 where pi > 0); r: (..., Y) rewards; beta > 0.
    """
    distribution(pi, "pi")
    distribution(pi0, "pi0")
    same_shape(pi, pi0, ("pi", "pi0"))
    same_shape(pi, r, ("pi", "r"))
    beta = positive(beta, "beta")
    log_ratio = torch.where(pi > 0, pi.log() - pi0.log(), torch.zeros_like(pi))  # 0 log 0 = 0
    return (pi * r).sum(-1) - beta * (pi * log_ratio).sum(-1)


def optimal_policy(pi0: torch.Tensor, r: torch.Tensor, beta: float) -> torch.Tensor:
    """(..., Y) pi*(y) = pi0(y) exp(r(y) / beta) / Z, as a softmax of log pi0 + r / beta (no
    overflow for small beta). Implements eq. 36.2."""
    distribution(pi0, "pi0")
    same_shape(pi0, r, ("pi0", "r"))
    return torch.softmax(pi0.log() + r / positive(beta, "beta"), dim=-1)


def optimal_policy_naive(pi0: torch.Tensor, r: torch.Tensor, beta: float) -> torch.Tensor:
    """:func:`optimal_policy` as written, pi0 exp(r / beta) / sum (overflows for small beta)."""
    distribution(pi0, "pi0")
    same_shape(pi0, r, ("pi0", "r"))
    tilted = pi0 * torch.exp(r / positive(beta, "beta"))
    return tilted / tilted.sum(-1, keepdim=True)


def log_partition(pi0: torch.Tensor, r: torch.Tensor, beta: float) -> torch.Tensor:
    """(...,) beta log Z = beta log sum_y pi0(y) exp(r(y) / beta): the optimum of eq. 36.1."""
    distribution(pi0, "pi0")
    same_shape(pi0, r, ("pi0", "r"))
    beta = positive(beta, "beta")
    return beta * torch.logsumexp(pi0.log() + r / beta, dim=-1)


def implicit_reward(logp: torch.Tensor, logp_ref: torch.Tensor, beta: float) -> torch.Tensor:
    """beta log(pi(y) / pi0(y)), the reward for which pi is optimal, up to the constant
    beta log Z (which every comparison of two outcomes cancels). Implements eq. 36.3.

    logp, logp_ref: log-probabilities of the same outcomes under pi and pi0, same shape.
    """
    same_shape(logp, logp_ref, ("logp", "logp_ref"))
    return positive(beta, "beta") * (logp - logp_ref)


def _pair_args(logp_w, logp_l, ref_w, ref_l, beta):
    float_tensor(logp_w, "logp_w", ndim=1, not_empty=True)
    for t, name in ((logp_l, "logp_l"), (ref_w, "ref_w"), (ref_l, "ref_l")):
        same_shape(logp_w, t, ("logp_w", name))
    return positive(beta, "beta")


def dpo_loss(logp_w, logp_l, ref_w, ref_l, beta: float, weight=None) -> torch.Tensor:
    """() mean over the B pairs of -log sigma(r_w - r_l), with the implicit rewards of eq. 36.3.
    Implements eq. 36.4.

    logp_w, logp_l: (B,) log pi of the chosen and rejected outcomes; ref_w, ref_l: (B,) the same
    under the reference; beta > 0; weight: optional (B,) counts of each pair (a weighted mean).
    """
    beta = _pair_args(logp_w, logp_l, ref_w, ref_l, beta)
    margin = implicit_reward(logp_w, ref_w, beta) - implicit_reward(logp_l, ref_l, beta)  # (B,)
    if weight is None:
        return -F.logsigmoid(margin).mean()
    same_shape(logp_w, weight, ("logp_w", "weight"))
    return -(weight * F.logsigmoid(margin)).sum() / weight.sum()


def dpo_loss_naive(logp_w, logp_l, ref_w, ref_l, beta: float) -> torch.Tensor:
    """:func:`dpo_loss` pair by pair in Python floats: -log(1 / (1 + exp(-margin)))."""
    beta = _pair_args(logp_w, logp_l, ref_w, ref_l, beta)
    total = 0.0
    rows = zip(logp_w.tolist(), logp_l.tolist(), ref_w.tolist(), ref_l.tolist(), strict=True)
    for lw, ll, rw, rl in rows:
        margin = beta * (lw - rw) - beta * (ll - rl)
        total += -math.log(1.0 / (1.0 + math.exp(-margin)))
    return torch.tensor(total / len(logp_w), dtype=torch.float64)


def dpo_grad(logp_w, logp_l, ref_w, ref_l, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,), (B,) the derivatives of :func:`dpo_loss` with respect to logp_w and logp_l:
    -beta sigma(r_l - r_w) / B and its negative. Implements eq. 36.5 (the chain rule through
    log pi then gives the gradient in the parameters)."""
    beta = _pair_args(logp_w, logp_l, ref_w, ref_l, beta)
    weight = torch.sigmoid(beta * (logp_l - ref_l) - beta * (logp_w - ref_w))  # (B,)
    g_w = -beta * weight / len(logp_w)
    return g_w, -g_w


def bradley_terry_pairs(
    r: torch.Tensor, n: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` labelled pairs over a discrete space: two distinct outcomes drawn uniformly, the
    first preferred with probability sigma(r_i - r_j) (the Bradley-Terry model).

    r: (Y,) true rewards, Y >= 2. Returns winners, losers: (n,) int64 outcome ids.
    """
    float_tensor(r, "r", ndim=1, all_finite=True)
    Y, n = integer(r.shape[0], "len(r)", low=2), positive_int(n, "n")
    i = torch.randint(Y, (n,), generator=generator)
    j = (i + torch.randint(1, Y, (n,), generator=generator)) % Y  # (n,) uniform over j != i
    first = torch.rand(n, generator=generator, dtype=r.dtype) < torch.sigmoid(r[i] - r[j])
    return torch.where(first, i, j), torch.where(first, j, i)


def tabular_dpo(
    winners: torch.Tensor,
    losers: torch.Tensor,
    pi0: torch.Tensor,
    beta: float,
    steps: int = 300,
    lr: float = 0.05,
) -> torch.Tensor:
    """DPO on a tabular softmax policy pi = softmax(theta), started at pi0, full-batch Adam
    (the loss of all B pairs, each distinct pair once with its count as weight).

    winners, losers: (B,) outcome ids; pi0: (Y,) reference. Returns (steps + 1, Y): the policy
    before the first step and after each one.
    """
    Y = distribution(pi0, "pi0").shape[-1]
    index_tensor(nonempty(winners, "winners"), "winners", Y, ndim=1)
    index_tensor(losers, "losers", Y, ndim=1)
    same_shape(winners, losers, ("winners", "losers"))
    pairs, count = torch.unique(torch.stack([winners, losers], 1), dim=0, return_counts=True)
    w, l, count = pairs[:, 0], pairs[:, 1], count.to(pi0.dtype)  # distinct (w, l), their counts
    theta = pi0.log().clone().requires_grad_(True)  # (Y,) logits
    opt = Optimizer([theta], OptimizerConfig(kind="adam", lr=positive(lr, "lr")))
    log_pi0 = pi0.log()
    history = [pi0.clone()]
    for _ in range(positive_int(steps, "steps")):
        logp = torch.log_softmax(theta, -1)
        loss = dpo_loss(logp[w], logp[l], log_pi0[w], log_pi0[l], beta, weight=count)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(torch.softmax(theta.detach(), -1))
    return torch.stack(history)


def preference_data(
    model: Decoder,
    pairs: Sequence[tuple[int, int]],
    n_samples: int = 16,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """Preference pairs on the addition task: chosen = the right sum, rejected = the first wrong
    sum (one or two digits) among ``n_samples`` completions sampled from ``model`` at tau = 1.
    A problem whose samples hold no wrong sum gives no pair.

    Returns tokens (2B, 8), mask (2B, 7) (chosen rows first) and the B problems kept.
    """
    n_samples = positive_int(n_samples, "n_samples")
    with torch.no_grad():
        tokens, _ = task.sample(model, pairs, n_samples, 1.0, generator)
    said = task.answers(tokens)  # problem-major, n_samples each
    kept, rejected = [], []
    for p, (a, b) in enumerate(pairs):
        wrong = [
            s
            for s in said[p * n_samples : (p + 1) * n_samples]
            if s.isdigit() and len(s) <= 2 and int(s) != a + b
        ]
        if wrong:
            kept.append((a, b))
            rejected.append(wrong[0])
    if not kept:
        raise ValueError("no sample was a wrong sum: there is nothing to reject")
    chosen_t, chosen_m = task.batch(kept)
    rejected_t, rejected_m = task.batch(kept, rejected)
    return torch.cat([chosen_t, rejected_t]), torch.cat([chosen_m, rejected_m]), kept


def train_dpo(
    policy: Decoder,
    reference: Decoder,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    beta: float = 0.1,
    steps: int = 20,
    lr: float = 1e-3,
    nll_weight: float = 0.0,
) -> dict[str, list[float]]:
    """Full-batch DPO (eq. 36.4) of ``policy`` against the frozen ``reference`` with Adam, plus
    ``nll_weight`` times the mean negative log-likelihood of the chosen completions.

    tokens (2B, 8), mask (2B, 7): from :func:`preference_data`. Returns per step the loss, the
    mean implicit reward margin r_w - r_l and the mean log pi / pi0 of the chosen and of the
    rejected completions (before the step's update).
    """
    shape_is(mask, "mask", (tokens.shape[0], tokens.shape[1] - 1))
    B = tokens.shape[0] // 2
    nll_weight = number(nll_weight, "nll_weight", 0.0)
    with torch.no_grad():
        ref = task.completion_log_probs(reference, tokens, mask)  # (2B,)
    opt = Optimizer(
        [p for p in policy.parameters() if p.requires_grad], OptimizerConfig("adam", lr=lr)
    )
    hist: dict[str, list[float]] = {"loss": [], "margin": [], "chosen": [], "rejected": []}
    policy.train()
    for _ in range(positive_int(steps, "steps")):
        logp = task.completion_log_probs(policy, tokens, mask)  # (2B,)
        loss = dpo_loss(logp[:B], logp[B:], ref[:B], ref[B:], beta)
        total = loss - nll_weight * logp[:B].mean()
        opt.zero_grad()
        total.backward()
        opt.step()
        ratio = (logp - ref).detach()  # (2B,) log pi / pi0
        hist["loss"].append(loss.item())
        hist["margin"].append(beta * (ratio[:B] - ratio[B:]).mean().item())
        hist["chosen"].append(ratio[:B].mean().item())
        hist["rejected"].append(ratio[B:].mean().item())
    policy.eval()
    return hist


@torch.no_grad()
def sampled_log_ratios(
    policy: Decoder,
    reference: Decoder,
    pairs: Sequence[tuple[int, int]],
    n: int = 16,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Completions sampled from ``policy`` (tau = 1), ``n`` per problem, with their
    log pi(y|x) - log pi0(y|x) (whose mean estimates KL(pi || pi0)), rewards and texts.

    Returns log_ratio (B,), rewards (B,), answers: B = n len(pairs), problem-major.
    """
    tokens, mask = task.sample(policy, pairs, n, 1.0, generator)
    log_ratio = task.completion_log_probs(policy, tokens, mask) - task.completion_log_probs(
        reference, tokens, mask
    )
    return log_ratio, task.rewards(tokens), task.answers(tokens)
