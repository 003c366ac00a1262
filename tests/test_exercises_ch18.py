"""Typical wrong answers to the exercises of chapter 18 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import pytest
import torch
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


# 18.1 ---------------------------------------------------------------------------------------


def weight(counts, alpha):
    return _ref("18.1", "smoothing_weight")(counts, alpha)


def probs(counts, alpha):
    return _ref("18.1", "interpolated_probs")(counts, alpha)


def weight_swapped(counts, alpha):
    n = counts.sum(-1)
    return torch.where(n > 0, alpha * counts.shape[-1] / (n + alpha * counts.shape[-1]), 1.0)


def weight_without_V(counts, alpha):
    n = counts.sum(-1)
    return n / torch.where(n > 0, n + alpha, 1.0)


def weight_nan_unseen(counts, alpha):
    n = counts.sum(-1)
    return n / (n + alpha * counts.shape[-1])


def weight_keepdim(counts, alpha):
    return weight(counts, alpha)[..., None]


def weight_first_axis(counts, alpha):
    n = counts.sum(0)
    return n / torch.where(n > 0, n + alpha * counts.shape[-1], 1.0)


def probs_nan_unseen(counts, alpha):
    lam = weight(counts, alpha)[..., None]
    return lam * counts / counts.sum(-1, keepdim=True) + (1 - lam) / counts.shape[-1]


def probs_swapped(counts, alpha):
    lam = weight(counts, alpha)[..., None]
    ml = counts / counts.sum(-1, keepdim=True).clamp(min=1)
    return (1 - lam) * ml + lam / counts.shape[-1]


def probs_uniform_one(counts, alpha):
    lam = weight(counts, alpha)[..., None]
    ml = counts / counts.sum(-1, keepdim=True).clamp(min=1)
    return lam * ml + (1 - lam)


def probs_unsmoothed(counts, alpha):
    n = counts.sum(-1, keepdim=True)
    return torch.where(n > 0, counts / n.clamp(min=1), 1 / counts.shape[-1])


# 18.2 ---------------------------------------------------------------------------------------


def count(v, c, d, h):
    return _ref("18.2", "mlp_param_count")(v, c, d, h)


def crossover(v, d, h):
    return _ref("18.2", "first_larger_context")(v, d, h)


def count_no_biases(v, c, d, h):
    return v * d + c * d * h + h * v


def count_no_embeddings(v, c, d, h):
    return c * d * h + h + h * v + v


def count_one_hot_inputs(v, c, d, h):
    return v * d + c * v * h + h + h * v + v


def crossover_table_V_to_the_C(v, d, h):
    c = 1
    while v**c <= count(v, c, d, h):
        c += 1
    return c


def crossover_order(v, d, h):
    return crossover(v, d, h) + 1


def crossover_from_zero(v, d, h):
    c = 0
    while v ** (c + 1) <= count(v, c, d, h):
        c += 1
    return max(c - 1, 0)


# 18.3 ---------------------------------------------------------------------------------------


def entropy(z, tau):
    return _ref("18.3", "temperature_entropy")(z, tau)


def limits(z):
    return _ref("18.3", "entropy_limits")(z)


def entropy_naive(z, tau):
    p = torch.softmax(z / tau, -1)
    return -(p * torch.log(p)).sum()


def entropy_bits(z, tau):
    return entropy(z, tau) / math.log(2)


def entropy_times_tau(z, tau):
    return entropy(z, 1 / tau)


def entropy_no_tau(z, tau):
    return entropy(z, 1.0)


def entropy_perplexity(z, tau):
    return entropy(z, tau).exp()


def limits_ignore_ties(z):
    return 0.0, math.log(z.numel())


def limits_swapped(z):
    return tuple(reversed(limits(z)))


def limits_bits(z):
    return tuple(x / math.log(2) for x in limits(z))


def limits_V_minus_one(z):
    return limits(z)[0], math.log(z.numel() - 1)


WRONG = {
    "18.1": [
        ((weight_swapped, probs), "that is 1 - λ"),
        ((weight_without_V, probs), "not n_i + α"),
        ((weight_nan_unseen, probs), "not 0/0"),
        ((weight_keepdim, probs), "should have shape (29, 29)"),
        ((weight_first_axis, probs), "the last axis"),
        ((weight, probs_nan_unseen), "its distribution is uniform"),
        ((weight, probs_swapped), "λ and 1 - λ are swapped"),
        ((weight, probs_uniform_one), "1/V on each token"),
        ((weight, probs_unsmoothed), "unsmoothed counting estimate"),
    ],
    "18.2": [
        ((count_no_biases, crossover), "have biases"),
        ((count_no_embeddings, crossover), "the embedding table"),
        ((count_one_hot_inputs, crossover), "not C V H"),
        ((count, crossover_order), "one too large"),
        ((count, crossover_table_V_to_the_C), "V^(C+1) cells"),
        ((count, crossover_from_zero), "C starts at 1"),
    ],
    "18.3": [
        ((entropy_naive, limits), "compute log p with log_softmax"),
        ((entropy_bits, limits), "that is in bits"),
        ((entropy_times_tau, limits), "divide the logits by τ"),
        ((entropy_no_tau, limits), "the temperature is missing"),
        ((entropy_perplexity, limits), "the perplexity"),
        ((entropy, limits_ignore_ties), "tied for the maximum"),
        ((entropy, limits_swapped), "the limits are swapped"),
        ((entropy, limits_bits), "that is in bits"),
        ((entropy, limits_V_minus_one), "has entropy log V"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
