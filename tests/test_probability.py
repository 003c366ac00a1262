"""mlbook.foundations.probability against independent references (closed forms, SciPy, torch)."""

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from mlbook.foundations import probability as prob


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def test_interval_probability_matches_scipy():
    for dist, a, b in [
        (stats.norm(), -1.0, 2.0),
        (stats.beta(2, 5), 0.1, 0.7),
        (stats.expon(), 0.0, 3.0),
    ]:
        assert prob.interval_probability(dist.pdf, a, b) == pytest.approx(
            dist.cdf(b) - dist.cdf(a), abs=1e-10
        )


def test_marginal_conditional_bayes():
    rng = np.random.default_rng(1)
    joint = rng.dirichlet(np.ones(6)).reshape(2, 3)
    np.testing.assert_allclose(prob.marginal(joint, 0), joint.sum(1), atol=1e-15)
    cond = prob.conditional(joint, given=1)  # p(x | y), columns sum to 1
    np.testing.assert_allclose(cond.sum(0), 1.0, atol=1e-15)
    np.testing.assert_allclose(cond * joint.sum(0, keepdims=True), joint, atol=1e-15)
    lik = prob.conditional(joint, given=0)[:, 2]  # p(y=2 | x)
    post = prob.bayes_posterior(joint.sum(1), lik)  # p(x | y=2) via Bayes
    np.testing.assert_allclose(post, joint[:, 2] / joint[:, 2].sum(), atol=1e-15)


def test_marginal_keeps_axes_in_the_order_given():
    joint = np.random.default_rng(2).dirichlet(np.ones(24)).reshape(2, 3, 4)
    np.testing.assert_allclose(prob.marginal(joint, (2, 0)), joint.sum(1).T, atol=1e-15)


def test_chain_rule_round_trip_and_zero_prefixes():
    joint = np.random.default_rng(3).dirichlet(np.ones(27)).reshape(3, 3, 3)
    joint[0] = 0
    joint /= joint.sum()
    factors = prob.chain_rule_factors(joint)
    np.testing.assert_allclose(prob.chain_rule_joint(factors), joint, atol=1e-15)
    for f in factors:
        np.testing.assert_allclose(f.sum(-1), 1.0, atol=1e-12)


def test_markov_log_prob_sums_to_one_over_all_sequences():
    init = np.array([0.2, 0.8])
    tr = np.array([[0.9, 0.1], [0.4, 0.6]])
    total = sum(
        math.exp(prob.markov_sequence_log_prob(init, tr, np.array(s)))
        for s in itertools.product(range(2), repeat=5)
    )
    assert total == pytest.approx(1.0, abs=1e-12)
    assert prob.markov_sequence_log_prob(init, tr, np.array([0, 1])) == pytest.approx(
        math.log(0.2 * 0.1), abs=1e-15
    )


def test_expectation_and_variance_against_scipy():
    k = np.arange(11)
    pmf = stats.binom(10, 0.3).pmf(k)
    assert prob.expectation(k, pmf) == pytest.approx(3.0, abs=1e-12)
    assert prob.variance(k, pmf) == pytest.approx(2.1, abs=1e-12)


def test_gradient_estimators_are_unbiased(gen):
    exact = np.array([2 * 0.5, 2 * 1.5])  # d/d(mu, sigma) of mu^2 + sigma^2
    for g in (
        prob.score_function_grad(lambda x: x**2, 0.5, 1.5, 400_000, gen),
        prob.score_function_grad(lambda x: x**2, 0.5, 1.5, 400_000, gen, baseline=2.5),
        prob.pathwise_grad(lambda x: x**2, 0.5, 1.5, 400_000, gen),
    ):
        se = g.std(0).numpy() / math.sqrt(g.shape[0])
        assert np.all(np.abs(g.mean(0).numpy() - exact) < 4 * se)


def test_nlls_against_references(gen):
    y = torch.randn(50, generator=gen, dtype=torch.float64)
    mean = torch.zeros(50, dtype=torch.float64)
    ref = -stats.norm.logpdf(y.numpy(), 0, 0.7).mean()
    assert prob.gaussian_nll(y, mean, 0.7).item() == pytest.approx(ref, abs=1e-12)
    logits = torch.randn(20, 5, generator=gen, dtype=torch.float64) * 30  # large: needs stability
    labels = torch.randint(0, 5, (20,), generator=gen)
    assert prob.categorical_nll(logits, labels).item() == pytest.approx(
        F.cross_entropy(logits, labels).item(), abs=1e-10
    )


def test_gumbel_max_matches_softmax(gen):
    z = torch.tensor([0.0, 1.0, -1.0, 0.5])
    n = 200_000
    freq = torch.bincount(prob.gumbel_max_sample(z, n, gen), minlength=4).double() / n
    p = torch.softmax(z.double(), 0)
    assert torch.all((freq - p).abs() < 4 * torch.sqrt(p * (1 - p) / n))


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: prob.expectation([1, 2], [0.5, 0.6]), ValueError, "sum to one"),
        (lambda: prob.expectation([1, 2], [-0.1, 1.1]), ValueError, "non-negative"),
        (lambda: prob.expectation([1, 2], [0.5, math.nan]), ValueError, "finite"),
        (lambda: prob.marginal([], 0), ValueError, "empty"),
        (lambda: prob.interval_probability(np.exp, 1.0, 0.0), ValueError, "b must"),
        (lambda: prob.interval_probability(np.exp, 0.0, 1.0, n=4), ValueError, "odd"),
        (lambda: prob.interval_probability(lambda x: -x, 0.0, 1.0), ValueError, "negative"),
        (lambda: prob.marginal(np.full((2, 2), 0.25), 3), ValueError, r"keep must be in \[-2, 1\]"),
        (lambda: prob.marginal(np.full((2, 2), 0.25), (0, 0)), ValueError, "repeat"),
        (lambda: prob.conditional(np.full(4, 0.25), 0), ValueError, "2 axes"),
        (lambda: prob.conditional(np.array([[0.5, 0.5], [0.0, 0.0]]), 0), ValueError, "undefined"),
        (lambda: prob.bayes_posterior([0.5, 0.5], [0.1]), ValueError, "likelihood must have shape"),
        (lambda: prob.bayes_posterior([0.5, 0.5], [0.0, 0.0]), ValueError, "probability 0"),
        (lambda: prob.chain_rule_joint([]), ValueError, "empty"),
        (
            lambda: prob.chain_rule_joint([np.full(2, 0.5), np.full((3, 2), 0.5)]),
            ValueError,
            "shape",
        ),
        (
            lambda: prob.markov_sequence_log_prob([1.0, 0.0], np.eye(2), np.array([0, 2])),
            ValueError,
            "seq must hold indices",
        ),
        (
            lambda: prob.markov_sequence_log_prob([1.0, 0.0], np.eye(3), np.array([0])),
            ValueError,
            "transition",
        ),
        (lambda: prob.expectation([1, 2, 3], [0.5, 0.5]), ValueError, "same shape"),
        (
            lambda: prob.score_function_grad(torch.sin, 0.0, -1.0, 10, torch.Generator()),
            ValueError,
            "sigma",
        ),
        (
            lambda: prob.pathwise_grad(lambda x: x.sum(), 0.0, 1.0, 10, torch.Generator()),
            ValueError,
            "same shape",
        ),
        (lambda: prob.gaussian_nll(torch.zeros(3), torch.zeros(4), 1.0), ValueError, "same shape"),
        (lambda: prob.gaussian_nll(torch.zeros(3), torch.zeros(3), 0.0), ValueError, "positive"),
        (lambda: prob.categorical_nll(torch.zeros(3, 2), torch.zeros(3)), TypeError, "integer"),
        (
            lambda: prob.categorical_nll(torch.zeros(3, 2), torch.tensor([0, 1, 2])),
            ValueError,
            r"y must hold indices in \[0, 2\)",
        ),
        (
            lambda: prob.categorical_nll(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)),
            ValueError,
            r"logits must not be empty, got shape \(0, 4\)",
        ),  # an empty batch used to average to NaN
        (
            lambda: prob.gaussian_nll(torch.zeros(0), torch.zeros(0), 1.0),
            ValueError,
            "y must not be empty",
        ),
        (
            lambda: prob.expectation([1.0, math.nan], [0.5, 0.5]),
            ValueError,
            "values must be finite",
        ),
        (lambda: prob.gumbel_max_sample([0.0, 1.0], 5, torch.Generator()), TypeError, "Tensor"),
        (
            lambda: prob.gumbel_max_sample(torch.zeros(3), 2.5, torch.Generator()),
            TypeError,
            "n must be a positive int, got float",
        ),
        (
            lambda: prob.gumbel_max_sample(torch.zeros(3), 100.0, torch.Generator()),
            TypeError,
            "n must be a positive int, got float",
        ),  # a whole float is refused too: a count is an int
        (
            lambda: prob.gumbel_max_sample(torch.zeros(3), 0, torch.Generator()),
            ValueError,
            "n must be a positive int, got 0",
        ),
        (
            lambda: prob.gumbel_max_sample(torch.tensor([0.0, math.inf]), 5, torch.Generator()),
            ValueError,
            "finite",
        ),
    ],
)
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_gaussian_nll_names_numpy_input_and_categorical_nll_takes_int32_labels():
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        prob.gaussian_nll(np.zeros(3), torch.zeros(3), 1.0)
    with pytest.raises(TypeError, match="mean must be a torch.Tensor"):
        prob.gaussian_nll(torch.zeros(3), np.zeros(3), 1.0)
    logits = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 2], dtype=torch.int32)
    ref = torch.nn.functional.cross_entropy(logits, y.long())
    assert prob.categorical_nll(logits, y).item() == pytest.approx(ref.item(), abs=1e-14)
