"""Tests of mlbook.posttraining.grpo against independent references: Python's statistics, loops
in Python floats, float64 autograd, exact KL divergences by Monte Carlo."""

import math

import pytest
import torch

from mlbook.models import checkpoints
from mlbook.posttraining import grpo, task

F64 = torch.float64


def _rewards(seed=0, P=6, G=5):
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 2, (P, G), generator=g).to(F64)
    r[0] = 1.0  # a flat group
    r[1, :] = torch.tensor([0.3, -1.2, 2.0, 0.5, 0.0], dtype=F64)[:G]
    return r


def test_group_advantages_match_statistics_and_vanish_on_flat_groups():
    r = _rewards()
    A = grpo.group_advantages(r)
    assert torch.allclose(A, grpo.group_advantages_naive(r), atol=1e-12)
    assert torch.equal(A[0], torch.zeros(5, dtype=F64))
    informative = r.std(1) > 0
    assert torch.allclose(A[informative].mean(1), torch.zeros(int(informative.sum()), dtype=F64))
    assert torch.allclose(A[1].std(), torch.tensor(1.0, dtype=F64), atol=1e-5)


def test_rloo_is_a_rescaled_group_mean_baseline():
    r = _rewards(1, 4, 5)
    A = grpo.rloo_advantages(r)
    assert torch.allclose(A, grpo.rloo_advantages_naive(r), atol=1e-14)
    assert torch.allclose(A, 5 / 4 * (r - r.mean(1, keepdim=True)), atol=1e-14)


def test_rloo_gradient_is_unbiased_and_the_self_inclusive_mean_is_not():
    """Tabular softmax policy: the exact gradient of E[r] against Monte Carlo with G = 3."""
    g = torch.Generator().manual_seed(2)
    Y, G, n = 4, 3, 60_000
    pi = torch.softmax(torch.randn(Y, generator=g, dtype=F64), -1)
    reward = torch.tensor([1.0, 0.0, 2.0, -1.0], dtype=F64)
    exact = pi * (reward - (pi * reward).sum())  # d E[r] / d logits
    y = torch.multinomial(pi, n * G, replacement=True, generator=g).view(n, G)
    r = reward[y]
    score = torch.nn.functional.one_hot(y, Y).to(F64) - pi  # (n, G, Y) grad of log pi(y)
    for A, scale in ((grpo.rloo_advantages(r), 1.0), (r - r.mean(1, keepdim=True), (G - 1) / G)):
        est = (A[..., None] * score).mean(1)  # (n, Y)
        se = est.std(0) / math.sqrt(n)
        assert bool(((est.mean(0) - scale * exact).abs() < 4 * se + 1e-12).all())
    est = ((r - r.mean(1, keepdim=True))[..., None] * score).mean(1)
    k = int(exact.abs().argmax())
    assert abs(est[:, k].mean() - exact[k]) > 4 * est[:, k].std() / math.sqrt(n)


def test_clipped_surrogate_matches_the_loop_and_stops_gradients_outside_the_clip():
    logp_old = torch.zeros(6, dtype=F64)
    logp = torch.log(torch.tensor([0.5, 0.9, 1.1, 1.5, 0.7, 1.4], dtype=F64))
    adv = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, -1.0], dtype=F64)
    got = grpo.clipped_surrogate(logp, logp_old, adv, 0.2)
    assert torch.allclose(got, grpo.clipped_surrogate_naive(logp, logp_old, adv, 0.2), atol=1e-14)
    x = logp.clone().requires_grad_(True)
    grpo.clipped_surrogate(x, logp_old, adv, 0.2).sum().backward()
    rho = logp.exp()
    # A > 0 and rho > 1.2 (index 3), A < 0 and rho < 0.8 (index 4): clipped, no gradient
    expected = torch.where(torch.tensor([0, 0, 0, 1, 1, 0]).bool(), 0.0, -adv * rho)
    assert torch.allclose(x.grad, expected, atol=1e-14)
    assert torch.allclose(grpo.importance_ratio(logp, logp_old), rho, atol=1e-15)


def test_kl_estimators_k3_is_unbiased_and_non_negative():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(10, generator=g, dtype=F64), -1)
    q = torch.softmax(torch.randn(10, generator=g, dtype=F64), -1)
    kl = float((p * (p.log() - q.log())).sum())
    y = torch.multinomial(p, 100_000, replacement=True, generator=g)
    logp, logq = p.log()[y], q.log()[y]
    k1, k2, k3 = grpo.kl_k1(logp, logq), grpo.kl_k2(logp, logq), grpo.kl_k3(logp, logq)
    assert bool((k3 >= 0).all()) and bool((k1 < 0).any()) and bool((k2 >= 0).all())
    for k in (k1, k3):
        assert abs(float(k.mean()) - kl) < 4 * float(k.std()) / math.sqrt(len(k))
    assert torch.allclose(k3, k1 + torch.exp(logq - logp) - 1, atol=1e-12)


def test_grpo_loss_is_the_mean_of_surrogate_plus_beta_k3():
    g = torch.Generator().manual_seed(4)
    lp, lo, lr, adv = (torch.randn(12, generator=g, dtype=F64) for _ in range(4))
    want = (grpo.clipped_surrogate(lp, lo, adv, 0.1) + 0.3 * grpo.kl_k3(lp, lr)).mean()
    assert torch.allclose(grpo.grpo_loss(lp, lo, lr, adv, 0.1, 0.3), want, atol=1e-15)


def test_train_grpo_runs_and_calls_back():
    torch.manual_seed(0)
    policy, reference = checkpoints.load("base"), checkpoints.load("base")
    seen = []
    hist = grpo.train_grpo(
        policy,
        reference,
        task.split()[0],
        steps=2,
        group_size=4,
        prompts_per_step=4,
        lr=1e-4,
        generator=torch.Generator().manual_seed(0),
        callback=seen.append,
    )
    assert seen == [0, 1, 2]
    assert all(len(v) == 2 for v in hist.values())
    assert all(0 <= x <= 1 for x in hist["reward"] + hist["flat_groups"] + hist["clipped"])


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="the group size G"):
        grpo.group_advantages(torch.ones(3, 1, dtype=F64))
    with pytest.raises(ValueError, match="r must have 2 axes"):
        grpo.rloo_advantages(torch.ones(4, dtype=F64))
    with pytest.raises(ValueError, match="logp and adv must have the same shape"):
        grpo.clipped_surrogate(torch.zeros(3), torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="clip_eps must be a finite number"):
        grpo.clipped_surrogate(torch.zeros(3), torch.zeros(3), torch.zeros(3), 1.5)
    with pytest.raises(ValueError, match="logp and logp_ref must have the same shape"):
        grpo.kl_k3(torch.zeros(3), torch.zeros(2))
