"""Typical wrong answers to the exercises of chapter 15 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected

F64 = torch.float64


def _ref(eid, name):
    return reference(eid)[name]


# --- 15.1


def ref_matrix(lam, lr, beta):
    return _ref("15.1", "momentum_matrix")(lam, lr, beta)


def ref_limit(lam, beta):
    return _ref("15.1", "momentum_limit")(lam, beta)


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


def ref_first_step(g, lr, eps):
    return _ref("15.2", "adam_first_step")(g, lr, eps)


def ref_run(grad_fn, theta0, lr, steps, eps):
    return _ref("15.2", "adam_run")(grad_fn, theta0, lr, steps, eps)


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


WRONG = {
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


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
