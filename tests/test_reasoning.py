"""mlbook.posttraining.reasoning against references: scipy's binomial, enumeration, Counter,
simulation and exact marginalisation."""

import numpy as np
import pytest
import torch
from scipy import stats

from mlbook.posttraining import reasoning as R

P = torch.tensor([0.0, 1e-9, 0.05, 0.3, 0.5, 0.7, 0.99, 1.0], dtype=torch.float64)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10])
def test_closed_forms_match_enumeration_and_scipy(n):
    torch.testing.assert_close(R.best_of_n(n, P), R.best_of_n_naive(n, P), atol=1e-12, rtol=0)
    torch.testing.assert_close(
        R.majority_vote(n, P), R.majority_vote_naive(n, P), atol=1e-12, rtol=0
    )
    sf = torch.from_numpy(stats.binom.sf(n // 2, n, P.numpy()))  # P(K > n/2)
    torch.testing.assert_close(R.majority_vote(n, P), sf, atol=1e-13, rtol=0)
    best = torch.from_numpy(stats.binom.sf(0, n, P.numpy()))  # P(K >= 1)
    torch.testing.assert_close(R.best_of_n(n, P), best, atol=1e-14, rtol=1e-12)


def test_large_n_and_tiny_p():
    n = 2001
    p = torch.tensor([0.45, 0.5, 0.55], dtype=torch.float64)
    ref = torch.from_numpy(stats.binom.sf(n // 2, n, p.numpy()))
    torch.testing.assert_close(R.majority_vote(n, p), ref, atol=1e-12, rtol=1e-9)
    assert abs(R.best_of_n(3, 1e-12).item() - 3e-12) < 1e-20  # no cancellation in 1 - (1-p)^n


def test_majority_vote_hurts_below_one_half_and_helps_above():
    p = torch.tensor([0.3, 0.45, 0.55, 0.7], dtype=torch.float64)
    m = R.majority_vote(15, p)
    assert (m[:2] < p[:2]).all() and (m[2:] > p[2:]).all()
    torch.testing.assert_close(R.majority_vote(2, p), p**2, atol=1e-15, rtol=0)  # tie loses


def test_simulation_agrees_within_four_standard_errors():
    gen = torch.Generator().manual_seed(0)
    n, G = 9, 20000
    for p in (0.3, 0.6):
        right = torch.rand(G, n, generator=gen, dtype=torch.float64) < p  # (G, n)
        for got, exact in (
            (right.any(1), R.best_of_n(n, p)),
            (right.sum(1) > n / 2, R.majority_vote(n, p)),
        ):
            x = got.double()
            se = x.std() / G**0.5
            assert abs(x.mean() - exact) < 4 * se + 1e-12


def test_plurality_vote_matches_counter_including_ties():
    gen = torch.Generator().manual_seed(1)
    answers = torch.randint(0, 4, (500, 6), generator=gen)
    assert R.plurality_vote(answers).tolist() == R.plurality_vote_naive(answers.tolist())
    assert R.plurality_vote(torch.tensor([[3, 1, 1, 3]])).item() == 3  # tie: first seen wins


def test_answer_marginal_is_the_sum_over_chains():
    gen = torch.Generator().manual_seed(2)
    p_z = torch.softmax(torch.randn(4, 7, generator=gen, dtype=torch.float64), -1)
    p_y_z = torch.softmax(torch.randn(4, 7, 5, generator=gen, dtype=torch.float64), -1)
    m = R.answer_marginal(p_z, p_y_z)
    joint = p_z[..., None] * p_y_z  # (4, Z, Y) P(Z, Y | X)
    torch.testing.assert_close(m, joint.sum(-2), atol=1e-15, rtol=0)
    for i in range(4):
        torch.testing.assert_close(
            m[i], R.answer_marginal_naive(p_z[i], p_y_z[i]), atol=1e-15, rtol=0
        )
    torch.testing.assert_close(m.sum(-1), torch.ones(4, dtype=torch.float64))


def test_sum_chain_model_and_sampling():
    p_z, p_y_z, labels = R.sum_chain_model(7, 8, 5)
    assert len(labels) == p_z.shape[0] == p_y_z.shape[0] == 60
    m = R.answer_marginal(p_z, p_y_z)
    assert int(m.argmax()) == 20  # the marginal's mode is the right sum
    joint = p_z[:, None] * p_y_z
    z_star, y_star = divmod(int(joint.argmax()), joint.shape[1])
    assert labels[z_star] == ("a+b", 16) and y_star == 21  # the likeliest chain is wrong
    # the right answer collects 0.65 * 0.9 + 0.35 * 0.05 (chains right, and one wrong chain
    # corrected by the final slip)
    assert abs(m[20].item() - (0.65 * 0.9 + 0.35 * 0.05)) < 1e-15
    z, y = R.sample_chains(p_z, p_y_z, 20000, torch.Generator().manual_seed(3))
    freq = torch.bincount(y, minlength=30).double() / y.numel()
    se = (m * (1 - m) / y.numel()).sqrt()
    assert ((freq - m).abs() <= 4 * se + 1e-12).all()
    zf = torch.bincount(z, minlength=60).double() / z.numel()
    assert ((zf - p_z).abs() <= 4 * (p_z * (1 - p_z) / z.numel()).sqrt() + 1e-12).all()


def test_argument_checks():
    with pytest.raises(ValueError, match="p must lie in"):
        R.best_of_n(3, 1.5)
    with pytest.raises(ValueError, match="n must be"):
        R.majority_vote(0, 0.5)
    with pytest.raises(ValueError, match="n must be <= 16"):
        R.best_of_n_naive(17, 0.5)
    with pytest.raises(ValueError, match="p_z must sum to one"):
        R.answer_marginal(torch.tensor([0.5, 0.6], dtype=torch.float64), torch.eye(2).double())
    with pytest.raises(ValueError, match="chain rows"):
        R.answer_marginal(torch.tensor([0.5, 0.5], dtype=torch.float64), torch.eye(3).double())
    with pytest.raises(ValueError, match="a must be a digit"):
        R.sum_chain_model(10, 1, 1)
    with pytest.raises(ValueError, match="answers must have 2 axes"):
        R.plurality_vote(torch.tensor([1, 2]))
    assert np.isclose(R.best_of_n(1, 0.25).item(), 0.25)
