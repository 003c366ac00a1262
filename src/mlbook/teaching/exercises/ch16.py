"""Checks of the exercises of chapter 16 (normalisation, residuals, dropout and precision).

The references are independent of the reader's answer and of :mod:`mlbook.nn.normalization`,
:mod:`mlbook.nn.precision` and :mod:`mlbook.nn.dropout`: gradients by autograd through
``F.layer_norm`` and ``F.batch_norm``, the two bfloat16 neighbours of a float32 from torch's own
cast and ``torch.nextafter``, and the moments of a dropout unit by exact enumeration of all masks
and by Monte Carlo through ``F.dropout``; the predicted step factors from ``torch.optim``, RMSNorm's
gradients from autograd through ``F.rms_norm``, and BatchNorm's spread from ``F.batch_norm`` on the
same draws.

Each typical wrong answer is written once, as a function below its check, and serves both the
check's feedback and ``MISTAKES``.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from . import (
    Incorrect,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_guess,
    expect_tuple,
)
from . import reference_answer as _ref

F64 = torch.float64
EPS = 1e-5


# --------------------------------------------------------------------------- 16.1


def _normalised_loss(W, X, y, norm):
    if norm == "layer":
        h = F.layer_norm(X, (X.shape[1],), eps=EPS)
    else:
        h = F.batch_norm(X, None, None, training=True, eps=EPS)
    return F.cross_entropy(h @ W.T, y)


def _accumulated(W, X, y, S, norm):
    """(1/S) sum_s grad L_s by autograd through torch's layers, each micro-batch on its own."""
    Wr = W.clone().requires_grad_(True)
    total = torch.zeros_like(W)
    for Xs, ys in zip(X.chunk(S), y.chunk(S), strict=True):
        (g,) = torch.autograd.grad(_normalised_loss(Wr, Xs, ys, norm), Wr)
        total += g
    return total / S


def _grad(W, X, y, S, normalise, divide=True, reduction="mean"):
    """The typical mistakes' gradients, written out (their own standardisation)."""
    Wr = W.clone().requires_grad_(True)
    total = torch.zeros_like(W)
    for Xs, ys in zip(X.chunk(S), y.chunk(S), strict=True):
        loss = F.cross_entropy(normalise(Xs) @ Wr.T, ys, reduction=reduction)
        total += torch.autograd.grad(loss, Wr)[0]
    return total / S if divide else total


def _norm(kind, unbiased=False):
    dim = 1 if kind == "layer" else 0
    return lambda X: (
        (X - X.mean(dim, keepdim=True))
        / torch.sqrt(X.var(dim, unbiased=unbiased, keepdim=True) + EPS)
    )


def acc_no_division(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm(norm), divide=False)


def acc_sum_loss(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm(norm), reduction="sum")


def acc_axes_swapped(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm("batch" if norm == "layer" else "layer"))


def acc_no_norm(W, X, y, S, norm):
    return _grad(W, X, y, S, lambda X: X)


def acc_unbiased_batch_variance(W, X, y, S, norm):
    return _grad(W, X, y, S, _norm(norm, unbiased=norm == "batch"))


def acc_full_batch_statistics(W, X, y, S, norm):
    return _grad(W, X, y, 1, _norm(norm))


def _wrong_accumulations(norm):
    """(wrong answer, feedback) for one normalisation layer."""
    axis = "the features of each example" if norm == "layer" else "the examples of the batch"
    return [
        (
            acc_no_division,
            "missing the division by S: summing the S micro-batch gradients gives S times the "
            "mean gradient (eq. 16.5)",
        ),
        (
            acc_sum_loss,
            "each micro-batch loss must be the mean over its own examples, not the sum",
        ),
        (acc_axes_swapped, f"normalised over the wrong axis: {norm!r} standardises over {axis}"),
        (acc_no_norm, "the normalisation layer is missing: the logits are norm(X) @ W.T"),
        (
            acc_unbiased_batch_variance,
            "BatchNorm in training mode divides by the biased variance of the batch "
            "(1/B, not 1/(B - 1))",
        ),
        (
            acc_full_batch_statistics,
            "that is the full-batch gradient: in training mode each micro-batch is "
            "normalised with its own mean and variance",
        ),
    ]


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
        if norm == "layer" or S == 1:
            expect(torch.allclose(want, full, atol=1e-13, rtol=0), "internal: reference broken")
        else:
            expect(bool((want - full).norm() > 1e-3 * full.norm()), "internal: reference broken")
        expect_answer(
            attempt(answer, W.clone(), X.clone(), y.clone(), S, norm),
            want,
            f"accumulated_grad(W, X, y, S={S}, norm={norm!r})",
            wrong={fb: f(W, X, y, S, norm) for f, fb in _wrong_accumulations(norm)},
            atol=1e-12,
            rtol=1e-9,
        )
    return (
        "matches autograd for LayerNorm (S = 1, 4: equal to the full-batch gradient) and "
        "BatchNorm (S = 1, 4, 8: different from it for S > 1)"
    )


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


_WRONG_ROUNDING = [
    (
        sr_round_to_nearest,
        "that is round-to-nearest: it is deterministic, so its error repeats at every step",
    ),
    (sr_truncate, "that is truncation: it always rounds towards zero"),
    (sr_coin_flip, "rounding up must have probability (x - a)/Δ, not 1/2"),
    (
        sr_swapped,
        "the probabilities are swapped: x close to the neighbour a below should mostly round "
        "down to a",
    ),
    (sr_half_noise, "the random integer must cover all 2^16 values of the low bits"),
]


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

    def up_frequency(rounded):  # how often each inexact value was rounded up, (6,)
        return (rounded[:, inexact] == hi[inexact]).double().mean(0)

    q = ((values.double() - lo.double()) / (hi.double() - lo.double()))[inexact]
    expect_answer(
        up_frequency(out),
        q,
        "the frequency of rounding up for x = 1.001, -2.74, 3.3e-3, 1000.7, -0.3, 7.77e5",
        wrong={
            fb: up_frequency(f(x.clone(), torch.Generator().manual_seed(1621)))
            for f, fb in _WRONG_ROUNDING
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


def moments_scaled_mean(w, x, p):
    return (1 - p) * (x @ w), (x**2) @ w**2 * p / (1 - p)


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


_WRONG_MOMENTS = [
    (
        moments_scaled_mean,
        "inverted dropout divides the survivors by 1 - p, so the mean is unchanged: E[y] = w^T x",
    ),
    (
        moments_not_inverted,
        "the variance lacks the inverted scaling: Var[m x / (1 - p)] = x^2 p / (1 - p), "
        "not x^2 p (1 - p)",
    ),
    (
        moments_keep_probability,
        "p is the drop probability: the variance of a unit is x^2 p / (1 - p)",
    ),
    (
        moments_correlated,
        "the masks are independent, so the variances of the units add: sum_j w_j^2 x_j^2 "
        "p/(1 - p), not (w^T x)^2 p/(1 - p)",
    ),
    (moments_weights_not_squared, "Var[w_j d_j] = w_j^2 Var[d_j]: the weights enter squared"),
    (moments_eval_mode, "a variance of 0 is evaluation mode; in training the masks add noise"),
]


def _mean_var(result, what, B):
    mean, var = expect_tuple(result, what, ("mean", "var"))
    return as_tensor(mean, f"the mean of {what}", (B,)), as_tensor(
        var, f"the variance of {what}", (B,)
    )


def _expect_moments(got, want, what, wrong, atol):
    for part, i in (("mean", 0), ("variance", 1)):
        wrong_i = {
            fb: v[i]
            for fb, v in wrong.items()
            if not torch.allclose(v[i], want[i], atol=atol, rtol=0)
        }
        expect_answer(got[i], want[i], f"the {part} of {what}", wrong=wrong_i, atol=atol, rtol=0)


@exercise("16.3", "dropout_linear_moments")
def dropout_linear_moments(answer) -> str:
    """E[y], Var[y] of a linear unit after dropout: exact over all masks, and Monte Carlo."""
    gen = torch.Generator().manual_seed(163)
    w = torch.randn(10, generator=gen, dtype=F64)
    x = torch.randn(3, 10, generator=gen, dtype=F64)
    for p in (0.3, 0.5, 0.9):
        what = f"dropout_linear_moments(w, x, p={p}) with D = 10"
        got = _mean_var(attempt(answer, w.clone(), x.clone(), p), what, 3)
        wrong = {fb: f(w, x, p) for f, fb in _WRONG_MOMENTS}
        _expect_moments(got, _exact_moments(w, x, p), what, wrong, 1e-10)
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


# --------------------------------------------------------------------------- 16.4


def _step_factors(S=8):
    """|first step without the 1/S| / |correct first step| for torch's SGD and Adam, measured on
    a softmax classifier whose gradient is accumulated over S micro-batches."""
    gen = torch.Generator().manual_seed(164)
    X = torch.randn(64, 10, generator=gen, dtype=F64)
    y = torch.randint(0, 3, (64,), generator=gen)
    W0 = 0.1 * torch.randn(3, 10, generator=gen, dtype=F64)

    def first_step(make_optimizer, divide):
        W = W0.clone().requires_grad_(True)
        optimizer = make_optimizer([W])
        for Xs, ys in zip(X.chunk(S), y.chunk(S), strict=True):
            loss = F.cross_entropy(Xs @ W.T, ys)
            (loss / S if divide else loss).backward()  # adds into W.grad
        optimizer.step()
        return (W.detach() - W0).norm().item()

    out = []
    for make in (
        lambda ps: torch.optim.SGD(ps, lr=0.1),
        lambda ps: torch.optim.Adam(ps, lr=0.01),
    ):
        out.append(first_step(make, divide=False) / first_step(make, divide=True))
    return tuple(out)


def factors_both_eight():
    return 8.0, 8.0


def factors_both_one():
    return 1.0, 1.0


def factors_adam_sqrt():
    return 8.0, math.sqrt(8.0)


def factors_swapped():
    return 1.0, 8.0


_WRONG_SGD = {
    1.0: "SGD's step is η times the gradient: forgetting the 1/S makes the gradient, and the "
    "step, S = 8 times too large",
}
_WRONG_ADAM = {
    8.0: "Adam divides by sqrt(v̂), which grows by S with the gradient: its step does not change",
    math.sqrt(8.0): "v̂ grows by S² but Adam divides by its square root, which grows by S, as "
    "m̂ does: its step does not change",
}


@exercise("16.4", "predict_step_factors")
def predict_step_factors(predict) -> str:
    """The guessed step factors vs torch.optim.SGD and Adam with a forgotten 1/S."""
    sgd, adam = _step_factors()
    guess = expect_tuple(attempt(predict), "predict_step_factors()", ("sgd", "adam"))
    for what, got, want, wrong in [
        ("your factor for SGD", guess[0], sgd, _WRONG_SGD),
        ("your factor for Adam", guess[1], adam, _WRONG_ADAM),
    ]:
        expect_guess(got, want, what, wrong)
    return (
        f"measured: SGD's first step is {sgd:.3f} times too long, Adam's {adam:.3f} times: Adam "
        "divides the forgotten S out again"
    )


# --------------------------------------------------------------------------- 16.5


def _rms_parts(dy, x, gamma):
    r = torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)  # (..., 1)
    return x / r, r, gamma * dy  # x_hat, r, the gradient at x_hat


def grads_with_mean_term(dy, x, gamma):
    x_hat, r, g = _rms_parts(dy, x, gamma)
    dx = (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True)) / r
    return dx, (dy * x_hat).reshape(-1, x.shape[-1]).sum(0)


def grads_r_constant(dy, x, gamma):
    x_hat, r, g = _rms_parts(dy, x, gamma)
    return g / r, (dy * x_hat).reshape(-1, x.shape[-1]).sum(0)


def grads_without_gamma(dy, x, gamma):
    x_hat, r, _ = _rms_parts(dy, x, gamma)
    dx = (dy - x_hat * (dy * x_hat).mean(-1, keepdim=True)) / r
    return dx, (dy * x_hat).reshape(-1, x.shape[-1]).sum(0)


def grads_dgamma_per_row(dy, x, gamma):
    x_hat, r, g = _rms_parts(dy, x, gamma)
    return (g - x_hat * (g * x_hat).mean(-1, keepdim=True)) / r, dy * x_hat


_WRONG_DX = [
    (
        grads_with_mean_term,
        "RMSNorm subtracts no mean: the term -mean(γ ⊙ dy) belongs to LayerNorm's backward pass",
    ),
    (
        grads_r_constant,
        "r depends on x too: dx needs the term -x̂ mean(γ ⊙ dy ⊙ x̂), as in (I - x̂ x̂ᵀ/D)/r",
    ),
    (grads_without_gamma, "the gradient at x̂ is γ ⊙ dy: the gain multiplies the upstream gradient"),
]
_WRONG_DGAMMA = [
    (grads_dgamma_per_row, "sum dγ over every row: one gain is shared by all rows"),
]


@exercise("16.5", "rms_norm_grads")
def rms_norm_grads(answer) -> str:
    """RMSNorm's hand-written gradients vs autograd through F.rms_norm, two shapes."""
    gen = torch.Generator().manual_seed(165)
    for shape in [(6, 16), (2, 3, 8)]:
        D = shape[-1]
        x = torch.randn(*shape, generator=gen, dtype=F64) * 2 + 0.5
        gamma = torch.randn(D, generator=gen, dtype=F64)
        dy = torch.randn(*shape, generator=gen, dtype=F64)
        xr, gr = x.clone().requires_grad_(True), gamma.clone().requires_grad_(True)
        want = torch.autograd.grad((F.rms_norm(xr, (D,), gr, eps=1e-6) * dy).sum(), (xr, gr))
        what = f"rms_norm_grads(dy, x, gamma) for x of shape {shape}"
        got = expect_tuple(
            attempt(answer, dy.clone(), x.clone(), gamma.clone()), what, ("dx", "dgamma")
        )
        for i, part, wrong in [(0, "dx", _WRONG_DX), (1, "dgamma", _WRONG_DGAMMA)]:
            expect_answer(
                got[i],
                want[i],
                f"{part} of {what}",
                wrong={fb: f(dy, x, gamma)[i] for f, fb in wrong},
                atol=1e-12,
                rtol=1e-9,
            )
    return "dx and dγ match autograd through F.rms_norm for x of shapes (6, 16) and (2, 3, 8)"


# --------------------------------------------------------------------------- 16.6


def _spreads(x0, batch_sizes, n_batches, gen, *, unbiased=False, include_x0=True, var=False):
    """Training-mode BatchNorm output spread by F.batch_norm on the reader's draws; the keywords
    make the typical mistakes."""
    out = []
    for B in batch_sizes:
        others = torch.randn(n_batches, B - 1, generator=gen, dtype=F64)
        batch = torch.cat([torch.full((n_batches, 1), float(x0), dtype=F64), others], 1)
        if unbiased:
            y = (batch - batch.mean(1, keepdim=True)) / torch.sqrt(batch.var(1, keepdim=True) + EPS)
        elif include_x0:
            y = F.batch_norm(batch.T.contiguous(), None, None, training=True, eps=EPS).T
        else:  # standardise x0 with its batch-mates' statistics only
            m = others.mean(1, keepdim=True)
            y = (batch - m) / torch.sqrt(others.var(1, unbiased=False, keepdim=True) + EPS)
        spread = y[:, 0].std()
        out.append(spread**2 if var else spread)
    return torch.stack(out)


def spread_as_variance(x0, batch_sizes, n_batches, gen):
    return _spreads(x0, batch_sizes, n_batches, gen, var=True)


def spread_unbiased(x0, batch_sizes, n_batches, gen):
    return _spreads(x0, batch_sizes, n_batches, gen, unbiased=True)


def spread_without_x0(x0, batch_sizes, n_batches, gen):
    return _spreads(x0, batch_sizes, n_batches, gen, include_x0=False)


_WRONG_SPREAD = [
    (spread_as_variance, "that is the variance over the batches; return the standard deviation"),
    (
        spread_unbiased,
        "BatchNorm in training mode divides by the biased variance of the batch (1/B)",
    ),
    (
        spread_without_x0,
        "x0 belongs to its batch: the mean and variance are taken over all B examples, x0 included",
    ),
]


@exercise("16.6", "bn_output_spread")
def bn_output_spread(answer) -> str:
    """Measured spreads vs F.batch_norm on the same draws; the slope of the spread against B."""
    sizes, n = [2, 4, 8, 16, 64, 256, 1024], 1000
    for x0 in (1.5, 0.0):
        got = attempt(answer, x0, list(sizes), n, torch.Generator().manual_seed(166))
        want = _spreads(x0, sizes, n, torch.Generator().manual_seed(166))
        expect_answer(
            got,
            want,
            f"bn_output_spread(x0={x0}, batch_sizes={sizes}, n_batches={n}, gen)",
            wrong={
                fb: f(x0, sizes, n, torch.Generator().manual_seed(166)) for f, fb in _WRONG_SPREAD
            },
            atol=1e-10,
            rtol=1e-8,
        )
    spread = _spreads(1.5, sizes, n, torch.Generator().manual_seed(166))
    big = [i for i, B in enumerate(sizes) if B >= 64]
    logs = torch.log(torch.tensor([float(sizes[i]) for i in big], dtype=F64))
    slope = float(
        torch.linalg.lstsq(
            torch.stack([logs, torch.ones_like(logs)], 1), torch.log(spread[big])[:, None]
        ).solution[0, 0]
    )
    return (
        f"matches F.batch_norm on the same draws for B = 2 to 1024; for x0 = 1.5 the spread is "
        f"{float(spread[0]):.2f} at B = 2 and falls with log-log slope {slope:.2f} for B >= 64"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


def sr_bfloat16_dtype(x, g):
    return _ref("16.2", "stochastic_round_bf16")(x, g).to(torch.bfloat16)


def sr_no_rounding(x, g):
    return x.clone()


def moments_single_tensor(w, x, p):
    return torch.stack(_ref("16.3", "dropout_linear_moments")(w, x, p))


def factors_one_number():
    return 8.0


def _feedback(fb):
    return fb.split(":")[0]


MISTAKES = {
    "16.1": [(f, _feedback(fb)) for f, fb in _wrong_accumulations("batch")],
    "16.2": [(f, _feedback(fb)) for f, fb in _WRONG_ROUNDING]
    + [
        (sr_bfloat16_dtype, "should return float32"),
        (sr_no_rounding, "not bfloat16 numbers"),
    ],
    "16.3": [(f, _feedback(fb)) for f, fb in _WRONG_MOMENTS]
    + [(moments_single_tensor, "should return a pair (mean, var)")],
    "16.4": [
        (factors_both_eight, "its step does not change"),
        (factors_adam_sqrt, "divides by its square root"),
        (factors_both_one, "S = 8 times too large"),
        (factors_swapped, "S = 8 times too large"),
        (factors_one_number, "should return a pair (sgd, adam)"),
    ],
    "16.5": [(f, _feedback(fb)) for f, fb in _WRONG_DX + _WRONG_DGAMMA],
    "16.6": [(f, _feedback(fb)) for f, fb in _WRONG_SPREAD],
}
