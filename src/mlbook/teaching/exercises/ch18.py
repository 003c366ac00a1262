"""Checks of the exercises of chapter 18 (language modelling).

The references are independent of the reader's answer: add-alpha probabilities computed directly
from eq. 18.2 on the chapter's own trigram counts and on a small table with unseen contexts, the
parameters of real ``MLPLanguageModel`` instances counted with ``numel`` and a brute-force search
over context lengths, the entropy of ``torch.distributions.Categorical``, whose limits in the
temperature are taken numerically at tiny and huge temperatures, and, for 18.4 to 18.6, n-gram
models counted here with a ``Counter`` and a loop over the positions of the chapter's test text.

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import torch

from ...language import language_model as lm
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


@functools.cache
def _data():
    """The chapter's corpus: vocabulary, padding id, training and test ids (as in the chapter)."""
    text = lm.toy_corpus(700, seed=0)
    lines = text.splitlines(keepends=True)
    vocab = lm.build_vocab(text)
    train = lm.encode("".join(lines[:560]), vocab)
    test = lm.encode("".join(lines[630:]), vocab)
    return vocab, vocab.index("\n"), train, test


# --------------------------------------------------------------------------- 18.1


@functools.cache
def _trigram_counts() -> torch.Tensor:
    """The chapter's trigram counts (V, V, V): its corpus, vocabulary and training split."""
    vocab, pad, train, _ = _data()
    return lm.ngram_counts(lm.context_windows(train, 2, pad), train, len(vocab))


def _small_counts() -> torch.Tensor:
    gen = torch.Generator().manual_seed(181)
    counts = torch.randint(0, 4, (6, 5), generator=gen).double()  # (contexts, V = 5)
    counts[2] = 0  # two contexts never seen
    counts[5] = 0
    counts[4] = torch.tensor([0.0, 0.0, 7.0, 0.0, 0.0])
    return counts


def _lambda(counts, alpha, n=None):
    """n_i / (n_i + alpha V), 0 for an unseen context (the reference formula)."""
    n = counts.sum(-1) if n is None else n
    return torch.where(n > 0, n / (n + alpha * counts.shape[-1]).clamp(min=1e-300), 0.0)


def _counting(counts):
    """c_ij / n_i, 0 for an unseen context."""
    return counts / counts.sum(-1, keepdim=True).clamp(min=1)


def weight_swapped(counts, alpha):
    return torch.where(counts.sum(-1) > 0, 1 - _lambda(counts, alpha), 1.0)


def weight_without_V(counts, alpha):
    n = counts.sum(-1)
    return n / torch.where(n > 0, n + alpha, 1.0)


def weight_nan_unseen(counts, alpha):
    n = counts.sum(-1)
    return n / (n + alpha * counts.shape[-1])


def weight_keepdim(counts, alpha):
    return _lambda(counts, alpha)[..., None]


def weight_first_axis(counts, alpha):
    return _lambda(counts, alpha, n=counts.sum(0))


def probs_nan_unseen(counts, alpha):
    lam = _lambda(counts, alpha)[..., None]
    return lam * counts / counts.sum(-1, keepdim=True) + (1 - lam) / counts.shape[-1]


def probs_swapped(counts, alpha):
    lam = _lambda(counts, alpha)[..., None]
    return (1 - lam) * _counting(counts) + lam / counts.shape[-1]


def probs_uniform_one(counts, alpha):
    lam = _lambda(counts, alpha)[..., None]
    return lam * _counting(counts) + (1 - lam)


def probs_unsmoothed(counts, alpha):
    n = counts.sum(-1, keepdim=True)
    return torch.where(n > 0, _counting(counts), 1 / counts.shape[-1])


WRONG_WEIGHT = {
    "that is 1 - λ, the weight of the uniform distribution; λ weights the counts": weight_swapped,
    "the pseudo-counts add α to each of the V next tokens, so n_i + α V, not n_i + α": (
        weight_without_V
    ),
    "n_i sums the counts over the next token, the last axis": weight_first_axis,
}
WRONG_PROBS = {
    "λ and 1 - λ are swapped: λ = n_i / (n_i + α V) weights the counts": probs_swapped,
    "the uniform distribution puts 1/V on each token": probs_uniform_one,
    "that is the unsmoothed counting estimate c_ij / n_i": probs_unsmoothed,
}


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
            expect(
                bool(
                    torch.allclose(
                        lam[..., None] * (_counting(counts) - 1 / V), direct - 1 / V, atol=1e-12
                    )
                ),
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
                wrong={fb: f(counts, alpha) for fb, f in WRONG_WEIGHT.items()},
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
                wrong={fb: f(counts, alpha) for fb, f in WRONG_PROBS.items()},
                atol=1e-12,
                rtol=1e-9,
            )
    return (
        "λ = n_i / (n_i + α V) and the interpolation match eq. 18.2 on the chapter's trigram "
        "counts and a table with unseen contexts, for α = 0, 0.1, 1, 1000"
    )


# --------------------------------------------------------------------------- 18.2

_CONFIGS = [(29, 16, 128), (2, 4, 8), (50, 8, 32), (300, 64, 256), (5, 3, 40)]


@functools.cache
def _real_count(v, c, d, h) -> int:
    model = lm.MLPLanguageModel(lm.MLPLMConfig(v, c, d, h), torch.Generator().manual_seed(0))
    return sum(p.numel() for p in model.parameters())


def _crossover(v, d, h, extra=1) -> int:
    """The smallest C >= 1 with V^(C + extra) > the parameters of a real model (brute force)."""
    return next(c for c in range(1, 64) if v ** (c + extra) > _real_count(v, c, d, h))


def count_no_biases(v, c, d, h):
    return v * d + c * d * h + h * v


def count_no_embeddings(v, c, d, h):
    return c * d * h + h + h * v + v


def count_one_hot_inputs(v, c, d, h):
    return v * d + c * v * h + h + h * v + v


def count_no_output_layer(v, c, d, h):
    return v * d + c * d * h + h + v


def crossover_order(v, d, h):
    return _crossover(v, d, h) + 1


def crossover_from_zero(v, d, h):
    return _crossover(v, d, h) - 1


def crossover_table_V_to_the_C(v, d, h):
    return _crossover(v, d, h, extra=0)


WRONG_COUNT = {
    "the hidden and the output layer have biases: + H + V": count_no_biases,
    "the embedding table E has V D parameters": count_no_embeddings,
    "the hidden layer sees C embeddings of width D, so its weights are C D H, not C V H": (
        count_one_hot_inputs
    ),
    "the output layer maps H to V: H V weights and V biases": count_no_output_layer,
}
WRONG_CROSSOVER = {
    "one too large: the table of a context of length C has V^(C+1) cells (one per context and "
    "next token), and the answer is the context length C, not the n-gram order C + 1": (
        crossover_order
    ),
    "C starts at 1 (a bigram model has a context of one token)": crossover_from_zero,
    "the table of a context of length C has V^(C+1) cells, not V^C": crossover_table_V_to_the_C,
}


@exercise("18.2", "mlp_param_count", "first_larger_context")
def param_count(mlp_param_count, first_larger_context) -> str:
    """Parameter counts against real MLPLanguageModel instances; the crossover by brute force."""
    for v, d, h in _CONFIGS:
        for c in (1, 2, 3, 6):
            expect_answer(
                attempt(mlp_param_count, v, c, d, h),
                _real_count(v, c, d, h),
                f"mlp_param_count(v={v}, c={c}, d={d}, h={h})",
                wrong={fb: f(v, c, d, h) for fb, f in WRONG_COUNT.items()},
                atol=0.5,
                rtol=0,
            )
        expect_answer(
            attempt(first_larger_context, v, d, h),
            _crossover(v, d, h),
            f"first_larger_context(v={v}, d={d}, h={h})",
            wrong={fb: f(v, d, h) for fb, f in WRONG_CROSSOVER.items()},
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


def entropy_naive(z, tau):
    p = torch.softmax(z / tau, -1)
    return -(p * torch.log(p)).sum()


def entropy_bits(z, tau):
    return _entropy(z, tau) / math.log(2)


def entropy_times_tau(z, tau):
    return _entropy(z, 1 / tau)


def entropy_no_tau(z, tau):
    return _entropy(z, 1.0)


def entropy_perplexity(z, tau):
    return _entropy(z, tau).exp()


def entropy_negative(z, tau):
    return -_entropy(z, tau)


def entropy_unweighted(z, tau):
    return -torch.log(torch.softmax(z / tau, -1)).sum()


def _limits(z):
    """(log k, log V): the closed form, k the number of logits tied for the maximum."""
    return math.log(int((z == z.max()).sum())), math.log(z.numel())


def limits_ignore_ties(z):
    return 0.0, math.log(z.numel())


def limits_swapped(z):
    return tuple(reversed(_limits(z)))


def limits_bits(z):
    return tuple(x / math.log(2) for x in _limits(z))


def limits_V_minus_one(z):
    return _limits(z)[0], math.log(z.numel() - 1)


WRONG_ENTROPY = {
    "that is in bits: the entropy in nats uses the natural log": entropy_bits,
    "divide the logits by τ; that is the entropy at temperature 1/τ": entropy_times_tau,
    "the temperature is missing: that is the entropy of softmax(z)": entropy_no_tau,
    "that is exp(H), the perplexity; return the entropy H": entropy_perplexity,
    "the entropy is -sum_j p_j log p_j, with a minus sign": entropy_negative,
    "each term is p_j log p_j, weighted by p_j": entropy_unweighted,
}
WRONG_LIMITS = {
    "as τ → 0 the mass is spread evenly over the k logits tied for the maximum, so the limit "
    "is log k": limits_ignore_ties,
    "the limits are swapped: τ → 0 concentrates the mass (low entropy), τ → ∞ makes it uniform "
    "(log V)": limits_swapped,
    "that is in bits: the entropy in nats uses the natural log": limits_bits,
    "the uniform distribution over V tokens has entropy log V, not log(V - 1)": (
        limits_V_minus_one
    ),
}


@exercise("18.3", "temperature_entropy", "entropy_limits")
def temperature(temperature_entropy, entropy_limits) -> str:
    """Entropy against Categorical.entropy over a τ grid; limits against τ = 1e-9 and 1e12."""
    taus = (1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 1e3)
    for name, z in _logits():
        values = []
        for tau in taus:
            what = f"temperature_entropy(z, tau={tau:g}) for {name}"
            got = as_tensor(attempt(temperature_entropy, z.clone(), tau), what, ())
            if not bool(torch.isfinite(got)):
                raise Incorrect(
                    f"{what} is nan or inf: compute log p with log_softmax, so that "
                    "a probability that underflows to 0 contributes 0, not 0 * -inf"
                )
            expect_answer(
                got,
                _entropy(z, tau),
                what,
                wrong={fb: f(z, tau) for fb, f in WRONG_ENTROPY.items()},
                atol=1e-9,
                rtol=1e-7,
            )
            values.append(float(got))
        expect(
            all(b >= a - 1e-12 for a, b in zip(values, values[1:], strict=False)),
            f"temperature_entropy for {name} should not decrease as τ grows",
        )
        want = [float(_entropy(z, 1e-9)), float(_entropy(z, 1e12))]
        what = f"entropy_limits(z) for {name}"
        got = attempt(entropy_limits, z.clone())
        expect(
            isinstance(got, tuple | list) and len(got) == 2,
            f"{what} should return the pair (limit at 0, limit at infinity), got "
            f"{type(got).__name__}",
        )
        expect_answer(
            got,
            want,
            what,
            wrong={fb: f(z) for fb, f in WRONG_LIMITS.items()},
            atol=1e-6,
            rtol=0,
        )
    return (
        "matches Categorical.entropy for τ from 1e-3 to 1e3 on 3 logit vectors (ties, "
        "large logits), rises with τ, and the limits match τ = 1e-9 and 1e12"
    )


# --------------------------------------------------------------------------- 18.4

DIRECTIONS = ("lower", "higher", "unchanged")
WRONG_SHARPER = {
    "lower": "sharpening makes the model more confident: the tokens it favours get a smaller "
    "surprisal, but every token it underrates gets a much larger one, and perplexity averages the "
    "surprisals of all the tokens that came. The counting estimate is the maximum-likelihood "
    "model, already at the best temperature on its training text, and the test text agrees",
    "unchanged": "a temperature changes every conditional that is neither uniform nor one-hot, "
    "and with it the surprisal of the tokens that came",
}
WRONG_FLATTER = {
    "lower": "flattening moves probability from the tokens the model favours, which are usually "
    "the ones that come, to all the others; the counting estimate is already at the best "
    "temperature on its training text",
    "unchanged": "a temperature changes every conditional that is neither uniform nor one-hot, "
    "and with it the surprisal of the tokens that came",
}


@functools.cache
def _bigram_test_perplexity(tau: float) -> float:
    """Test perplexity of the counted bigram (alpha = 0) at temperature tau, counted here."""
    vocab, pad, train, test = _data()
    V = len(vocab)
    pairs = Counter(zip([pad, *train[:-1].tolist()], train.tolist(), strict=True))
    counts = torch.zeros(V, V, dtype=F64)
    for (i, j), n in pairs.items():
        counts[i, j] = n
    log_q = torch.log(counts / counts.sum(-1, keepdim=True))  # -inf for unseen pairs
    log_q_tau = torch.log_softmax(log_q / tau, dim=-1)
    prev = [pad, *test[:-1].tolist()]
    nll = [-float(log_q_tau[i, j]) for i, j in zip(prev, test.tolist(), strict=True)]
    return math.exp(sum(nll) / len(nll))


def _direction(value: float, base: float) -> str:
    if math.isclose(value, base, rel_tol=1e-9):
        return "unchanged"
    return "higher" if value > base else "lower"


def _choice(fn, name: str, options) -> str:
    got = attempt(fn, name=name)
    if not isinstance(got, str) or got.strip().lower() not in options:
        listed = ", ".join(repr(o) for o in options)
        raise Incorrect(f"{name}() should return one of {listed}, got {got!r}")
    return got.strip().lower()


@exercise("18.4", "predict_sharper", "predict_flatter")
def temperature_prediction(predict_sharper, predict_flatter) -> str:
    """Run the counted bigram at τ = 0.5, 1, 2 on the test text; compare with the guesses."""
    base = _bigram_test_perplexity(1.0)
    for name, fn, tau, wrong in (
        ("predict_sharper", predict_sharper, 0.5, WRONG_SHARPER),
        ("predict_flatter", predict_flatter, 2.0, WRONG_FLATTER),
    ):
        seen = _direction(_bigram_test_perplexity(tau), base)
        expect(seen == "higher", "internal: the experiment changed")
        guess = _choice(fn, name, DIRECTIONS)
        if guess != seen:
            raise Incorrect(
                f"you predicted {guess!r} at τ = {tau:g}; the experiment gives a test perplexity "
                f"of {_bigram_test_perplexity(tau):.4g} against {base:.4g} at τ = 1, {seen}: "
                f"{wrong[guess]}"
            )
    return (
        "the experiment agrees: the counted bigram's test perplexity rises both at τ = 0.5 and at "
        "τ = 2, since the maximum-likelihood model is already at the best temperature"
    )


def guess_lower():
    return "lower"


def guess_higher():
    return "higher"


def guess_unchanged():
    return "unchanged"


# --------------------------------------------------------------------------- 18.5


def _models():
    """(name, next_logits, C) of the two models the check evaluates."""
    vocab, pad, train, _ = _data()
    V = len(vocab)
    gen = torch.Generator().manual_seed(185)
    E = torch.randn(V, 4, generator=gen, dtype=F64)
    W1 = torch.randn(12, 16, generator=gen, dtype=F64) / 12**0.5
    W2 = 2 * torch.randn(16, V, generator=gen, dtype=F64)

    def neural(windows):  # (M, 3) -> (M, V) unnormalised logits
        return torch.tanh(E[windows].reshape(len(windows), -1) @ W1) @ W2

    pairs = Counter(zip([pad, *train[:-1].tolist()], train.tolist(), strict=True))
    counts = torch.ones(V, V, dtype=F64)  # add-one smoothing
    for (i, j), n in pairs.items():
        counts[i, j] += n
    log_q = torch.log(counts / counts.sum(-1, keepdim=True))

    def bigram(windows):  # (M, 1) -> (M, V) log-probabilities
        return log_q[windows[:, -1]]

    return [("a random neural model with C = 3", neural, 3), ("a bigram table", bigram, 1)]


def _windows(ids: list[int], C: int, pad_id: int, shift: int = 0) -> torch.Tensor:
    """The C ids before each position (shift = 1: up to and including it), padded, by a loop."""
    rows = []
    for t in range(len(ids)):
        end = t + shift
        rows.append([pad_id] * max(C - end, 0) + ids[max(end - C, 0) : end])
    return torch.tensor(rows, dtype=torch.int64)


def _surprisals(next_logits, ids, C, pad_id, *, shift=0, normalise=True) -> torch.Tensor:
    z = next_logits(_windows(ids.tolist(), C, pad_id, shift))  # (N, V)
    log_q = z - torch.logsumexp(z, dim=-1, keepdim=True) if normalise else z
    return -log_q[torch.arange(len(ids)), ids]  # (N,)


def ppl_window_with_current(next_logits, ids, C, pad_id):
    return math.exp(_surprisals(next_logits, ids, C, pad_id, shift=1).mean())


def ppl_skip_padded(next_logits, ids, C, pad_id):
    return math.exp(_surprisals(next_logits, ids, C, pad_id)[C:].mean())


def ppl_no_log_softmax(next_logits, ids, C, pad_id):
    return math.exp(_surprisals(next_logits, ids, C, pad_id, normalise=False).mean())


def ppl_mean_of_exp(next_logits, ids, C, pad_id):
    return float(_surprisals(next_logits, ids, C, pad_id).exp().mean())


def ppl_base_two(next_logits, ids, C, pad_id):
    return 2 ** float(_surprisals(next_logits, ids, C, pad_id).mean())


WRONG_PERPLEXITY = {
    "the window of position t holds the C tokens before it; that window includes token t itself, "
    "so the model sees the answer": ppl_window_with_current,
    "every token is scored: pad the first C windows with pad_id instead of skipping them": (
        ppl_skip_padded
    ),
    "next_logits returns logits: take log_softmax before reading off log q": ppl_no_log_softmax,
    "the perplexity is exp of the mean surprisal, not the mean of exp(surprisal)": ppl_mean_of_exp,
    "the surprisals are in nats, so the perplexity is exp of their mean (2 to the power is for "
    "bits)": ppl_base_two,
}


@exercise("18.5", "perplexity")
def perplexity_check(perplexity) -> str:
    """Perplexity against a loop over the positions, for a neural model and a bigram table."""
    _, pad, _, test = _data()
    ids = test[:600]
    for name, model, C in _models():
        want = math.exp(float(_surprisals(model, ids, C, pad).mean()))
        got = attempt(perplexity, model, ids.clone(), C, pad)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = float(got)
        expect(
            isinstance(got, int | float),
            f"perplexity(...) should return a float, got {type(got).__name__}",
        )
        expect_answer(
            got,
            want,
            f"perplexity(next_logits, ids, C={C}, pad_id) for {name}",
            wrong={fb: f(model, ids, C, pad) for fb, f in WRONG_PERPLEXITY.items()},
            atol=1e-9,
            rtol=1e-9,
        )
    return (
        "matches a loop over the 600 positions for a random neural model (C = 3) and a bigram "
        "table, the first windows padded"
    )


# --------------------------------------------------------------------------- 18.6

CURVE_CONTEXTS = [1, 2, 3]
CURVE_ALPHA = 0.01


def _curve_sizes() -> list[int]:
    return [500, 2000, 8000, len(_data()[2])]


@functools.cache
def _ngram_table(n: int, C: int) -> tuple[dict, dict]:
    """Counts of (context, next) and of contexts in the first n training ids, by a Counter."""
    _, pad, train, _ = _data()
    ids = train[:n].tolist()
    padded = [pad] * C + ids
    pairs = Counter((tuple(padded[t : t + C]), ids[t]) for t in range(len(ids)))
    contexts = Counter(tuple(padded[t : t + C]) for t in range(len(ids)))
    return pairs, contexts


def _ngram_perplexity(n, C, *, eval_ids=None) -> float:
    vocab, pad, train, test = _data()
    V = len(vocab)
    pairs, contexts = _ngram_table(n, C)
    ids = (test if eval_ids is None else eval_ids).tolist()
    padded = [pad] * C + ids
    nll = 0.0
    for t, y in enumerate(ids):
        ctx = tuple(padded[t : t + C])
        nll -= math.log((pairs[(ctx, y)] + CURVE_ALPHA) / (contexts[ctx] + CURVE_ALPHA * V))
    return math.exp(nll / len(ids))


def _curve(sizes, contexts, *, full=False, shift=0, on_train=False, log=False):
    train = _data()[2]
    rows = []
    for n in sizes:
        m = len(train) if full else n
        row = [
            _ngram_perplexity(m, c + shift, eval_ids=train[:m] if on_train else None)
            for c in contexts
        ]
        rows.append([math.log(p) for p in row] if log else row)
    return torch.tensor(rows, dtype=F64)


def curve_full_train(train, test, V, pad_id, contexts, sizes, alpha):
    return _curve(sizes, contexts, full=True)


def curve_one_less(train, test, V, pad_id, contexts, sizes, alpha):
    return _curve(sizes, contexts, shift=-1)


def curve_on_train(train, test, V, pad_id, contexts, sizes, alpha):
    return _curve(sizes, contexts, on_train=True)


def curve_cross_entropy(train, test, V, pad_id, contexts, sizes, alpha):
    return _curve(sizes, contexts, log=True)


def curve_transposed(train, test, V, pad_id, contexts, sizes, alpha):
    return _curve(sizes, contexts).T


WRONG_CURVE = {
    "fit each model on the first sizes[i] training tokens only": curve_full_train,
    "C is the number of previous tokens (C = 1 is the bigram, whose table has V^2 cells)": (
        curve_one_less
    ),
    "evaluate on the test text: on its own training text a longer context always looks better": (
        curve_on_train
    ),
    "that is the cross-entropy in nats; the perplexity is its exponential": curve_cross_entropy,
}


@exercise("18.6", "ngram_curve")
def ngram_curve_check(ngram_curve) -> str:
    """The (sizes, contexts) table of test perplexities against n-grams counted with a Counter."""
    vocab, pad, train, test = _data()
    sizes = _curve_sizes()
    want = _curve(sizes, CURVE_CONTEXTS)
    best = [CURVE_CONTEXTS[int(i)] for i in want.argmin(dim=1)]
    expect(best == [2, 2, 3, 3], "internal: the best context lengths changed")
    got = attempt(
        ngram_curve,
        train.clone(),
        test.clone(),
        len(vocab),
        pad,
        list(CURVE_CONTEXTS),
        list(sizes),
        CURVE_ALPHA,
    )
    expect_answer(
        got,
        want,
        f"ngram_curve(train, test, V, pad_id, contexts={CURVE_CONTEXTS}, sizes={sizes}, "
        f"alpha={CURVE_ALPHA})",
        wrong={
            fb: f(train, test, len(vocab), pad, CURVE_CONTEXTS, sizes, CURVE_ALPHA)
            for fb, f in WRONG_CURVE.items()
        },
        atol=1e-8,
        rtol=1e-8,
    )
    return (
        f"matches n-grams counted with a Counter for {len(sizes)} training sizes x "
        f"{len(CURVE_CONTEXTS)} context lengths; the best context length grows with the data: "
        f"C = {', '.join(str(b) for b in best)} for {', '.join(str(n) for n in sizes)} tokens"
    )


# Typical wrong answers: the functions above, each with (a part of) its feedback; the tests build
# each one and check that it is rejected with that feedback --------------------------------------

_weight_ref = _ref("18.1", "smoothing_weight")
_probs_ref = _ref("18.1", "interpolated_probs")
_count_ref = _ref("18.2", "mlp_param_count")
_crossover_ref = _ref("18.2", "first_larger_context")
_entropy_ref = _ref("18.3", "temperature_entropy")
_limits_ref = _ref("18.3", "entropy_limits")

MISTAKES = {
    "18.1": [((f, _probs_ref), fb) for fb, f in WRONG_WEIGHT.items()]
    + [((weight_nan_unseen, _probs_ref), "not 0/0")]
    + [((weight_keepdim, _probs_ref), "should have shape (29, 29)")]
    + [((_weight_ref, f), fb) for fb, f in WRONG_PROBS.items()]
    + [((_weight_ref, probs_nan_unseen), "its distribution is uniform")],
    "18.2": [((f, _crossover_ref), fb) for fb, f in WRONG_COUNT.items()]
    # where V^C gives the order's answer C + 1, the order's feedback names V^(C+1) cells too
    + [
        ((_count_ref, f), "V^(C+1) cells" if f is crossover_table_V_to_the_C else fb)
        for fb, f in WRONG_CROSSOVER.items()
    ],
    "18.3": [
        ((f, _limits_ref), fb) for fb, f in WRONG_ENTROPY.items() if f is not entropy_unweighted
    ]
    + [((entropy_naive, _limits_ref), "compute log p with log_softmax")]
    + [((_entropy_ref, f), fb) for fb, f in WRONG_LIMITS.items()],
    "18.4": [
        ((guess_lower, guess_higher), "more confident"),
        ((guess_unchanged, guess_higher), "neither uniform nor one-hot"),
        ((guess_higher, guess_lower), "flattening moves probability"),
        ((lambda: "up", guess_higher), "should return one of"),
    ],
    "18.5": [(f, fb) for fb, f in WRONG_PERPLEXITY.items()],
    "18.6": [(f, fb) for fb, f in WRONG_CURVE.items()] + [(curve_transposed, "looks transposed")],
}
