"""Retrieval, RAG and evaluation (chapter 43) against torch, scikit-learn, SciPy and exact sums."""

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.special import comb
from scipy.stats import binom
from sklearn.feature_extraction.text import TfidfVectorizer

from mlbook.models import checkpoints
from mlbook.posttraining import task
from mlbook.systems import retrieval as rt

F64 = torch.float64


def test_cosine_scores_against_torch_and_the_loop():
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(5, 7, generator=g, dtype=F64), torch.randn(9, 7, generator=g, dtype=F64)
    s = rt.cosine_scores(q, d)
    want = F.cosine_similarity(q[:, None, :], d[None, :, :], dim=-1)
    torch.testing.assert_close(s, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(s, rt.cosine_scores_naive(q, d), atol=1e-12, rtol=0)
    torch.testing.assert_close(rt.cosine_scores(3 * q, 0.5 * d), s, atol=1e-12, rtol=0)
    d[2] = 0  # an empty bag of words scores 0, not NaN
    assert torch.all(rt.cosine_scores(q, d)[:, 2] == 0)
    with pytest.raises(ValueError, match="same width"):
        rt.cosine_scores(q, d[:, :3])
    with pytest.raises(ValueError, match="q must be finite"):
        rt.cosine_scores(q * math.nan, d)


def test_top_k_against_topk_and_the_naive_ties():
    g = torch.Generator().manual_seed(1)
    s = torch.randn(6, 20, generator=g, dtype=F64)
    assert torch.equal(rt.top_k(s, 4), torch.topk(s, 4).indices)
    tied = torch.tensor([[0.5, 0.9, 0.9, 0.1, 0.9]], dtype=F64)
    assert rt.top_k(tied, 3).tolist() == [[1, 2, 4]] == rt.top_k_naive(tied, 3).tolist()
    assert torch.equal(rt.top_k(s, 5), rt.top_k_naive(s, 5))
    with pytest.raises(ValueError, match="k must be in"):
        rt.top_k(s, 21)


@pytest.mark.parametrize(("analyzer", "n"), [("word", 1), ("word", 2), ("char", 2), ("char", 3)])
def test_tfidf_matches_scikit_learn(analyzer, n):
    docs = [
        "Attention weights values by a softmax.",
        "The KV cache stores keys and values.",
        "Mixture of experts routes tokens to experts",
        "3+4=7",
        "4+3=7",
    ]
    queries = ["which experts get the tokens", "keys and values", "3+4="]
    vocab, idf = rt.tfidf_fit(docs, analyzer, n)
    sk = TfidfVectorizer(analyzer=analyzer, ngram_range=(n, n)).fit(docs)
    assert list(vocab) == list(sk.get_feature_names_out())
    torch.testing.assert_close(idf, torch.tensor(sk.idf_), atol=1e-12, rtol=0)
    got = rt.tfidf_transform(docs + queries, vocab, idf, analyzer, n)
    want = torch.tensor(sk.transform(docs + queries).toarray())
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="analyzer must be"):
        rt.analyze("x", "sentence")


def test_char_bigrams_retrieve_every_sum_exactly():
    docs = [f"{a}+{b}={a + b}" for a, b in task.problems()]
    queries = [f"{a}+{b}=" for a, b in task.problems()]
    vocab, idf = rt.tfidf_fit(docs, "char", 2)
    s = rt.cosine_scores(
        rt.tfidf_transform(queries, vocab, idf, "char", 2),
        rt.tfidf_transform(docs, vocab, idf, "char", 2),
    )
    assert torch.equal(rt.top_k(s, 1)[:, 0], torch.arange(100))


def test_pass_at_k_against_exact_binomials():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = 1 - comb(n - c, k, exact=True) / comb(n, k, exact=True)
                assert rt.pass_at_k_naive(n, c, k) == pytest.approx(want, abs=1e-15)
                assert float(rt.pass_at_k(n, c, k)) == pytest.approx(want, abs=1e-12)
    n, c = torch.tensor([200, 200, 50]), torch.tensor([3, 100, 50])
    want = [rt.pass_at_k_naive(int(a), int(b), 10) for a, b in zip(n, c, strict=True)]
    torch.testing.assert_close(rt.pass_at_k(n, c, 10), torch.tensor(want, dtype=F64))
    with pytest.raises(ValueError, match="c must lie in"):
        rt.pass_at_k(5, 6, 1)
    with pytest.raises(ValueError, match="must be at most n"):
        rt.pass_at_k(5, 2, 6)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.8])
def test_pass_at_k_is_unbiased_and_the_plug_in_is_not(p):
    n = 10
    c = torch.arange(n + 1)
    pmf = torch.tensor(binom.pmf(np.arange(n + 1), n, p))
    for k in (1, 3, 10):
        mean = float((pmf * rt.pass_at_k(n, c, k)).sum())
        assert mean == pytest.approx(float(rt.expected_pass_at_k(p, k)), abs=1e-12)
        biased = float((pmf * rt.pass_at_k_biased(n, c, k)).sum())
        if k == 1:
            assert biased == pytest.approx(p, abs=1e-12)
        else:
            assert biased < mean - 1e-4  # Jensen: the plug-in is low
    with pytest.raises(ValueError, match="p must lie in"):
        rt.expected_pass_at_k(1.5, 2)


def test_query_cost_against_the_term_by_term_sum():
    g = torch.Generator().manual_seed(2)
    usage = torch.randint(0, 500, (7, 3), generator=g).to(F64)
    prices = torch.tensor([0.5, 1.5, 0.02], dtype=F64) / 1e6
    tools = torch.rand(7, generator=g, dtype=F64) * 1e-4
    torch.testing.assert_close(
        rt.query_cost(usage, prices, tools), rt.query_cost_naive(usage, prices, tools)
    )
    torch.testing.assert_close(rt.query_cost(usage, prices), rt.query_cost_naive(usage, prices))
    with pytest.raises(ValueError, match="prices must have shape"):
        rt.query_cost(usage, prices[:2])
    with pytest.raises(ValueError, match="tool_cost must have shape"):
        rt.query_cost(usage, prices, tools[:3])


def test_rag_prompts_copy_batches_and_greedy_answers():
    docs = ["1+1=2", "2+2=4", "3+3=6"]
    top = torch.tensor([[2, 0]])
    assert rt.rag_prompts(["3+3="], docs, top) == ["\n1+1=2\n3+3=6\n3+3="]
    assert rt.rag_prompts(["3+3="], docs, None) == ["\n3+3="]
    tokens, mask = rt.copy_batch([(3, 4), (9, 9)], random.Random(0))
    for row, m in zip(tokens, mask, strict=True):
        text = task.decode(row)
        value = text.split("\n")[1].split("=")[1]
        assert task.decode(row[1:][m.bool()]) == value + "\n"  # the answer and its newline
        assert text.startswith(f"\n{text[1:4]}={value}\n{text[1:4]}={value}\n")
    model = checkpoints.load("base")
    pairs = task.problems()[:20]
    got = rt.greedy_answers(model, [f"\n{a}+{b}=" for a, b in pairs])
    assert got == task.answers(task.sample(model, pairs, 1, 0.0)[0])


def test_finetune_reader_starts_from_the_masked_nll():
    model = checkpoints.load("base")
    pairs = task.problems()[:10]
    rng = random.Random(5)
    x, mask = rt.copy_batch([rng.choice(pairs) for _ in range(4)], rng)
    with torch.no_grad():
        lp = task.token_log_probs(model, x)  # (4, 15)
    want = float(-(lp * mask).sum() / mask.sum())
    losses = rt.finetune_reader(model, pairs, steps=2, batch_size=4, seed=5)
    assert losses[0] == pytest.approx(want, abs=1e-5)
    assert not model.training
