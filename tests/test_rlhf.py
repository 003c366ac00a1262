"""Reward models, the KL-regularised objective and PPO (mlbook.posttraining.rlhf, chapter 35)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbook.models import checkpoints
from mlbook.posttraining import rlhf, task

F64 = torch.float64


def randn(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_bradley_terry_loss_matches_torch_and_the_naive_form():
    r_w, r_l = randn(0, 50), randn(1, 50)
    want = F.binary_cross_entropy_with_logits(r_w - r_l, torch.ones(50, dtype=F64))
    torch.testing.assert_close(rlhf.bradley_terry_loss(r_w, r_l), want, atol=1e-14, rtol=0)
    torch.testing.assert_close(rlhf.bradley_terry_loss_naive(r_w, r_l), want, atol=1e-14, rtol=0)
    torch.testing.assert_close(rlhf.bradley_terry_prob(r_w, r_l), 1 / (1 + torch.exp(r_l - r_w)))


def test_bradley_terry_loss_is_finite_where_the_naive_form_overflows():
    r_w, r_l = torch.tensor([0.0], dtype=F64), torch.tensor([800.0], dtype=F64)
    assert rlhf.bradley_terry_loss(r_w, r_l).item() == pytest.approx(800.0, abs=1e-12)
    assert math.isinf(rlhf.bradley_terry_loss_naive(r_w, r_l).item())


def test_bradley_terry_loss_refuses_a_hidden_broadcast_and_an_empty_batch():
    with pytest.raises(ValueError, match="r_w and r_l must have the same shape"):
        rlhf.bradley_terry_loss(randn(0, 4), randn(1, 1))
    with pytest.raises(ValueError, match="r_w must not be empty"):
        rlhf.bradley_terry_loss(torch.zeros(0, dtype=F64), torch.zeros(0, dtype=F64))


def test_fit_linear_reward_is_sklearn_logistic_regression_on_differences():
    sklearn = pytest.importorskip("sklearn.linear_model")
    gen = torch.Generator().manual_seed(3)
    w_true = torch.tensor([1.5, -1.0, 0.5], dtype=F64)
    dx = torch.randn(400, 3, generator=gen, dtype=F64)
    first_wins = torch.rand(400, generator=gen, dtype=F64) < torch.sigmoid(dx @ w_true)
    dx = torch.where(first_wins[:, None], dx, -dx)  # rows: preferred minus rejected
    w = rlhf.fit_linear_reward(dx)
    x = np.concatenate([dx.numpy(), -dx.numpy()])  # each pair in both orders
    y = np.r_[np.ones(400), np.zeros(400)]
    lr = sklearn.LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-12, max_iter=1000)
    np.testing.assert_allclose(w.numpy(), lr.fit(x, y).coef_[0], atol=1e-6)
    w_req = w.clone().requires_grad_(True)
    rlhf.bradley_terry_loss(dx @ w_req, torch.zeros(400, dtype=F64)).backward()
    assert w_req.grad.abs().max() < 1e-10  # a stationary point of eq. 35.1's loss


def test_optimal_policy_attains_the_closed_form_maximum():
    gen = torch.Generator().manual_seed(4)
    pi_ref = torch.softmax(torch.randn(7, generator=gen, dtype=F64), 0)
    r = torch.randn(7, generator=gen, dtype=F64)
    for beta in (0.1, 1.0, 5.0):
        pi_star = rlhf.optimal_policy(pi_ref, r, beta)
        j_star = rlhf.kl_regularised_objective(pi_star, pi_ref, r, beta)
        closed = beta * math.log(float((pi_ref * torch.exp(r / beta)).sum()))
        assert j_star.item() == pytest.approx(closed, abs=1e-12)
        others = torch.softmax(torch.randn(200, 7, generator=gen, dtype=F64) * 2, -1)
        assert (rlhf.kl_regularised_objective(others, pi_ref, r, beta) < j_star).all()
        kl = float((pi_star * (pi_star / pi_ref).log()).sum())
        want = float((pi_star * r).sum()) - beta * kl
        assert j_star.item() == pytest.approx(want, abs=1e-12)


def test_objective_refuses_a_policy_that_does_not_sum_to_one():
    with pytest.raises(ValueError, match="pi must sum to one"):
        rlhf.kl_regularised_objective(
            torch.tensor([0.5, 0.6], dtype=F64), torch.tensor([0.5, 0.5], dtype=F64), 0.0, 1.0
        )


def test_kl_penalised_reward_averages_to_the_objective():
    gen = torch.Generator().manual_seed(5)
    pi = torch.softmax(torch.randn(6, generator=gen, dtype=F64), 0)
    pi_ref = torch.softmax(torch.randn(6, generator=gen, dtype=F64), 0)
    r = torch.randn(6, generator=gen, dtype=F64)
    per_answer = rlhf.kl_penalised_reward(r, pi.log(), pi_ref.log(), 0.3)  # every answer once
    exact = rlhf.kl_regularised_objective(pi, pi_ref, r, 0.3)
    assert float((pi * per_answer).sum()) == pytest.approx(exact.item(), abs=1e-12)


def test_token_rewards_match_the_loop_and_sum_to_the_sequence_form():
    _, mask = task.batch([(3, 4), (9, 9)])  # "7\n" and "18\n": 2 and 3 completion tokens
    lp, lp_ref, reward = -randn(6, 2, 7).abs(), -randn(7, 2, 7).abs(), torch.tensor([1.0, 0.0])
    got = rlhf.token_rewards(reward.double(), lp, lp_ref, mask.double(), 0.2)
    torch.testing.assert_close(got, rlhf.token_rewards_naive(reward, lp, lp_ref, mask, 0.2))
    seq = rlhf.kl_penalised_reward(reward.double(), (lp * mask).sum(1), (lp_ref * mask).sum(1), 0.2)
    torch.testing.assert_close(got.sum(1), seq, atol=1e-12, rtol=0)


def test_ppo_clip_loss_matches_the_case_analysis_and_its_gradient():
    logp_old = -randn(8, 64).abs()
    logp = (logp_old + 0.4 * randn(9, 64)).requires_grad_(True)
    adv = randn(10, 64)
    loss = rlhf.ppo_clip_loss(logp, logp_old, adv, 0.2)
    torch.testing.assert_close(loss, rlhf.ppo_clip_loss_naive(logp, logp_old, adv, 0.2))
    (grad,) = torch.autograd.grad(loss, logp)
    ratio = torch.exp(logp.detach() - logp_old)
    want = -rlhf.clip_gradient(ratio, adv, 0.2) * ratio / 64  # chain rule through r = e^logp
    torch.testing.assert_close(grad, want, atol=1e-14, rtol=0)


def test_clip_gradient_is_autograd_of_the_objective_and_the_loop():
    ratio = torch.linspace(0.5, 1.5, 41, dtype=F64) + 1e-3  # no point on a kink
    for a in (1.3, -0.7):
        adv = torch.full_like(ratio, a)
        r = ratio.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(rlhf.ppo_clip_objective(r, adv, 0.2).sum(), r)
        torch.testing.assert_close(rlhf.clip_gradient(ratio, adv, 0.2), grad)
        torch.testing.assert_close(rlhf.clip_gradient_naive(ratio, adv, 0.2), grad)
        zero = grad == 0
        side = ratio > 1.2 if a > 0 else ratio < 0.8
        assert torch.equal(zero, side)  # zero exactly on the side that would push r further


def test_softmax_ratio_gradient_matches_autograd():
    logits = randn(11, 16, 5)
    actions = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(12))
    logp_old = torch.log_softmax(randn(13, 16, 5), -1).gather(1, actions[:, None]).squeeze(1)
    adv = randn(14, 16)
    z = logits.clone().requires_grad_(True)
    ratio = torch.exp(torch.log_softmax(z, -1).gather(1, actions[:, None]).squeeze(1) - logp_old)
    (grad,) = torch.autograd.grad((ratio * adv).sum(), z)
    got = rlhf.softmax_ratio_gradient(logits, actions, logp_old, adv)
    torch.testing.assert_close(got, grad, atol=1e-13, rtol=0)


def test_group_advantages_centre_each_prompt():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    torch.testing.assert_close(
        rlhf.group_advantages(r, 3), torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0])
    )
    with pytest.raises(ValueError, match="rewards must be"):
        rlhf.group_advantages(r, 4)


def test_ppo_eps_is_checked():
    with pytest.raises(ValueError, match="eps must be a finite number"):
        rlhf.ppo_clip_objective(torch.ones(2), torch.ones(2), 1.5)


def test_rlhf_ppo_runs_and_leaves_the_reference_untouched():
    policy, reference = checkpoints.load("base"), checkpoints.load("base")
    before = [p.clone() for p in reference.parameters()]
    hist = rlhf.rlhf_ppo(policy, reference, task.problems()[:3], beta=0.1, iterations=2)
    assert set(hist) == {"reward", "kl", "clipped", "accuracy"} and len(hist["reward"]) == 2
    assert hist["kl"][0] == pytest.approx(0.0, abs=1e-6)  # the first samples come from pi_ref
    assert all(torch.equal(a, b) for a, b in zip(before, reference.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
