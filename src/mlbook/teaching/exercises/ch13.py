"""Checks of the exercises of chapter 13 (loss functions and divergences).

The references are independent of the reader's answer and of :mod:`mlbook.nn.losses`: NumPy's
``np.quantile(method="inverted_cdf")`` for the pinball minimiser, float64 autograd through
``F.logsigmoid`` for the focal-loss derivative, autograd of ``F.cross_entropy`` and ``F.kl_div``
(and gradient descent driven by it) for distillation, ``scipy.integrate.quad`` for the moments of a
Gaussian mixture and ``torch.trapezoid`` for the reverse-KL profile.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy import integrate

from . import as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64


# --- 13.1 ---------------------------------------------------------------------------------------


@exercise("13.1", "pinball_loss", "pinball_minimiser")
def pinball(loss, minimiser) -> str:
    """ρ_τ elementwise, and the data point that minimises the summed loss vs np.quantile."""
    gen = torch.Generator().manual_seed(131)
    r = torch.cat(
        [3 * torch.randn(4, 25, generator=gen, dtype=F64), torch.zeros(4, 1, dtype=F64)], dim=1
    )  # (4, 26), with r = 0
    for tau in (0.1, 0.25, 0.5, 0.9):
        neg = (r < 0).to(F64)
        ref = (tau - neg) * r  # (τ - 1[r < 0]) r
        expect_answer(
            attempt(loss, r.clone(), tau),
            ref,
            f"pinball_loss(r, tau={tau}), r of shape (4, 26)",
            wrong={
                "τ and 1 - τ are swapped: a positive residual (y above c) costs τ per unit, a "
                "negative one 1 - τ": (1 - tau - neg) * r,
                "both sides are weighted by τ; the negative side has weight 1 - τ": tau * r.abs(),
                "max, not min: the loss is the larger of τ r and (τ - 1) r, never "
                "negative": torch.minimum(tau * r, (tau - 1) * r),
                "this ignores τ; ρ_τ is |r|/2 only at τ = 1/2": r.abs() / 2,
            },
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
    for y in samples:
        N = len(y)
        for tau in (0.1, 0.25, 0.5, 0.9):  # N τ is never an integer here
            want = np.quantile(y, tau, method="inverted_cdf")
            got = attempt(minimiser, torch.tensor(y), tau)
            expect_answer(
                got,
                want,
                f"pinball_minimiser(y, tau={tau}) for N = {N}",
                wrong={
                    "τ and 1 - τ are swapped: this is the (1 - τ)-quantile": np.quantile(
                        y, 1 - tau, method="inverted_cdf"
                    ),
                    "np.quantile's default interpolates between data points; the minimiser of "
                    "the pinball loss is a data point": np.quantile(y, tau),
                    "that is the mean, the minimiser of the squared error": y.mean(),
                    "that is the median, the minimiser at τ = 1/2 only": np.median(y),
                    "that is the index j of the minimiser; return the data value y_j": float(
                        np.flatnonzero(y == want)[0]
                    ),
                },
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
    s = 2 * y - 1
    p_t = torch.sigmoid(s * z)
    for gamma, alpha in [(2.0, 0.25), (0.5, 0.25), (0.0, 0.25), (5.0, 0.6)]:
        ref = _focal_autograd(z, y, gamma, alpha)
        a_t = alpha * y + (1 - alpha) * (1 - y)
        expect_answer(
            attempt(answer, z.clone(), y.clone(), gamma, alpha),
            ref,
            f"focal_grad(z, y, gamma={gamma}, alpha={alpha})",
            wrong={
                "this is the derivative in z_t = s z; multiply by s = 2y - 1 to get d/dz": ref * s,
                "the sign is flipped: raising the logit of the true class lowers the loss": -ref,
                "the term from differentiating (1 - p_t)^γ is missing (the γ p_t log p_t in "
                "the bracket)": -s * a_t * (1 - p_t) ** (gamma + 1),
                "α_t is swapped: α weights the positives (y = 1), 1 - α the negatives": ref
                * (1 - a_t)
                / a_t,
            },
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
        ref = _kd_autograd(z, v, y, lam, T)
        hard = torch.softmax(z, -1) - F.one_hot(y, K).to(F64)
        hard_T = torch.softmax(z / T, -1) - F.one_hot(y, K).to(F64)
        diff = torch.softmax(z / T, -1) - torch.softmax(v / T, -1)
        expect_answer(
            attempt(student_grad, z.clone(), v.clone(), y.clone(), lam, T),
            ref,
            f"student_grad(z, v, y, lam={lam}, T={T}) for B = {B}, K = {K}",
            wrong={
                "the distillation term misses the factor T: ∇_z T² KL(p_T || q_T) = "
                "T (q_T - p_T)": (1 - lam) * hard + lam * diff,
                "the distillation term has T² where it needs T: the chain rule through z/T "
                "takes one factor T away": (1 - lam) * hard + lam * T**2 * diff,
                "the hard-label term uses the softened q_T; the cross-entropy is taken at T = 1": (
                    1 - lam
                )
                * hard_T
                + lam * T * diff,
                "λ and 1 - λ are swapped: λ weights the distillation term": lam * hard
                + (1 - lam) * T * diff,
                "the sign is flipped: this is the direction of steepest ascent": -ref,
                "that is the gradient of the batch mean; the loss is summed over the batch": ref
                / B,
            },
            atol=1e-10,
            rtol=1e-8,
        )

    v = 2 * torch.randn(8, 5, generator=gen, dtype=F64)
    labels = v.argmax(-1)  # unused at λ = 1
    for T, lr, steps in [(3.0, 0.5, 300), (1.0, 0.2, 1), (2.0, 0.3, 0)]:
        path = _descend(
            lr, steps + 1, torch.zeros_like(v), lambda z, T=T: _kd_autograd(z, v, labels, 1.0, T)
        )
        ref = path[steps]
        wrong = {
            "ascent, not descent: step against the gradient": _descend_closed(v, T, -lr, steps, T),
            "the gradient misses the factor T (it is T (q_T - p_T))": _descend_closed(
                v, T, lr, steps, 1.0
            ),
            "the gradient has T² where it needs T": _descend_closed(v, T, lr, steps, T**2),
            "one step too many: take exactly `steps` steps": path[steps + 1],
        }
        if steps > 0:
            wrong["one step too few: take exactly `steps` steps"] = path[steps - 1]
        got = expect_answer(
            attempt(distil, v.clone(), T, lr, steps),
            ref,
            f"distil(v, T={T}, lr={lr}, steps={steps})",
            wrong=wrong,
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
        mean, sd = _moments_by_quadrature(w, m, s)
        between = math.sqrt(max(float((wt * mt**2).sum()) - mean**2, 0.0))
        what = f"mixture_moments for weights {w}"
        got = _mean_sd(attempt(moments, wt.clone(), mt.clone(), st.clone()), what)
        expect_answer(
            got,
            [mean, sd],
            what,
            wrong={
                "the sd misses the spread within the components: E[x²] = Σ w (σ² + μ²)": [
                    mean,
                    between,
                ],
                "the second entry is the variance; return the standard deviation": [mean, sd**2],
                "the weighted mean of the component sds is not the mixture's sd: the spread "
                "of the means adds to it": [mean, float((wt * st).sum())],
                "the mean must weight the component means by the mixture weights": [
                    float(mt.mean()),
                    sd,
                ],
            },
            atol=1e-9,
            rtol=1e-9,
        )

    x = torch.linspace(-20, 20, 401, dtype=F64)
    dx = float(x[1] - x[0])
    mus = torch.linspace(-3.5, 3.5, 29, dtype=F64)
    sigmas = torch.linspace(0.3, 2.5, 23, dtype=F64)
    log_q = (
        -0.5 * ((x - mus[None, :, None]) / sigmas[:, None, None]) ** 2
        - torch.log(sigmas[:, None, None])
        - 0.5 * math.log(2 * math.pi)
    )  # (S, M, X)
    for w, m, s in mixtures[:2] + [((1.0,), (0.5,), (0.8,))]:
        log_p = _log_mixture(x, w, m, s)
        reverse = torch.trapezoid(log_q.exp() * (log_q - log_p), x, dim=-1)  # (S, M)
        forward = torch.trapezoid(log_p.exp() * (log_p - log_q), x, dim=-1)
        ref = reverse.min(dim=0).values
        got = expect_answer(
            attempt(profile, x.clone(), log_p.clone(), mus.clone(), sigmas.clone()),
            ref,
            f"reverse_kl_profile for the mixture with weights {w}",
            wrong={
                "that is the forward KL(p || q); the reverse KL averages over q": forward.min(
                    dim=0
                ).values,
                "the Riemann sum needs the grid spacing dx": ref / dx,
                "take the minimum over σ, not the mean": reverse.mean(dim=0),
            },
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


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# --- 13.1


def pinball_swapped(r, tau):
    return torch.maximum((1 - tau) * r, -tau * r)


def pinball_min_not_max(r, tau):
    return torch.minimum(tau * r, (tau - 1) * r)


def pinball_symmetric(r, tau):
    return tau * r.abs()


def minimiser_interpolated(y, tau):
    return torch.tensor(np.quantile(y.numpy(), tau))


def minimiser_index(y, tau):
    objective = _ref("13.1", "pinball_loss")(y[None, :] - y[:, None], tau).sum(dim=1)
    return torch.argmin(objective).double()


def minimiser_median(y, tau):
    return y.median()


ref_pinball_loss = _ref("13.1", "pinball_loss")
ref_minimiser = _ref("13.1", "pinball_minimiser")


# --- 13.2


def focal_grad_in_zt(z, y, gamma, alpha):
    return _ref("13.2", "focal_grad")(z, y, gamma, alpha) * (2 * y - 1)


def focal_grad_no_gamma_term(z, y, gamma, alpha):
    s = 2 * y - 1
    p_t = torch.sigmoid(s * z)
    alpha_t = alpha * y + (1 - alpha) * (1 - y)
    return -s * alpha_t * (1 - p_t) ** gamma * (1 - p_t)


def focal_grad_alpha_swapped(z, y, gamma, alpha):
    return _ref("13.2", "focal_grad")(z, y, gamma, 1 - alpha)


def focal_grad_naive_log(z, y, gamma, alpha):
    s = 2 * y - 1
    p_t = torch.sigmoid(s * z)
    alpha_t = alpha * y + (1 - alpha) * (1 - y)
    return s * alpha_t * (1 - p_t) ** gamma * (gamma * p_t * torch.log(p_t) - (1 - p_t))


# --- 13.3


def student_grad_without_T(z, v, y, lam, T):
    hard = torch.softmax(z, -1) - F.one_hot(y, z.shape[-1]).double()
    return (1 - lam) * hard + lam * (torch.softmax(z / T, -1) - torch.softmax(v / T, -1))


def student_grad_T_squared(z, v, y, lam, T):
    hard = torch.softmax(z, -1) - F.one_hot(y, z.shape[-1]).double()
    return (1 - lam) * hard + lam * T**2 * (torch.softmax(z / T, -1) - torch.softmax(v / T, -1))


def student_grad_soft_ce(z, v, y, lam, T):
    hard = torch.softmax(z / T, -1) - F.one_hot(y, z.shape[-1]).double()
    return (1 - lam) * hard + lam * T * (torch.softmax(z / T, -1) - torch.softmax(v / T, -1))


def student_grad_mean(z, v, y, lam, T):
    return _ref("13.3", "student_grad")(z, v, y, lam, T) / z.shape[0]


def student_grad_lam_swapped(z, v, y, lam, T):
    return _ref("13.3", "student_grad")(z, v, y, 1 - lam, T)


def distil_ascent(v, T, lr, steps):
    return _ref("13.3", "distil")(v, T, -lr, steps)


def distil_one_more(v, T, lr, steps):
    return _ref("13.3", "distil")(v, T, lr, steps + 1)


def distil_without_T(v, T, lr, steps):
    return _ref("13.3", "distil")(v, T, lr / T, steps)


ref_student_grad = _ref("13.3", "student_grad")
ref_distil = _ref("13.3", "distil")


# --- 13.4


def moments_between_only(weights, means, sds):
    mean = (weights * means).sum()
    return mean, ((weights * means**2).sum() - mean**2).sqrt()


def moments_variance(weights, means, sds):
    mean, sd = _ref("13.4", "mixture_moments")(weights, means, sds)
    return mean, sd**2


def moments_mean_sd(weights, means, sds):
    mean, _ = _ref("13.4", "mixture_moments")(weights, means, sds)
    return mean, (weights * sds).sum()


def moments_tensor(weights, means, sds):
    return torch.stack(_ref("13.4", "mixture_moments")(weights, means, sds))


def profile_forward(x, log_p, mus, sigmas):
    from mlbook.nn import losses as L

    _, _, table = L.fit_gaussian_kl(x, log_p, mus, sigmas, "forward")
    return table.min(dim=0).values


def profile_without_dx(x, log_p, mus, sigmas):
    return _ref("13.4", "reverse_kl_profile")(x, log_p, mus, sigmas) / (x[1] - x[0])


def profile_mean_over_sigma(x, log_p, mus, sigmas):
    from mlbook.nn import losses as L

    _, _, table = L.fit_gaussian_kl(x, log_p, mus, sigmas, "reverse")
    return table.mean(dim=0)


ref_moments = _ref("13.4", "mixture_moments")
ref_profile = _ref("13.4", "reverse_kl_profile")


MISTAKES = {
    "13.1": [
        ((pinball_swapped, ref_minimiser), "τ and 1 - τ are swapped"),
        ((pinball_min_not_max, ref_minimiser), "max, not min"),
        ((pinball_symmetric, ref_minimiser), "both sides are weighted by τ"),
        ((ref_pinball_loss, minimiser_interpolated), "interpolates between data points"),
        ((ref_pinball_loss, minimiser_index), "that is the index j"),
        ((ref_pinball_loss, minimiser_median), "that is the median"),
    ],
    "13.2": [
        (focal_grad_in_zt, "multiply by s = 2y - 1"),
        (focal_grad_no_gamma_term, "differentiating (1 - p_t)^γ is missing"),
        (focal_grad_alpha_swapped, "α_t is swapped"),
        (focal_grad_naive_log, "nan or inf"),
    ],
    "13.3": [
        ((student_grad_without_T, ref_distil), "misses the factor T"),
        ((student_grad_T_squared, ref_distil), "has T² where it needs T"),
        ((student_grad_soft_ce, ref_distil), "cross-entropy is taken at T = 1"),
        ((student_grad_mean, ref_distil), "summed over the batch"),
        ((student_grad_lam_swapped, ref_distil), "λ and 1 - λ are swapped"),
        ((ref_student_grad, distil_ascent), "ascent, not descent"),
        ((ref_student_grad, distil_one_more), "one step too many"),
        ((ref_student_grad, distil_without_T), "misses the factor T"),
    ],
    "13.4": [
        ((moments_between_only, ref_profile), "spread within the components"),
        ((moments_variance, ref_profile), "the variance"),
        ((moments_mean_sd, ref_profile), "weighted mean of the component sds"),
        ((moments_tensor, ref_profile), "should return a pair (mean, sd)"),
        ((ref_moments, profile_forward), "that is the forward KL"),
        ((ref_moments, profile_without_dx), "grid spacing dx"),
        ((ref_moments, profile_mean_over_sigma), "minimum over σ"),
    ],
}
