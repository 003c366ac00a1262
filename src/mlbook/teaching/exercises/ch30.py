"""Checks of the exercises of chapter 30 (contrastive and metric learning).

The references are independent of :mod:`mlbook.architectures.contrastive`: a simulation of the
initial loss with ``torch.nn.functional.cross_entropy`` (30.1); InfoNCE from
``F.cross_entropy`` and ``F.normalize`` (30.2); a training loop written with ``F.cross_entropy``,
``torch.optim.Adam`` and ``torch.pdist`` (30.3); and float64 autograd (30.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from . import (
    Incorrect,
    as_number,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    is_close,
    wrong_values,
)

F64 = torch.float64


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


def _ce_rows(logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the rows of logits (N, N) against the diagonal."""
    return F.cross_entropy(logits, torch.arange(len(logits)))


def _logits(z_a, z_b, tau):
    return F.normalize(z_a, dim=1) @ F.normalize(z_b, dim=1).T / tau


def _info_nce(z_a, z_b, tau, symmetric=True):
    lg = _logits(z_a, z_b, tau)
    return 0.5 * (_ce_rows(lg) + _ce_rows(lg.T)) if symmetric else _ce_rows(lg)


# --- 30.1 ----------------------------------------------------------------------------------------


def guess_zero():
    return 0.0


def guess_log_two():
    return math.log(2)


def guess_batch_size():
    return 256


def guess_a_word():
    return "log N"


@exercise("30.1", "predict_initial_loss")
def initial_loss(answer) -> str:
    """The one-directional InfoNCE of 256 unrelated random pairs in R^128 at tau = 0.1."""
    guess = as_number(attempt(answer), "predict_initial_loss()", " (nats)")
    gen = torch.Generator().manual_seed(301)
    N, D, tau = 256, 128, 0.1
    losses = [float(_info_nce(_randn(gen, N, D), _randn(gen, N, D), tau, False)) for _ in range(20)]
    sim = sum(losses) / len(losses)
    seen = (
        f"the mean over 20 random batches is {sim:.2f} nats; log N = {math.log(N):.2f}, and "
        f"log N + 1/(2 D tau^2) = {math.log(N) + 1 / (2 * D * tau**2):.2f}"
    )
    if abs(guess - sim) > 0.1 * sim:
        if guess == 0:
            why = "a loss is not 0 before learning: the positive gets about 1/N of the softmax"
        elif abs(guess - math.log(2)) < 0.05:
            why = "the positive is one of N = 256 candidates, not one of 2: the loss is near log N"
        elif abs(guess - N) < 1:
            why = "the loss grows like log N, not like N: -log(1/N) = log N"
        else:
            why = "the positive gets about 1/N of each row's softmax, so the loss is near log N"
        raise Incorrect(f"you predicted {guess:g}; {seen}: {why}")
    return f"right within 10 %: {seen}"


# --- 30.2 ----------------------------------------------------------------------------------------


def ince_unnormalised(z_a, z_b, tau, symmetric):
    lg = z_a @ z_b.T / tau
    return 0.5 * (_ce_rows(lg) + _ce_rows(lg.T)) if symmetric else _ce_rows(lg)


def ince_times_tau(z_a, z_b, tau, symmetric):
    return _info_nce(z_a, z_b, 1 / tau, symmetric)


def ince_one_direction(z_a, z_b, tau, symmetric):
    return _info_nce(z_a, z_b, tau, False)


def ince_sum(z_a, z_b, tau, symmetric):
    return _info_nce(z_a, z_b, tau, symmetric) * len(z_a)


def ince_both_summed(z_a, z_b, tau, symmetric):
    return _info_nce(z_a, z_b, tau, symmetric) * (2 if symmetric else 1)


MISTAKES_30_2 = [
    (ince_unnormalised, "normalise the rows first: s is the cosine similarity of eq. 30.1"),
    (ince_times_tau, "divide the similarities by tau, do not multiply"),
    (ince_one_direction, "with symmetric=True average the row and the column directions"),
    (ince_sum, "average over the N rows, do not sum"),
    (ince_both_summed, "average the two directions, do not add them"),
]


@exercise("30.2", "info_nce_loss")
def info_nce_loss(answer) -> str:
    """InfoNCE against F.cross_entropy of normalised similarities, both directions."""
    gen = torch.Generator().manual_seed(302)
    for N, D, tau, scale in (
        (16, 8, 0.1, 1.0),
        (5, 3, 0.5, 30.0),
        (1, 4, 0.2, 1.0),
        (40, 16, 0.01, 0.1),
    ):
        z_a = scale * _randn(gen, N, D)
        z_b = 0.5 * z_a + _randn(gen, N, D)
        for symmetric in (False, True):
            expect_answer(
                attempt(answer, z_a.clone(), z_b.clone(), tau, symmetric),
                _info_nce(z_a, z_b, tau, symmetric),
                f"info_nce_loss(z_a, z_b, tau={tau}, symmetric={symmetric}) for N = {N}",
                wrong={
                    fb: v
                    for fb, v in wrong_values(MISTAKES_30_2, z_a, z_b, tau, symmetric).items()
                    if not torch.allclose(v, _info_nce(z_a, z_b, tau, symmetric))
                },
                atol=1e-10,
                rtol=1e-10,
            )
    return (
        "matches F.cross_entropy of the normalised similarities / tau, one direction and both, "
        "for N = 1 to 40, norms from 0.1 to 30 and tau from 0.01 to 0.5"
    )


# --- 30.3 ----------------------------------------------------------------------------------------


def _sweep(x_a, x_b, W0, taus, steps, lr, *, restart=True, symmetric=True, both_views=False):
    """The reference loop, with switches that reproduce typical mistakes."""
    align, unif = [], []
    W = W0.clone().requires_grad_(True)
    for tau in taus:
        if restart:
            W = W0.clone().requires_grad_(True)
        opt = torch.optim.Adam([W], lr=lr)
        for _ in range(steps):
            loss = _info_nce(x_a @ W, x_b @ W, tau, symmetric)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            za, zb = F.normalize(x_a @ W, dim=1), F.normalize(x_b @ W, dim=1)
            align.append(float(((za - zb) ** 2).sum(1).mean()))
            z = torch.cat([za, zb]) if both_views else za
            unif.append(float(torch.log(torch.exp(-2 * torch.pdist(z) ** 2).mean())))
    return align, unif


def sweep_without_restart(x_a, x_b, W0, taus, steps, lr):
    return _sweep(x_a, x_b, W0, taus, steps, lr, restart=False)


def sweep_one_direction(x_a, x_b, W0, taus, steps, lr):
    return _sweep(x_a, x_b, W0, taus, steps, lr, symmetric=False)


def sweep_uniformity_both_views(x_a, x_b, W0, taus, steps, lr):
    return _sweep(x_a, x_b, W0, taus, steps, lr, both_views=True)


def sweep_swapped(x_a, x_b, W0, taus, steps, lr):
    return tuple(reversed(_sweep(x_a, x_b, W0, taus, steps, lr)))


MISTAKES_30_3 = [
    (sweep_without_restart, "start every temperature from a copy of W0"),
    (sweep_one_direction, "ct.info_nce is symmetric by default"),
    (sweep_uniformity_both_views, "uniformity of the first view's embeddings only"),
    (sweep_swapped, "return (alignment, uniformity) in this order"),
]


_SWEEP = ((0.05, 0.2, 1.0), 40, 0.03)  # temperatures, steps, learning rate


@functools.cache  # the reference and each typical wrong loop run once per process
def _sweep_results(loop):
    return loop(*(t.clone() for t in _sweep_case()), list(_SWEEP[0]), *_SWEEP[1:])


@functools.cache
def _sweep_case():
    from ...datasets import digits  # the data only; the loss and measures are written here

    x = digits().x_train[:96].reshape(96, -1).to(F64)  # (96, 64)
    x = x - x.mean(0)
    gen = torch.Generator().manual_seed(303)
    x_a = x + 0.2 * _randn(gen, *x.shape)
    x_b = x + 0.2 * _randn(gen, *x.shape)
    W0 = _randn(gen, 64, 8) / 8
    return x_a, x_b, W0


@exercise("30.3", "temperature_sweep")
def temperature_sweep(answer) -> str:
    """Alignment and uniformity after training at each temperature, against a reference loop."""
    x_a, x_b, W0 = _sweep_case()
    out = attempt(answer, x_a.clone(), x_b.clone(), W0.clone(), list(_SWEEP[0]), *_SWEEP[1:])
    align, unif = expect_tuple(out, "temperature_sweep(...)", ("alignment", "uniformity"))
    want = _sweep_results(_sweep)
    taus = list(_SWEEP[0])
    for k, (got, name) in enumerate(((align, "alignment"), (unif, "uniformity"))):
        what = f"the {name} list of temperature_sweep"
        try:
            expect_answer(got, want[k], what, atol=1e-6, rtol=1e-6)
        except Incorrect:  # name the mistake: the typical wrong loops one by one
            for fn, feedback in MISTAKES_30_3:
                wrong = _sweep_results(fn)[k]
                if is_close(as_tensor(got, what), as_tensor(wrong, what), atol=1e-6, rtol=1e-6):
                    raise Incorrect(f"{what}: {feedback}") from None
            raise
    a, u = want
    return (
        f"matches an independent loop for tau = {taus}: alignment "
        f"{', '.join(f'{v:.3f}' for v in a)}, uniformity {', '.join(f'{v:.2f}' for v in u)}"
    )


# --- 30.4 ----------------------------------------------------------------------------------------


def _grad_parts(z_a, z_b, tau):
    n_a = z_a.norm(dim=1, keepdim=True)
    za, zb = z_a / n_a, F.normalize(z_b, dim=1)
    P = torch.softmax(za @ zb.T / tau, dim=1)
    g = (P - torch.eye(len(z_a), dtype=z_a.dtype)) / (len(z_a) * tau) @ zb  # dL / d ẑ_a
    return g, za, n_a


def grad_wrt_unit_rows(z_a, z_b, tau):
    return _grad_parts(z_a, z_b, tau)[0]


def grad_without_norm_factor(z_a, z_b, tau):
    g, za, _ = _grad_parts(z_a, z_b, tau)
    return g - (g * za).sum(1, keepdim=True) * za


def grad_without_tau(z_a, z_b, tau):
    g, za, n_a = _grad_parts(z_a, z_b, tau)
    g = g * tau
    return (g - (g * za).sum(1, keepdim=True) * za) / n_a


def grad_sign_flipped(z_a, z_b, tau):
    g, za, n_a = _grad_parts(z_a, z_b, tau)
    return -(g - (g * za).sum(1, keepdim=True) * za) / n_a


MISTAKES_30_4 = [
    (grad_wrt_unit_rows, "that is the gradient with respect to the normalised ẑ_a"),
    (grad_without_norm_factor, "the Jacobian of z / |z| carries a factor 1 / |z|"),
    (grad_without_tau, "the logits are S / tau: the gradient in S carries 1 / (N tau)"),
    (grad_sign_flipped, "the sign is flipped"),
]


@exercise("30.4", "info_nce_grad_za")
def info_nce_grad(answer) -> str:
    """The gradient with respect to the un-normalised z_a, against float64 autograd."""
    gen = torch.Generator().manual_seed(304)
    for N, D, tau, scale in ((12, 6, 0.1, 3.0), (4, 2, 0.5, 0.2), (30, 16, 0.05, 1.0)):
        z_a, z_b = scale * _randn(gen, N, D), _randn(gen, N, D)
        za = z_a.clone().requires_grad_(True)
        (want,) = torch.autograd.grad(_info_nce(za, z_b, tau, False), za)
        got = expect_answer(
            attempt(answer, z_a.clone(), z_b.clone(), tau),
            want,
            f"info_nce_grad_za(z_a, z_b, tau={tau}) for N = {N}, |z_a| about {scale}",
            wrong=wrong_values(MISTAKES_30_4, z_a, z_b, tau),
            atol=1e-10,
            rtol=1e-8,
        )
        radial = float((got * z_a).sum(1).abs().max())
        expect(radial < 1e-10, f"a row of the gradient has a component {radial:.2g} along z_a")
    return (
        "matches float64 autograd for 3 batches (norms from 0.2 to 3, tau from 0.05 to 0.5); "
        "each row is orthogonal to its z_a (|z_a . grad| < 1e-10)"
    )


MISTAKES = {
    "30.1": [
        (guess_zero, "not 0 before learning"),
        (guess_log_two, "not one of 2"),
        (guess_batch_size, "not like N"),
        (guess_a_word, "should return a number"),
    ],
    "30.2": [(fn, fb) for fn, fb in MISTAKES_30_2],
    "30.3": [(fn, fb) for fn, fb in MISTAKES_30_3],
    "30.4": [(fn, fb) for fn, fb in MISTAKES_30_4],
}
