"""Checks of the exercises of chapter 15 (optimizers and schedules).

The references are independent of the reader's answer and of :mod:`mlbook.nn.optim`: the matrix of
one heavy-ball step is assembled by applying eq. 15.2 to two starting states, and the stability
limit is found by bisection on its spectral radius (``numpy.linalg.eigvals``); Adam's steps and
trajectories come from ``torch.optim.Adam``, and torch's momentum from ``torch.optim.SGD``, fed the
same gradients and learning rates.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


# --- 15.1 ---------------------------------------------------------------------------------------


def _step_matrix(lam, lr, beta):
    """Columns: one step of eq. 15.2 on lam/2 θ² from (θ_t, θ_{t-1}) = (1, 0) and (0, 1)."""
    cols = []
    for th, th_prev in ((1.0, 0.0), (0.0, 1.0)):
        v = beta * (th - th_prev) - lr * lam * th  # v_t = β v_{t-1} - η g_t
        cols.append([th + v, th])  # (θ_{t+1}, θ_t)
    return torch.tensor(cols, dtype=F64).T


def _radius(lam, lr, beta):
    return float(np.abs(np.linalg.eigvals(_step_matrix(lam, lr, beta).numpy())).max())


def _limit_by_bisection(lam, beta):
    lo, hi = 1e-3 / lam, 10.0 / lam  # converges at lo, diverges at hi
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _radius(lam, mid, beta) < 1 else (lo, mid)
    return lo


@exercise("15.1", "momentum_matrix", "momentum_limit")
def momentum_limit(matrix, limit) -> str:
    """The heavy-ball step matrix, and the stability limit vs bisection on its spectral radius."""
    for lam, lr, beta in [(4.0, 0.5, 0.9), (1.0, 0.1, 0.0), (50.0, 0.03, 0.5)]:
        M = _step_matrix(lam, lr, beta)
        a = 1 + beta - lr * lam
        expect_answer(
            attempt(matrix, lam, lr, beta),
            M,
            f"momentum_matrix(lam={lam}, lr={lr}, beta={beta})",
            wrong={
                "this is the transpose: row 1 gives θ_{t+1} from (θ_t, θ_{t-1}), row 2 copies "
                "θ_t": M.T,
                "the rows are swapped: the first entry of the new state is θ_{t+1}": M.flip(0),
                "the sign of β: θ_{t-1} enters through v_{t-1} = θ_t - θ_{t-1}, with "
                "-β": torch.tensor([[a, beta], [1.0, 0.0]], dtype=F64),
                "the term θ_t itself is missing: θ_{t+1} = θ_t + v_t, so the corner is "
                "1 + β - ηλ": torch.tensor([[a - 1, -beta], [1.0, 0.0]], dtype=F64),
            },
            atol=1e-14,
            rtol=1e-12,
        )
    for lam, beta in [(4.0, 0.9), (1.0, 0.0), (50.0, 0.5), (10.0, 0.99)]:
        want = _limit_by_bisection(lam, beta)
        expect_answer(
            attempt(limit, lam, beta),
            want,
            f"momentum_limit(lam={lam}, beta={beta})",
            wrong={
                "that is the limit of plain gradient descent; momentum raises it by the factor "
                "1 + β": 2 / lam,
                "the factor is 1 + β, not 1 - β: momentum raises the limit": 2 * (1 - beta) / lam,
                "the factor 2 is missing: the limit is where a root reaches -1, at ηλ = 2(1 + β)": (
                    1 + beta
                )
                / lam,
                "the limit is a learning rate: divide by λ, do not multiply": 2 * (1 + beta) * lam,
            },
            atol=0,
            rtol=1e-9,
        )
    return (
        "M matches one step of eq. 15.2 for 3 settings; the limit 2(1 + β)/λ matches "
        "bisection on the spectral radius for β = 0, 0.5, 0.9, 0.99"
    )


# --- 15.2 ---------------------------------------------------------------------------------------


def _torch_adam(grad_fn, theta0, lr, steps, eps):
    """Iterates of torch.optim.Adam fed grad_fn's gradients: (steps + 1, P)."""
    p = theta0.clone().requires_grad_(True)
    adam = torch.optim.Adam([p], lr=lr, eps=eps)
    path = [theta0.clone()]
    for _ in range(steps):
        p.grad = grad_fn(p.detach().clone())
        adam.step()
        path.append(p.detach().clone())
    return torch.stack(path)


def _adam_variant(grad_fn, theta0, lr, steps, eps, *, corrected=True, sign=-1.0):
    """Adam written out, with the bias correction optional and the step's sign free."""
    theta, m, v, path = theta0.clone(), torch.zeros_like(theta0), torch.zeros_like(theta0), []
    path.append(theta)
    for t in range(1, steps + 1):
        g = grad_fn(theta.clone())
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        mh, vh = (m / (1 - 0.9**t), v / (1 - 0.999**t)) if corrected else (m, v)
        theta = theta + sign * lr * mh / (vh.sqrt() + eps)
        path.append(theta)
    return torch.stack(path)


_A = torch.tensor([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 0.2]], dtype=F64)
_C = torch.tensor([1.0, -2.0, 0.5], dtype=F64)


def _grad(scale):
    def grad_fn(theta):
        return scale * (_A @ (theta - _C) + 0.5 * theta**3)

    return grad_fn


@exercise("15.2", "adam_first_step", "adam_run")
def adam(first_step, run) -> str:
    """Adam's first step and trajectory vs torch.optim.Adam, at loss scales 1 and 1000."""
    g1 = torch.tensor([1e-3, -0.5, 1.0, 30.0, -1e3], dtype=F64)
    for g, lr, eps in [
        (g1, 0.01, 1e-8),
        (torch.tensor([1e-9, -1e-10, 0.0, 2e-8], dtype=F64), 0.1, 1e-8),
        (g1, 0.5, 0.0),
    ]:
        ref = _torch_adam(lambda _, g=g: g.clone(), torch.zeros_like(g), lr, 1, eps)[1]
        b1, b2 = 0.9, 0.999
        expect_answer(
            attempt(first_step, g.clone(), lr, eps),
            ref,
            f"adam_first_step(g, lr={lr}, eps={eps}) for |g| from {g.abs().min().item():g} to "
            f"{g.abs().max().item():g}",
            wrong={
                "without the bias correction: m_1 = (1 - β1) g and v_1 = (1 - β2) g², so m̂_1 = g "
                "and v̂_1 = g² only after dividing by 1 - β^t": -lr
                * (1 - b1)
                * g
                / ((1 - b2) ** 0.5 * g.abs() + eps),
                "the sign is flipped: Adam steps against the gradient": lr * g / (g.abs() + eps),
                "ε is added to sqrt(v̂), not inside the square root": -lr * g / (g**2 + eps).sqrt(),
                "that is -lr sign(g): where |g| is not large against ε the step is smaller, "
                "-lr g / (|g| + ε)": -lr * torch.sign(g),
                "that is a plain SGD step; Adam divides by sqrt(v̂_1) = |g|": -lr * g,
            },
            atol=1e-15,
            rtol=1e-9,
        )

    theta0 = torch.tensor([0.5, 1.5, -1.0], dtype=F64)
    runs = {}
    for scale, eps, steps in [
        (1.0, 1e-8, 50),
        (1000.0, 1e-8, 50),
        (1.0, 0.0, 50),
        (1000.0, 0.0, 50),
        (1.0, 1e-8, 1),
    ]:
        grad_fn = _grad(scale)
        ref = _torch_adam(grad_fn, theta0, 0.05, steps, eps)
        runs[scale, eps, steps] = expect_answer(
            attempt(run, grad_fn, theta0.clone(), 0.05, steps, eps),
            ref,
            f"adam_run(grad_fn, theta0, lr=0.05, steps={steps}, eps={eps}) for {scale:g} x "
            f"the loss",
            wrong={
                "without the bias correction (divide m and v by 1 - β^t)": _adam_variant(
                    grad_fn, theta0, 0.05, steps, eps, corrected=False
                ),
                "the first row must be theta0: return steps + 1 iterates": ref[1:],
                "the sign is flipped: this climbs the loss": _adam_variant(
                    grad_fn, theta0, 0.05, steps, eps, sign=1.0
                ),
            },
            atol=1e-10,
            rtol=1e-8,
        )
    same = (runs[1.0, 0.0, 50] - runs[1000.0, 0.0, 50]).abs().max().item()
    expect(
        same < 1e-9,
        "with eps = 0 the iterates for the loss and for 1000 x the loss should coincide",
    )
    return (
        "the first step -lr g/(|g| + ε) and 50-step trajectories match torch.optim.Adam; "
        "with ε = 0 the trajectories of the loss and of 1000 x the loss coincide"
    )


# --- 15.3 ---------------------------------------------------------------------------------------


def _torch_sgd(grad_fn, theta0, lrs, beta):
    """Iterates of torch.optim.SGD(momentum=beta) with the learning rate set before each step."""
    p = theta0.clone().requires_grad_(True)
    sgd = torch.optim.SGD([p], lr=lrs[0], momentum=beta)
    path = [theta0.clone()]
    for lr in lrs:
        sgd.param_groups[0]["lr"] = lr
        p.grad = grad_fn(p.detach().clone())
        sgd.step()
        path.append(p.detach().clone())
    return torch.stack(path)


def _velocity_path(grad_fn, theta0, lrs, beta, ratio):
    theta, vel, path = theta0.clone(), torch.zeros_like(theta0), [theta0.clone()]
    for t, lr in enumerate(lrs):
        r = ratio(lrs[t - 1], lr) if t > 0 else 1.0
        vel = beta * r * vel - lr * grad_fn(theta.clone())
        theta = theta + vel
        path.append(theta)
    return torch.stack(path)


@exercise("15.3", "torch_momentum_path")
def torch_momentum(answer) -> str:
    """The rescaled-velocity recursion vs torch.optim.SGD(momentum) under three schedules."""
    angle = math.radians(30)
    R = torch.tensor(
        [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=F64
    )
    Hk = R @ torch.diag(torch.tensor([1.0, 50.0], dtype=F64)) @ R.T
    start = 2.5 * R[:, 0] + 0.3 * R[:, 1]

    def quadratic(theta):
        return Hk @ theta

    def double_well(theta):
        return theta**3 - theta + 0.3

    warmup_cosine = [
        0.03 * (0.1 + 0.9 * t / 10)
        if t < 10
        else 0.03 * 0.5 * (1 + math.cos(math.pi * (t - 10) / 50))
        for t in range(60)
    ]
    cut = [0.05 if t < 20 else 0.005 for t in range(40)]
    cases = [
        ("the κ = 50 quadratic under warmup + cosine", quadratic, start, warmup_cosine, 0.9),
        (
            "a double well under a step cut",
            double_well,
            torch.tensor([1.5, -0.7], dtype=F64),
            cut,
            0.9,
        ),
        ("the quadratic at a constant rate", quadratic, start, [0.02] * 15, 0.5),
    ]
    for name, grad_fn, theta0, lrs, beta in cases:
        ref = _torch_sgd(grad_fn, theta0, lrs, beta)
        expect_answer(
            attempt(answer, grad_fn, theta0.clone(), list(lrs), beta),
            ref,
            f"torch_momentum_path for {name}",
            wrong={
                "that is the sheet's convention, v_t = β v_{t-1} - η_t g_t; torch's update "
                "rescales the old velocity by η_t / η_{t-1}": _velocity_path(
                    grad_fn, theta0, lrs, beta, lambda a, b: 1.0
                ),
                "the ratio is upside down: it is η_t / η_{t-1}, the new rate over the "
                "old": _velocity_path(grad_fn, theta0, lrs, beta, lambda a, b: a / b),
                "the first row must be theta0: return T + 1 iterates": ref[1:],
            },
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches torch.optim.SGD(momentum) under warmup + cosine, a step cut and a "
        "constant rate (where it is the sheet's eq. 15.2)"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# --- 15.1


ref_matrix = _ref("15.1", "momentum_matrix")
ref_limit = _ref("15.1", "momentum_limit")


def matrix_transposed(lam, lr, beta):
    return ref_matrix(lam, lr, beta).T


def matrix_plus_beta(lam, lr, beta):
    return torch.tensor([[1 + beta - lr * lam, beta], [1.0, 0.0]], dtype=F64)


def matrix_without_theta(lam, lr, beta):
    return torch.tensor([[beta - lr * lam, -beta], [1.0, 0.0]], dtype=F64)


def matrix_rows_swapped(lam, lr, beta):
    return torch.tensor([[1.0, 0.0], [1 + beta - lr * lam, -beta]], dtype=F64)


def matrix_numpy_list(lam, lr, beta):
    return [[1 + beta - lr * lam, -beta], [1.0]]


def limit_gd(lam, beta):
    return 2 / lam


def limit_one_minus_beta(lam, beta):
    return 2 * (1 - beta) / lam


def limit_no_two(lam, beta):
    return (1 + beta) / lam


def limit_times_lam(lam, beta):
    return 2 * (1 + beta) * lam


# --- 15.2


ref_first_step = _ref("15.2", "adam_first_step")
ref_run = _ref("15.2", "adam_run")


def first_step_uncorrected(g, lr, eps):
    m, v = 0.1 * g, 0.001 * g * g
    return -lr * m / (v.sqrt() + eps)


def first_step_ascent(g, lr, eps):
    return lr * g / (g.abs() + eps)


def first_step_eps_inside(g, lr, eps):
    return -lr * g / (g * g + eps).sqrt()


def first_step_sign(g, lr, eps):
    return -lr * torch.sign(g)


def first_step_sgd(g, lr, eps):
    return -lr * g


def run_uncorrected(grad_fn, theta0, lr, steps, eps):
    from mlbook.nn import optim as opt

    theta, m, v, path = theta0, torch.zeros_like(theta0), torch.zeros_like(theta0), [theta0]
    for t in range(1, steps + 1):
        theta, m, v = opt.adamw_step(
            theta, m, v, grad_fn(theta), t, lr=lr, eps=eps, bias_correction=False
        )
        path.append(theta)
    return torch.stack(path)


def run_without_start(grad_fn, theta0, lr, steps, eps):
    return ref_run(grad_fn, theta0, lr, steps, eps)[1:]


def run_ascent(grad_fn, theta0, lr, steps, eps):
    return ref_run(lambda th: -grad_fn(th), theta0, lr, steps, eps)


# --- 15.3


def path_sheet(grad_fn, theta0, lrs, beta):
    theta, vel, path = theta0, torch.zeros_like(theta0), [theta0]
    for lr in lrs:
        vel = beta * vel - lr * grad_fn(theta)
        theta = theta + vel
        path.append(theta)
    return torch.stack(path)


def path_ratio_inverted(grad_fn, theta0, lrs, beta):
    theta, vel, path = theta0, torch.zeros_like(theta0), [theta0]
    for t, lr in enumerate(lrs):
        ratio = lrs[t - 1] / lr if t > 0 else 1.0
        vel = beta * ratio * vel - lr * grad_fn(theta)
        theta = theta + vel
        path.append(theta)
    return torch.stack(path)


def path_without_start(grad_fn, theta0, lrs, beta):
    return _ref("15.3", "torch_momentum_path")(grad_fn, theta0, lrs, beta)[1:]


MISTAKES = {
    "15.1": [
        ((matrix_transposed, ref_limit), "this is the transpose"),
        ((matrix_plus_beta, ref_limit), "the sign of β"),
        ((matrix_without_theta, ref_limit), "the term θ_t itself is missing"),
        ((matrix_rows_swapped, ref_limit), "the rows are swapped"),
        ((matrix_numpy_list, ref_limit), "should be a number or a tensor"),
        ((ref_matrix, limit_gd), "limit of plain gradient descent"),
        ((ref_matrix, limit_one_minus_beta), "not 1 - β"),
        ((ref_matrix, limit_no_two), "the factor 2 is missing"),
        ((ref_matrix, limit_times_lam), "divide by λ"),
    ],
    "15.2": [
        ((first_step_uncorrected, ref_run), "without the bias correction"),
        ((first_step_ascent, ref_run), "the sign is flipped"),
        ((first_step_eps_inside, ref_run), "not inside the square root"),
        ((first_step_sign, ref_run), "that is -lr sign(g)"),
        ((first_step_sgd, ref_run), "plain SGD step"),
        ((ref_first_step, run_uncorrected), "without the bias correction"),
        ((ref_first_step, run_without_start), "the first row must be theta0"),
        ((ref_first_step, run_ascent), "this climbs the loss"),
    ],
    "15.3": [
        (path_sheet, "that is the sheet's convention"),
        (path_ratio_inverted, "the ratio is upside down"),
        (path_without_start, "the first row must be theta0"),
    ],
}
