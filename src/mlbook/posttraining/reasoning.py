"""Spending compute at inference: best-of-n, majority vote, chains of thought (chapter 38).

n independent samples of a model, each right with probability p, are turned into one answer in
two ways: a verifier picks a right one if there is one (best-of-n, eq. 38.4), or the answers vote
(eq. 38.5 for a binary right/wrong vote: more than n/2 right). :func:`plurality_vote` is the vote
over answer values that self-consistency uses; with many different wrong answers it can win with
fewer than n/2 right ones. A chain of thought is a latent variable Z between a question X and an
answer Y: P(Y | X) = sum_Z P(Y | Z, X) P(Z | X) (:func:`answer_marginal`), and a vote over sampled
chains estimates the mode of that marginal. :func:`sum_chain_model` is a small model of the sum
a + b + c through an intermediate partial sum, where every sum can be done exactly.

Shape legend
    p (...) probability that one sample is right;  n samples per question (an int)
    G groups (questions, or repeated draws);  answers (G, n) int ids of the sampled answers
    Z chain values;  Y answer values;  p_z (..., Z) = P(Z | X);  p_y_z (..., Z, Y) = P(Y | Z, X)
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import torch

from ..validation import distribution, float_tensor, index_tensor, positive_int, unit_interval

__all__ = [
    "best_of_n",
    "best_of_n_naive",
    "majority_vote",
    "majority_vote_naive",
    "plurality_vote",
    "plurality_vote_naive",
    "answer_marginal",
    "answer_marginal_naive",
    "sample_chains",
    "sum_chain_model",
]

_ENUMERATE_MAX = 16  # the naive references list all 2^n outcomes


def _probs(p) -> torch.Tensor:
    """p as a float64 tensor with every entry in [0, 1] (NaN refused)."""
    t = torch.as_tensor(p, dtype=torch.float64)
    return unit_interval(t, "p")


def best_of_n(n: int, p) -> torch.Tensor:
    """P(at least one of n samples is right) = 1 - (1 - p)^n. Implements eq. 38.4.

    n: samples, an int >= 1; p: (...) probabilities (a number, array or tensor). Returns (...)
    float64; computed as -expm1(n log1p(-p)), accurate also for tiny p."""
    n, p = positive_int(n, "n"), _probs(p)
    return -torch.expm1(n * torch.log1p(-p))


def best_of_n_naive(n: int, p) -> torch.Tensor:
    """Eq. 38.4 by listing all 2^n right/wrong outcomes and adding up those with a right one
    (n <= 16)."""
    n, p = positive_int(n, "n"), _probs(p)
    if n > _ENUMERATE_MAX:
        raise ValueError(f"n must be <= {_ENUMERATE_MAX} to list 2^n outcomes, got {n}")
    total = torch.zeros_like(p)
    for outcome in itertools.product((0, 1), repeat=n):
        k = sum(outcome)
        if k >= 1:
            total = total + p**k * (1 - p) ** (n - k)
    return total


def majority_vote(n: int, p) -> torch.Tensor:
    """P(more than n/2 of n samples are right) = sum_{k > n/2} C(n, k) p^k (1 - p)^(n - k).
    Implements eq. 38.5. A tie (k = n/2, n even) counts as a loss.

    n: an int >= 1; p: (...) probabilities. Returns (...) float64."""
    n, p = positive_int(n, "n"), _probs(p)
    k = torch.arange(n // 2 + 1, n + 1, dtype=torch.float64)  # (K,) the winning counts k > n/2
    log_comb = math.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)  # (K,)
    pk = p[..., None]  # (..., 1)
    log_terms = log_comb + torch.xlogy(k, pk) + torch.xlogy(n - k, 1 - pk)  # (..., K), 0 log 0 = 0
    return torch.exp(log_terms).sum(-1)


def majority_vote_naive(n: int, p) -> torch.Tensor:
    """Eq. 38.5 by listing all 2^n outcomes and adding up those with more than n/2 right
    (n <= 16)."""
    n, p = positive_int(n, "n"), _probs(p)
    if n > _ENUMERATE_MAX:
        raise ValueError(f"n must be <= {_ENUMERATE_MAX} to list 2^n outcomes, got {n}")
    total = torch.zeros_like(p)
    for outcome in itertools.product((0, 1), repeat=n):
        k = sum(outcome)
        if 2 * k > n:
            total = total + p**k * (1 - p) ** (n - k)
    return total


def plurality_vote(answers: torch.Tensor) -> torch.Tensor:
    """The most frequent answer of each group; a tie goes to the tied answer seen first.

    answers: (G, n) int ids >= 0. Returns (G,) int64. With samples in random order the rule
    breaks ties at random."""
    index_tensor(answers, "answers", ndim=2)
    a = answers.long()
    counts = torch.zeros(a.shape[0], int(a.max()) + 1, dtype=torch.long)  # (G, A)
    counts.scatter_add_(1, a, torch.ones_like(a))
    count_of_each = counts.gather(1, a)  # (G, n): how often sample j's answer occurs
    first = (count_of_each == count_of_each.max(1, keepdim=True).values).long().argmax(1)  # (G,)
    return a.gather(1, first[:, None])[:, 0]


def plurality_vote_naive(answers) -> list:
    """The same vote with ``collections.Counter``, one group (a list of hashable answers) at a
    time: ``most_common`` lists tied answers in the order they were first seen."""
    return [Counter(list(row)).most_common(1)[0][0] for row in answers]


def answer_marginal(p_z: torch.Tensor, p_y_z: torch.Tensor) -> torch.Tensor:
    """P(Y | X) = sum_Z P(Y | Z, X) P(Z | X): the answer's distribution with the chain summed
    out, a matrix product.

    p_z: (..., Z) rows summing to 1; p_y_z: (..., Z, Y), each row P(. | z) summing to 1.
    Returns (..., Y)."""
    distribution(float_tensor(p_z, "p_z", min_ndim=1), "p_z")
    distribution(float_tensor(p_y_z, "p_y_z", min_ndim=2), "p_y_z")
    if p_y_z.shape[-2] != p_z.shape[-1]:
        raise ValueError(
            f"p_y_z has {p_y_z.shape[-2]} chain rows, p_z {p_z.shape[-1]} chain values"
        )
    return (p_z[..., None, :] @ p_y_z)[..., 0, :]  # (..., 1, Z) @ (..., Z, Y) -> (..., Y)


def answer_marginal_naive(p_z: torch.Tensor, p_y_z: torch.Tensor) -> torch.Tensor:
    """The same sum for one question, chain by chain: p_z (Z,), p_y_z (Z, Y) -> (Y,)."""
    total = torch.zeros(p_y_z.shape[-1], dtype=p_y_z.dtype)
    for z in range(p_z.shape[0]):
        total = total + p_z[z] * p_y_z[z]
    return total


def sample_chains(
    p_z: torch.Tensor, p_y_z: torch.Tensor, n: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """n chains of one question, ancestrally: z ~ P(Z | X), then y ~ P(Y | z, X).

    p_z: (Z,); p_y_z: (Z, Y). Returns z, y: (n,) int64 each."""
    distribution(float_tensor(p_z, "p_z", ndim=1), "p_z")
    distribution(float_tensor(p_y_z, "p_y_z", ndim=2), "p_y_z")
    z = torch.multinomial(p_z, positive_int(n, "n"), replacement=True, generator=generator)
    y = torch.multinomial(p_y_z[z], 1, generator=generator)[:, 0]  # (n,) one answer per chain
    return z, y


def sum_chain_model(
    a: int,
    b: int,
    c: int,
    route_probs=(0.5, 0.25, 0.25),
    slips=(0.6, 0.1, 0.1),
    final_error: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[str, int]]]:
    """A chain-of-thought model of a + b + c: first a partial sum, then the answer.

    The chain Z is (route, s): the route adds a + b, b + c or a + c first (with route_probs)
    and writes the partial sum s, one too large with probability slips[route]; the answer Y
    adds the remaining digit, off by one either way with probability final_error / 2 each.
    Digits a, b, c in 0..9. Returns p_z (Z,), p_y_z (Z, Y) with Z = 3 x 20 chains (s = 0..19)
    and Y = 30 answers (0..29), and the labels (route, s) of the chains.
    """
    for v, name in ((a, "a"), (b, "b"), (c, "c")):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 9:
            raise ValueError(f"{name} must be a digit 0..9, got {v!r}")
    routes = distribution(torch.tensor(route_probs, dtype=torch.float64), "route_probs")
    slip = unit_interval(torch.tensor(slips, dtype=torch.float64), "slips")
    eps = float(unit_interval(torch.tensor(final_error, dtype=torch.float64), "final_error"))
    if routes.shape != (3,) or slip.shape != (3,):
        raise ValueError("route_probs and slips need one entry per route (3)")
    first = ((a + b, c, "a+b"), (b + c, a, "b+c"), (a + c, b, "a+c"))  # (partial, rest, name)
    S, Y = 20, 30
    p_z = torch.zeros(3 * S, dtype=torch.float64)
    p_y_z = torch.zeros(3 * S, Y, dtype=torch.float64)
    labels = []
    for r, (partial, rest, name) in enumerate(first):
        p_z[r * S + partial] += routes[r] * (1 - slip[r])
        p_z[r * S + partial + 1] += routes[r] * slip[r]  # the slip: one too large
        for s in range(S):
            labels.append((name, s))
            y = s + rest
            p_y_z[r * S + s, y] = 1 - eps
            p_y_z[r * S + s, y + 1] = eps / 2
            p_y_z[r * S + s, y - 1 if y > 0 else y + 1] += eps / 2
    return p_z, p_y_z, labels
