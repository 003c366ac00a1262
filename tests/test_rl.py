"""mlbook.posttraining.rl against independent references: a discount matrix, explicit sums,
NumPy's linear solve, autograd, finite differences, closed forms and seeded Monte Carlo."""

import math

import numpy as np
import pytest
import torch

from mlbook.posttraining import rl

f64 = torch.float64


def assert_close(actual, expected, atol):
    """Same shape and max |actual - expected| <= atol (torch.testing's first call is slow)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = float((actual - expected).abs().max())
    assert err <= atol, f"max abs error {err:.3g} > {atol}"


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


def lfilter_returns(r, gamma):
    """G = r U^T with the discount matrix U[t, k] = gamma^(k - t) for k >= t (NumPy)."""
    T = r.shape[-1]
    lag = np.arange(T)[None, :] - np.arange(T)[:, None]  # (T, T) k - t
    U = np.where(lag >= 0, float(gamma) ** np.maximum(lag, 0), 0.0)
    return torch.from_numpy(r.numpy() @ U.T)


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)
    mdp = rl.gridworld()
    pi = torch.tensor([0.35, 0.35, 0.15, 0.15], dtype=f64).expand(mdp.n_states, 4).clone()
    return mdp, pi


@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
def test_discounted_returns_match_a_linear_filter_and_the_sum(gamma):
    r = randn(3, 17)
    ref = lfilter_returns(r, gamma)
    assert_close(rl.discounted_returns(r, gamma), ref, atol=1e-12)
    assert_close(rl.discounted_returns_naive(r, gamma), ref, atol=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("bootstrap", [False, True])
def test_gae_recursion_equals_the_sum(lam, bootstrap):
    r, v = randn(2, 3, 12, seed=1), randn(2, 3, 12 + bootstrap, seed=2)
    assert_close(rl.gae(r, v, 0.9, lam), rl.gae_naive(r, v, 0.9, lam), atol=1e-12)


def test_gae_limits_are_the_td_error_and_the_monte_carlo_advantage():
    r, v = randn(4, 15, seed=3), randn(4, 15, seed=4)
    v_next = torch.cat([v[:, 1:], torch.zeros(4, 1, dtype=f64)], 1)
    assert_close(rl.gae(r, v, 0.8, 0.0), r + 0.8 * v_next - v, atol=1e-13)
    assert_close(rl.gae(r, v, 0.8, 1.0), lfilter_returns(r, 0.8) - v, atol=1e-12)
    assert_close(
        rl.gae(r, torch.zeros_like(r), 0.8, 1.0), rl.discounted_returns(r, 0.8), atol=1e-13
    )


def test_gae_bootstrap_value_enters_discounted():
    r, v = randn(5, seed=5), randn(6, seed=6)
    want = lfilter_returns(r, 0.9) + 0.9 ** torch.arange(5, 0, -1, dtype=f64) * v[-1] - v[:-1]
    assert_close(rl.gae(r, v, 0.9, 1.0), want, atol=1e-12)


def test_sequence_functions_refuse_bad_arguments():
    r = randn(3, 5)
    with pytest.raises(ValueError, match="values must have T = 5 or T \\+ 1"):
        rl.gae(r, randn(3, 7), 0.9, 0.9)
    with pytest.raises(ValueError, match="values must have shape"):
        rl.gae(r, randn(5), 0.9, 0.9)  # would broadcast silently
    with pytest.raises(ValueError, match="gamma must be a finite number in"):
        rl.discounted_returns(r, 1.5)
    with pytest.raises(ValueError, match="lam must be a finite number in"):
        rl.gae(r, randn(3, 5), 0.9, -0.1)
    with pytest.raises(ValueError, match="same shape"):
        rl.importance_weights(randn(4), randn(4, 1))


def test_importance_weights_and_effective_sample_size():
    p, b = torch.softmax(randn(6), 0), torch.softmax(randn(6, seed=1), 0)
    assert_close(rl.importance_weights(p.log(), b.log()), p / b, atol=1e-14)
    assert rl.effective_sample_size(torch.ones(2, 50, dtype=f64)).tolist() == [50.0, 50.0]
    w = torch.tensor([1e6, 1e-3, 1e-3], dtype=f64)
    assert abs(float(rl.effective_sample_size(w)) - 1.0) < 1e-6
    w = torch.rand(1000, generator=torch.Generator().manual_seed(0), dtype=f64)
    want = w.numpy().sum() ** 2 / (w.numpy() ** 2).sum()
    assert abs(float(rl.effective_sample_size(w)) - want) < 1e-9


def test_gridworld_is_a_valid_mdp():
    mdp = rl.gridworld()
    assert_close(mdp.P.sum(-1), torch.ones(11, 4, dtype=f64), atol=1e-15)
    assert int(mdp.terminal.sum()) == 2 and float(mdp.start.sum()) == 1.0
    assert float(mdp.R[mdp.terminal].abs().max()) == 0.0
    with pytest.raises(ValueError, match="slip must be at most 0.5"):
        rl.gridworld(slip=0.6)


@pytest.mark.parametrize("gamma", [0.5, 0.9, 1.0])
def test_exact_policy_evaluation_against_numpy_and_backups(world, gamma):
    mdp, pi = world
    v = rl.evaluate_policy(mdp, pi, gamma)
    P_pi = np.einsum("sa,sat->st", pi.numpy(), mdp.P.numpy())
    r_pi = (pi.numpy() * mdp.R.numpy()).sum(-1)
    keep = ~mdp.terminal.numpy()
    ref = np.zeros(11)
    ref[keep] = np.linalg.solve(np.eye(keep.sum()) - gamma * P_pi[np.ix_(keep, keep)], r_pi[keep])
    np.testing.assert_allclose(v.numpy(), ref, atol=1e-12)
    assert_close(rl.bellman_backup(mdp, pi, v, gamma), v, atol=1e-12)
    if gamma < 1:
        vs = rl.evaluate_policy_iterative(mdp, pi, gamma, 400)
        assert_close(vs[-1], v, atol=1e-10)


def test_policy_checks(world):
    mdp, pi = world
    with pytest.raises(ValueError, match="pi must sum to one"):
        rl.evaluate_policy(mdp, 2 * pi, 0.9)
    with pytest.raises(ValueError, match="pi must have shape"):
        rl.evaluate_policy(mdp, pi[:5], 0.9)
    stay = torch.zeros(11, 4, dtype=f64)
    stay[:, 0] = 1.0  # always "up": the top-left cell bumps into the edge forever
    with pytest.raises(ValueError, match="must be invertible"):
        rl.evaluate_policy(rl.gridworld(slip=0.0), stay, 1.0)
    with pytest.raises(RuntimeError, match="still running after 5 steps"):
        rl.rollout(mdp, pi, 10, torch.Generator().manual_seed(0), max_steps=5)


def test_monte_carlo_returns_agree_with_the_exact_value(world):
    mdp, pi = world
    ep = rl.rollout(mdp, pi, 3000, torch.Generator().manual_seed(1))
    assert not ep.alive[:, -1].all()
    G0 = rl.discounted_returns(ep.rewards, 0.9)[:, 0]
    v = rl.evaluate_policy(mdp, pi, 0.9)
    se = float(G0.std() / math.sqrt(3000))
    assert abs(float(G0.mean()) - float(mdp.start @ v)) < 4 * se


def test_reinforce_gradient_matches_autograd_and_is_unbiased(world):
    mdp, pi = world
    theta = randn(11, 4, seed=7)
    ep = rl.rollout(mdp, rl.softmax_policy(theta), 40, torch.Generator().manual_seed(2))
    G = rl.discounted_returns(ep.rewards, 1.0)
    assert_close(
        rl.reinforce_gradient(theta, ep, G),
        rl.reinforce_gradient_naive(theta, ep, G),
        atol=1e-12,
    )
    th = theta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(rl.exact_objective(mdp, th, 1.0), th)
    eps, i, j = 1e-6, 4, 1
    e = torch.zeros_like(theta)
    e[i, j] = eps
    fd = (rl.exact_objective(mdp, theta + e, 1.0) - rl.exact_objective(mdp, theta - e, 1.0)) / (
        2 * eps
    )
    assert abs(float(fd) - float(grad[i, j])) < 1e-8
    ep = rl.rollout(mdp, rl.softmax_policy(theta), 1500, torch.Generator().manual_seed(3))
    v = rl.evaluate_policy(mdp, rl.softmax_policy(theta), 1.0)
    u = grad / grad.norm()
    for baseline in (0.0, v[ep.states]):
        g = rl.reinforce_gradient(theta, ep, rl.discounted_returns(ep.rewards, 1.0) - baseline)
        proj = (g * u).sum((1, 2))
        se = float(proj.std()) / math.sqrt(len(proj))
        assert abs(float(proj.mean()) - float(grad.norm())) < 4 * se


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_gae_expectation_closed_forms(world, lam):
    mdp, pi = world
    gamma = 0.9
    v = rl.evaluate_policy(mdp, pi, gamma)
    q = rl.q_values(mdp, v, gamma)
    alive = (~mdp.terminal).to(f64)[:, None]
    # with the true values every lambda gives the true advantage q - v
    assert_close(rl.gae_expectation(mdp, pi, v, gamma, lam), alive * (q - v[:, None]), atol=1e-12)
    v_hat = v + randn(11, seed=8) * (~mdp.terminal)
    m = rl.gae_expectation(mdp, pi, v_hat, gamma, lam)
    if lam == 0.0:  # the mean TD error
        want = alive * (mdp.R + gamma * mdp.P @ v_hat - v_hat[:, None])
    elif lam == 1.0:  # the Monte Carlo advantage q - v_hat
        want = alive * (q - v_hat[:, None])
    else:
        return
    assert_close(m, want, atol=1e-12)


def test_completion_log_probs_at_a_temperature():
    from mlbook.models import checkpoints
    from mlbook.posttraining import task

    model = checkpoints.load("base", dtype=f64)
    pairs = [(3, 4), (9, 9), (0, 5)]
    tokens, mask = task.batch(pairs)
    with torch.no_grad():
        logits = model(tokens[:, :-1])
        assert_close(
            rl.completion_log_probs_at(logits, tokens, mask, 1.0),
            task.completion_log_probs(model, tokens, mask),
            atol=1e-12,
        )
        tau = 0.5  # explicit: p = exp(z / tau) / sum exp(z / tau), product over the completion
        p = torch.exp(logits / tau) / torch.exp(logits / tau).sum(-1, keepdim=True)
        want = [
            sum(math.log(p[b, t, tokens[b, t + 1]]) for t in range(7) if mask[b, t])
            for b in range(3)
        ]
        got = rl.completion_log_probs_at(logits, tokens, mask, tau)
        assert max(abs(float(g) - w) for g, w in zip(got, want, strict=True)) < 1e-12
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        rl.completion_log_probs_at(logits, tokens, mask, 0.0)
    with pytest.raises(ValueError, match="logits must have shape"):
        rl.completion_log_probs_at(logits[:, :5], tokens, mask, 1.0)
