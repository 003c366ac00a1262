"""Typical wrong answers to the exercises of chapter 16 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
import torch.nn.functional as F
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


# 16.1 ---------------------------------------------------------------------------------------


def _grad(W, X, y, S, normalise, divide=True, reduction="mean"):
    Wr = W.clone().requires_grad_(True)
    total = torch.zeros_like(W)
    for Xs, ys in zip(X.chunk(S), y.chunk(S), strict=True):
        loss = F.cross_entropy(normalise(Xs) @ Wr.T, ys, reduction=reduction)
        total += torch.autograd.grad(loss, Wr)[0]
    return total / S if divide else total


def _norm(kind):
    if kind == "layer":
        return lambda X: (
            (X - X.mean(1, keepdim=True))
            / torch.sqrt(X.var(1, unbiased=False, keepdim=True) + 1e-5)
        )
    return lambda X: (X - X.mean(0)) / torch.sqrt(X.var(0, unbiased=False) + 1e-5)


def acc_no_division(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm(norm), divide=False)


def acc_full_batch_statistics(W, X, y, S, norm):
    return _grad(W, X, y, 1, _norm(norm))


def acc_unbiased_batch_variance(W, X, y, S, norm):
    if norm == "layer":
        return _grad(W, X, y, S, _norm(norm))
    return _grad(W, X, y, S, lambda X: (X - X.mean(0)) / torch.sqrt(X.var(0) + 1e-5))


def acc_axes_swapped(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm("batch" if norm == "layer" else "layer"))


def acc_sum_loss(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm(norm), reduction="sum")


def acc_no_norm(W, X, y, S, norm):
    return _grad(W, X, y, S, lambda X: X)


# 16.2 ---------------------------------------------------------------------------------------


def sr_round_to_nearest(x, g):
    return x.to(torch.bfloat16).float()


def sr_truncate(x, g):
    return (x.view(torch.int32) & -(2**16)).view(torch.float32)


def sr_coin_flip(x, g):
    down = sr_truncate(x, g)
    up = torch.nextafter(
        down.to(torch.bfloat16),
        torch.where(x >= 0, torch.tensor(float("inf")), torch.tensor(float("-inf"))).to(
            torch.bfloat16
        ),
    ).float()
    exact = down == x
    coin = torch.rand(x.shape, generator=g) < 0.5
    return torch.where(exact | ~coin, down, up)


def sr_swapped(x, g):
    bits = x.view(torch.int32)
    low = bits & (2**16 - 1)
    noise = torch.randint(0, 2**16, x.shape, generator=g, dtype=torch.int32)
    carry = (low > 0) & (noise < 2**16 - low)  # probability 1 - low / 2^16
    return ((bits & -(2**16)) + carry.int() * 2**16).view(torch.float32)


def sr_half_noise(x, g):
    noise = torch.randint(0, 2**15, x.shape, generator=g, dtype=torch.int32)
    return ((x.view(torch.int32) + noise) & -(2**16)).view(torch.float32)


def sr_bfloat16_dtype(x, g):
    return _ref("16.2", "stochastic_round_bf16")(x, g).to(torch.bfloat16)


def sr_no_rounding(x, g):
    return x.clone()


# 16.3 ---------------------------------------------------------------------------------------


def moments_scaled_mean(w, x, p):
    mean, var = _ref("16.3", "dropout_linear_moments")(w, x, p)
    return (1 - p) * mean, var


def moments_not_inverted(w, x, p):
    return x @ w, (x**2) @ w**2 * p * (1 - p)


def moments_keep_probability(w, x, p):
    return x @ w, (x**2) @ w**2 * (1 - p) / p


def moments_correlated(w, x, p):
    return x @ w, (x @ w) ** 2 * p / (1 - p)


def moments_weights_not_squared(w, x, p):
    return x @ w, (x**2) @ w * p / (1 - p)


def moments_eval_mode(w, x, p):
    return x @ w, torch.zeros(x.shape[0], dtype=x.dtype)


def moments_single_tensor(w, x, p):
    return torch.stack(_ref("16.3", "dropout_linear_moments")(w, x, p))


WRONG = {
    "16.1": [
        (acc_no_division, "missing the division by S"),
        (acc_full_batch_statistics, "that is the full-batch gradient"),
        (acc_unbiased_batch_variance, "biased variance"),
        (acc_axes_swapped, "normalised over the wrong axis"),
        (acc_sum_loss, "not the sum"),
        (acc_no_norm, "normalisation layer is missing"),
    ],
    "16.2": [
        (sr_round_to_nearest, "that is round-to-nearest"),
        (sr_truncate, "that is truncation"),
        (sr_coin_flip, "not 1/2"),
        (sr_swapped, "probabilities are swapped"),
        (sr_half_noise, "all 2^16 values"),
        (sr_bfloat16_dtype, "should return float32"),
        (sr_no_rounding, "not bfloat16 numbers"),
    ],
    "16.3": [
        (moments_scaled_mean, "the mean is unchanged"),
        (moments_not_inverted, "lacks the inverted scaling"),
        (moments_keep_probability, "p is the drop probability"),
        (moments_correlated, "variances of the units add"),
        (moments_weights_not_squared, "weights enter squared"),
        (moments_eval_mode, "evaluation mode"),
        (moments_single_tensor, "should return a pair (mean, var)"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
