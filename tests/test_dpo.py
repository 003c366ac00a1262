"""Tests of mlbook.posttraining.dpo against independent references: SciPy's maximisation over the
simplex, torch's binary cross-entropy, float64 autograd, Bradley-Terry frequencies."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize

from mlbook.models import checkpoints
from mlbook.posttraining import dpo, task

F64 = torch.float64


def _space(seed=0, Y=6):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(Y, generator=g, dtype=F64)
    pi0 = torch.softmax(torch.randn(Y, generator=g, dtype=F64), -1)
    return r, pi0


@pytest.mark.parametrize("beta", [0.3, 1.0, 4.0])
def test_optimal_policy_maximises_the_objective(beta):
    r, pi0 = _space()

    def neg_j(z):  # softmax parameters, maximised by SciPy
        pi = np.exp(z - z.max())
        pi /= pi.sum()
        return -(pi @ r.numpy() - beta * pi @ (np.log(pi) - np.log(pi0.numpy())))

    res = minimize(neg_j, np.zeros(6), method="BFGS", options={"gtol": 1e-10})
    found = torch.softmax(torch.tensor(res.x), -1)
    star = dpo.optimal_policy(pi0, r, beta)
    assert torch.allclose(star, found, atol=1e-4)
    assert -res.fun == pytest.approx(float(dpo.kl_objective(star, pi0, r, beta)), abs=1e-9)
    assert torch.allclose(dpo.kl_objective(star, pi0, r, beta), dpo.log_partition(pi0, r, beta))
    assert torch.allclose(star, dpo.optimal_policy_naive(pi0, r, beta), atol=1e-14)


def test_naive_optimal_policy_overflows_where_the_softmax_does_not():
    r, pi0 = _space()
    r = 100 * r.abs()
    assert torch.isnan(dpo.optimal_policy_naive(pi0, r, 0.1)).any()
    assert torch.isfinite(dpo.optimal_policy(pi0, r, 0.1)).all()


def test_implicit_reward_recovers_the_reward_up_to_beta_log_z():
    r, pi0 = _space(1)
    beta = 0.7
    star = dpo.optimal_policy(pi0, r, beta)
    rhat = dpo.implicit_reward(star.log(), pi0.log(), beta) + dpo.log_partition(pi0, r, beta)
    assert torch.allclose(rhat, r, atol=1e-12)


def test_dpo_loss_is_bce_and_matches_the_naive_loop():
    g = torch.Generator().manual_seed(2)
    lw, ll, rw, rl = (torch.randn(9, generator=g, dtype=F64) for _ in range(4))
    beta = 0.4
    margin = beta * ((lw - rw) - (ll - rl))
    bce = F.binary_cross_entropy_with_logits(margin, torch.ones_like(margin))
    assert torch.allclose(dpo.dpo_loss(lw, ll, rw, rl, beta), bce, atol=1e-14)
    assert torch.allclose(dpo.dpo_loss_naive(lw, ll, rw, rl, beta), bce, atol=1e-13)
    weight = torch.arange(1.0, 10.0, dtype=F64)
    rep = torch.repeat_interleave(torch.arange(9), weight.long())
    assert torch.allclose(
        dpo.dpo_loss(lw, ll, rw, rl, beta, weight=weight),
        dpo.dpo_loss(lw[rep], ll[rep], rw[rep], rl[rep], beta),
        atol=1e-14,
    )


def test_dpo_grad_matches_autograd():
    g = torch.Generator().manual_seed(3)
    lw = torch.randn(7, generator=g, dtype=F64, requires_grad=True)
    ll = torch.randn(7, generator=g, dtype=F64, requires_grad=True)
    rw, rl = torch.randn(7, generator=g, dtype=F64), torch.randn(7, generator=g, dtype=F64)
    dpo.dpo_loss(lw, ll, rw, rl, 0.3).backward()
    g_w, g_l = dpo.dpo_grad(lw.detach(), ll.detach(), rw, rl, 0.3)
    assert torch.allclose(g_w, lw.grad, atol=1e-14)
    assert torch.allclose(g_l, ll.grad, atol=1e-14)


def test_bradley_terry_pairs_follow_sigmoid_of_the_reward_gap():
    r = torch.tensor([0.0, 1.0, -1.0], dtype=F64)
    w, l = dpo.bradley_terry_pairs(r, 40_000, torch.Generator().manual_seed(4))
    assert bool((w != l).all())
    between = ((w == 1) & (l == 0)) | ((w == 0) & (l == 1))
    freq = float(((w == 1) & between).sum() / between.sum())
    se = math.sqrt(0.25 / float(between.sum()))
    assert abs(freq - 1 / (1 + math.exp(-1.0))) < 4 * se


def test_tabular_dpo_approaches_the_optimum():
    r, pi0 = _space(5)
    w, l = dpo.bradley_terry_pairs(r, 20_000, torch.Generator().manual_seed(5))
    hist = dpo.tabular_dpo(w, l, pi0, 0.5, steps=150, lr=0.1)
    star = dpo.optimal_policy(pi0, r, 0.5)
    assert hist.shape == (151, 6)
    assert 0.5 * (hist[-1] - star).abs().sum() < 0.05 < 0.5 * (hist[0] - star).abs().sum()


def test_preference_data_and_a_few_dpo_steps_on_the_decoder():
    torch.manual_seed(0)
    policy, reference = checkpoints.load("base"), checkpoints.load("base")
    pairs = task.split()[0][:12]
    tokens, mask, kept = dpo.preference_data(policy, pairs, 8, torch.Generator().manual_seed(0))
    B = len(kept)
    assert tokens.shape == (2 * B, 8) and mask.shape == (2 * B, 7) and B > 0
    assert task.rewards(tokens[:B]).eq(1).all() and task.rewards(tokens[B:]).eq(0).all()
    hist = dpo.train_dpo(policy, reference, tokens, mask, beta=0.1, steps=3, lr=1e-3)
    assert hist["margin"][0] == pytest.approx(0.0, abs=1e-6)
    assert hist["margin"][-1] > 0
    lr_, rw_, said = dpo.sampled_log_ratios(policy, reference, pairs[:2], 3)
    assert lr_.shape == rw_.shape == (6,) and len(said) == 6


def test_arguments_are_checked():
    r, pi0 = _space()
    with pytest.raises(ValueError, match="pi0 must sum to one"):
        dpo.optimal_policy(2 * pi0, r, 1.0)
    with pytest.raises(ValueError, match="pi0 and r must have the same shape"):
        dpo.optimal_policy(pi0, r[:3], 1.0)
    with pytest.raises(ValueError, match="beta must be a finite number"):
        dpo.dpo_loss(r, r, r, r, 0.0)
    with pytest.raises(ValueError, match="logp_w and ref_l must have the same shape"):
        dpo.dpo_loss(r, r, r, r[:2], 1.0)
    with pytest.raises(ValueError, match="winners must hold indices"):
        dpo.tabular_dpo(torch.tensor([7]), torch.tensor([0]), pi0, 1.0)
