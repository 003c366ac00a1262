"""Checks of the exercises of chapter 43 (retrieval, memory, planning and evaluation).

The references are independent of :mod:`mlbook.systems.retrieval`: pass@k from exact integer
binomials (``math.comb``) and Fractions (43.1, 43.2); the bias and mean squared errors of the
two estimators as sums over the binomial distribution written with ``math`` (43.3).

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from . import Incorrect, as_number, as_tensor, attempt, exercise, expect_answer, expect_tuple
from . import reference_answer as _ref

# --- 43.1 ----------------------------------------------------------------------------------------


def guess_plug_in():
    return 1 - 0.7**5


def guess_pass_at_1():
    return 0.3


@exercise("43.1", "predict_pass_at_5")
def predict_pass_at_5(answer) -> str:
    """The unbiased pass@5 for n = 10, c = 3, exactly, as a Fraction."""
    guess = as_number(attempt(answer), "predict_pass_at_5()")
    exact = 1 - Fraction(math.comb(7, 5), math.comb(10, 5))
    seen = f"1 - C(7, 5) / C(10, 5) = 1 - 21/252 = {exact} ≈ {float(exact):.3f}"
    if abs(guess - float(exact)) > 0.01:
        if abs(guess - (1 - 0.7**5)) < 0.01:
            why = (
                "that is the plug-in 1 - (1 - c/n)^k, drawing with replacement; the estimator "
                "draws 5 of the 10 samples without replacement"
            )
        elif abs(guess - 0.3) < 0.01:
            why = (
                "c/n = 0.3 is pass@1; with five tries the chance of at least one success is higher"
            )
        else:
            why = "count the 5-subsets of the 10 samples that hold only the 7 wrong ones"
        raise Incorrect(f"you guessed {guess:.3f}; it is {seen}: {why}")
    return f"right: {seen}; the plug-in would say {1 - 0.7**5:.3f}"


# --- 43.2 ----------------------------------------------------------------------------------------

_CASES = [(1, 0, 1), (1, 1, 1), (10, 3, 5), (10, 0, 10), (10, 10, 10), (10, 6, 5), (7, 2, 3)]
_CASES += [(200, 3, 100), (200, 37, 50), (1000, 12, 1), (1000, 12, 500), (3000, 5, 2000)]


def _exact(n, c, k) -> float:
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def pass_plug_in(n, c, k):
    return 1 - (1 - c / n) ** k


def pass_shifted(n, c, k):
    prod = 1.0
    for i in range(n - c, n):
        prod *= 1 - k / i if i > 0 else 0.0
    return 1 - prod


def pass_without_one_minus(n, c, k):
    return 1 - _ref("43.2", "pass_at_k_estimate")(n, c, k)


@exercise("43.2", "pass_at_k_estimate")
def pass_at_k_estimate(fn) -> str:
    """The reader's estimator against exact Fractions of integer binomials."""
    for n, c, k in _CASES:
        what = f"pass_at_k_estimate({n}, {c}, {k})"
        got = as_number(attempt(fn, n, c, k), what)
        expect_answer(
            got,
            _exact(n, c, k),
            what,
            wrong={
                "that is the plug-in 1 - (1 - c/n)^k (with replacement), which is biased low": (
                    pass_plug_in(n, c, k)
                ),
                "the product runs over i = n - c + 1, ..., n (it is shifted by one)": (
                    pass_shifted(n, c, k) if n > c else None
                ),
                "C(n - c, k) / C(n, k) is the chance that all k are wrong; pass@k is 1 minus it": (
                    1 - _exact(n, c, k)
                ),
            },
            atol=1e-9,
        )
    return (
        f"matches exact integer binomials on {len(_CASES)} cases, from n = 1 to n = 3000 "
        "(where C(n, k) overflows a float), including n - c < k"
    )


# --- 43.3 ----------------------------------------------------------------------------------------

_NS, _K, _P = [5, 10, 20, 40, 80, 160, 320, 640], 5, 0.1


@functools.cache
def _errors_exact():
    target = 1 - (1 - _P) ** _K
    bias, mse_u, mse_p = [], [], []
    for n in _NS:
        c = np.arange(n + 1)
        log_pmf = [
            math.lgamma(n + 1)
            - math.lgamma(j + 1)
            - math.lgamma(n - j + 1)
            + j * math.log(_P)
            + (n - j) * math.log1p(-_P)
            for j in range(n + 1)
        ]
        pmf = np.exp(np.array(log_pmf))  # Binomial(n, p) probabilities
        unbiased = np.array([1 - math.comb(n - j, _K) / math.comb(n, _K) for j in range(n + 1)])
        plug = 1 - (1 - c / n) ** _K
        bias.append(float((pmf * plug).sum() - target))
        mse_u.append(float((pmf * (unbiased - target) ** 2).sum()))
        mse_p.append(float((pmf * (plug - target) ** 2).sum()))
    return bias, mse_u, mse_p


def errors_bias_flipped(ns, k, p):
    bias, mse_u, mse_p = _ref("43.3", "estimator_errors")(ns, k, p)
    return [-b for b in bias], mse_u, mse_p


def errors_variance_only(ns, k, p):
    bias, mse_u, mse_p = _ref("43.3", "estimator_errors")(ns, k, p)
    return bias, mse_u, [m - b**2 for m, b in zip(mse_p, bias, strict=True)]


def _slope(ns, ys) -> float:
    return float(np.polyfit(np.log(ns[-4:]), np.log(np.abs(ys[-4:])), 1)[0])


@exercise("43.3", "estimator_errors")
def estimator_errors(fn) -> str:
    """Bias and mean squared errors against sums over the binomial pmf, in exact arithmetic
    where it matters (integer binomials) and math.lgamma for the probabilities."""
    got = attempt(fn, list(_NS), _K, _P)
    bias, mse_u, mse_p = expect_tuple(
        got, "estimator_errors(...)", ("bias_plug", "mse_unbiased", "mse_plug")
    )
    want_b, want_u, want_p = _errors_exact()
    expect_answer(
        as_tensor(bias, "bias_plug"),
        want_b,
        "bias_plug",
        wrong={"the plug-in is biased low: E[estimate] - target is negative": [-b for b in want_b]},
        atol=1e-9,
    )
    expect_answer(as_tensor(mse_u, "mse_unbiased"), want_u, "mse_unbiased", atol=1e-9)
    expect_answer(
        as_tensor(mse_p, "mse_plug"),
        want_p,
        "mse_plug",
        wrong={
            "that is the plug-in's variance; its MSE adds the squared bias": [
                m - b**2 for m, b in zip(want_p, want_b, strict=True)
            ]
        },
        atol=1e-9,
    )
    if not all(a > b for a, b in zip(want_u, want_p, strict=True)):
        raise Incorrect("internal: the reference no longer shows the plug-in's smaller MSE")
    return (
        f"matches exact sums over Binomial(n, 0.1) for n = {_NS}: plug-in bias "
        f"{want_b[0]:.3f} at n = 5 to "
        f"{want_b[-1]:.5f} at n = 640 (log-log slope {_slope(_NS, want_b):.2f}); MSE unbiased "
        f"{want_u[0]:.3f} -> {want_u[-1]:.5f}, plug-in {want_p[0]:.3f} -> {want_p[-1]:.5f} "
        f"(slopes {_slope(_NS, want_u):.2f}, {_slope(_NS, want_p):.2f}): on one problem the "
        "plug-in's error is smaller, but its bias does not average away over problems"
    )


MISTAKES = {
    "43.1": [
        (guess_plug_in, "that is the plug-in"),
        (guess_pass_at_1, "c/n = 0.3 is pass@1"),
    ],
    "43.2": [
        (pass_plug_in, "that is the plug-in"),
        (pass_shifted, "shifted by one"),
        (pass_without_one_minus, "pass@k is 1 minus it"),
    ],
    "43.3": [
        (errors_bias_flipped, "biased low"),
        (errors_variance_only, "its MSE adds the squared bias"),
    ],
}
