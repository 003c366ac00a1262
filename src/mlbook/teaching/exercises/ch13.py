"""Checks of the exercises of chapter 13 (loss functions and divergences).

The references are independent of the reader's answer and of :mod:`mlbook.nn.losses`: NumPy's
``np.quantile(method="inverted_cdf")`` for the pinball minimiser, float64 autograd through
``F.logsigmoid`` for the focal-loss derivative, autograd of ``F.cross_entropy`` and ``F.kl_div``
(and gradient descent driven by it) for distillation, ``scipy.integrate.quad`` for the moments of a
Gaussian mixture and ``torch.trapezoid`` for the reverse-KL profile, SciPy's linear programme and
``numpy.linalg.lstsq`` for the line fits, ``F.binary_cross_entropy_with_logits(pos_weight=...)``
for the weighted loss.

Each typical wrong answer is written once, as a function of the exercise's arguments computed from
those references; a check passes the ones it names to ``expect_answer(wrong=...)``, and
``MISTAKES`` lists them (with the reference answers of the other functions) for the tests.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy import integrate, optimize

from ..check import fmt
from . import (
    Incorrect,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    is_close,
    wrong_values,
)
from . import reference_answer as _ref

F64 = torch.float64


def _expect_lazily(got, want, what, wrong, *, atol, rtol):
    """``expect_answer``, building the named wrong answers (``wrong()``, costly here: each one
    reruns a gradient descent) only when the answer is not right."""
    g, w = as_tensor(got, what), as_tensor(want, "the reference")
    if (
        g.shape == w.shape
        and bool(torch.isfinite(g).all())
        and is_close(g, w, atol=atol, rtol=rtol)
    ):
        return g
    return expect_answer(g, w, what, wrong=wrong(), atol=atol, rtol=rtol)


# --- 13.1 ---------------------------------------------------------------------------------------


def pinball_swapped(r, tau):
    return torch.maximum((1 - tau) * r, -tau * r)


def pinball_symmetric(r, tau):
    return tau * r.abs()


def pinball_min_not_max(r, tau):
    return torch.minimum(tau * r, (tau - 1) * r)


def pinball_half_abs(r, tau):
    return r.abs() / 2


WRONG_13_1_LOSS = [
    (
        pinball_swapped,
        "τ and 1 - τ are swapped: a positive residual (y above c) costs τ per unit, a negative "
        "one 1 - τ",
    ),
    (pinball_symmetric, "both sides are weighted by τ; the negative side has weight 1 - τ"),
    (
        pinball_min_not_max,
        "max, not min: the loss is the larger of τ r and (τ - 1) r, never negative",
    ),
    (pinball_half_abs, "this ignores τ; ρ_τ is |r|/2 only at τ = 1/2"),
]


def _quantile(y, tau):
    return np.quantile(y.numpy(), tau, method="inverted_cdf")


def minimiser_swapped(y, tau):
    return torch.tensor(_quantile(y, 1 - tau), dtype=F64)


def minimiser_interpolated(y, tau):
    return torch.tensor(np.quantile(y.numpy(), tau), dtype=F64)


def minimiser_mean(y, tau):
    return y.mean()


def minimiser_median(y, tau):
    return torch.tensor(np.median(y.numpy()), dtype=F64)


def minimiser_index(y, tau):
    return torch.tensor(float(np.flatnonzero(y.numpy() == _quantile(y, tau))[0]), dtype=F64)


WRONG_13_1_MINIMISER = [
    (minimiser_swapped, "τ and 1 - τ are swapped: this is the (1 - τ)-quantile"),
    (
        minimiser_interpolated,
        "np.quantile's default interpolates between data points; the minimiser of the pinball "
        "loss is a data point",
    ),
    (minimiser_mean, "that is the mean, the minimiser of the squared error"),
    (minimiser_median, "that is the median, the minimiser at τ = 1/2 only"),
    (minimiser_index, "that is the index j of the minimiser; return the data value y_j"),
]


@exercise("13.1", "pinball_loss", "pinball_minimiser")
def pinball(loss, minimiser) -> str:
    """ρ_τ elementwise, and the data point that minimises the summed loss vs np.quantile."""
    gen = torch.Generator().manual_seed(131)
    r = torch.cat(
        [3 * torch.randn(4, 25, generator=gen, dtype=F64), torch.zeros(4, 1, dtype=F64)], dim=1
    )  # (4, 26), with r = 0
    for tau in (0.1, 0.25, 0.5, 0.9):
        expect_answer(
            attempt(loss, r.clone(), tau),
            (tau - (r < 0).to(F64)) * r,  # (τ - 1[r < 0]) r
            f"pinball_loss(r, tau={tau}), r of shape (4, 26)",
            wrong=wrong_values(WRONG_13_1_LOSS, r, tau),
            atol=1e-12,
            rtol=1e-10,
        )

    rng = np.random.default_rng(131)
    samples = [
        rng.exponential(1.0, size=37),
        rng.standard_normal(101),
        np.round(rng.exponential(1.0, size=53) * 2) / 2,  # many ties
        np.array([0.7]),
    ]  # N = 1
    for y in map(torch.tensor, samples):
        for tau in (0.1, 0.25, 0.5, 0.9):  # N τ is never an integer here
            expect_answer(
                attempt(minimiser, y.clone(), tau),
                _quantile(y, tau),
                f"pinball_minimiser(y, tau={tau}) for N = {len(y)}",
                wrong=wrong_values(WRONG_13_1_MINIMISER, y, tau),
                atol=1e-12,
                rtol=0,
            )
    return (
        "pinball_loss matches (τ - 1[r < 0]) r at τ = 0.1, 0.25, 0.5, 0.9; the minimiser "
        "equals np.quantile(method='inverted_cdf') for 4 samples (with ties, and N = 1)"
    )


# --- 13.2 ---------------------------------------------------------------------------------------


def _focal_autograd(z, y, gamma, alpha):
    """d/dz of -α_t (1 - p_t)^γ log p_t through F.logsigmoid, by autograd (float64)."""
    zr = z.clone().requires_grad_(True)
    zt = torch.where(y == 1, zr, -zr)
    a_t = torch.where(y == 1, torch.tensor(alpha, dtype=F64), torch.tensor(1 - alpha, dtype=F64))
    loss = -a_t * torch.exp(gamma * F.logsigmoid(-zt)) * F.logsigmoid(zt)
    (grad,) = torch.autograd.grad(loss.sum(), zr)
    return grad


def focal_grad_in_zt(z, y, gamma, alpha):
    return _focal_autograd(z, y, gamma, alpha) * (2 * y - 1)


def focal_grad_flipped(z, y, gamma, alpha):
    return -_focal_autograd(z, y, gamma, alpha)


def focal_grad_no_gamma_term(z, y, gamma, alpha):
    s = 2 * y - 1
    p_t = torch.sigmoid(s * z)
    alpha_t = alpha * y + (1 - alpha) * (1 - y)
    return -s * alpha_t * (1 - p_t) ** gamma * (1 - p_t)


def focal_grad_alpha_swapped(z, y, gamma, alpha):
    return _focal_autograd(z, y, gamma, 1 - alpha)


def focal_grad_naive_log(z, y, gamma, alpha):
    s = 2 * y - 1
    p_t = torch.sigmoid(s * z)
    alpha_t = alpha * y + (1 - alpha) * (1 - y)
    return s * alpha_t * (1 - p_t) ** gamma * (gamma * p_t * torch.log(p_t) - (1 - p_t))


WRONG_13_2 = [
    (
        focal_grad_in_zt,
        "this is the derivative in z_t = s z; multiply by s = 2y - 1 to get d/dz",
    ),
    (
        focal_grad_flipped,
        "the sign is flipped: raising the logit of the true class lowers the loss",
    ),
    (
        focal_grad_no_gamma_term,
        "the term from differentiating (1 - p_t)^γ is missing (the γ p_t log p_t in the bracket)",
    ),
    (
        focal_grad_alpha_swapped,
        "α_t is swapped: α weights the positives (y = 1), 1 - α the negatives",
    ),
]


@exercise("13.2", "focal_grad")
def focal_grad(answer) -> str:
    """The focal loss's derivative in the logit vs float64 autograd, logits up to ±1000."""
    gen = torch.Generator().manual_seed(132)
    z = torch.cat(
        [
            4 * torch.randn(200, generator=gen, dtype=F64),
            torch.tensor([-1000.0, -50.0, 0.0, 50.0, 1000.0] * 2, dtype=F64),
        ]
    )
    y = torch.cat(
        [
            (torch.rand(200, generator=gen) < 0.5).to(F64),
            torch.tensor([1.0] * 5 + [0.0] * 5, dtype=F64),
        ]
    )
    for gamma, alpha in [(2.0, 0.25), (0.5, 0.25), (0.0, 0.25), (5.0, 0.6)]:
        expect_answer(
            attempt(answer, z.clone(), y.clone(), gamma, alpha),
            _focal_autograd(z, y, gamma, alpha),
            f"focal_grad(z, y, gamma={gamma}, alpha={alpha})",
            wrong=wrong_values(WRONG_13_2, z, y, gamma, alpha),
            atol=1e-12,
            rtol=1e-9,
        )
    return (
        "matches float64 autograd of the focal loss for γ = 0, 0.5, 2, 5 and two α, "
        "finite for logits up to ±1000"
    )


# --- 13.3 ---------------------------------------------------------------------------------------


def _kd_autograd(z, v, y, lam, T):
    """∇_z of the batch sum of (1 - λ) CE(y, softmax z) + λ T² KL(p_T || q_T), by autograd."""
    zr = z.clone().requires_grad_(True)
    kd = F.kl_div(
        F.log_softmax(zr / T, dim=-1),
        F.log_softmax(v / T, dim=-1),
        log_target=True,
        reduction="sum",
    )
    total = (1 - lam) * F.cross_entropy(zr, y, reduction="sum") + lam * T**2 * kd
    (grad,) = torch.autograd.grad(total, zr)
    return grad


def _descend(lr, steps, start, grad_fn):
    """Gradient descent from ``start``; returns the iterates after 0, 1, ..., steps steps."""
    z, path = start, [start]
    for _ in range(steps):
        z = z - lr * grad_fn(z)
        path.append(z)
    return path


def _descend_closed(v, T, lr, steps, factor):
    """Gradient descent from zero logits on the gradient factor (q_T - p_T), after ``steps``."""
    p_T = torch.softmax(v / T, -1)
    return _descend(
        lr, steps, torch.zeros_like(v), lambda z: factor * (torch.softmax(z / T, -1) - p_T)
    )[steps]


def _hard(z, y, T=1.0):
    return torch.softmax(z / T, -1) - F.one_hot(y, z.shape[-1]).to(F64)


def _soft(z, v, T):
    return torch.softmax(z / T, -1) - torch.softmax(v / T, -1)


def student_grad_without_T(z, v, y, lam, T):
    return (1 - lam) * _hard(z, y) + lam * _soft(z, v, T)


def student_grad_T_squared(z, v, y, lam, T):
    return (1 - lam) * _hard(z, y) + lam * T**2 * _soft(z, v, T)


def student_grad_soft_ce(z, v, y, lam, T):
    return (1 - lam) * _hard(z, y, T) + lam * T * _soft(z, v, T)


def student_grad_lam_swapped(z, v, y, lam, T):
    return _kd_autograd(z, v, y, 1 - lam, T)


def student_grad_flipped(z, v, y, lam, T):
    return -_kd_autograd(z, v, y, lam, T)


def student_grad_mean(z, v, y, lam, T):
    return _kd_autograd(z, v, y, lam, T) / z.shape[0]


WRONG_13_3_GRAD = [
    (
        student_grad_without_T,
        "the distillation term misses the factor T: ∇_z T² KL(p_T || q_T) = T (q_T - p_T)",
    ),
    (
        student_grad_T_squared,
        "the distillation term has T² where it needs T: the chain rule through z/T takes one "
        "factor T away",
    ),
    (
        student_grad_soft_ce,
        "the hard-label term uses the softened q_T; the cross-entropy is taken at T = 1",
    ),
    (student_grad_lam_swapped, "λ and 1 - λ are swapped: λ weights the distillation term"),
    (student_grad_flipped, "the sign is flipped: this is the direction of steepest ascent"),
    (
        student_grad_mean,
        "that is the gradient of the batch mean; the loss is summed over the batch",
    ),
]


def distil_ascent(v, T, lr, steps):
    return _descend_closed(v, T, -lr, steps, T)


def distil_without_T(v, T, lr, steps):
    return _descend_closed(v, T, lr, steps, 1.0)


def distil_T_squared(v, T, lr, steps):
    return _descend_closed(v, T, lr, steps, T**2)


def distil_one_more(v, T, lr, steps):
    return _descend_closed(v, T, lr, steps + 1, T)


def distil_one_fewer(v, T, lr, steps):
    return _descend_closed(v, T, lr, steps - 1, T) if steps > 0 else None


WRONG_13_3_DISTIL = [
    (distil_ascent, "ascent, not descent: step against the gradient"),
    (distil_without_T, "the gradient misses the factor T (it is T (q_T - p_T))"),
    (distil_T_squared, "the gradient has T² where it needs T"),
    (distil_one_more, "one step too many: take exactly `steps` steps"),
    (distil_one_fewer, "one step too few: take exactly `steps` steps"),
]


@exercise("13.3", "student_grad", "distil")
def distillation(student_grad, distil) -> str:
    """The mixed student gradient vs autograd, and distillation by gradient descent."""
    gen = torch.Generator().manual_seed(133)
    cases = [
        (8, 5, 0.7, 3.0, 1.0),
        (4, 3, 0.0, 1.0, 1.0),
        (6, 10, 1.0, 0.5, 1.0),
        (5, 4, 0.3, 2.0, 30.0),
    ]  # last: logits of size ~30
    for B, K, lam, T, scale in cases:
        z = scale * torch.randn(B, K, generator=gen, dtype=F64)
        v = 2 * scale * torch.randn(B, K, generator=gen, dtype=F64)
        y = torch.randint(0, K, (B,), generator=gen)
        expect_answer(
            attempt(student_grad, z.clone(), v.clone(), y.clone(), lam, T),
            _kd_autograd(z, v, y, lam, T),
            f"student_grad(z, v, y, lam={lam}, T={T}) for B = {B}, K = {K}",
            wrong=wrong_values(WRONG_13_3_GRAD, z, v, y, lam, T),
            atol=1e-10,
            rtol=1e-8,
        )

    v = 2 * torch.randn(8, 5, generator=gen, dtype=F64)
    labels = v.argmax(-1)  # unused at λ = 1
    for T, lr, steps in [(3.0, 0.5, 300), (1.0, 0.2, 1), (2.0, 0.3, 0)]:
        path = _descend(
            lr, steps, torch.zeros_like(v), lambda z, T=T: _kd_autograd(z, v, labels, 1.0, T)
        )
        got = _expect_lazily(
            attempt(distil, v.clone(), T, lr, steps),
            path[steps],
            f"distil(v, T={T}, lr={lr}, steps={steps})",
            lambda T=T, lr=lr, steps=steps: wrong_values(WRONG_13_3_DISTIL, v, T, lr, steps),
            atol=1e-9,
            rtol=1e-8,
        )
        if steps == 300:
            gap = (torch.softmax(got / T, -1) - torch.softmax(v / T, -1)).abs().max()
            expect(bool(gap < 1e-4), "after 300 steps the student's q_T should match p_T")
    return (
        "student_grad matches autograd for 4 batches (λ = 0, 0.3, 0.7, 1; large logits); "
        "distil matches gradient descent on F.kl_div's gradient for 0, 1 and 300 steps, "
        "and after 300 steps q_T matches p_T"
    )


# --- 13.4 ---------------------------------------------------------------------------------------


def _moments_by_quadrature(w, m, s):
    """Mean and sd of a Gaussian mixture by adaptive quadrature of x p(x) and x² p(x)."""

    def pdf(x):
        return sum(
            wi * math.exp(-0.5 * ((x - mi) / si) ** 2) / (si * math.sqrt(2 * math.pi))
            for wi, mi, si in zip(w, m, s, strict=True)
        )

    lo, hi = min(m) - 12 * max(s), max(m) + 12 * max(s)
    points = sorted(m)
    mean = integrate.quad(
        lambda x: x * pdf(x), lo, hi, points=points, epsabs=1e-13, epsrel=1e-13, limit=200
    )[0]
    var = integrate.quad(
        lambda x: (x - mean) ** 2 * pdf(x),
        lo,
        hi,
        points=points,
        epsabs=1e-13,
        epsrel=1e-13,
        limit=200,
    )[0]
    return mean, math.sqrt(var)


def _moments(weights, means, sds):
    """(mean, sd) of the mixture as float64 scalar tensors."""
    mean, sd = _moments_by_quadrature(weights.tolist(), means.tolist(), sds.tolist())
    return torch.tensor(mean, dtype=F64), torch.tensor(sd, dtype=F64)


def moments_between_only(weights, means, sds):
    mean = (weights * means).sum()
    return mean, ((weights * means**2).sum() - mean**2).sqrt()


def moments_variance(weights, means, sds):
    mean, sd = _moments(weights, means, sds)
    return mean, sd**2


def moments_mean_sd(weights, means, sds):
    return _moments(weights, means, sds)[0], (weights * sds).sum()


def moments_unweighted_mean(weights, means, sds):
    return means.mean(), _moments(weights, means, sds)[1]


def moments_tensor(weights, means, sds):
    return torch.stack(_moments(weights, means, sds))


WRONG_13_4_MOMENTS = [
    (
        moments_between_only,
        "the sd misses the spread within the components: E[x²] = Σ w (σ² + μ²)",
    ),
    (moments_variance, "the second entry is the variance; return the standard deviation"),
    (
        moments_mean_sd,
        "the weighted mean of the component sds is not the mixture's sd: the spread of the means "
        "adds to it",
    ),
    (
        moments_unweighted_mean,
        "the mean must weight the component means by the mixture weights",
    ),
]


def _kl_tables(x, log_p, mus, sigmas):
    """(reverse, forward) KL tables (S, M) of q = N(mu, sigma^2) and p, by the trapezoid rule."""
    log_q = (
        -0.5 * ((x - mus[None, :, None]) / sigmas[:, None, None]) ** 2
        - torch.log(sigmas[:, None, None])
        - 0.5 * math.log(2 * math.pi)
    )  # (S, M, X)
    reverse = torch.trapezoid(log_q.exp() * (log_q - log_p), x, dim=-1)
    forward = torch.trapezoid(log_p.exp() * (log_p - log_q), x, dim=-1)
    return reverse, forward


def profile_forward(x, log_p, mus, sigmas):
    return _kl_tables(x, log_p, mus, sigmas)[1].min(dim=0).values


def profile_without_dx(x, log_p, mus, sigmas):
    return _kl_tables(x, log_p, mus, sigmas)[0].min(dim=0).values / (x[1] - x[0])


def profile_mean_over_sigma(x, log_p, mus, sigmas):
    return _kl_tables(x, log_p, mus, sigmas)[0].mean(dim=0)


WRONG_13_4_PROFILE = [
    (profile_forward, "that is the forward KL(p || q); the reverse KL averages over q"),
    (profile_without_dx, "the Riemann sum needs the grid spacing dx"),
    (profile_mean_over_sigma, "take the minimum over σ, not the mean"),
]


def _mean_sd(value, what: str) -> torch.Tensor:
    mean, sd = expect_tuple(value, what, ("mean", "sd"))
    return torch.stack(
        [as_tensor(mean, f"the mean of {what}", ()), as_tensor(sd, f"the sd of {what}", ())]
    )


def _log_mixture(x, w, m, s):
    parts = [
        math.log(wi) - 0.5 * ((x - mi) / si) ** 2 - math.log(si * math.sqrt(2 * math.pi))
        for wi, mi, si in zip(w, m, s, strict=True)
    ]
    return torch.logsumexp(torch.stack(parts), dim=0)


@exercise("13.4", "mixture_moments", "reverse_kl_profile")
def forward_reverse(moments, profile) -> str:
    """Moment matching vs quadrature, and the reverse-KL profile vs the trapezoid rule."""
    mixtures = [
        ((0.6, 0.4), (-2.0, 2.0), (0.7, 0.7)),
        ((0.5, 0.5), (-2.0, 2.0), (0.7, 0.7)),
        ((0.2, 0.5, 0.3), (-1.0, 0.5, 3.0), (0.4, 1.0, 0.6)),
        ((1.0,), (0.3,), (1.5,)),
    ]
    for w, m, s in mixtures:
        wt, mt, st = (torch.tensor(a, dtype=F64) for a in (w, m, s))
        what = f"mixture_moments for weights {w}"
        expect_answer(
            _mean_sd(attempt(moments, wt.clone(), mt.clone(), st.clone()), what),
            list(_moments_by_quadrature(w, m, s)),
            what,
            wrong={fb: torch.stack(f(wt, mt, st)) for f, fb in WRONG_13_4_MOMENTS},
            atol=1e-9,
            rtol=1e-9,
        )

    x = torch.linspace(-20, 20, 401, dtype=F64)
    mus = torch.linspace(-3.5, 3.5, 29, dtype=F64)
    sigmas = torch.linspace(0.3, 2.5, 23, dtype=F64)
    for w, m, s in mixtures[:2] + [((1.0,), (0.5,), (0.8,))]:
        log_p = _log_mixture(x, w, m, s)
        got = expect_answer(
            attempt(profile, x.clone(), log_p.clone(), mus.clone(), sigmas.clone()),
            _kl_tables(x, log_p, mus, sigmas)[0].min(dim=0).values,
            f"reverse_kl_profile for the mixture with weights {w}",
            wrong=wrong_values(WRONG_13_4_PROFILE, x, log_p, mus, sigmas),
            atol=1e-9,
            rtol=1e-9,
        )
        if w == (0.5, 0.5):
            expect(
                bool(torch.allclose(got, got.flip(0), atol=1e-9)),
                "for equal weights the profile should be symmetric in μ",
            )
    return (
        "mixture_moments matches quadrature for 4 mixtures (C = 1 to 3); the reverse-KL "
        "profile matches the trapezoid rule for 3 targets and is symmetric for equal "
        "weights, with two equal minima"
    )


# --- 13.5 ---------------------------------------------------------------------------------------

_OPTIONS = ("none", "small", "large")


def _line_with_outliers():
    """60 points on y = 1 + 0.5 x with noise, four pulled far below the line (as in §13.1)."""
    rng = np.random.default_rng(135)
    x = np.sort(rng.uniform(0, 10, 60))
    y = 1.0 + 0.5 * x + rng.normal(0, 0.5, 60)
    outliers = np.arange(52, 60, 2)
    y[outliers] -= rng.uniform(6, 10, outliers.size)
    return np.stack([x, np.ones(60)], axis=1), y, outliers


def _l1_fit(X, y):
    """argmin_theta sum_i |y_i - x_i theta| as a linear programme (SciPy's HiGHS)."""
    n = len(y)
    lp = optimize.linprog(
        np.r_[0.0, 0.0, np.ones(n)],
        A_ub=np.block([[X, -np.eye(n)], [-X, -np.eye(n)]]),
        b_ub=np.r_[y, -y],
        bounds=[(None, None)] * 2 + [(0, None)] * n,
        method="highs",
    )
    return lp.x[:2]


def _outlier_experiment():
    """(change of the absolute-error fit, change of the squared-error fit) when the lowest
    outlier moves 100 times as far below the line."""
    X, y, outliers = _line_with_outliers()
    far = outliers[np.argmin(y[outliers] - (1.0 + 0.5 * X[outliers, 0]))]
    moved = y.copy()
    moved[far] = 1.0 + 0.5 * X[far, 0] + 100 * (y[far] - 1.0 - 0.5 * X[far, 0])
    l1 = np.abs(_l1_fit(X, moved) - _l1_fit(X, y)).max()
    l2 = np.abs(np.linalg.lstsq(X, moved, rcond=None)[0] - np.linalg.lstsq(X, y, rcond=None)[0])
    return float(l1), float(l2.max())


def guess_small():
    return "small"


def guess_large():
    return "large"


WRONG_13_5 = [
    (
        guess_small,
        "not even a little: under absolute error every point pulls on the fit with the force "
        "ψ(r) = sign r, whatever its distance, so moving it further out on the same side changes "
        "nothing",
    ),
    (
        guess_large,
        "that is what the squared error does (its pull ψ(r) = r grows with the distance); the "
        "absolute error's pull is sign r",
    ),
]


@exercise("13.5", "predict_outlier_effect")
def outlier_effect(predict) -> str:
    """The reader's guess of how far the absolute-error fit moves vs the measured change."""
    guess = attempt(predict)
    expect(
        isinstance(guess, str) and guess in _OPTIONS,
        f"predict_outlier_effect() should return one of {_OPTIONS}, got {guess!r}",
    )
    l1, l2 = _outlier_experiment()
    expect(l1 < 1e-6, "the absolute-error fit should not move")  # the experiment itself
    reveal = (
        "moving the outlier 100 times further out changes the absolute-error fit by less than "
        f"1e-6 (rounding) and the squared-error fit by {fmt(l2, 3)}"
    )
    for wrong, feedback in WRONG_13_5:
        if guess == wrong():
            raise Incorrect(f"predict_outlier_effect(): {feedback} ({reveal})")
    return f"right: {reveal}: the median line does not see how far a point is, only on which side"


# --- 13.6 ---------------------------------------------------------------------------------------


def _pos_weight_reference(z, y, w):
    pw = torch.tensor(w, dtype=F64)
    return F.binary_cross_entropy_with_logits(
        z.double(), y.double(), pos_weight=pw, reduction="none"
    )


def _softplus(t):
    return t.double().clamp(min=0) + torch.log1p(torch.exp(-t.double().abs()))


def pos_weight_on_negatives(z, y, w):
    return y * _softplus(-z) + w * (1 - y) * _softplus(z)


def pos_weight_on_both(z, y, w):
    return w * _pos_weight_reference(z, y, 1.0)


def pos_weight_signs_swapped(z, y, w):
    return w * y * _softplus(z) + (1 - y) * _softplus(-z)


def pos_weight_mean(z, y, w):
    return _pos_weight_reference(z, y, w).mean()


def pos_weight_naive(z, y, w):
    p = torch.sigmoid(z)
    return -(w * y * torch.log(p) + (1 - y) * torch.log(1 - p))


WRONG_13_6 = [
    (
        pos_weight_on_negatives,
        "the weight is on the negatives: pos_weight multiplies the positive term y (-log σ(z)) "
        "only",
    ),
    (pos_weight_on_both, "the weight multiplies both terms; it belongs to the positive one only"),
    (
        pos_weight_signs_swapped,
        "the two softplus terms are swapped: -log σ(z) = softplus(-z) goes with y, "
        "-log(1 - σ(z)) = softplus(z) with 1 - y",
    ),
    (pos_weight_mean, "that is the mean over the batch; return one loss per element"),
]


@exercise("13.6", "bce_pos_weight")
def bce_pos_weight(answer) -> str:
    """The weighted BCE from logits vs F.binary_cross_entropy_with_logits(pos_weight=w)."""
    gen = torch.Generator().manual_seed(136)
    soft = torch.rand(200, generator=gen, dtype=F64)
    z64 = 5 * torch.randn(200, generator=gen, dtype=F64)
    z32 = torch.cat([3 * torch.randn(50, generator=gen), torch.tensor([-1000.0, -80.0, 80.0, 1e3])])
    y32 = torch.cat([(torch.rand(50, generator=gen) < 0.3).float(), torch.tensor([1.0, 1, 0, 0])])
    for z, y, w, what in [
        (z64, soft, 3.0, "float64 logits, soft targets"),
        (z64, soft, 0.25, "float64 logits, soft targets"),
        (z32, y32, 7.0, "float32 logits up to ±1000"),
    ]:
        expect_answer(
            attempt(answer, z.clone(), y.clone(), w),
            _pos_weight_reference(z, y, w),
            f"bce_pos_weight(z, y, w={w}), {what}",
            wrong=wrong_values(WRONG_13_6, z, y, w),
            atol=1e-4,
            rtol=1e-5,
        )
    return (
        "matches F.binary_cross_entropy_with_logits(pos_weight=w) elementwise for w = 0.25, 3 "
        "and 7, soft targets, and float32 logits up to ±1000 without inf or nan"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------

ref_pinball_loss = _ref("13.1", "pinball_loss")
ref_minimiser = _ref("13.1", "pinball_minimiser")
ref_student_grad = _ref("13.3", "student_grad")
ref_distil = _ref("13.3", "distil")
ref_moments = _ref("13.4", "mixture_moments")
ref_profile = _ref("13.4", "reverse_kl_profile")

MISTAKES = {
    "13.1": [((f, ref_minimiser), fb) for f, fb in WRONG_13_1_LOSS]
    + [((ref_pinball_loss, f), fb) for f, fb in WRONG_13_1_MINIMISER],
    "13.2": WRONG_13_2 + [(focal_grad_naive_log, "nan or inf")],
    "13.3": [((f, ref_distil), fb) for f, fb in WRONG_13_3_GRAD]
    + [((ref_student_grad, f), fb) for f, fb in WRONG_13_3_DISTIL],
    "13.4": [((f, ref_profile), fb) for f, fb in WRONG_13_4_MOMENTS]
    + [((moments_tensor, ref_profile), "should return a pair (mean, sd)")]
    + [((ref_moments, f), fb) for f, fb in WRONG_13_4_PROFILE],
    "13.5": WRONG_13_5,
    "13.6": WRONG_13_6 + [(pos_weight_naive, "nan or inf")],
}
