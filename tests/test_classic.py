"""mlbook.beyond.classic against references: scikit-learn, enumeration, torch, float64 autograd."""

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.kernel_ridge import KernelRidge
from sklearn.metrics.pairwise import rbf_kernel as sk_rbf

from mlbook.beyond import classic as cl

f64 = torch.float64
TOL = 1e-12


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def hmm(gen, S=3, V=4):
    pi = torch.softmax(torch.randn(S, generator=gen, dtype=f64), 0)
    A = torch.softmax(torch.randn(S, S, generator=gen, dtype=f64), 1)
    B = torch.softmax(torch.randn(S, V, generator=gen, dtype=f64), 1)
    return pi, A, B


def test_xor_best_linear_accuracy_is_three_quarters():
    X, y = cl.xor_data()
    assert not cl.linearly_separable(X, y)
    assert cl.linearly_separable(X, (X.sum(1) >= 1).long())  # OR is separable
    assert cl.best_linear_accuracy(X, y) == 0.75


def test_rbf_kernel_matches_sklearn_and_naive(gen):
    X, Y = torch.randn(20, 3, generator=gen, dtype=f64), torch.randn(7, 3, generator=gen, dtype=f64)
    K = cl.rbf_kernel(X, Y, 1.3)
    ref = sk_rbf(X.numpy(), Y.numpy(), gamma=1 / (2 * 1.3**2))
    assert np.allclose(K.numpy(), ref, atol=TOL, rtol=0)
    assert torch.allclose(K, cl.rbf_kernel_naive(X, Y, 1.3), atol=TOL, rtol=0)


def test_random_fourier_features_converge(gen):
    X = torch.randn(30, 2, generator=gen, dtype=f64)
    W, b = cl.rff_params(2, 200_000, 1.0, gen)
    Z = cl.random_fourier_features(X, W, b)
    err = (Z @ Z.T - cl.rbf_kernel(X, X, 1.0)).abs().max()
    assert err < 0.02  # about 4 standard errors of sqrt(1 / D)


def test_kernel_ridge_matches_sklearn(gen):
    x = torch.rand(40, 2, generator=gen, dtype=f64)
    y = torch.sin(3 * x[:, 0]) + x[:, 1]
    xt = torch.rand(15, 2, generator=gen, dtype=f64)
    alpha = cl.kernel_ridge_fit(cl.rbf_kernel(x, x, 0.5), y, 0.05)
    pred = cl.kernel_ridge_predict(cl.rbf_kernel(xt, x, 0.5), alpha)
    ref = KernelRidge(alpha=0.05, kernel="rbf", gamma=2.0).fit(x.numpy(), y.numpy())
    assert np.allclose(pred.numpy(), ref.predict(xt.numpy()), atol=1e-9, rtol=0)


def test_forward_and_viterbi_match_enumeration(gen):
    for _ in range(4):
        pi, A, B = hmm(gen)
        obs = torch.randint(0, 4, (5,), generator=gen)
        lp, _ = cl.hmm_forward(pi.log(), A.log(), B.log(), obs)
        total = 0.0
        best, best_path = -math.inf, None
        for path in itertools.product(range(3), repeat=5):
            p = pi[path[0]] * B[path[0], obs[0]]
            for t in range(1, 5):
                p = p * A[path[t - 1], path[t]] * B[path[t], obs[t]]
            total += float(p)
            if float(p) > best:
                best, best_path = float(p), list(path)
        assert abs(float(lp) - math.log(total)) < TOL
        assert abs(float(cl.hmm_forward_naive(pi, A, B, obs)) - total) < TOL
        path, score = cl.viterbi(pi.log(), A.log(), B.log(), obs)
        assert path == best_path and abs(float(score) - math.log(best)) < TOL
        assert cl.viterbi_bruteforce(pi.log(), A.log(), B.log(), obs)[0] == best_path


def test_viterbi_length_one_and_long_sequences(gen):
    pi, A, B = hmm(gen)
    path, score = cl.viterbi(pi.log(), A.log(), B.log(), torch.tensor([2]))
    assert path == [int((pi * B[:, 2]).argmax())]
    assert abs(float(score) - math.log(float((pi * B[:, 2]).max()))) < TOL
    obs = torch.randint(0, 4, (3000,), generator=gen)
    assert float(cl.hmm_forward_naive(pi, A, B, obs)) == 0.0  # underflow
    lp, _ = cl.hmm_forward(pi.log(), A.log(), B.log(), obs)
    path, score = cl.viterbi(pi.log(), A.log(), B.log(), obs)
    assert math.isfinite(float(lp)) and float(score) <= float(lp)


def test_hmm_argument_checks(gen):
    pi, A, B = hmm(gen)
    with pytest.raises(ValueError, match="obs must hold indices"):
        cl.hmm_forward(pi.log(), A.log(), B.log(), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="log_A must have shape"):
        cl.viterbi(pi.log(), A.log()[:2], B.log(), torch.tensor([0]))
    with pytest.raises(ValueError, match="obs must not be empty"):
        cl.hmm_forward(pi.log(), A.log(), B.log(), torch.tensor([], dtype=torch.long))


def test_hopfield_energy_never_rises_and_step_formula(gen):
    xi = torch.randint(0, 2, (4, 60), generator=gen).to(f64) * 2 - 1
    W = cl.hebbian_weights(xi)
    assert torch.equal(W, W.T) and bool((torch.diagonal(W) == 0).all())
    theta = 0.1 * torch.randn(60, generator=gen, dtype=f64)
    s0 = torch.sign(torch.randn(60, generator=gen, dtype=f64))
    order = torch.randint(0, 60, (400,), generator=gen)
    _, E = cl.hopfield_async(W, s0, order, theta)
    assert bool((E.diff() <= 1e-12).all())
    direct = -0.5 * s0 @ W @ s0 + theta @ s0
    assert abs(float(E[0] - direct)) < TOL


def test_hopfield_recall_matches_async_in_order(gen):
    xi = torch.randint(0, 2, (3, 50), generator=gen).to(f64) * 2 - 1
    W = cl.hebbian_weights(xi)
    probe = xi * torch.where(torch.rand(3, 50, generator=gen, dtype=f64) < 0.2, -1.0, 1.0)
    batch = cl.hopfield_recall(W, probe, sweeps=4)
    for b in range(3):
        one, _ = cl.hopfield_async(W, probe[b], torch.arange(50).repeat(4))
        assert torch.equal(batch[b], one)


def test_modern_hopfield_is_attention(gen):
    M = torch.randn(30, 8, generator=gen, dtype=f64)
    q = torch.randn(5, 8, generator=gen, dtype=f64)
    out = cl.modern_hopfield_update(M, q, 0.7)
    ref = F.scaled_dot_product_attention(q[None], M[None], M[None], scale=0.7)[0]
    assert torch.allclose(out, ref, atol=TOL, rtol=0)
    assert torch.allclose(out[2], cl.modern_hopfield_update_naive(M, q[2], 0.7), atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="beta must be a finite number"):
        cl.modern_hopfield_update(M, q, 0.0)


def test_rbm_conditionals_partition_and_gradient(gen):
    W = torch.randn(4, 3, generator=gen, dtype=f64)
    a, c = torch.randn(4, generator=gen, dtype=f64), torch.randn(3, generator=gen, dtype=f64)
    V, H = cl.binary_states(4, f64), cl.binary_states(3, f64)
    joint = torch.exp(-cl.rbm_energy(V[:, None], H[None], W, a, c))  # (16, 8)
    p_h = (joint[:, :, None] * H[None]).sum(1) / joint.sum(1, keepdim=True)
    assert torch.allclose(cl.rbm_p_h_given_v(V, W, c), p_h, atol=TOL, rtol=0)
    p_v = (joint.T[:, :, None] * V[None]).sum(1) / joint.T.sum(1, keepdim=True)  # (8, 4)
    assert torch.allclose(cl.rbm_p_v_given_h(H, W, a), p_v, atol=TOL, rtol=0)
    assert abs(float(cl.rbm_log_partition(W, a, c) - joint.sum().log())) < TOL
    assert abs(float(cl.rbm_log_partition_naive(W, a, c) - joint.sum().log())) < TOL
    data = V[[1, 5, 6, 14]]
    Wg = W.clone().requires_grad_(True)
    cl.rbm_log_likelihood(data, Wg, a, c).backward()
    p_model = joint.sum(1) / joint.sum()  # (16,)
    grad = data.T @ cl.rbm_p_h_given_v(data, W, c) / 4 - (V * p_model[:, None]).T @ p_h
    assert torch.allclose(Wg.grad, grad, atol=1e-10, rtol=0)


def test_cd_training_raises_exact_likelihood(gen):
    assert cl.bars_and_stripes(2).shape == (6, 4)
    data = cl.bars_and_stripes(3)  # (14, 9)
    W = 0.01 * torch.randn(9, 16, generator=gen, dtype=f64)
    a, c = torch.zeros(9, dtype=f64), torch.zeros(16, dtype=f64)
    before = float(cl.rbm_log_likelihood(data, W, a, c))
    for _ in range(300):
        W, a, c = cl.rbm_cd_step(data, W, a, c, k=1, lr=0.5, generator=gen)
    assert float(cl.rbm_log_likelihood(data, W, a, c)) > before + 0.5


def test_argument_checks(gen):
    X = torch.randn(3, 2, generator=gen, dtype=f64)
    with pytest.raises(ValueError, match="Y must have shape"):
        cl.rbf_kernel(X, torch.randn(3, 3, dtype=f64), 1.0)
    with pytest.raises(ValueError, match="sigma must be a finite number"):
        cl.rbf_kernel(X, X, -1.0)
    with pytest.raises(ValueError, match="W must have shape"):
        cl.random_fourier_features(X, torch.randn(3, 5, dtype=f64), torch.zeros(5, dtype=f64))
    with pytest.raises(ValueError, match="K must have shape"):
        cl.kernel_ridge_fit(torch.eye(3, dtype=f64), torch.zeros(4, dtype=f64), 0.1)
    with pytest.raises(ValueError, match="too large"):
        cl.binary_states(21, f64)
    with pytest.raises(ValueError, match="at most 12"):
        cl.best_linear_accuracy(torch.zeros(13, 2), torch.zeros(13))
