"""Typical wrong answers to the exercises of chapter 13 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


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


def ref_pinball_loss(r, tau):
    return _ref("13.1", "pinball_loss")(r, tau)


def ref_minimiser(y, tau):
    return _ref("13.1", "pinball_minimiser")(y, tau)


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


def ref_student_grad(z, v, y, lam, T):
    return _ref("13.3", "student_grad")(z, v, y, lam, T)


def ref_distil(v, T, lr, steps):
    return _ref("13.3", "distil")(v, T, lr, steps)


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


def ref_moments(weights, means, sds):
    return _ref("13.4", "mixture_moments")(weights, means, sds)


def ref_profile(x, log_p, mus, sigmas):
    return _ref("13.4", "reverse_kl_profile")(x, log_p, mus, sigmas)


WRONG = {
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


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
