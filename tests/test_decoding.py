"""mlbook.systems.decoding against references: exhaustive search, closed forms, chi-square tests
with SciPy, the book's greedy ``generate``."""

import itertools
import math

import numpy as np
import pytest
import scipy.stats
import torch

from mlbook.models import checkpoints
from mlbook.models.generate import generate
from mlbook.posttraining import task
from mlbook.systems import decoding as dec

f64 = torch.float64


def markov_step_fn(V=3, seed=0, eos_bias=None):
    """A toy 'model': next-token log-probabilities from a random table of (position, last token)."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(16, V, V, generator=gen, dtype=f64) * 1.5  # (position, last, next)
    if eos_bias is not None:
        table[..., 0] += eos_bias

    def step(tokens):
        z = table[tokens.shape[1] % 16, tokens[:, -1]]  # (W, V)
        return torch.log_softmax(z, -1)

    return step


def chisquare_pvalue(samples, p, min_expected=5.0):
    """Pearson chi-square p-value of integer samples against probabilities p (rare bins pooled)."""
    counts = np.bincount(np.asarray(samples), minlength=len(p)).astype(float)
    expected = np.asarray(p, dtype=float) * counts.sum()
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return scipy.stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue


def test_sequence_score_is_the_sum_of_log_probs():
    gen = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(2, 5, 7, generator=gen, dtype=f64), -1)
    y = torch.randint(0, 7, (2, 5), generator=gen)
    ref = torch.tensor(
        [sum(float(logp[b, t, y[b, t]]) for t in range(5)) for b in range(2)], dtype=f64
    )
    torch.testing.assert_close(dec.sequence_score(logp, y), ref.double(), atol=1e-12, rtol=0)
    assert float(dec.length_normalised(torch.tensor(-6.0), 3, 1.0)) == -2.0
    assert float(dec.length_normalised(torch.tensor(-6.0), 3, 0.0)) == -6.0


@pytest.mark.parametrize(("eos", "alpha"), [(None, 0.0), (0, 0.0), (0, 1.0), (0, 0.6)])
def test_wide_beam_equals_exhaustive_search(eos, alpha):
    step = markov_step_fn(V=3, seed=2, eos_bias=0.5)
    prompt = torch.tensor([1])
    y, s = dec.beam_search(step, prompt, 4, beam_width=3**4, eos=eos, alpha=alpha)
    y_ref, s_ref = dec.beam_search_naive(step, prompt, 4, 3, eos=eos, alpha=alpha)
    assert y.tolist() == y_ref.tolist()
    assert abs(s - s_ref) < 1e-12
    # independent brute force: every sequence scored by a direct product of probabilities
    best = max(
        (
            math.log(
                math.prod(
                    float(step(torch.tensor([[1, *seq[:t]]])).exp()[0, seq[t]])
                    for t in range(len(seq))
                )
            )
            / len(seq) ** alpha,
            seq,
        )
        for full in itertools.product(range(3), repeat=4)
        for seq in [full[: full.index(eos) + 1] if eos is not None and eos in full else full]
    )
    assert list(best[1]) == y.tolist()


def test_beam_of_width_one_is_greedy():
    step = markov_step_fn(V=5, seed=3)
    y, s = dec.beam_search(step, torch.tensor([0, 2]), 6, beam_width=1)
    ctx, total = torch.tensor([[0, 2]]), 0.0
    for _ in range(6):
        logp = step(ctx)[0]
        total += float(logp.max())
        ctx = torch.cat([ctx, logp.argmax().reshape(1, 1)], 1)
    assert y.tolist() == ctx[0, 2:].tolist()
    assert abs(s - total) < 1e-12


def test_acceptance_and_residual_closed_form():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=f64)
    q = torch.tensor([0.25, 0.5, 0.0, 0.25], dtype=f64)
    torch.testing.assert_close(
        dec.acceptance_prob(p, q), torch.tensor([1.0, 0.6, 1.0, 0.0], dtype=f64)
    )
    torch.testing.assert_close(
        dec.residual(p, q), torch.tensor([0.25, 0, 0.2, 0], dtype=f64) / 0.45
    )
    torch.testing.assert_close(dec.acceptance_rate(p, q), torch.tensor(0.55, dtype=f64))
    torch.testing.assert_close(dec.residual(p, p), p)  # nothing is ever rejected


@pytest.mark.parametrize("seed", [0, 1])
def test_speculative_sample_has_the_target_distribution(seed):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(12, generator=gen, dtype=f64) * 1.5, -1)
    q = torch.softmax(torch.randn(12, generator=gen, dtype=f64) * 1.5, -1)
    x, accepted = dec.speculative_sample(p, q, 200_000, gen)
    assert chisquare_pvalue(x, p) > 1e-4
    rate = accepted.double().mean()
    assert abs(rate - dec.acceptance_rate(p, q)) < 5 * math.sqrt(0.25 / 200_000)
    wrong, _ = dec.speculative_sample(p, q, 200_000, gen, use_residual=False)
    assert chisquare_pvalue(wrong, p) < 1e-10  # the negative control fails


def test_naive_sampler_agrees_in_distribution():
    gen = torch.Generator().manual_seed(4)
    p = torch.softmax(torch.randn(5, generator=gen, dtype=f64), -1)
    q = torch.softmax(torch.randn(5, generator=gen, dtype=f64), -1)
    assert chisquare_pvalue(dec.speculative_sample_naive(p, q, 4000, gen), p) > 1e-4


def test_expected_tokens_and_speedup():
    for a in (0.0, 0.3, 0.8, 0.99):
        for g in (0, 1, 4, 9):
            assert abs(float(dec.expected_tokens(a, g)) - sum(a**k for k in range(g + 1))) < 1e-12
    assert float(dec.expected_tokens(1.0, 5)) == 6.0
    # Monte Carlo: accepted prefix length of gamma Bernoulli(alpha) trials, plus one token
    gen = torch.Generator().manual_seed(5)
    ok = torch.rand(100_000, 4, generator=gen) < 0.7
    mc = (ok.long().cumprod(1).sum(1) + 1).double()
    assert abs(mc.mean() - float(dec.expected_tokens(0.7, 4))) < 4 * mc.std() / math.sqrt(1e5)
    assert float(dec.speedup(0.8, 4, 0.1)) == pytest.approx(
        float(dec.expected_tokens(0.8, 4)) / 1.4
    )
    brute = max(range(1, 65), key=lambda g: float(dec.speedup(0.9, g, 0.05)))
    assert dec.optimal_gamma(0.9, 0.05) == brute
    assert dec.simple_speedup(4, 0.4) == pytest.approx(4 / 1.4)


@pytest.fixture(scope="module")
def pair():
    return checkpoints.load("base"), checkpoints.load("draft")


def test_greedy_speculative_decoding_is_greedy_decoding(pair):
    target, draft = pair
    prompts = torch.randint(0, 41, (3, 6), generator=torch.Generator().manual_seed(6))
    out, stats = dec.speculative_generate(target, draft, prompts, 20, 3, temperature=0)
    ref = generate(target, prompts, 20)
    assert torch.equal(out, ref)
    assert (stats["target_calls"] < 20).all()
    one, _ = dec.speculative_generate_naive(target, draft, prompts[1], 20, 3, temperature=0)
    assert torch.equal(one, ref[1])


def test_speculative_decoder_samples_the_target(pair):
    target, draft = pair
    prompt = task.encode("\n1+4=")[None, :]  # (1, 5)
    with torch.no_grad():
        p = torch.softmax(target(prompt)[0, -1].double(), -1)
    gen = torch.Generator().manual_seed(7)
    out, stats = dec.speculative_generate(target, draft, prompt.repeat(4000, 1), 1, 2, gen)
    assert chisquare_pvalue(out[:, -1], p) > 1e-4
    assert (stats["produced"] >= 1).all()
    naive, _ = dec.speculative_generate_naive(target, draft, prompt[0], 4, 2, gen)
    assert naive.shape == (9,)


def test_bad_arguments_are_named(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="p must sum to one"):
        dec.acceptance_prob(torch.tensor([0.5, 0.6]), torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="len\\(prompt\\) \\+ n_new \\+ gamma - 1"):
        dec.speculative_generate(target, draft, torch.zeros(1, 60, dtype=torch.long), 4, 4)
    with pytest.raises(TypeError, match="draft must be a Decoder"):
        dec.speculative_generate(target, None, torch.zeros(1, 3, dtype=torch.long), 4, 4)
    with pytest.raises(ValueError, match="beam_width"):
        dec.beam_search(markov_step_fn(), torch.tensor([0]), 3, 0)
    with pytest.raises(ValueError, match="gamma"):
        dec.expected_tokens(0.5, -1)
