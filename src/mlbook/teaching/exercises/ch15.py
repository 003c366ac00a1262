"""Checks of the exercises of chapter 15 (optimizers and schedules).

The references are independent of the reader's answer and of :mod:`mlbook.nn.optim`: the matrix of
one heavy-ball step is assembled by applying eq. 15.2 to two starting states, and the stability
limit is found by bisection on its spectral radius (``numpy.linalg.eigvals``); Adam's steps and
trajectories come from ``torch.optim.Adam``, and torch's momentum from ``torch.optim.SGD``, fed the
same gradients and learning rates; the predicted distances and the measured momentum rates are
measured on ``torch.optim.SGD`` and ``torch.optim.Adam``.

Each typical wrong answer is written once, as a function below its check, and serves both the
check's feedback and ``MISTAKES``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import attempt, exercise, expect, expect_answer, expect_guess, expect_tuple
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


def matrix_transposed(lam, lr, beta):
    return _step_matrix(lam, lr, beta).T


def matrix_rows_swapped(lam, lr, beta):
    return _step_matrix(lam, lr, beta).flip(0)


def matrix_plus_beta(lam, lr, beta):
    return torch.tensor([[1 + beta - lr * lam, beta], [1.0, 0.0]], dtype=F64)


def matrix_without_theta(lam, lr, beta):
    return torch.tensor([[beta - lr * lam, -beta], [1.0, 0.0]], dtype=F64)


_WRONG_MATRIX = [
    (
        matrix_transposed,
        "this is the transpose: row 1 gives θ_{t+1} from (θ_t, θ_{t-1}), row 2 copies θ_t",
    ),
    (matrix_rows_swapped, "the rows are swapped: the first entry of the new state is θ_{t+1}"),
    (
        matrix_plus_beta,
        "the sign of β: θ_{t-1} enters through v_{t-1} = θ_t - θ_{t-1}, with -β",
    ),
    (
        matrix_without_theta,
        "the term θ_t itself is missing: θ_{t+1} = θ_t + v_t, so the corner is 1 + β - ηλ",
    ),
]


def limit_gd(lam, beta):
    return 2 / lam


def limit_one_minus_beta(lam, beta):
    return 2 * (1 - beta) / lam


def limit_no_two(lam, beta):
    return (1 + beta) / lam


def limit_times_lam(lam, beta):
    return 2 * (1 + beta) * lam


_WRONG_LIMIT = [
    (
        limit_gd,
        "that is the limit of plain gradient descent; momentum raises it by the factor 1 + β",
    ),
    (limit_one_minus_beta, "the factor is 1 + β, not 1 - β: momentum raises the limit"),
    (
        limit_no_two,
        "the factor 2 is missing: the limit is where a root reaches -1, at ηλ = 2(1 + β)",
    ),
    (limit_times_lam, "the limit is a learning rate: divide by λ, do not multiply"),
]


@exercise("15.1", "momentum_matrix", "momentum_limit")
def momentum_limit(matrix, limit) -> str:
    """The heavy-ball step matrix, and the stability limit vs bisection on its spectral radius."""
    for lam, lr, beta in [(4.0, 0.5, 0.9), (1.0, 0.1, 0.0), (50.0, 0.03, 0.5)]:
        expect_answer(
            attempt(matrix, lam, lr, beta),
            _step_matrix(lam, lr, beta),
            f"momentum_matrix(lam={lam}, lr={lr}, beta={beta})",
            wrong={fb: f(lam, lr, beta) for f, fb in _WRONG_MATRIX},
            atol=1e-14,
            rtol=1e-12,
        )
    for lam, beta in [(4.0, 0.9), (1.0, 0.0), (50.0, 0.5), (10.0, 0.99)]:
        expect_answer(
            attempt(limit, lam, beta),
            _limit_by_bisection(lam, beta),
            f"momentum_limit(lam={lam}, beta={beta})",
            wrong={fb: f(lam, beta) for f, fb in _WRONG_LIMIT},
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


def first_step_uncorrected(g, lr, eps):
    return _adam_variant(lambda _: g, torch.zeros_like(g), lr, 1, eps, corrected=False)[1]


def first_step_ascent(g, lr, eps):
    return lr * g / (g.abs() + eps)


def first_step_eps_inside(g, lr, eps):
    return -lr * g / (g * g + eps).sqrt()


def first_step_sign(g, lr, eps):
    return -lr * torch.sign(g)


def first_step_sgd(g, lr, eps):
    return -lr * g


_WRONG_FIRST_STEP = [
    (
        first_step_uncorrected,
        "without the bias correction: m_1 = (1 - β1) g and v_1 = (1 - β2) g², so m̂_1 = g "
        "and v̂_1 = g² only after dividing by 1 - β^t",
    ),
    (first_step_ascent, "the sign is flipped: Adam steps against the gradient"),
    (first_step_eps_inside, "ε is added to sqrt(v̂), not inside the square root"),
    (
        first_step_sign,
        "that is -lr sign(g): where |g| is not large against ε the step is smaller, "
        "-lr g / (|g| + ε)",
    ),
    (first_step_sgd, "that is a plain SGD step; Adam divides by sqrt(v̂_1) = |g|"),
]


def run_uncorrected(grad_fn, theta0, lr, steps, eps):
    return _adam_variant(grad_fn, theta0, lr, steps, eps, corrected=False)


def run_without_start(grad_fn, theta0, lr, steps, eps):
    return _adam_variant(grad_fn, theta0, lr, steps, eps)[1:]


def run_ascent(grad_fn, theta0, lr, steps, eps):
    return _adam_variant(grad_fn, theta0, lr, steps, eps, sign=1.0)


_WRONG_RUN = [
    (run_uncorrected, "without the bias correction (divide m and v by 1 - β^t)"),
    (run_without_start, "the first row must be theta0: return steps + 1 iterates"),
    (run_ascent, "the sign is flipped: this climbs the loss"),
]

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
        expect_answer(
            attempt(first_step, g.clone(), lr, eps),
            _torch_adam(lambda _, g=g: g.clone(), torch.zeros_like(g), lr, 1, eps)[1],
            f"adam_first_step(g, lr={lr}, eps={eps}) for |g| from {g.abs().min().item():g} to "
            f"{g.abs().max().item():g}",
            wrong={fb: f(g, lr, eps) for f, fb in _WRONG_FIRST_STEP},
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
        runs[scale, eps, steps] = expect_answer(
            attempt(run, grad_fn, theta0.clone(), 0.05, steps, eps),
            _torch_adam(grad_fn, theta0, 0.05, steps, eps),
            f"adam_run(grad_fn, theta0, lr=0.05, steps={steps}, eps={eps}) for {scale:g} x "
            f"the loss",
            wrong={fb: f(grad_fn, theta0, 0.05, steps, eps) for f, fb in _WRONG_RUN},
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


def path_velocity_form(grad_fn, theta0, lrs, beta):
    return _velocity_path(grad_fn, theta0, lrs, beta, lambda old, new: 1.0)


def path_ratio_inverted(grad_fn, theta0, lrs, beta):
    return _velocity_path(grad_fn, theta0, lrs, beta, lambda old, new: old / new)


def path_without_start(grad_fn, theta0, lrs, beta):
    return _velocity_path(grad_fn, theta0, lrs, beta, lambda old, new: new / old)[1:]


_WRONG_PATH = [
    (
        path_velocity_form,
        "that is the velocity form, v_t = β v_{t-1} - η_t g_t; torch's update rescales the old "
        "velocity by η_t / η_{t-1}",
    ),
    (
        path_ratio_inverted,
        "the ratio is upside down: it is η_t / η_{t-1}, the new rate over the old",
    ),
    (path_without_start, "the first row must be theta0: return T + 1 iterates"),
]


@exercise("15.3", "torch_momentum_path")
def torch_momentum(answer) -> str:
    """The rescaled-velocity recursion vs torch.optim.SGD(momentum) under three schedules."""
    Hk, start = _rotated_quadratic(50.0)

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
        expect_answer(
            attempt(answer, grad_fn, theta0.clone(), list(lrs), beta),
            _torch_sgd(grad_fn, theta0, lrs, beta),
            f"torch_momentum_path for {name}",
            wrong={fb: f(grad_fn, theta0, lrs, beta) for f, fb in _WRONG_PATH},
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches torch.optim.SGD(momentum) under warmup + cosine, a step cut and a "
        "constant rate (where it is the velocity form, eq. 15.2)"
    )


def _rotated_quadratic(kappa):
    """The quadratic of §15.2: eigenvalues 1 and kappa, eigenvectors rotated by 30 degrees, and
    its start 2.5 u_flat + 0.3 u_steep. Returns (H (2, 2), theta0 (2,))."""
    angle = math.radians(30)
    R = torch.tensor(
        [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=F64
    )
    H = R @ torch.diag(torch.tensor([1.0, kappa], dtype=F64)) @ R.T
    return H, 2.5 * R[:, 0] + 0.3 * R[:, 1]


# --- 15.4 ---------------------------------------------------------------------------------------


def _distance(make_optimizer, gradient=5.0, lr=0.01, steps=100):
    """|theta_100 - theta_0| of a torch optimizer on L(theta) = gradient * theta from 0."""
    p = torch.zeros(1, dtype=F64, requires_grad=True)
    o = make_optimizer([p], lr)
    for _ in range(steps):
        p.grad = torch.full((1,), gradient, dtype=F64)
        o.step()
    return abs(p.item())


def guess_plain_gd():
    return 5.0, 1.0


def guess_terminal_speed():
    return 50.0, 1.0


def guess_adam_like_sgd():
    return 45.5, 5.0


def guess_adam_like_momentum():
    return 45.5, 10.0


_WRONG_MOMENTUM = {
    5.0: "that is plain gradient descent, 100 η g; momentum accumulates the gradient",
    50.0: "that is the terminal speed η g/(1 - β) from the first step on; the velocity needs "
    "about 1/(1 - β) = 10 steps to build up",
}
_WRONG_ADAM = {
    5.0: "Adam's step does not grow with the gradient: for a constant gradient m̂ = g and "
    "v̂ = g², so every step is η",
    10.0: "β1 averages the gradient, it does not accumulate it like momentum's β: every step is η",
    9.1: "β1 averages the gradient; only momentum's β accumulates it, by 1/(1 - β): every "
    "Adam step is η",
}


@exercise("15.4", "predict_distances")
def predict_distances(predict) -> str:
    """The guessed distances vs momentum and Adam measured in torch.optim on L = 5 θ."""
    momentum = _distance(lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9))
    adam_d = _distance(lambda ps, lr: torch.optim.Adam(ps, lr=lr))
    guess = expect_tuple(attempt(predict), "predict_distances()", ("momentum", "adam"))
    for what, got, want, wrong in [
        ("your distance for momentum", guess[0], momentum, _WRONG_MOMENTUM),
        ("your distance for Adam", guess[1], adam_d, _WRONG_ADAM),
    ]:
        expect_guess(got, want, what, wrong)
    return (
        f"momentum moved {momentum:.1f} (not 50: the velocity needs about 10 steps to reach "
        f"η g/(1 - β)), Adam {adam_d:.2f} (η per step, whatever the gradient's size)"
    )


# --- 15.5 ---------------------------------------------------------------------------------------


def _rates(H, theta0, lr, betas, steps, *, sign=-1.0, root=True, window="half"):
    """Momentum's measured rates, written out; the keywords make the typical mistakes."""
    out = []
    for beta in betas:
        theta, vel, norms = theta0.clone(), torch.zeros_like(theta0), [theta0.norm()]
        for _ in range(steps):
            vel = beta * vel + sign * lr * (H @ theta)
            theta = theta + vel
            norms.append(theta.norm())
        first = steps // 2 if window == "half" else 0
        ratio = norms[steps] / norms[first]
        out.append(ratio ** (1 / (steps - first)) if root else ratio)
    return torch.stack(out)


def _torch_rates(H, theta0, lr, betas, steps):
    """The same measurement on torch.optim.SGD(momentum=beta), the independent reference."""
    out = []
    for beta in betas:
        p = theta0.clone().requires_grad_(True)
        sgd = torch.optim.SGD([p], lr=lr, momentum=beta)
        norms = [theta0.norm()]
        for _ in range(steps):
            p.grad = H @ p.detach()
            sgd.step()
            norms.append(p.detach().norm())
        out.append((norms[steps] / norms[steps // 2]) ** (2 / steps))
    return torch.stack(out)


def rates_without_root(H, theta0, lr, betas, steps):
    return _rates(H, theta0, lr, betas, steps, root=False)


def rates_from_the_start(H, theta0, lr, betas, steps):
    return _rates(H, theta0, lr, betas, steps, window="all")


def rates_uphill(H, theta0, lr, betas, steps):
    return _rates(H, theta0, lr, betas, steps, sign=1.0)


_WRONG_RATES = [
    (
        rates_without_root,
        "that is the contraction over T/2 steps; the rate per step is its 2/T-th power",
    ),
    (
        rates_from_the_start,
        "measure after the transient: compare ||θ_T|| with ||θ_{T/2}||, not with ||θ_0||",
    ),
    (rates_uphill, "the velocity must point downhill: v_t = β v_{t-1} - η g_t"),
]


@exercise("15.5", "momentum_rates")
def momentum_rates(answer) -> str:
    """Measured momentum rates vs the same measurement on torch.optim.SGD(momentum)."""
    H50, start = _rotated_quadratic(50.0)
    lr50 = 4 / (math.sqrt(50.0) + 1) ** 2
    beta_star = ((math.sqrt(50.0) - 1) / (math.sqrt(50.0) + 1)) ** 2
    cases = [
        (
            "the κ = 50 quadratic",
            H50,
            start,
            lr50,
            [0.0, 0.3, 0.55, beta_star, 0.7, 0.9, 0.99],
            200,
        ),
        (
            "diag(1, 200)",
            torch.diag(torch.tensor([1.0, 200.0], dtype=F64)),
            torch.tensor([1.0, -1.0], dtype=F64),
            0.015,
            [0.5, 0.8, 0.95],
            120,
        ),
    ]
    for name, H, theta0, lr, betas, steps in cases:
        got = attempt(answer, H.clone(), theta0.clone(), lr, list(betas), steps)
        expect_answer(
            got,
            _torch_rates(H, theta0, lr, betas, steps),
            f"momentum_rates on {name} (lr = {lr:.4g}, {steps} steps)",
            wrong={fb: f(H, theta0, lr, betas, steps) for f, fb in _WRONG_RATES},
            atol=0,
            rtol=1e-8,
        )
    return (
        "the rates match the same measurement on torch.optim.SGD(momentum) for 10 values of β "
        "on two quadratics"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


ref_matrix = _ref("15.1", "momentum_matrix")
ref_limit = _ref("15.1", "momentum_limit")
ref_first_step = _ref("15.2", "adam_first_step")
ref_run = _ref("15.2", "adam_run")


def matrix_numpy_list(lam, lr, beta):
    return [[1 + beta - lr * lam, -beta], [1.0]]


def guess_one_number():
    return 45.5


MISTAKES = {
    "15.1": [((f, ref_limit), fb.split(":")[0]) for f, fb in _WRONG_MATRIX]
    + [((matrix_numpy_list, ref_limit), "should be a number or a tensor")]
    + [((ref_matrix, f), fb.split(";")[0].split(":")[0]) for f, fb in _WRONG_LIMIT],
    "15.2": [((f, ref_run), fb.split(":")[0]) for f, fb in _WRONG_FIRST_STEP]
    + [((ref_first_step, f), fb.split(":")[0]) for f, fb in _WRONG_RUN],
    "15.3": [(f, fb.split(":")[0].split(",")[0]) for f, fb in _WRONG_PATH],
    "15.4": [
        (guess_plain_gd, "that is plain gradient descent"),
        (guess_terminal_speed, "that is the terminal speed"),
        (guess_adam_like_sgd, "Adam's step does not grow with the gradient"),
        (guess_adam_like_momentum, "β1 averages the gradient"),
        (guess_one_number, "should return a pair (momentum, adam)"),
    ],
    "15.5": [(f, fb.split(":")[0].split(";")[0]) for f, fb in _WRONG_RATES],
}
