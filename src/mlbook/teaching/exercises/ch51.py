"""Checks of the exercises of chapter 51 (diffusion and Schrödinger bridges).

The references are independent of :mod:`mlbook.beyond.diffusion`: the signal left by Ho et al.'s
schedule as a product of Python floats (51.1); the closed-form forward sample with that product
(51.2); entropic transport costs from Sinkhorn's scaling form written in NumPy, beside the exact
cost from ``scipy.optimize.linear_sum_assignment`` (51.3).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.optimize
import torch

from . import as_number, attempt, exercise, expect_answer

F64 = torch.float64

# --- 51.1 ----------------------------------------------------------------------------------------


def _ho_betas() -> list[float]:
    """Ho et al.'s linear schedule, T = 1000, beta from 1e-4 to 0.02, as Python floats."""
    return [1e-4 + (0.02 - 1e-4) * i / 999 for i in range(1000)]


def _alpha_bar_T() -> float:
    return math.prod(1 - b for b in _ho_betas())


def guess_alpha_bar():
    return _alpha_bar_T()


def guess_one_step():
    return math.sqrt(1 - 0.02)


def guess_beta_T_every_step():
    return (1 - 0.02) ** 1000


def guess_zero():
    return 0.0


WRONG_SIGNAL = [
    (
        guess_alpha_bar,
        "that is alpha_bar_T, the signal's share of the variance; its amplitude is the square root",
    ),
    (
        guess_one_step,
        "that is the amplitude kept by one step, sqrt(1 - beta_T); 1000 steps compound",
    ),
    (
        guess_beta_T_every_step,
        "that uses 1 - beta_T = 0.98 at every step; beta grows linearly, its mean is about 0.01",
    ),
    (guess_zero, "the signal is never exactly zero: alpha_bar_T is a product of positive factors"),
]


@exercise("51.1", "predict_signal_left")
def signal_left(answer) -> str:
    """sqrt(alpha_bar_T) of the 1000-step schedule, within 25 %."""
    guess = as_number(attempt(answer), "predict_signal_left()")
    exact = math.sqrt(_alpha_bar_T())
    seen = (
        f"sqrt(alpha_bar_T) = {exact:.4f}, about exp(-sum(beta) / 2) with sum(beta) = "
        f"{sum(_ho_betas()):.2f}"
    )
    wrong = {fb: fn() for fn, fb in WRONG_SIGNAL}
    expect_answer(
        guess, exact, f"predict_signal_left() = {guess!r} ({seen})", wrong=wrong, atol=0, rtol=0.25
    )
    return f"right: {seen}; 0.6 % of the amplitude, buried under noise of standard deviation 1"


# --- 51.2 ----------------------------------------------------------------------------------------


def _forward(x0, t, eps, betas, *, upto=None, std=True, cumulative=True, sqrt_signal=True):
    b = [float(v) for v in betas]
    upto = t + 1 if upto is None else upto
    ab = math.prod(1 - v for v in b[:upto]) if cumulative else 1 - b[t]
    signal = math.sqrt(ab) if sqrt_signal else ab
    noise = math.sqrt(1 - ab) if std else 1 - ab
    return signal * x0 + noise * eps


def forward_reference(x0, t, eps, betas):
    return _forward(x0, t, eps, betas)


def forward_off_by_one(x0, t, eps, betas):
    return _forward(x0, t, eps, betas, upto=t)


def forward_variance_as_std(x0, t, eps, betas):
    return _forward(x0, t, eps, betas, std=False)


def forward_one_step(x0, t, eps, betas):
    return _forward(x0, t, eps, betas, cumulative=False)


def forward_no_sqrt(x0, t, eps, betas):
    return _forward(x0, t, eps, betas, sqrt_signal=False)


WRONG_FORWARD = [
    (
        forward_off_by_one,
        "the product stops one step early: index t is step t + 1, so alpha_bar includes beta[t]",
    ),
    (forward_variance_as_std, "eps is scaled by the variance 1 - alpha_bar; scale it by its root"),
    (forward_one_step, "that is one step's kernel with alpha_t; the closed form uses alpha_bar_t"),
    (forward_no_sqrt, "x0 is scaled by alpha_bar; the mean is sqrt(alpha_bar) x0"),
]


@exercise("51.2", "forward_sample")
def forward_sample(answer) -> str:
    """Eq. 51.1 against a product of Python floats, for three schedules and several steps."""
    for seed, (T, b1, bT) in enumerate(((10, 0.05, 0.3), (100, 1e-4, 0.2), (1000, 1e-4, 0.02))):
        g = torch.Generator().manual_seed(512 + seed)
        betas = torch.linspace(b1, bT, T, dtype=F64)
        for t in (0, T // 3, T - 1):
            x0 = torch.randn(5, 3, generator=g, dtype=F64)
            eps = torch.randn(5, 3, generator=g, dtype=F64)
            got = attempt(answer, x0.clone(), t, eps.clone(), betas.clone())
            wrong = {fb: fn(x0, t, eps, betas) for fn, fb in WRONG_FORWARD}
            expect_answer(
                got,
                forward_reference(x0, t, eps, betas),
                f"forward_sample(x0, t={t}, eps, betas) with T = {T}",
                wrong=wrong,
                atol=1e-12,
                rtol=1e-10,
            )
    return "matches sqrt(alpha_bar_t) x0 + sqrt(1 - alpha_bar_t) eps for T = 10, 100, 1000"


# --- 51.3 ----------------------------------------------------------------------------------------


def _cost(x, y, kind="half_sq"):
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    return {"half_sq": 0.5 * d2, "sq": d2, "dist": np.sqrt(d2)}[kind]


def _sinkhorn_np(C, eps, tol=1e-11, iters=1_000_000):
    """Sinkhorn in its scaling form u = a / (K v), v = b / (K^T u) with uniform marginals, in
    NumPy (safe here: C / eps stays far below the underflow of exp); returns the plan."""
    n, m = C.shape
    K = np.exp(-C / eps)
    u, v = np.ones(n), np.ones(m)
    for _ in range(iters):
        u = (1 / n) / (K @ v)
        v = (1 / m) / (K.T @ u)
        P = u[:, None] * K * v[None, :]
        if np.abs(P.sum(1) - 1 / n).max() < tol:
            break
    return P


def _costs(x, y, eps_list, kind="half_sq", with_entropy=False):
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    C = _cost(x, y, kind)
    out = []
    for eps in eps_list:
        P = _sinkhorn_np(C, eps)
        value = float((P * C).sum())
        if with_entropy:
            ref = 1.0 / (len(x) * len(y))
            value += eps * float((P * np.log(np.maximum(P, 1e-300) / ref)).sum())
        out.append(value)
    return out


def costs_reference(x, y, eps_list):
    return _costs(x.numpy(), y.numpy(), eps_list)


def costs_with_entropy(x, y, eps_list):
    return _costs(x.numpy(), y.numpy(), eps_list, with_entropy=True)


def costs_full_square(x, y, eps_list):
    return _costs(x.numpy(), y.numpy(), eps_list, kind="sq")


def costs_distance(x, y, eps_list):
    return _costs(x.numpy(), y.numpy(), eps_list, kind="dist")


WRONG_COSTS = [
    (
        costs_with_entropy,
        "that adds eps KL(P || a b^T): return the transport cost <P, C> alone",
    ),
    (costs_full_square, "the cost is half the squared distance, C = ||x - y||^2 / 2"),
    (costs_distance, "the cost is half the squared distance, not the distance ||x - y||"),
]


@exercise("51.3", "entropic_costs")
def entropic_costs(answer) -> str:
    """<P_eps, C> against a NumPy Sinkhorn (scaling form); reveals the gaps to exact OT."""
    g = torch.Generator().manual_seed(513)
    n = 24
    x = 0.5 * torch.randn(n, 2, generator=g, dtype=F64)
    angle = 2 * math.pi * torch.rand(n, generator=g, dtype=F64)
    y = 2 * torch.stack([angle.cos(), angle.sin()], dim=1)
    eps_list = [1.0, 0.3, 0.1, 0.03]
    got = attempt(answer, x.clone(), y.clone(), list(eps_list))
    want = costs_reference(x, y, eps_list)
    wrong = {fb: fn(x, y, eps_list) for fn, fb in WRONG_COSTS}
    expect_answer(
        got, want, "entropic_costs(x, y, [1.0, 0.3, 0.1, 0.03])", wrong=wrong, atol=1e-6, rtol=0
    )
    C = _cost(x.numpy(), y.numpy())
    rows, cols = scipy.optimize.linear_sum_assignment(C)
    ot = float(C[rows, cols].mean())
    gaps = ", ".join(f"{w - ot:.3g}" for w in want)
    return (
        f"right: exact OT {ot:.4f}; the entropic excess cost for eps = 1, 0.3, 0.1, 0.03 is "
        f"{gaps}, each below eps log n"
    )


MISTAKES = {
    "51.1": [(fn, fb.split(";")[0]) for fn, fb in WRONG_SIGNAL],
    "51.2": [(fn, fb.split(":")[0].split(";")[0]) for fn, fb in WRONG_FORWARD],
    "51.3": [(fn, fb.split(":")[0]) for fn, fb in WRONG_COSTS],
}
