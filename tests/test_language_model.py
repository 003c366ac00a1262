"""Tests of mlbook.language.language_model against independent references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbook.foundations import probability as prob
from mlbook.language import language_model as lm

TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.fixture(scope="module")
def data():
    text = lm.toy_corpus(60, seed=3)
    vocab = lm.build_vocab(text)
    return text, vocab, lm.encode(text, vocab), vocab.index("\n")


def test_corpus_is_deterministic_and_round_trips(data):
    text, vocab, ids, _ = data
    assert lm.toy_corpus(60, seed=3) == text
    assert lm.toy_corpus(60, seed=4) != text
    assert text.count("\n") == 60 and text.endswith(".\n")
    assert lm.decode(ids, vocab) == text
    assert lm.decode(torch.tensor([len(vocab)]), vocab) == "_"


def test_context_windows_match_a_loop(data):
    _, _, ids, pad = data
    x = ids[:50]
    for c in (0, 1, 3):
        X = lm.context_windows(x, c, pad)
        assert X.shape == (50, c)
        padded = [pad] * c + x.tolist()
        for t in range(50):
            assert X[t].tolist() == padded[t : t + c]
    batch = ids[:60].reshape(3, 20)
    Xb = lm.context_windows(batch, 2, pad)
    for b in range(3):
        assert torch.equal(Xb[b], lm.context_windows(batch[b], 2, pad))


def test_centered_windows_match_a_loop(data):
    _, _, ids, pad = data
    x = ids[:30]
    W = lm.centered_windows(x, 2, pad)
    padded = [pad] * 2 + x.tolist() + [pad] * 2
    for t in range(30):
        assert W[t].tolist() == padded[t : t + 5]
    assert lm.centered_windows(x.reshape(2, 15), 2, pad).shape == (2, 15, 5)


@pytest.mark.parametrize("c", [0, 1, 2])
def test_ngram_counts_fast_vs_naive(data, c):
    _, vocab, ids, pad = data
    X = lm.context_windows(ids, c, pad)
    fast = lm.ngram_counts(X, ids, len(vocab))
    assert torch.equal(fast, lm.ngram_counts_naive(X, ids, len(vocab)))
    assert fast.sum() == ids.numel()


def test_add_alpha_probs_formula_and_limits():
    gen = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 5, (4, 6), generator=gen).double()
    counts[2] = 0  # an unseen context
    for alpha in (0.0, 0.5, 1.0):
        q = lm.add_alpha_probs(counts, alpha)
        torch.testing.assert_close(q.sum(-1), torch.ones(4, dtype=torch.float64))
        for i, j in itertools.product(range(4), range(6)):
            den = counts[i].sum().item() + alpha * 6
            expected = (counts[i, j].item() + alpha) / den if den > 0 else 1 / 6
            assert abs(q[i, j].item() - expected) < 1e-15
    q_big = lm.add_alpha_probs(counts, 1e12)
    torch.testing.assert_close(q_big, torch.full_like(q_big, 1 / 6), atol=1e-10, rtol=0)


def test_bigram_sequence_log_prob_vs_markov_chain(data):
    _, vocab, ids, pad = data
    v = len(vocab)
    X = lm.context_windows(ids, 1, pad)
    q = lm.add_alpha_probs(lm.ngram_counts(X, ids, v), 0.1)
    seq = ids[:40]
    logp = lm.ngram_log_probs(q, lm.context_windows(seq, 1, pad))  # (40, V)
    ours = lm.sequence_log_prob(logp, seq)
    ref = prob.markov_sequence_log_prob(q[pad].numpy(), q.numpy(), seq.numpy())
    assert abs(ours.item() - ref) < 1e-10


def _model(dtype, v=7, c=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return lm.MLPLanguageModel(lm.MLPLMConfig(v, c, 4, 10), gen, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mlp_logits_fast_vs_naive(dtype):
    model = _model(dtype)
    with torch.no_grad():
        model.W2.normal_(generator=torch.Generator().manual_seed(1))
    X = torch.randint(0, 7, (12, 3), generator=torch.Generator().manual_seed(2))
    params = (model.E, model.W1, model.b1, model.W2, model.b2)
    torch.testing.assert_close(
        model(X), lm.mlp_lm_logits_naive(X, *params), atol=TOL[dtype], rtol=0
    )


def test_mlp_chain_rule_sums_to_one():
    """Sum over all V^T sequences of prod_t q(x_t | x_<t) is 1 (eq. 18.1)."""
    v, c, t = 5, 2, 4
    model = _model(torch.float64, v=v, c=c)
    with torch.no_grad():
        model.W2.normal_(generator=torch.Generator().manual_seed(1))
    seqs = torch.tensor(list(itertools.product(range(v), repeat=t)))  # (V^T, T)
    X = lm.context_windows(seqs, c, 0)  # (V^T, T, C)
    logq = torch.log_softmax(model(X.reshape(-1, c)), -1).reshape(v**t, t, v)
    total = lm.sequence_log_prob(logq, seqs).exp().sum()
    assert abs(total.item() - 1) < 1e-12
    joint = lm.sequence_log_prob(logq, seqs).exp().reshape((v,) * t).detach().numpy()
    factors = prob.chain_rule_factors(joint)
    np.testing.assert_allclose(
        factors[-1].reshape(-1, v), logq[::v, -1].exp().detach().numpy(), atol=1e-12
    )


def test_loss_at_init_is_log_v_and_grad_vs_autograd():
    model = _model(torch.float64, v=11)
    X = torch.randint(0, 11, (64, 3), generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 11, (64,), generator=torch.Generator().manual_seed(4))
    logits = model(X).detach().requires_grad_(True)
    loss = lm.lm_loss(logits, y)
    assert abs(loss.item() - math.log(11)) < 0.01
    ref = F.cross_entropy(logits, y)
    (g,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(lm.lm_loss_grad(logits.detach(), y), g, atol=1e-15, rtol=0)
    assert abs(loss.item() - ref.item()) < 1e-14


def test_training_lowers_the_loss():
    text = lm.toy_corpus(80, seed=0)
    vocab = lm.build_vocab(text)
    ids = lm.encode(text, vocab)
    X = lm.context_windows(ids, 3, vocab.index("\n"))
    gen = torch.Generator().manual_seed(0)
    model = lm.MLPLanguageModel(lm.MLPLMConfig(len(vocab), 3, 8, 32), gen, dtype=torch.float64)
    losses = lm.train_lm(model, X, ids, steps=60, batch_size=64, lr=1e-2, generator=gen)
    assert len(losses) == 60
    assert np.mean(losses[-10:]) < losses[0] - 0.5


def test_mask_tokens_statistics():
    v, n = 10, 400_000
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, v, (n,), generator=gen)
    inputs, labels = lm.mask_tokens(tokens, v, v, gen)
    sel = labels != lm.IGNORE_INDEX
    assert torch.equal(labels[sel], tokens[sel])
    assert torch.equal(inputs[~sel], tokens[~sel])
    k = int(sel.sum())

    def within(frac, p, count):
        return abs(frac - p) < 5 * math.sqrt(p * (1 - p) / count)

    assert within(k / n, 0.15, n)
    assert within((inputs[sel] == v).double().mean().item(), 0.8, k)
    assert within((inputs[sel] == tokens[sel]).double().mean().item(), 0.1 + 0.1 / v, k)


def test_masked_and_causal_losses_vs_torch():
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 6, (3, 9), generator=gen)
    logits = torch.randn(3, 9, 7, generator=gen, dtype=torch.float64)
    _, labels = lm.mask_tokens(tokens, 6, 6, gen, p_select=0.5)
    ref = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), ignore_index=-100)
    assert abs(lm.masked_lm_loss(logits, labels).item() - ref.item()) < 1e-14
    ref_c = F.cross_entropy(logits.reshape(-1, 7), tokens.reshape(-1))
    assert abs(lm.causal_lm_loss(logits, tokens).item() - ref_c.item()) < 1e-14


def test_sample_distribution_and_greedy():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    gen = torch.Generator().manual_seed(0)
    out = lm.sample(lambda X: logits, torch.tensor([], dtype=torch.int64), 6000, 0, gen)
    freq = torch.bincount(out, minlength=3).double() / 6000
    for f, p in zip(freq.tolist(), [0.5, 0.3, 0.2], strict=True):
        assert abs(f - p) < 5 * math.sqrt(p * (1 - p) / 6000)
    hot = lm.sample(lambda X: logits, torch.tensor([1]), 4000, 0, gen, temperature=0.5)[1:]
    p_hot = torch.softmax(logits[0] / 0.5, 0)[0].item()
    assert abs((hot == 0).double().mean().item() - p_hot) < 5 * math.sqrt(p_hot / 4000)
    greedy = lm.sample(lambda X: logits, torch.tensor([2]), 5, 0, gen, temperature=0)
    assert greedy.tolist() == [2, 0, 0, 0, 0, 0]
    seen = []
    lm.sample(
        lambda X: seen.append(X.tolist()) or logits, torch.tensor([1, 2]), 2, 3, gen, pad_id=9
    )
    assert seen[0] == [[9, 1, 2]] and seen[1][0][:2] == [1, 2]


def test_bad_input_raises():
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="n_sentences"):
        lm.toy_corpus(0)
    with pytest.raises(ValueError, match="empty"):
        lm.build_vocab("")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        lm.encode("xyz", ["x", "y"])
    with pytest.raises(TypeError, match="integer"):
        lm.context_windows(torch.tensor([0.5]), 1, 0)
    with pytest.raises(ValueError, match="context"):
        lm.context_windows(torch.tensor([1, 2]), -1, 0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        lm.centered_windows(torch.tensor([1, 2]), 0, 0)
    with pytest.raises(ValueError, match="tokens must have shape"):  # gather takes a subset
        lm.sequence_log_prob(torch.zeros(3, 4), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="floating-point"):
        lm.sequence_log_prob(torch.zeros(2, 4, dtype=torch.int64), torch.tensor([0, 1]))
    X = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="y must have shape"):  # one target would broadcast
        lm.ngram_counts(X, torch.tensor([0]), 3)
    with pytest.raises(ValueError, match=r"y must hold indices in \[0, 3\)"):
        lm.ngram_counts(X, torch.tensor([0, 5]), 3)
    with pytest.raises(ValueError, match="exceeds"):
        lm.ngram_counts(torch.zeros(2, 9, dtype=torch.int64), torch.tensor([0, 1]), 30)
    with pytest.raises(ValueError, match="y must have shape"):
        lm.ngram_counts_naive(X, torch.tensor([0]), 3)
    with pytest.raises(ValueError, match="alpha"):
        lm.add_alpha_probs(torch.ones(2, 2), -1.0)
    with pytest.raises(ValueError, match="non-negative"):
        lm.add_alpha_probs(-torch.ones(2, 2), 1.0)
    with pytest.raises(ValueError, match="counts must be finite"):
        lm.add_alpha_probs(torch.tensor([1.0, float("nan")]), 1.0)
    with pytest.raises(ValueError, match="probs must have shape"):
        lm.ngram_log_probs(torch.full((3, 3), 1 / 3), torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match="floating-point"):
        lm.ngram_log_probs(torch.ones(3, 3, dtype=torch.int64), X)
    with pytest.raises(ValueError, match="logits must have 2 axes"):
        lm.lm_loss(torch.zeros(2, 3, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="y must hold indices"):
        lm.lm_loss_grad(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="context"):
        lm.MLPLMConfig(5, 0, 2, 2)
    with pytest.raises(ValueError, match="dtype"):
        lm.MLPLanguageModel(lm.MLPLMConfig(5, 1, 2, 2), dtype=torch.float16)
    model = lm.MLPLanguageModel(lm.MLPLMConfig(5, 2, 2, 3), gen)
    with pytest.raises(ValueError, match="X must hold indices"):
        lm.mlp_lm_logits_naive(
            torch.full((1, 2), 7), model.E, model.W1, model.b1, model.W2, model.b2
        )
    with pytest.raises(ValueError, match="b2 must have shape"):  # a (1,) bias would broadcast
        lm.mlp_lm_logits(
            torch.zeros(4, 2, dtype=torch.int64),
            model.E,
            model.W1,
            model.b1,
            model.W2,
            model.b2[:1],
        )
    with pytest.raises(ValueError, match="y must have shape"):
        lm.train_lm(
            model,
            torch.zeros(3, 2, dtype=torch.int64),
            torch.zeros(2, dtype=torch.int64),
            steps=1,
            batch_size=1,
            lr=0.1,
            generator=gen,
        )
    with pytest.raises(ValueError, match="X must not be empty"):
        lm.train_lm(
            model,
            torch.zeros(0, 2, dtype=torch.int64),
            torch.zeros(0, dtype=torch.int64),
            steps=1,
            batch_size=1,
            lr=0.1,
            generator=gen,
        )
    with pytest.raises(ValueError, match="lr"):
        lm.train_lm(
            model,
            torch.zeros(3, 2, dtype=torch.int64),
            torch.zeros(3, dtype=torch.int64),
            steps=1,
            batch_size=1,
            lr=-0.1,
            generator=gen,
        )
    tokens = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="mask_id"):
        lm.mask_tokens(tokens, 3, 1, gen)
    with pytest.raises(ValueError, match="p_select"):
        lm.mask_tokens(tokens, 3, 3, gen, p_select=1.5)
    with pytest.raises(ValueError, match="exceeds 1"):
        lm.mask_tokens(tokens, 3, 3, gen, p_mask=0.8, p_random=0.3)
    with pytest.raises(ValueError, match="no position is selected"):
        lm.masked_lm_loss(torch.zeros(3, 4), torch.full((3,), -100))
    with pytest.raises(ValueError, match="labels must have shape"):
        lm.masked_lm_loss(torch.zeros(3, 4), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="tokens must have shape"):
        lm.causal_lm_loss(torch.zeros(3, 4), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="temperature"):
        lm.sample(lambda X: torch.zeros(1, 3), tokens, 2, 1, gen, temperature=-1.0)
    with pytest.raises(TypeError, match="prompt must be a torch.Tensor"):
        lm.sample(lambda X: torch.zeros(1, 3), [0, 1], 2, 1, gen)
