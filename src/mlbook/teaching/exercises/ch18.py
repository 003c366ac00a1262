"""Checks of the exercises of chapter 18 (language modelling).

The references are independent of the reader's answer: add-alpha probabilities computed directly
from eq. 18.2 on the chapter's own trigram counts and on a small table with unseen contexts, the
parameters of real ``MLPLanguageModel`` instances counted with ``numel`` and a brute-force search
over context lengths, and the entropy of ``torch.distributions.Categorical``, whose limits in the
temperature are taken numerically at tiny and huge temperatures.
"""

from __future__ import annotations

import functools
import math

import torch

from ...language import language_model as lm
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


# --------------------------------------------------------------------------- 18.1


@functools.cache
def _trigram_counts() -> torch.Tensor:
    """The chapter's trigram counts (V, V, V): its corpus, vocabulary and training split."""
    text = lm.toy_corpus(700, seed=0)
    lines = text.splitlines(keepends=True)
    vocab = lm.build_vocab(text)
    train = lm.encode("".join(lines[:560]), vocab)
    X2 = lm.context_windows(train, 2, vocab.index("\n"))
    return lm.ngram_counts(X2, train, len(vocab))


def _small_counts() -> torch.Tensor:
    gen = torch.Generator().manual_seed(181)
    counts = torch.randint(0, 4, (6, 5), generator=gen).double()  # (contexts, V = 5)
    counts[2] = 0  # two contexts never seen
    counts[5] = 0
    counts[4] = torch.tensor([0.0, 0.0, 7.0, 0.0, 0.0])
    return counts


@exercise("18.1", "smoothing_weight", "interpolated_probs")
def smoothing(smoothing_weight, interpolated_probs) -> str:
    """λ = n/(n + αV) and the interpolation against eq. 18.2 computed directly."""
    cases = [("trigram counts", _trigram_counts()), ("a (6, 5) table", _small_counts())]
    for name, counts in cases:
        V = counts.shape[-1]
        n = counts.sum(-1)  # (...,)
        seen = n > 0
        for alpha in (0.0, 0.1, 1.0, 1e3):
            direct = (counts + alpha) / (n[..., None] + alpha * V)  # eq. 18.2, (..., V)
            direct = torch.where(seen[..., None], direct, torch.full_like(direct, 1 / V))
            lam = torch.where(seen, n / (n + alpha * V), torch.zeros_like(n))
            # λ is determined by the table: q_ij - 1/V = λ (c_ij/n_i - 1/V) for every j
            ml = counts / n.clamp(min=1)[..., None]
            expect(
                bool(torch.allclose(lam[..., None] * (ml - 1 / V), direct - 1 / V, atol=1e-12)),
                "internal: the reference is broken",
            )
            what = f"smoothing_weight(counts, alpha={alpha:g}) for the {name}"
            got = as_tensor(attempt(smoothing_weight, counts.clone(), alpha), what)
            if alpha == 0 and got.shape == lam.shape and bool(got[~seen].isnan().any()):
                raise Incorrect(
                    f"{what}: an unseen context (n_i = 0) has λ_i = 0 (it is uniform), not 0/0"
                )
            expect_answer(
                got,
                lam,
                what,
                wrong={
                    "that is 1 - λ, the weight of the uniform distribution; λ weights the "
                    "counts": torch.where(seen, 1 - lam, torch.ones_like(lam)),
                    "the pseudo-counts add α to each of the V next tokens, so n_i + α V, not "
                    "n_i + α": torch.where(seen, n / (n + alpha), torch.zeros_like(n)),
                    "n_i sums the counts over the next token, the last axis": _weight_over_axis0(
                        counts, alpha
                    )
                    if counts.dim() == 3
                    else None,
                },
                atol=1e-12,
                rtol=1e-9,
            )
            what = f"interpolated_probs(counts, alpha={alpha:g}) for the {name}"
            got = as_tensor(attempt(interpolated_probs, counts.clone(), alpha), what)
            if got.shape == direct.shape and bool(got[~seen].isnan().any()):
                raise Incorrect(
                    f"{what}: c_ij / n_i is 0/0 for an unseen context; its λ is 0, "
                    "so its distribution is uniform"
                )
            expect_answer(
                got,
                direct,
                what,
                wrong={
                    "λ and 1 - λ are swapped: λ = n_i / (n_i + α V) weights the counts": (
                        1 - lam[..., None]
                    )
                    * ml
                    + lam[..., None] / V,
                    "the uniform distribution puts 1/V on each token": lam[..., None] * ml
                    + (1 - lam[..., None]),
                    "that is the unsmoothed counting estimate c_ij / n_i": torch.where(
                        seen[..., None], ml, torch.full_like(ml, 1 / V)
                    ),
                },
                atol=1e-12,
                rtol=1e-9,
            )
    return (
        "λ = n_i / (n_i + α V) and the interpolation match eq. 18.2 on the chapter's trigram "
        "counts and a table with unseen contexts, for α = 0, 0.1, 1, 1000"
    )


def _weight_over_axis0(counts, alpha):
    n0 = counts.sum(0)
    return torch.where(n0 > 0, n0 / (n0 + alpha * counts.shape[-1]), torch.zeros_like(n0))


# --------------------------------------------------------------------------- 18.2

_CONFIGS = [(29, 16, 128), (2, 4, 8), (50, 8, 32), (300, 64, 256), (5, 3, 40)]


@functools.cache
def _real_count(v, c, d, h) -> int:
    model = lm.MLPLanguageModel(lm.MLPLMConfig(v, c, d, h), torch.Generator().manual_seed(0))
    return sum(p.numel() for p in model.parameters())


@exercise("18.2", "mlp_param_count", "first_larger_context")
def param_count(mlp_param_count, first_larger_context) -> str:
    """Parameter counts against real MLPLanguageModel instances; the crossover by brute force."""
    for v, d, h in _CONFIGS:
        for c in (1, 2, 3, 6):
            want = _real_count(v, c, d, h)
            got = attempt(mlp_param_count, v, c, d, h)
            what = f"mlp_param_count(v={v}, c={c}, d={d}, h={h})"
            expect_answer(
                got,
                want,
                what,
                wrong={
                    "the hidden and the output layer have biases: + H + V": want - h - v,
                    "the embedding table E has V D parameters": want - v * d,
                    "the hidden layer sees C embeddings of width D, so its weights are C D H, "
                    "not C V H": want - c * d * h + c * v * h,
                    "the output layer maps H to V: H V weights and V biases": want - h * v,
                },
                atol=0.5,
                rtol=0,
            )
        # brute force over C with the real counts
        want = next(c for c in range(1, 64) if v ** (c + 1) > _real_count(v, c, d, h))
        table_c = next(c for c in range(1, 64) if v**c > _real_count(v, c, d, h))
        wrong = {
            "one too large: the table of a context of length C has V^(C+1) cells (one "
            "per context and next token), and the answer is the context length C, not the "
            "n-gram order C + 1": want + 1,
            "C starts at 1 (a bigram model has a context of one token)": want - 1,
        }
        if table_c != want + 1:
            wrong["the table of a context of length C has V^(C+1) cells, not V^C"] = table_c
        expect_answer(
            attempt(first_larger_context, v, d, h),
            want,
            f"first_larger_context(v={v}, d={d}, h={h})",
            wrong=wrong,
            atol=0.5,
            rtol=0,
        )
    return (
        "counts match the parameters of real MLPLanguageModel instances for 5 sizes and "
        "C = 1, 2, 3, 6, and the crossover matches a brute-force search"
    )


# --------------------------------------------------------------------------- 18.3


def _entropy(z, tau):
    return torch.distributions.Categorical(logits=z / tau).entropy()


def _logits() -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(183)
    return [
        ("random logits, V = 29", torch.randn(29, generator=gen, dtype=F64) * 3),
        (
            "logits with a 3-way tie for the maximum",
            torch.tensor([2.0, 5.0, -1.0, 5.0, 0.5, 5.0, 4.5], dtype=F64),
        ),
        ("large logits", torch.tensor([100.0, 99.0, 98.5, -50.0], dtype=F64)),
    ]


@exercise("18.3", "temperature_entropy", "entropy_limits")
def temperature(temperature_entropy, entropy_limits) -> str:
    """Entropy against Categorical.entropy over a τ grid; limits against τ = 1e-9 and 1e12."""
    taus = (1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 1e3)
    for name, z in _logits():
        values = []
        for tau in taus:
            want = _entropy(z, tau)
            what = f"temperature_entropy(z, tau={tau:g}) for {name}"
            got = as_tensor(attempt(temperature_entropy, z.clone(), tau), what, ())
            if not bool(torch.isfinite(got)):
                raise Incorrect(
                    f"{what} is nan or inf: compute log p with log_softmax, so that "
                    "a probability that underflows to 0 contributes 0, not 0 * -inf"
                )
            p1 = torch.softmax(z / tau, -1)
            expect_answer(
                got,
                want,
                what,
                wrong={
                    "that is in bits: the entropy in nats uses the natural log": want / math.log(2),
                    "divide the logits by τ; that is the entropy at temperature 1/τ": _entropy(
                        z, 1 / tau
                    ),
                    "the temperature is missing: that is the entropy of softmax(z)": _entropy(
                        z, 1.0
                    ),
                    "that is exp(H), the perplexity; return the entropy H": want.exp(),
                    "the entropy is -sum_j p_j log p_j, with a minus sign": -want,
                    "each term is p_j log p_j, weighted by p_j": -torch.log(p1).sum()
                    if bool((p1 > 0).all())
                    else None,
                },
                atol=1e-9,
                rtol=1e-7,
            )
            values.append(float(got))
        expect(
            all(b >= a - 1e-12 for a, b in zip(values, values[1:], strict=False)),
            f"temperature_entropy for {name} should not decrease as τ grows",
        )
        k = int((z == z.max()).sum())
        want0, want_inf = float(_entropy(z, 1e-9)), float(_entropy(z, 1e12))
        what = f"entropy_limits(z) for {name}"
        got = attempt(entropy_limits, z.clone())
        expect(
            isinstance(got, tuple | list) and len(got) == 2,
            f"{what} should return the pair (limit at 0, limit at infinity), got "
            f"{type(got).__name__}",
        )
        V = z.numel()
        expect_answer(
            got,
            [want0, want_inf],
            what,
            wrong={
                "as τ → 0 the mass is spread evenly over the k logits tied for the maximum, so "
                "the limit is log k": [0.0, want_inf] if k > 1 else None,
                "the limits are swapped: τ → 0 concentrates the mass (low entropy), τ → ∞ makes "
                "it uniform (log V)": [want_inf, want0],
                "that is in bits: the entropy in nats uses the natural log": [
                    want0 / math.log(2),
                    want_inf / math.log(2),
                ],
                "the uniform distribution over V tokens has entropy log V, not log(V - 1)": [
                    want0,
                    math.log(V - 1),
                ],
            },
            atol=1e-6,
            rtol=0,
        )
    return (
        "matches Categorical.entropy for τ from 1e-3 to 1e3 on 3 logit vectors (ties, "
        "large logits), rises with τ, and the limits match τ = 1e-9 and 1e12"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# 18.1 ---------------------------------------------------------------------------------------


weight = _ref("18.1", "smoothing_weight")
probs = _ref("18.1", "interpolated_probs")


def weight_swapped(counts, alpha):
    n = counts.sum(-1)
    return torch.where(n > 0, alpha * counts.shape[-1] / (n + alpha * counts.shape[-1]), 1.0)


def weight_without_V(counts, alpha):
    n = counts.sum(-1)
    return n / torch.where(n > 0, n + alpha, 1.0)


def weight_nan_unseen(counts, alpha):
    n = counts.sum(-1)
    return n / (n + alpha * counts.shape[-1])


def weight_keepdim(counts, alpha):
    return weight(counts, alpha)[..., None]


def weight_first_axis(counts, alpha):
    n = counts.sum(0)
    return n / torch.where(n > 0, n + alpha * counts.shape[-1], 1.0)


def probs_nan_unseen(counts, alpha):
    lam = weight(counts, alpha)[..., None]
    return lam * counts / counts.sum(-1, keepdim=True) + (1 - lam) / counts.shape[-1]


def probs_swapped(counts, alpha):
    lam = weight(counts, alpha)[..., None]
    ml = counts / counts.sum(-1, keepdim=True).clamp(min=1)
    return (1 - lam) * ml + lam / counts.shape[-1]


def probs_uniform_one(counts, alpha):
    lam = weight(counts, alpha)[..., None]
    ml = counts / counts.sum(-1, keepdim=True).clamp(min=1)
    return lam * ml + (1 - lam)


def probs_unsmoothed(counts, alpha):
    n = counts.sum(-1, keepdim=True)
    return torch.where(n > 0, counts / n.clamp(min=1), 1 / counts.shape[-1])


# 18.2 ---------------------------------------------------------------------------------------


count = _ref("18.2", "mlp_param_count")
crossover = _ref("18.2", "first_larger_context")


def count_no_biases(v, c, d, h):
    return v * d + c * d * h + h * v


def count_no_embeddings(v, c, d, h):
    return c * d * h + h + h * v + v


def count_one_hot_inputs(v, c, d, h):
    return v * d + c * v * h + h + h * v + v


def crossover_table_V_to_the_C(v, d, h):
    c = 1
    while v**c <= count(v, c, d, h):
        c += 1
    return c


def crossover_order(v, d, h):
    return crossover(v, d, h) + 1


def crossover_from_zero(v, d, h):
    c = 0
    while v ** (c + 1) <= count(v, c, d, h):
        c += 1
    return max(c - 1, 0)


# 18.3 ---------------------------------------------------------------------------------------


entropy = _ref("18.3", "temperature_entropy")
limits = _ref("18.3", "entropy_limits")


def entropy_naive(z, tau):
    p = torch.softmax(z / tau, -1)
    return -(p * torch.log(p)).sum()


def entropy_bits(z, tau):
    return entropy(z, tau) / math.log(2)


def entropy_times_tau(z, tau):
    return entropy(z, 1 / tau)


def entropy_no_tau(z, tau):
    return entropy(z, 1.0)


def entropy_perplexity(z, tau):
    return entropy(z, tau).exp()


def limits_ignore_ties(z):
    return 0.0, math.log(z.numel())


def limits_swapped(z):
    return tuple(reversed(limits(z)))


def limits_bits(z):
    return tuple(x / math.log(2) for x in limits(z))


def limits_V_minus_one(z):
    return limits(z)[0], math.log(z.numel() - 1)


MISTAKES = {
    "18.1": [
        ((weight_swapped, probs), "that is 1 - λ"),
        ((weight_without_V, probs), "not n_i + α"),
        ((weight_nan_unseen, probs), "not 0/0"),
        ((weight_keepdim, probs), "should have shape (29, 29)"),
        ((weight_first_axis, probs), "the last axis"),
        ((weight, probs_nan_unseen), "its distribution is uniform"),
        ((weight, probs_swapped), "λ and 1 - λ are swapped"),
        ((weight, probs_uniform_one), "1/V on each token"),
        ((weight, probs_unsmoothed), "unsmoothed counting estimate"),
    ],
    "18.2": [
        ((count_no_biases, crossover), "have biases"),
        ((count_no_embeddings, crossover), "the embedding table"),
        ((count_one_hot_inputs, crossover), "not C V H"),
        ((count, crossover_order), "one too large"),
        ((count, crossover_table_V_to_the_C), "V^(C+1) cells"),
        ((count, crossover_from_zero), "C starts at 1"),
    ],
    "18.3": [
        ((entropy_naive, limits), "compute log p with log_softmax"),
        ((entropy_bits, limits), "that is in bits"),
        ((entropy_times_tau, limits), "divide the logits by τ"),
        ((entropy_no_tau, limits), "the temperature is missing"),
        ((entropy_perplexity, limits), "the perplexity"),
        ((entropy, limits_ignore_ties), "tied for the maximum"),
        ((entropy, limits_swapped), "the limits are swapped"),
        ((entropy, limits_bits), "that is in bits"),
        ((entropy, limits_V_minus_one), "has entropy log V"),
    ],
}
