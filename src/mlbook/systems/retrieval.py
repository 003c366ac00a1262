"""Retrieval, memory and evaluation (chapter 43): cosine retrieval, RAG, pass@k, cost per query.

Retrieval ranks documents by the cosine similarity of their embeddings with the query's
(eq. 43.1); the embeddings come from the pretrained sentence encoder of chapter 30
(:func:`mlbook.architectures.contrastive.sentence_embeddings`) or, as the baseline, from a
TF-IDF bag of words (:func:`tfidf_fit`, :func:`tfidf_transform`, words or character n-grams).
Retrieval-augmented generation puts the k best documents into the model's context
(eq. 43.2): :func:`rag_prompts` for the book's decoder, whose "reader" learns to copy from its
context with :func:`finetune_reader`. Evaluation: the unbiased pass@k estimator (eq. 43.3), its
expectation (eq. 43.4) and the biased plug-in it replaces; the cost of a query (eq. 43.5).

Shape legend
    Q queries;  N documents;  D embedding width;  V bag-of-words vocabulary;  k retrieved
    q (Q, D), d (N, D) embeddings;  scores (Q, N);  top (Q, k) document indices, best first
    n samples per problem, c of them right;  usage (Q, C) tokens of C priced kinds;  prices (C,)
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

import torch

from ..validation import (
    float_tensor,
    integer,
    nonempty,
    number,
    positive_int,
    shape_is,
    unit_interval,
)

__all__ = [
    "cosine_scores",
    "cosine_scores_naive",
    "top_k",
    "top_k_naive",
    "analyze",
    "tfidf_fit",
    "tfidf_transform",
    "rag_prompts",
    "copy_batch",
    "finetune_reader",
    "greedy_answers",
    "pass_at_k",
    "pass_at_k_naive",
    "pass_at_k_biased",
    "expected_pass_at_k",
    "query_cost",
    "query_cost_naive",
    "PRICES",
]


# --- retrieval (eq. 43.1) ------------------------------------------------------------------------


def cosine_scores(q: torch.Tensor, d: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """s(q, d) = e_q^T e_d / (||e_q|| ||e_d||) for every query and document: (Q, D), (N, D) ->
    (Q, N). A zero vector (an empty bag of words) scores 0. Implements eq. 43.1."""
    float_tensor(q, "q", ndim=2, all_finite=True)
    float_tensor(d, "d", ndim=2, all_finite=True)
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"q and d must have the same width, got {q.shape[1]} and {d.shape[1]}")
    qn = q / q.norm(dim=1, keepdim=True).clamp_min(eps)  # (Q, D) unit rows
    dn = d / d.norm(dim=1, keepdim=True).clamp_min(eps)  # (N, D)
    return qn @ dn.T  # (Q, N)


def cosine_scores_naive(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`cosine_scores`: one dot product and two norms per pair, in loops."""
    out = torch.zeros(q.shape[0], d.shape[0], dtype=q.dtype)
    for i in range(q.shape[0]):
        for j in range(d.shape[0]):
            den = float(q[i].norm()) * float(d[j].norm())
            out[i, j] = float(q[i] @ d[j]) / den if den > 0 else 0.0
    return out


def top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The indices (Q, k) of the k best documents of each query, best first; equal scores keep
    the documents' order."""
    float_tensor(scores, "scores", ndim=2, all_finite=True)
    k = integer(k, "k", 1, scores.shape[1])
    return torch.sort(-scores, dim=1, stable=True).indices[:, :k]  # (Q, k)


def top_k_naive(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Reference for :func:`top_k`: repeated arg-max, the lower index winning ties."""
    out = []
    for row in scores.tolist():
        picked: list[int] = []
        for _ in range(k):
            best = max((j for j in range(len(row)) if j not in picked), key=lambda j: (row[j], -j))
            picked.append(best)
        out.append(picked)
    return torch.tensor(out, dtype=torch.long)


_WORD = re.compile(r"(?u)\b\w\w+\b")  # words of two characters or more


def analyze(text: str, analyzer: str = "word", n: int = 1) -> list[str]:
    """The terms of a text: lower-case words (``analyzer="word"``, n-grams of n words) or
    character n-grams of the lower-cased text (``analyzer="char"``)."""
    positive_int(n, "n")
    text = text.lower()
    if analyzer == "word":
        words = _WORD.findall(text)
        return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    if analyzer == "char":
        return [text[i : i + n] for i in range(len(text) - n + 1)]
    raise ValueError(f"analyzer must be 'word' or 'char', got {analyzer!r}")


def tfidf_fit(docs: Sequence[str], analyzer: str = "word", n: int = 1):
    """The vocabulary (term -> column, sorted) and the smoothed inverse document frequencies
    idf(t) = ln((1 + N) / (1 + df(t))) + 1 of a collection of N documents: (V,) float64."""
    nonempty(docs, "docs")
    df = Counter(t for doc in docs for t in set(analyze(doc, analyzer, n)))
    vocab = {t: i for i, t in enumerate(sorted(df))}
    N = len(docs)
    idf = torch.tensor([math.log((1 + N) / (1 + df[t])) + 1 for t in vocab], dtype=torch.float64)
    return vocab, idf


def tfidf_transform(
    texts: Sequence[str], vocab: dict, idf: torch.Tensor, analyzer: str = "word", n: int = 1
) -> torch.Tensor:
    """TF-IDF vectors (len(texts), V), float64: term counts times idf, each row scaled to unit
    length (an all-zero row stays zero: a text with no known term). Terms outside the
    vocabulary are dropped."""
    out = torch.zeros(len(texts), len(vocab), dtype=torch.float64)
    for i, text in enumerate(texts):
        for t, c in Counter(analyze(text, analyzer, n)).items():
            if t in vocab:
                out[i, vocab[t]] = c
    out = out * idf  # (len(texts), V)
    return out / out.norm(dim=1, keepdim=True).clamp_min(1e-300)


# --- retrieval-augmented generation with the book's decoder (eq. 43.2) --------------------------


def rag_prompts(queries: Sequence[str], docs: Sequence[str], top: torch.Tensor | None) -> list[str]:
    """RAG(x) = LLM(x, d_(1), ..., d_(k)): each query x preceded by its retrieved documents, one
    per line, the best one last (nearest to the question); ``top`` (Q, k) indices, or None for
    no retrieval. Each prompt starts with a newline, as the decoder's lines do. Implements
    eq. 43.2 (the prompt; the model completes it)."""
    if top is None:
        return ["\n" + x for x in queries]
    shape_is(top, "top", (len(queries), None))
    return [
        "".join("\n" + docs[j] for j in reversed(row)) + "\n" + x
        for x, row in zip(queries, top.tolist(), strict=True)
    ]


def copy_batch(pairs: Sequence[tuple[int, int]], rng: random.Random):
    """A fine-tuning batch that can only be solved by reading the context: for each (a, b) a
    memory line "a+b=v" with a random v in 0..18, then the question "a+b=" and the answer v.
    Returns tokens (B, 16) and the loss mask (B, 15) of the answer and its newline."""
    from ..posttraining import task

    rows, masks = [], []
    for a, b in pairs:
        v = rng.randrange(19)
        prompt = f"\n{a}+{b}={v}\n{a}+{b}="
        text = (prompt + f"{v}\n").ljust(16, "\n")
        rows.append(task.encode(text))
        mask = torch.zeros(15)
        mask[len(prompt) - 1 : len(prompt) + len(str(v))] = 1.0  # predictions of v and "\n"
        masks.append(mask)
    return torch.stack(rows), torch.stack(masks)


def finetune_reader(
    model,
    pairs: Sequence[tuple[int, int]],
    *,
    steps: int = 60,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Teach the decoder to answer from a memory line in its context: AdamW (the book's
    optimiser) on :func:`copy_batch` batches of the given problems, the loss the mean negative
    log-likelihood of the answer tokens. Trains ``model`` in place; returns the losses."""
    from ..nn.optim import Optimizer, OptimizerConfig

    positive_int(steps, "steps")
    positive_int(batch_size, "batch_size")
    rng = random.Random(seed)
    opt = Optimizer(model.parameters(), OptimizerConfig(kind="adamw", lr=number(lr, "lr", 0.0)))
    losses = []
    model.train()
    for _ in range(steps):
        x, mask = copy_batch([rng.choice(pairs) for _ in range(batch_size)], rng)
        logp = torch.log_softmax(model(x[:, :-1]), -1).gather(-1, x[:, 1:, None])[..., 0]
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def greedy_answers(model, prompts: Sequence[str], max_new: int = 3) -> list[str]:
    """The decoder's greedy completion of each prompt, up to its first newline; prompts of
    different lengths run in batches of equal length."""
    from ..models.generate import generate
    from ..posttraining import task

    groups: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[len(p)].append(i)
    out = [""] * len(prompts)
    for length, idx in groups.items():
        tokens = torch.stack([task.encode(prompts[i]) for i in idx])  # (b, length)
        new = generate(model, tokens, max_new, temperature=0.0)[:, length:]  # (b, max_new)
        for i, row in zip(idx, new.tolist(), strict=True):
            out[i] = task.decode(row).split("\n")[0]
    return out


# --- evaluation: pass@k (eqs. 43.3-43.4) ---------------------------------------------------------


def pass_at_k(n, c, k: int) -> torch.Tensor:
    """The unbiased estimate of pass@k from n samples of which c are right:
    1 - C(n - c, k) / C(n, k), computed as 1 - prod_{i = n - c + 1}^{n} (1 - k / i) (no large
    binomials). n, c: int tensors (or ints) of one shape; k <= n. Implements eq. 43.3."""
    n = torch.as_tensor(n, dtype=torch.long)
    c = torch.as_tensor(c, dtype=torch.long)
    k = positive_int(k, "k")
    if bool(((c < 0) | (c > n)).any()):
        raise ValueError("c must lie in [0, n]")
    if bool((n < k).any()):
        raise ValueError(f"k={k} must be at most n, the number of samples")
    i = torch.arange(1, int(n.max()) + 1, dtype=torch.float64)  # (n_max,)
    factors = 1 - k / i  # (n_max,)
    take = (i > (n - c)[..., None]) & (i <= n[..., None])  # (..., n_max): i in (n - c, n]
    return 1 - torch.where(take, factors, torch.ones_like(factors)).prod(-1)


def pass_at_k_naive(n: int, c: int, k: int) -> float:
    """Reference for :func:`pass_at_k`: the exact binomials of eq. 43.3 with integers."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_biased(n, c, k: int) -> torch.Tensor:
    """The plug-in estimate 1 - (1 - c/n)^k: the probability of k successes-free draws *with*
    replacement from the n samples. Biased low (Jensen), the estimator eq. 43.3 replaces."""
    n = torch.as_tensor(n, dtype=torch.float64)
    c = torch.as_tensor(c, dtype=torch.float64)
    return 1 - (1 - c / n) ** positive_int(k, "k")


def expected_pass_at_k(p, k) -> torch.Tensor:
    """E[pass@k estimate] = 1 - (1 - p)^k for a problem solved with probability p per sample.
    Implements eq. 43.4."""
    p = unit_interval(torch.as_tensor(p, dtype=torch.float64), "p")
    return 1 - (1 - p) ** torch.as_tensor(k, dtype=torch.float64)


# --- cost per query (eq. 43.5) -------------------------------------------------------------------

#: An illustrative price table in dollars per million tokens (input, output, embedding) and
#: dollars per call (vector search, calculator); the orders of magnitude of hosted models,
#: not any provider's prices.
PRICES = {
    "input": 0.50,
    "output": 1.50,
    "embedding": 0.02,
    "search call": 0.0001,
    "calculator call": 0.00005,
}


def query_cost(
    usage: torch.Tensor, prices: torch.Tensor, tool_cost: torch.Tensor | None = None
) -> torch.Tensor:
    """cost_q = sum_i tokens_{q,i} price_i + tool cost_q for each query: usage (Q, C) token
    counts of C priced kinds, prices (C,) per token, tool_cost (Q,) (or None). Returns (Q,).
    Implements eq. 43.5."""
    float_tensor(usage, "usage", ndim=2, all_finite=True)
    shape_is(float_tensor(prices, "prices", ndim=1, all_finite=True), "prices", (usage.shape[1],))
    cost = usage @ prices  # (Q,)
    if tool_cost is not None:
        cost = cost + shape_is(
            float_tensor(tool_cost, "tool_cost", ndim=1), "tool_cost", cost.shape
        )
    return cost


def query_cost_naive(usage, prices, tool_cost=None) -> torch.Tensor:
    """Reference for :func:`query_cost`: the sum of eq. 43.5 term by term."""
    out = []
    for q in range(usage.shape[0]):
        total = sum(float(usage[q, i]) * float(prices[i]) for i in range(usage.shape[1]))
        out.append(total + (float(tool_cost[q]) if tool_cost is not None else 0.0))
    return torch.tensor(out, dtype=torch.float64)
