"""mlbook.foundations.information against independent references (SciPy, torch, scikit-learn,
40-digit decimal arithmetic, closed forms, enumeration), seeded, with tolerances per dtype."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from sklearn.metrics import mutual_info_score

from mlbook.foundations import information as it
from mlbook.foundations import probability as prob

ATOL64 = 1e-12  # float64 sums of at most a few hundred terms of size O(1)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_to_bits():
    assert it.to_bits(math.log(2)) == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(it.to_bits([math.log(4), 0.0]), [2.0, 0.0], atol=1e-15)


def test_surprisal(rng):
    p = rng.random(10)
    np.testing.assert_allclose(it.surprisal(p), -np.log(p), rtol=1e-15)
    assert it.surprisal(0.5) == pytest.approx(math.log(2), abs=1e-15)
    assert it.surprisal(0.0) == math.inf
    # independent events: information adds
    both = it.surprisal(0.3) + it.surprisal(0.2)
    assert it.surprisal(0.3 * 0.2) == pytest.approx(both, abs=1e-14)
    assert it.surprisal(torch.tensor([1.0]))[0] == 0.0
    with pytest.raises(ValueError, match="must lie in"):
        it.surprisal([0.5, 1.2])
    with pytest.raises(ValueError, match="must lie in"):
        it.surprisal([-0.1])
    with pytest.raises(ValueError, match="must lie in"):
        it.surprisal([math.nan])
    with pytest.raises(TypeError, match="numeric"):
        it.surprisal(["a"])


def test_entropy_vs_scipy_and_torch(rng):
    p = rng.dirichlet(np.full(6, 0.5), size=20)  # (20, 6)
    h = it.entropy(p)
    assert h.shape == (20,)
    np.testing.assert_allclose(h, stats.entropy(p, axis=-1), atol=ATOL64)
    ref = torch.distributions.Categorical(probs=torch.as_tensor(p)).entropy().numpy()
    np.testing.assert_allclose(h, ref, atol=ATOL64)
    assert np.all(h <= math.log(6) + 1e-12) and np.all(h >= 0)


def test_entropy_edge_cases():
    assert it.entropy(np.full(8, 1 / 8)) == pytest.approx(math.log(8), abs=1e-15)
    assert it.entropy([0.0, 1.0, 0.0]) == 0.0
    assert it.entropy([0.5, 0.5, 0.0]) == pytest.approx(math.log(2), abs=1e-15)
    # float32 input is validated with the package tolerance and computed in float64
    p32 = torch.softmax(torch.randn(5, generator=torch.Generator().manual_seed(0)), 0)
    assert it.entropy(p32) == pytest.approx(stats.entropy(p32.double().numpy()), abs=1e-6)
    with pytest.raises(ValueError, match="at least 1 axes"):
        it.entropy(0.3)
    with pytest.raises(ValueError, match="sum to one"):
        it.entropy([0.5, 0.6])
    with pytest.raises(ValueError, match="non-negative"):
        it.entropy([1.5, -0.5])
    with pytest.raises(TypeError, match="numeric"):
        it.entropy(np.array(["a", "b"]))


def test_cross_entropy_and_kl_vs_references(rng):
    p = rng.dirichlet(np.ones(7), size=30)  # (30, 7)
    q = rng.dirichlet(np.ones(7), size=30)
    ce, kl = it.cross_entropy(p, q), it.kl_divergence(p, q)
    np.testing.assert_allclose(kl, stats.entropy(p, q, axis=-1), atol=ATOL64)
    cat = torch.distributions.Categorical
    ref_kl = torch.distributions.kl_divergence(
        cat(probs=torch.as_tensor(p)), cat(probs=torch.as_tensor(q))
    )
    np.testing.assert_allclose(kl, ref_kl.numpy(), atol=ATOL64)
    # soft-target cross-entropy of torch: -sum p log_softmax(log q) = -sum p log q
    ref_ce = F.cross_entropy(torch.log(torch.as_tensor(q)), torch.as_tensor(p), reduction="none")
    np.testing.assert_allclose(ce, ref_ce.numpy(), atol=ATOL64)
    np.testing.assert_allclose(ce, it.entropy(p) + kl, atol=ATOL64)
    assert np.all(kl > 0)
    # broadcasting one q against many p
    np.testing.assert_allclose(
        it.kl_divergence(p, q[0]), stats.entropy(p, q[0][None], axis=-1), atol=ATOL64
    )


def test_kl_edge_cases():
    p = np.array([0.5, 0.5, 0.0])
    assert it.kl_divergence(p, p) == 0.0
    assert it.kl_divergence(p, [0.25, 0.25, 0.5]) == pytest.approx(math.log(2), abs=1e-15)
    assert it.kl_divergence([0.25, 0.25, 0.5], p) == math.inf
    assert it.cross_entropy([0.25, 0.25, 0.5], p) == math.inf
    assert it.cross_entropy(p, [0.25, 0.25, 0.5]) == pytest.approx(math.log(4), abs=1e-15)
    with pytest.raises(ValueError, match="same K"):
        it.kl_divergence([0.5, 0.5], [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="shape mismatch"):
        it.cross_entropy(np.full((2, 3), 1 / 3), np.full((4, 3), 1 / 3))
    with pytest.raises(ValueError, match="sum to one"):
        it.cross_entropy([0.5, 0.5], [0.9, 0.9])
    with pytest.raises(ValueError, match="at least 1 axes"):
        it.kl_divergence(1.0, 1.0)


def test_empirical_distribution():
    tokens = torch.tensor([0, 2, 2, 3, 2])
    np.testing.assert_array_equal(it.empirical_distribution(tokens, 5), [0.2, 0, 0.6, 0.2, 0])
    np.testing.assert_array_equal(it.empirical_distribution(np.array([1, 1]), 2), [0.0, 1.0])
    with pytest.raises(ValueError, match="tokens must hold indices"):
        it.empirical_distribution(tokens, 3)
    with pytest.raises(ValueError, match="k must be a positive int"):
        it.empirical_distribution(tokens, 0)
    with pytest.raises(ValueError, match="tokens must not be empty"):
        it.empirical_distribution(torch.tensor([], dtype=torch.int64), 3)
    with pytest.raises(TypeError, match="integer tensor"):
        it.empirical_distribution(torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(TypeError, match="tokens must be a torch.Tensor"):
        it.empirical_distribution("abc", 3)


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_sequence_nll_and_perplexity(dtype, atol):
    gen = torch.Generator().manual_seed(1)
    n, k = 200, 9
    log_probs = torch.log_softmax(torch.randn(n, k, generator=gen, dtype=torch.float64), -1)
    tokens = torch.randint(0, k, (n,), generator=gen)
    nll = it.sequence_nll(log_probs.to(dtype), tokens)
    assert nll.dtype == dtype
    torch.testing.assert_close(nll.double(), F.nll_loss(log_probs, tokens), atol=atol, rtol=0)
    torch.testing.assert_close(
        it.perplexity(log_probs.to(dtype), tokens).double(),
        torch.exp(F.nll_loss(log_probs, tokens)),
        atol=10 * atol,
        rtol=0,
    )
    # a context-free model: mean NLL equals the cross-entropy of the empirical distribution
    q = torch.softmax(torch.randn(k, generator=gen, dtype=torch.float64), 0)
    expected = it.cross_entropy(it.empirical_distribution(tokens, k), q.numpy())
    got = float(it.sequence_nll(torch.log(q).to(dtype), tokens))
    assert got == pytest.approx(expected, abs=atol)
    # the uniform model has perplexity K
    uniform = torch.full((k,), -math.log(k), dtype=dtype)
    assert float(it.perplexity(uniform, tokens)) == pytest.approx(k, abs=1e3 * atol)


def test_sequence_nll_gradient_and_errors():
    logits = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([0, 1, 2, 2, 1])
    assert torch.autograd.gradcheck(
        lambda z: it.sequence_nll(torch.log_softmax(z, -1), tokens), (logits,)
    )
    lp = torch.log_softmax(logits.detach(), -1)
    with pytest.raises(TypeError, match="log_probs must be a torch.Tensor"):
        it.sequence_nll(lp.numpy(), tokens)
    with pytest.raises(TypeError, match="integer tensor"):
        it.sequence_nll(lp, tokens.double())
    with pytest.raises(ValueError, match="log_probs must have shape"):
        it.sequence_nll(lp[:4], tokens)
    with pytest.raises(ValueError, match="tokens must hold indices"):
        it.sequence_nll(lp, torch.tensor([0, 1, 2, 3, 1]))
    with pytest.raises(ValueError, match="logsumexp 0"):
        it.sequence_nll(lp + 0.1, tokens)  # not normalised
    with pytest.raises(ValueError, match="log_probs.ndim must be one of"):
        it.sequence_nll(lp[None], tokens)
    with pytest.raises(ValueError, match="NaN"):
        it.perplexity(torch.full((5, 3), math.nan, dtype=torch.float64), tokens)
    zero_prob = torch.tensor([0.0, -math.inf], dtype=torch.float64)
    assert float(it.sequence_nll(zero_prob, torch.tensor([0, 1]))) == math.inf


def test_markov_entropy_rate_vs_enumeration(rng):
    k, n = 3, 5
    tr = rng.dirichlet(np.ones(k), size=k)  # (K, K)
    pi = it.stationary_distribution(tr)
    np.testing.assert_allclose(pi @ tr, pi, atol=ATOL64)
    # H(x_1..x_n) by enumerating all K^n sequences of the stationary chain (chain rule, eq. 6.2)
    logp = np.array(
        [
            prob.markov_sequence_log_prob(pi, tr, np.array(s))
            for s in itertools.product(range(k), repeat=n)
        ]
    )
    h_joint = -(np.exp(logp) * logp).sum()
    rate = it.markov_entropy_rate(tr)
    assert h_joint == pytest.approx(it.entropy(pi) + (n - 1) * rate, abs=1e-12)
    # an i.i.d. chain (identical rows) has rate H(row)
    iid = np.tile([0.5, 0.3, 0.2], (3, 1))
    assert it.markov_entropy_rate(iid) == pytest.approx(stats.entropy([0.5, 0.3, 0.2]), abs=1e-14)
    with pytest.raises(ValueError, match="reducible"):
        it.stationary_distribution(np.eye(2))  # reducible: every distribution is stationary
    with pytest.raises(ValueError, match="transition must have shape"):
        it.stationary_distribution(np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match="sum to one"):
        it.markov_entropy_rate([[0.5, 0.6], [0.5, 0.5]])


def test_mutual_information_vs_sklearn_and_identities(rng):
    counts = rng.integers(0, 30, size=(4, 6))
    counts[0, 0] = 0  # a zero cell
    joint = counts / counts.sum()
    mi = it.mutual_information(joint)
    assert mi == pytest.approx(mutual_info_score(None, None, contingency=counts), abs=ATOL64)
    hx, hy = it.entropy(joint.sum(1)), it.entropy(joint.sum(0))
    h_xy = it.entropy(joint.reshape(-1))
    assert mi == pytest.approx(hx - it.conditional_entropy(joint, given=1), abs=ATOL64)
    assert mi == pytest.approx(hy - it.conditional_entropy(joint, given=0), abs=ATOL64)
    assert it.conditional_entropy(joint, given=1) == pytest.approx(h_xy - hy, abs=ATOL64)
    # independence: I = 0; a bijection: I = H(X)
    indep = np.outer([0.2, 0.8], [0.1, 0.6, 0.3])
    assert it.mutual_information(indep) == pytest.approx(0, abs=1e-15)
    perm = np.diag([0.1, 0.2, 0.7])[[2, 0, 1]]
    assert it.mutual_information(perm) == pytest.approx(stats.entropy([0.1, 0.2, 0.7]), abs=1e-14)
    assert it.conditional_entropy(perm) == pytest.approx(0.0, abs=1e-15)


def test_mutual_information_errors():
    with pytest.raises(ValueError, match="2 axes"):
        it.mutual_information(np.full(4, 0.25))
    with pytest.raises(ValueError, match="sum to one"):
        it.mutual_information(np.full((2, 2), 0.3))
    with pytest.raises(ValueError, match="given must be one of"):
        it.conditional_entropy(np.full((2, 2), 0.25), given=2)
    with pytest.raises(ValueError, match="2 axes"):
        it.conditional_entropy(np.full((2, 2, 2), 0.125))


def test_kl_k3_vs_decimal():
    u = torch.tensor(
        [
            -30.0,
            -3.0,
            -0.5,
            -0.1,
            -0.0999,
            -1e-3,
            -1e-9,
            0.0,
            1e-12,
            1e-5,
            0.05,
            0.1,
            0.2,
            2.0,
            10.0,
        ],
        dtype=torch.float64,
    )
    with localcontext() as ctx:
        ctx.prec = 40  # Decimal(float) is exact; exp is correctly rounded to 40 digits
        ref = [float(Decimal(x).exp() - 1 - Decimal(x)) for x in u.tolist()]
    got = it.kl_k3(u)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-14, atol=0)  # relative: tiny values too
    assert float(it.kl_k3(torch.tensor([-math.inf], dtype=torch.float64))[0]) == math.inf
    # float32: relative error at float32 precision, and never negative
    u32 = torch.linspace(-0.3, 0.3, 1001, dtype=torch.float32)
    ref32 = it.kl_k3(u32.double())
    got32 = it.kl_k3(u32)
    assert got32.dtype == torch.float32 and bool((got32 >= 0).all())
    np.testing.assert_allclose(got32.double().numpy(), ref32.numpy(), rtol=1e-6, atol=1e-30)
    # the naive formula agrees in float64 away from r = 1 ...
    big = torch.tensor([-3.0, -0.5, 0.5, 2.0], dtype=torch.float64)
    torch.testing.assert_close(it.kl_k3_naive(torch.exp(big)), it.kl_k3(big), atol=1e-14, rtol=0)
    # ... and loses its digits near r = 1 in float32
    naive32 = it.kl_k3_naive(torch.exp(u32))
    assert float((naive32.double() - ref32).abs().max()) > 1e-8


def test_kl_k3_gradient_and_k1():
    u = torch.linspace(-2, 2, 41, dtype=torch.float64).requires_grad_(True)
    (g,) = torch.autograd.grad(it.kl_k3(u).sum(), u)
    torch.testing.assert_close(g, torch.expm1(u.detach()), atol=1e-14, rtol=0)  # d/du = r - 1
    assert torch.autograd.gradcheck(
        it.kl_k3, (torch.tensor([-1.0, -0.05, 0.03, 0.5], dtype=torch.float64, requires_grad=True),)
    )
    torch.testing.assert_close(it.kl_k1(u.detach()), -u.detach())


def test_kl_estimators_unbiased_by_enumeration(rng):
    # exact expectations under q by enumeration, not by sampling
    q, p = rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))
    log_r = torch.as_tensor(np.log(p) - np.log(q))
    kl = stats.entropy(q, p)
    assert float((torch.as_tensor(q) * it.kl_k1(log_r)).sum()) == pytest.approx(kl, abs=ATOL64)
    assert float((torch.as_tensor(q) * it.kl_k3(log_r)).sum()) == pytest.approx(kl, abs=ATOL64)
    assert bool((it.kl_k3(log_r) >= 0).all())


def test_kl_estimator_errors():
    with pytest.raises(TypeError, match="log_ratio must be a torch.Tensor"):
        it.kl_k1(np.zeros(3))
    with pytest.raises(TypeError, match="floating-point"):
        it.kl_k3(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="NaN"):
        it.kl_k3(torch.tensor([0.0, math.nan]))
    with pytest.raises(ValueError, match="NaN"):
        it.kl_k1(torch.tensor([math.inf]))
    with pytest.raises(TypeError, match="ratio must be a torch.Tensor"):
        it.kl_k3_naive([1.0])
    with pytest.raises(ValueError, match="non-negative"):
        it.kl_k3_naive(torch.tensor([-0.5]))
