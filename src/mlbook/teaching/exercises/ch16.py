"""Checks of the exercises of chapter 16 (normalisation, residuals, dropout and precision).

The references are independent of the reader's answer and of :mod:`mlbook.nn.normalization`,
:mod:`mlbook.nn.precision` and :mod:`mlbook.nn.dropout`: gradients by autograd through
``F.layer_norm`` and ``F.batch_norm``, the two bfloat16 neighbours of a float32 from torch's own
cast and ``torch.nextafter``, and the moments of a dropout unit by exact enumeration of all masks
and by Monte Carlo through ``F.dropout``.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64
EPS = 1e-5


# --------------------------------------------------------------------------- 16.1


def _normalised_loss(W, X, y, norm, unbiased=False):
    if norm == "layer":
        h = F.layer_norm(X, (X.shape[1],), eps=EPS)
    elif unbiased:  # a typical mistake: BatchNorm with the unbiased batch variance
        h = (X - X.mean(0)) / torch.sqrt(X.var(0, unbiased=True) + EPS)
    else:
        h = F.batch_norm(X, None, None, training=True, eps=EPS)
    return F.cross_entropy(h @ W.T, y)


def _accumulated(W, X, y, S, norm, unbiased=False):
    """(1/S) sum_s grad L_s by autograd, each micro-batch normalised on its own."""
    Wr = W.clone().requires_grad_(True)
    total = torch.zeros_like(W)
    for Xs, ys in zip(X.chunk(S), y.chunk(S), strict=True):
        (g,) = torch.autograd.grad(_normalised_loss(Wr, Xs, ys, norm, unbiased), Wr)
        total += g
    return total / S


@exercise("16.1", "accumulated_grad")
def accumulated_grad(answer) -> str:
    """Accumulated micro-batch gradients against autograd, for LayerNorm and BatchNorm."""
    gen = torch.Generator().manual_seed(161)
    B, D, K = 64, 16, 10
    X = torch.randn(B, D, generator=gen, dtype=F64) * 3 + 1
    y = torch.randint(0, K, (B,), generator=gen)
    W = 0.1 * torch.randn(K, D, generator=gen, dtype=F64)
    for norm, S in [("layer", 1), ("layer", 4), ("batch", 1), ("batch", 4), ("batch", 8)]:
        want = _accumulated(W, X, y, S, norm)
        full = _accumulated(W, X, y, 1, norm)
        other = "batch" if norm == "layer" else "layer"
        wrong = {
            "missing the division by S: summing the S micro-batch gradients gives S times the "
            "mean gradient (eq. 16.5)": S * want,
            "each micro-batch loss must be the mean over its own examples, not the sum": (B // S)
            * want,
            f"normalised over the wrong axis: {norm!r} standardises over "
            + (
                "the features of each example" if norm == "layer" else "the examples of the batch"
            ): _accumulated(W, X, y, S, other),
            "the normalisation layer is missing: the logits are norm(X) @ W.T": _accumulated_plain(
                W, X, y, S
            ),
        }
        if norm == "batch":
            wrong[
                "BatchNorm in training mode divides by the biased variance of the batch "
                "(1/B, not 1/(B - 1))"
            ] = _accumulated(W, X, y, S, norm, unbiased=True)
            if S > 1:
                wrong[
                    "that is the full-batch gradient: in training mode each micro-batch is "
                    "normalised with its own mean and variance"
                ] = full
        if norm == "layer" or S == 1:
            expect(torch.allclose(want, full, atol=1e-13, rtol=0), "internal: reference broken")
        else:
            expect(bool((want - full).norm() > 1e-3 * full.norm()), "internal: reference broken")
        expect_answer(
            attempt(answer, W.clone(), X.clone(), y.clone(), S, norm),
            want,
            f"accumulated_grad(W, X, y, S={S}, norm={norm!r})",
            wrong=wrong,
            atol=1e-12,
            rtol=1e-9,
        )
    return (
        "matches autograd for LayerNorm (S = 1, 4: equal to the full-batch gradient) and "
        "BatchNorm (S = 1, 4, 8: different from it for S > 1)"
    )


def _accumulated_plain(W, X, y, S):
    Wr = W.clone().requires_grad_(True)
    total = torch.zeros_like(W)
    for Xs, ys in zip(X.chunk(S), y.chunk(S), strict=True):
        total += torch.autograd.grad(F.cross_entropy(Xs @ Wr.T, ys), Wr)[0]
    return total / S


# --------------------------------------------------------------------------- 16.2


def _neighbours(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bfloat16 numbers just below and just above each float32 (equal if x is one)."""
    near = x.to(torch.bfloat16)  # torch's round-to-nearest
    toward = torch.where(
        near.float() < x, torch.full_like(near, math.inf), torch.full_like(near, -math.inf)
    )
    other = torch.nextafter(near, toward)  # the neighbour on x's other side
    exact = near.float() == x
    lo = torch.where(exact | (near.float() < x), near, other).float()
    hi = torch.where(exact | (near.float() > x), near, other).float()
    return lo, hi


@exercise("16.2", "stochastic_round_bf16")
def stochastic_round_bf16(answer) -> str:
    """Rounding-up frequencies of float32 values against (x - a)/Δ; 2000 SR updates of 1e-3."""
    values = torch.tensor([1.001, -2.74, 3.3e-3, 1000.7, -0.3, 7.77e5, 1.0, -2.5, 0.0])
    n = 20_000
    x = values.expand(n, -1).contiguous()  # (n, 9) float32
    out = attempt(answer, x.clone(), torch.Generator().manual_seed(162))
    expect(
        isinstance(out, torch.Tensor),
        f"stochastic_round_bf16 should return a tensor, got {type(out).__name__}",
    )
    expect(
        out.dtype == torch.float32,
        f"stochastic_round_bf16 should return float32 (holding bfloat16 numbers), got {out.dtype}",
    )
    expect(
        tuple(out.shape) == tuple(x.shape),
        f"stochastic_round_bf16(x) should have x's shape {tuple(x.shape)}, got {tuple(out.shape)}",
    )
    expect(bool(torch.isfinite(out).all()), "stochastic_round_bf16(x) contains nan or inf")
    expect(
        bool((out.to(torch.bfloat16).float() == out).all()),
        "some outputs are not bfloat16 numbers: their low 16 bits must be zero",
    )
    lo, hi = _neighbours(values)
    exact = lo == hi
    expect(
        bool((out[:, exact] == values[exact]).all()),
        "a number that bfloat16 holds exactly (1, -2.5, 0) must come back unchanged",
    )
    expect(
        bool(((out == lo) | (out == hi)).all()),
        "some outputs are not one of the two bfloat16 neighbours of x",
    )
    inexact = ~exact
    q = ((values.double() - lo.double()) / (hi.double() - lo.double()))[inexact]
    up = (out[:, inexact] == hi[inexact]).double().mean(0)  # frequency of rounding up
    expect_answer(
        up,
        q,
        "the frequency of rounding up for x = 1.001, -2.74, 3.3e-3, 1000.7, -0.3, 7.77e5",
        wrong={
            "that is round-to-nearest: it is deterministic, so its error repeats at every step": (
                q > 0.5
            ).double(),
            "that is truncation: it always rounds towards zero": (values[inexact] < 0).double(),
            "rounding up must have probability (x - a)/Δ, not 1/2": torch.full_like(q, 0.5),
            "the probabilities are swapped: x close to the neighbour a below should mostly round "
            "down to a": 1 - q,
            "the random integer must cover all 2^16 values of the low bits": torch.where(
                values[inexact] > 0, (2 * q - 1).clamp(min=0), (2 * q).clamp(max=1)
            ),
        },
        atol=0.02,
    )
    # the experiment: 2000 updates of 1e-3 to w = 1, stochastic rounding after every step
    runs, steps, u = 200, 2000, 1e-3
    g = torch.Generator().manual_seed(1620)
    w = torch.ones(runs)
    for _ in range(steps):
        w = attempt(answer, w + u, g)
        expect(
            isinstance(w, torch.Tensor) and tuple(w.shape) == (runs,),
            "stochastic_round_bf16 changed the shape of its input",
        )
    w = as_tensor(w, "the final weights", (runs,))
    se = float(w.std()) / math.sqrt(runs)
    exact_final = 1 + steps * u
    if abs(float(w.mean()) - exact_final) > 4 * se + 1e-3:
        raise Incorrect(
            f"after {steps} updates of {u:g} the mean weight over {runs} runs is "
            f"{float(w.mean()):.4f}, more than 4 standard errors from 1 + n u = "
            f"{exact_final:g}: the rounding is biased"
        )
    return (
        "rounds up with probability (x - a)/Δ for 6 float32 values of both signs, keeps "
        "bfloat16 numbers, and 2000 SR updates of 1e-3 reach 1 + n u on average"
    )


# --------------------------------------------------------------------------- 16.3


def _exact_moments(w, x, p):
    """E[y], Var[y] over all 2^D keep/drop masks, each weighted by its probability."""
    D = w.numel()
    masks = torch.tensor(list(itertools.product((0.0, 1.0), repeat=D)), dtype=F64)  # (2^D, D)
    prob = ((1 - p) ** masks.sum(1)) * (p ** (D - masks.sum(1)))  # (2^D,)
    ys = (masks[None] * x[:, None, :] / (1 - p)) @ w  # (B, 2^D)
    mean = ys @ prob
    return mean, ((ys - mean[:, None]) ** 2) @ prob


def _wrong_moments(w, x, p):
    mean = x @ w
    var = (x**2) @ w**2 * p / (1 - p)
    return {
        "inverted dropout divides the survivors by 1 - p, so the mean is unchanged: E[y] = w^T x": (
            (1 - p) * mean,
            var,
        ),
        "the variance lacks the inverted scaling: Var[m x / (1 - p)] = x^2 p / (1 - p), "
        "not x^2 p (1 - p)": (mean, (x**2) @ w**2 * p * (1 - p)),
        "p is the drop probability: the variance of a unit is x^2 p / (1 - p)": (
            mean,
            (x**2) @ w**2 * (1 - p) / p,
        ),
        "the masks are independent, so the variances of the units add: sum_j w_j^2 x_j^2 "
        "p/(1 - p), not (w^T x)^2 p/(1 - p)": (mean, mean**2 * p / (1 - p)),
        "Var[w_j d_j] = w_j^2 Var[d_j]: the weights enter squared": (
            mean,
            (x**2) @ w * p / (1 - p),
        ),
        "a variance of 0 is evaluation mode; in training the masks add noise": (mean, 0 * var),
    }


def _mean_var(result, what, B):
    mean, var = expect_tuple(result, what, ("mean", "var"))
    return as_tensor(mean, f"the mean of {what}", (B,)), as_tensor(
        var, f"the variance of {what}", (B,)
    )


def _expect_moments(got, want, what, wrong, atol_mean, atol_var):
    mean, var = got
    for part, i, atol in (("mean", 0, atol_mean), ("variance", 1, atol_var)):
        wrong_i = {
            k: v[i]
            for k, v in wrong.items()
            if not torch.allclose(v[i], want[i], atol=atol, rtol=0)
        }
        expect_answer(
            (mean, var)[i], want[i], f"the {part} of {what}", wrong=wrong_i, atol=atol, rtol=0
        )


@exercise("16.3", "dropout_linear_moments")
def dropout_linear_moments(answer) -> str:
    """E[y], Var[y] of a linear unit after dropout: exact over all masks, and Monte Carlo."""
    gen = torch.Generator().manual_seed(163)
    w = torch.randn(10, generator=gen, dtype=F64)
    x = torch.randn(3, 10, generator=gen, dtype=F64)
    for p in (0.3, 0.5, 0.9):
        want = _exact_moments(w, x, p)
        what = f"dropout_linear_moments(w, x, p={p}) with D = 10"
        got = _mean_var(attempt(answer, w.clone(), x.clone(), p), what, 3)
        _expect_moments(got, want, what, _wrong_moments(w, x, p), 1e-10, 1e-10)
    # Monte Carlo through torch's own F.dropout, D = 20, p = 0.3
    p, n = 0.3, 200_000
    w20 = torch.randn(20, generator=gen, dtype=F64)
    x20 = torch.randn(2, 20, generator=gen, dtype=F64)
    torch.manual_seed(1630)  # F.dropout draws from the global generator
    ys = torch.stack([F.dropout(row.expand(n, 20), p=p, training=True) @ w20 for row in x20])
    mc_mean, mc_var = ys.mean(1), ys.var(1)  # (2,), (2,)
    se_mean = ys.std(1) / math.sqrt(n)
    se_var = ((ys - mc_mean[:, None]) ** 2).std(1) / math.sqrt(n)
    what = "dropout_linear_moments(w, x, p=0.3) with D = 20"
    got = _mean_var(attempt(answer, w20.clone(), x20.clone(), p), what, 2)
    for part, i, mc, se in (("mean", 0, mc_mean, se_mean), ("variance", 1, mc_var, se_var)):
        z = ((got[i] - mc).abs() / se).max()
        expect(
            bool(z < 4),
            f"the {part} of {what} is more than 4 standard errors from the "
            f"Monte Carlo estimate over {n} masks of F.dropout",
        )
    return (
        "E[y] = w^T x and Var[y] = p/(1-p) sum_j w_j^2 x_j^2 match the exact moments over "
        "all 2^10 masks (p = 0.3, 0.5, 0.9) and F.dropout by Monte Carlo (D = 20, p = 0.3)"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


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


MISTAKES = {
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
