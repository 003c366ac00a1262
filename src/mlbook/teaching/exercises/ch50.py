"""Checks of the exercises of chapter 50 (classic models).

The references are independent of :mod:`mlbook.beyond.classic`: random Fourier features drawn
and measured here, with the kernel from ``torch.cdist`` (50.1); Viterbi against enumeration of
all state paths and a max-plus recursion written in NumPy (50.2); the one-step Hopfield error
from the crosstalk written in closed form, ``xi (xi^T xi) / N - (P / N) xi`` (50.3).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from . import Incorrect, as_number, attempt, exercise, expect, expect_answer, expect_tuple
from . import reference_answer as _ref

F64 = torch.float64

# --- 50.1 ----------------------------------------------------------------------------------------


def _rff_rms_error(D: int, gen: torch.Generator, draws: int = 8) -> float:
    """RMS error of sqrt(2/D) cos(W^T x + b) features against exp(-||x - y||^2 / 2), 40 points."""
    X = torch.randn(40, 3, generator=gen, dtype=F64)
    K = torch.exp(-(torch.cdist(X, X) ** 2) / 2)
    errs = []
    for _ in range(draws):
        W = torch.randn(3, D, generator=gen, dtype=F64)
        b = 2 * math.pi * torch.rand(D, generator=gen, dtype=F64)
        Z = math.sqrt(2 / D) * torch.cos(X @ W + b)
        errs.append(float(((Z @ Z.T - K) ** 2).mean().sqrt()))
    return sum(errs) / draws


def guess_ten():
    return 10


def guess_sqrt_ten():
    return math.sqrt(10)


def guess_none():
    return None


@exercise("50.1", "predict_feature_factor")
def feature_factor(answer) -> str:
    """Measure the error at D = 100 and 10,000 and infer the factor for a 10x smaller error."""
    guess = as_number(attempt(answer), "predict_feature_factor()")
    gen = torch.Generator().manual_seed(0)
    e_small, e_large = _rff_rms_error(25, gen), _rff_rms_error(2500, gen)
    slope = math.log(e_large / e_small) / math.log(100)  # d log error / d log D
    factor = 10 ** (-1 / slope)
    seen = (
        f"the RMS error falls from {e_small:.3g} at D = 25 to {e_large:.3g} at D = 2,500, "
        f"a log-log slope of {slope:.2f}, so 10 times smaller needs about {factor:.0f} times "
        "more features"
    )
    if not factor / 2 <= guess <= 2 * factor:
        if abs(guess - 10) <= 2:
            why = "the error falls like 1/√D, not like 1/D (that is the squared error)"
        elif abs(guess - math.sqrt(10)) <= 1:
            why = "√10 would hold if the error fell like 1/D², but it falls like 1/√D"
        else:
            why = "the error is a Monte Carlo mean of D terms: it falls like 1/√D"
        raise Incorrect(f"you predicted {guess:g}; {seen}: {why}")
    return f"right within a factor 2: {seen}"


# --- 50.2 ----------------------------------------------------------------------------------------


def _path_logp(log_pi, log_A, log_B, obs, path) -> float:
    s = log_pi[path[0]] + log_B[path[0], obs[0]]
    for t in range(1, len(path)):
        s += log_A[path[t - 1], path[t]] + log_B[path[t], obs[t]]
    return float(s)


def _bruteforce(log_pi, log_A, log_B, obs):
    S, T = len(log_pi), len(obs)
    scores = {
        p: _path_logp(log_pi, log_A, log_B, obs, p) for p in itertools.product(range(S), repeat=T)
    }
    best = max(scores, key=scores.get)
    return list(best), scores[best]


def _maxplus(log_pi, log_A, log_B, obs) -> float:
    """The best log score by a max-plus recursion in NumPy (no back-pointers)."""
    lv = log_pi + log_B[:, obs[0]]
    for y in obs[1:]:
        lv = np.max(lv[:, None] + log_A, axis=0) + log_B[:, y]
    return float(np.max(lv))


def _model(gen: torch.Generator, S: int, V: int, zeros: bool = False):
    log_pi = torch.log_softmax(torch.randn(S, generator=gen, dtype=F64), 0)
    log_A = torch.log_softmax(torch.randn(S, S, generator=gen, dtype=F64), 1)
    logits = torch.randn(S, V, generator=gen, dtype=F64)
    if zeros:  # some impossible emissions, log b = -inf
        logits[0, 0] = -math.inf
        logits[1, 1] = -math.inf
    return log_pi, log_A, torch.log_softmax(logits, 1)


def viterbi_probability_space(log_pi, log_A, log_B, obs):
    v, back = log_pi.exp() * log_B[:, obs[0]].exp(), []
    for y in obs[1:]:
        best, arg = (v[:, None] * log_A.exp()).max(dim=0)
        v = best * log_B[:, y].exp()
        back.append(arg)
    path = [int(v.argmax())]
    for arg in reversed(back):
        path.append(int(arg[path[-1]]))
    return path[::-1], v.max().log()


def viterbi_no_first_emission(log_pi, log_A, log_B, obs):
    lv, back = log_pi.clone(), []
    for y in obs[1:]:
        best, arg = (lv[:, None] + log_A).max(dim=0)
        lv = best + log_B[:, y]
        back.append(arg)
    path = [int(lv.argmax())]
    for arg in reversed(back):
        path.append(int(arg[path[-1]]))
    return path[::-1], lv.max()


def viterbi_logsumexp(log_pi, log_A, log_B, obs):
    lv = log_pi + log_B[:, obs[0]]
    for y in obs[1:]:
        lv = torch.logsumexp(lv[:, None] + log_A, dim=0) + log_B[:, y]
    path, _ = _ref("50.2", "viterbi_decode")(log_pi, log_A, log_B, obs)
    return path, torch.logsumexp(lv, 0)


def viterbi_path_not_reversed(log_pi, log_A, log_B, obs):
    path, score = _ref("50.2", "viterbi_decode")(log_pi, log_A, log_B, obs)
    return path[::-1], score


def viterbi_greedy(log_pi, log_A, log_B, obs):
    """Picks the best state at each step given the previous pick: not a dynamic program."""
    path = [int((log_pi + log_B[:, obs[0]]).argmax())]
    for y in obs[1:]:
        path.append(int((log_A[path[-1]] + log_B[:, y]).argmax()))
    return path, torch.tensor(_path_logp(log_pi, log_A, log_B, obs, path))


@exercise("50.2", "viterbi_decode")
def viterbi_decode(answer) -> str:
    """Enumeration on short sequences, a NumPy max-plus recursion on long ones."""
    gen = torch.Generator().manual_seed(50)
    cases = [(3, 4, 6, False), (4, 3, 5, True), (2, 2, 1, False), (3, 5, 7, True)]
    for S, V, T, zeros in cases:
        log_pi, log_A, log_B = _model(gen, S, V, zeros)
        obs = torch.randint(2 if zeros else 0, V, (T,), generator=gen)
        what = f"viterbi_decode(...) with S = {S}, T = {T}"
        out = expect_tuple(
            attempt(answer, log_pi, log_A, log_B, obs), what, ("path", "log probability")
        )
        path_bf, score_bf = _bruteforce(log_pi.numpy(), log_A.numpy(), log_B.numpy(), obs.numpy())
        wrong = {
            "add log b_j(y_1) at the first step: the first observation's emission is missing": (
                viterbi_no_first_emission(log_pi, log_A, log_B, obs)[1]
            ),
            "that is the log-likelihood of the forward algorithm (logsumexp over all paths); "
            "Viterbi takes the max": torch.logsumexp(_forward_terms(log_pi, log_A, log_B, obs), 0),
            "that is the score of the greedy path (best next state given the previous pick), "
            "not of the best whole path": viterbi_greedy(log_pi, log_A, log_B, obs)[1],
        }
        expect_answer(out[1], score_bf, f"the log probability of {what}", wrong=wrong, atol=1e-9)
        path = [int(z) for z in out[0]]
        if path != path_bf:
            hint = (
                " (it is the right path backwards: reverse the back-pointer path)"
                if path[::-1] == path_bf
                else ""
            )
            raise Incorrect(f"{what} returned the path {path}, the best path is {path_bf}{hint}")
    # a long sequence: probability space underflows here
    log_pi, log_A, log_B = _model(gen, 4, 6)
    obs = torch.randint(0, 6, (2000,), generator=gen)
    path, score = expect_tuple(
        attempt(answer, log_pi, log_A, log_B, obs), "viterbi_decode(T = 2000)", ("path", "score")
    )
    want = _maxplus(log_pi.numpy(), log_A.numpy(), log_B.numpy(), obs.numpy())
    expect_answer(
        score,
        want,
        "the log probability of viterbi_decode(...) with T = 2000",
        wrong={
            "work in log space: a product of 2000 probabilities underflows to 0": -math.inf,
            "that is the score of the greedy path (best next state given the previous pick), "
            "not of the best whole path": viterbi_greedy(log_pi, log_A, log_B, obs)[1],
        },
        atol=1e-7,
    )
    expect(len(path) == 2000, f"viterbi_decode(T = 2000) returned a path of length {len(path)}")
    own = _path_logp(log_pi.numpy(), log_A.numpy(), log_B.numpy(), obs.numpy(), list(path))
    expect(
        abs(own - want) < 1e-7,
        f"the path returned for T = 2000 scores {own:.6g}, not the best score {want:.6g}",
    )
    return (
        "matches enumeration of all paths (S up to 4, T = 1 to 7, with impossible emissions) "
        "and a max-plus recursion at T = 2000"
    )


def _forward_terms(log_pi, log_A, log_B, obs):
    la = log_pi + log_B[:, obs[0]]
    for y in obs[1:]:
        la = torch.logsumexp(la[:, None] + log_A, dim=0) + log_B[:, y]
    return la


# --- 50.3 ----------------------------------------------------------------------------------------


def _crosstalk_rates(sets, keep_diagonal=False):
    """sign(W xi) != xi from the closed form W xi = xi (xi^T xi) / N - (P / N) xi."""
    rates = []
    for xi in sets:
        P, N = xi.shape
        h = (xi @ xi.T) @ xi / N  # (P, N) fields with the diagonal of W included
        if not keep_diagonal:
            h = h - (P / N) * xi  # w_ii = P / N removed
        rates.append(float((torch.sign(h) != xi).to(F64).mean()))
    return rates


def rates_with_diagonal(pattern_sets):
    return _crosstalk_rates(pattern_sets, keep_diagonal=True)


def rates_stable_fraction(pattern_sets):
    return [1 - r for r in _ref("50.3", "bit_error_rates")(pattern_sets)]


def rates_per_pattern(pattern_sets):
    out = []
    for xi in pattern_sets:
        P, N = xi.shape
        h = (xi @ xi.T) @ xi / N - (P / N) * xi
        out.append(float((torch.sign(h) != xi).any(1).to(F64).mean()))
    return out


@exercise("50.3", "bit_error_rates")
def bit_error_rates(answer) -> str:
    """N = 400, loads 0.05 to 0.3, against the crosstalk in closed form."""
    gen = torch.Generator().manual_seed(5)
    N, loads = 400, [0.05, 0.1, 0.138, 0.2, 0.3]
    sets = [torch.randint(0, 2, (round(a * N), N), generator=gen).to(F64) * 2 - 1 for a in loads]
    got = attempt(answer, sets)
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(sets),
        f"bit_error_rates should return a list of {len(sets)} floats, got {got!r:.80}",
    )
    want = _crosstalk_rates(sets)
    wrong = {
        "zero the diagonal of W: w_ii = P/N adds a self-term that hides errors": (
            _crosstalk_rates(sets, keep_diagonal=True)
        ),
        "return the fraction of bits that flip, not of bits that stay": [1 - r for r in want],
        "count bits, not patterns with at least one flipped bit": rates_per_pattern(sets),
    }
    expect_answer(got, want, "bit_error_rates(...)", wrong=wrong, atol=1e-12)
    gauss = [0.5 * math.erfc(math.sqrt(1 / a) / math.sqrt(2)) for a in loads]
    pairs = ", ".join(
        f"{a:g}: {r:.4f} ({g:.4f})" for a, r, g in zip(loads, want, gauss, strict=True)
    )
    return f"matches the closed-form crosstalk; P/N: measured (Gaussian Φ(-√(N/P))) {pairs}"


MISTAKES = {
    "50.1": [
        (guess_ten, "not like 1/D"),
        (guess_sqrt_ten, "√10 would hold"),
        (guess_none, "should return a number"),
    ],
    "50.2": [
        (viterbi_probability_space, "work in log space"),
        (viterbi_no_first_emission, "first observation's emission"),
        (viterbi_logsumexp, "forward algorithm"),
        (viterbi_path_not_reversed, "reverse the back-pointer path"),
        (viterbi_greedy, "greedy path"),
    ],
    "50.3": [
        (rates_with_diagonal, "zero the diagonal"),
        (rates_stable_fraction, "not of bits that stay"),
        (rates_per_pattern, "count bits, not patterns"),
    ],
}
