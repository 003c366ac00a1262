"""Checks of the exercises of chapter 29 (scaling laws and pretraining recipes).

The references are independent of :mod:`mlbook.architectures.scaling`: the compute-optimal
split is found by ``scipy.optimize.minimize_scalar`` along the constraint 6ND = C (29.1, 29.2),
with the published constants copied here; the extrapolation protocol of 29.3 is written out
again below and run with the same fit functions as the reader's answer (a toy fit and the
book's least-squares fit), the losses of eq. 29.3 computed with NumPy.

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them (the
tests feed each to its check).
"""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
from scipy.optimize import minimize_scalar

from . import (
    Incorrect,
    as_number,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    is_close,
    paired_mistakes,
)
from . import reference_answer as _ref

#: (E, A, B, alpha, beta): Hoffmann et al. (2022), Besiroglu et al. (2024), and a law of the
#: size of the chapter's sweep.
HOFFMANN = (1.69, 406.4, 410.7, 0.34, 0.28)
BESIROGLU = (1.8172, 482.01, 2085.43, 0.3478, 0.3658)
SMALL = (0.47, 140.0, 2.7e4, 0.78, 0.94)


def _optimum(C: float, E, A, B, alpha, beta) -> tuple[float, float, float]:
    """(N, D, L) minimising E + A N^-alpha + B D^-beta along 6 N D = C, found numerically."""

    def loss(log_n):
        return E + A * math.exp(-alpha * log_n) + B * (C / 6 / math.exp(log_n)) ** -beta

    res = minimize_scalar(
        loss, bounds=(0.0, math.log(C / 6)), method="bounded", options={"xatol": 1e-11}
    )
    n = math.exp(res.x)
    return n, C / 6 / n, float(res.fun)


# --- 29.1 ----------------------------------------------------------------------------------------


def guess_ten():
    return 10


def guess_five():
    return 5.0


def guess_one():
    return 1


def guess_words():
    return "about three"


@exercise("29.1", "predict_token_growth")
def token_growth(answer) -> str:
    """The growth of D_opt when C grows 10x, for Hoffmann et al.'s constants, found numerically."""
    guess = as_number(attempt(answer), "predict_token_growth()", " (a factor)")
    n1, d1, _ = _optimum(1e21, *HOFFMANN)
    n2, d2, _ = _optimum(1e22, *HOFFMANN)
    f_d, f_n = d2 / d1, n2 / n1
    seen = (
        f"at 10x the compute the optimum has {f_d:.2f}x the tokens and {f_n:.2f}x the parameters "
        f"(their product is 10, since C = 6ND)"
    )
    if abs(guess / f_d - 1) <= 0.15:
        return f"right within 15 %: {seen}; with alpha = beta both would grow by sqrt(10) = 3.16"
    if guess >= 7:
        raise Incorrect(
            f"you predicted {guess}: that spends all the extra compute on data, as if N stayed "
            f"fixed; but a fixed N soon stops gaining from more tokens. {seen}"
        )
    if 4.2 <= guess < 7:
        raise Incorrect(
            f"you predicted {guess}: the factor 10 splits as a product, 10^b 10^a with "
            f"a + b = 1, not as a sum of 5 and 5. {seen}"
        )
    if guess <= 1.2:
        raise Incorrect(
            f"you predicted {guess}: D_opt must grow, since both terms of the loss keep "
            f"falling with more of their resource. {seen}"
        )
    raise Incorrect(f"you predicted {guess}; {seen}")


# --- 29.2 ----------------------------------------------------------------------------------------


def _g(E, A, B, alpha, beta):
    return (alpha * A / (beta * B)) ** (1 / (alpha + beta))


def n_swapped_exponent(C, E, A, B, alpha, beta):
    return _g(E, A, B, alpha, beta) * (C / 6) ** (alpha / (alpha + beta))


def n_without_six(C, E, A, B, alpha, beta):
    return _g(E, A, B, alpha, beta) * C ** (beta / (alpha + beta))


def n_inverted_g(C, E, A, B, alpha, beta):
    return (C / 6) ** (beta / (alpha + beta)) / _g(E, A, B, alpha, beta)


def _n_right(C, E, A, B, alpha, beta):
    return _g(E, A, B, alpha, beta) * (C / 6) ** (beta / (alpha + beta))


def loss_without_floor(C, E, A, B, alpha, beta):
    n = _n_right(C, E, A, B, alpha, beta)
    return A * n**-alpha + B * (C / 6 / n) ** -beta


def loss_d_is_c_over_n(C, E, A, B, alpha, beta):
    n = _n_right(C, E, A, B, alpha, beta)
    return E + A * n**-alpha + B * (C / n) ** -beta


WRONG_N = [
    (
        n_swapped_exponent,
        "that is D_opt's exponent: N_opt grows as (C/6)^(beta/(alpha+beta)), the exponent of "
        "the *other* resource on top",
    ),
    (n_without_six, "the constraint is N D = C / 6 (eq. 29.1), not N D = C"),
    (
        n_inverted_g,
        "G is inverted: N_opt = G (C/6)^a with G = (alpha A / (beta B))^(1/(alpha+beta))",
    ),
]
WRONG_LOSS = [
    (loss_without_floor, "the irreducible loss E is missing from the frontier loss"),
    (loss_d_is_c_over_n, "D_opt = C / (6 N_opt), not C / N_opt"),
]


@exercise("29.2", "n_opt", "frontier_loss")
def compute_optimal(n_opt, frontier_loss) -> str:
    """N_opt(C) and L(N_opt, D_opt) against a numerical minimisation along 6ND = C."""
    C = np.array([1e9, 1e12, 1e18, 1e24])
    for consts, name in ((HOFFMANN, "Hoffmann"), (BESIROGLU, "Besiroglu"), (SMALL, "small")):
        opt = [_optimum(float(c), *consts) for c in C]
        what = f"for {name} et al.'s constants" if name != "small" else "for a small-model law"
        got_n = expect_answer(
            attempt(n_opt, C.copy(), *consts),
            np.array([o[0] for o in opt]),
            f"n_opt(C, ...) {what}",
            wrong={fb: fn(C, *consts) for fn, fb in WRONG_N},
            rtol=1e-5,
        )
        expect(got_n.shape == (4,), "n_opt should return one N per budget")
        expect_answer(
            attempt(frontier_loss, C.copy(), *consts),
            np.array([o[2] for o in opt]),
            f"frontier_loss(C, ...) {what}",
            wrong={fb: fn(C, *consts) for fn, fb in WRONG_LOSS},
            rtol=1e-9,
        )
    return (
        "N_opt and the frontier loss match a numerical minimisation along 6ND = C for 3 sets of "
        "constants and budgets from 1e9 to 1e24 FLOPs"
    )


# --- 29.3 ----------------------------------------------------------------------------------------


def _sweep_runs():
    """(n, d, loss) of the chapter's sweep, runs of at least 192 updates (float64 arrays)."""
    text = resources.files("mlbook").joinpath("data", "scaling_sweep.json").read_text("utf-8")
    runs = [r for r in json.loads(text)["runs"] if r["steps"] >= 192]
    return tuple(
        np.array([r[k] for r in runs], dtype=float) for k in ("params", "tokens", "val_loss")
    )


def _loss(params, n, d):
    E, A, B, alpha, beta = (float(v) for v in params)
    return E + A * n**-alpha + B * d**-beta


def _protocol(
    n,
    d,
    loss,
    cutoffs,
    fit,
    *,
    sign=1.0,
    log=np.log10,
    relative=False,
    all_runs=False,
    strict=False,
):
    """The extrapolation errors, written out again (with switches for the typical mistakes)."""
    c = 6 * n * d
    dist, err = [], []
    for cut in cutoffs:
        train = c < cut if strict else c <= cut
        params = fit(n[train], d[train], loss[train])
        test = np.ones_like(train) if all_runs else ~train
        pred = _loss(params, n[test], d[test])
        e = sign * (pred - loss[test])
        dist.append(log(c[test] / cut))
        err.append(e / loss[test] if relative else e)
    return np.concatenate(dist), np.concatenate(err)


def _toy_fit(n, d, loss):
    """A deterministic stand-in for a fit: its constants depend on the runs it is given."""
    from ...architectures.scaling import LossParams

    m = float(loss.mean())
    return LossParams(0.5 * float(loss.min()), m * n.max() ** 0.5, m * d.max() ** 0.5, 0.5, 0.5)


def errors_flipped(n, d, loss, cutoffs, fit):
    return _protocol(n, d, loss, cutoffs, fit, sign=-1.0)


def errors_natural_log(n, d, loss, cutoffs, fit):
    return _protocol(n, d, loss, cutoffs, fit, log=np.log)


def errors_relative(n, d, loss, cutoffs, fit):
    return _protocol(n, d, loss, cutoffs, fit, relative=True)


def errors_all_runs(n, d, loss, cutoffs, fit):
    return _protocol(n, d, loss, cutoffs, fit, all_runs=True)


def errors_strict(n, d, loss, cutoffs, fit):
    return _protocol(n, d, loss, cutoffs, fit, strict=True)


PARTS = ("distances", "errors")
WRONG_EXTRAPOLATION = [
    (errors_flipped, "the error is the prediction minus the measured loss (its sign is flipped)"),
    (errors_natural_log, "distances are in decades of compute: log10(C / cutoff), not ln"),
    (errors_relative, "the errors are in nats (prediction - loss), not relative to the loss"),
    (errors_all_runs, "score only the held-out runs, those above the cutoff, not the fitted ones"),
    (errors_strict, "a run exactly at the cutoff belongs to the fit (C <= cutoff)"),
]


@exercise("29.3", "extrapolation_errors")
def extrapolation(answer) -> str:
    """The protocol against an independent implementation, with a toy fit and the real one."""
    from ...architectures.scaling import fit_parametric_loss

    n, d, loss = _sweep_runs()
    c = np.sort(np.unique(6 * n * d))
    cutoffs = [float(c[5]), float(c[9]), float(c[12])]  # each the compute of a run
    found = {}
    for fit, name in ((_toy_fit, "a toy fit"), (fit_parametric_loss, "fit_parametric_loss")):
        what = f"extrapolation_errors(n, d, loss, cutoffs, fit) with {name}"
        got = expect_tuple(
            attempt(answer, n.copy(), d.copy(), loss.copy(), list(cutoffs), fit),
            what,
            PARTS,
        )
        want = _protocol(n, d, loss, cutoffs, fit)
        parts = [as_tensor(got[j], f"{what}: {part}").reshape(-1) for j, part in enumerate(PARTS)]
        wrong = None
        if not all(is_close(g, w, atol=1e-9, rtol=1e-7) for g, w in zip(parts, want, strict=True)):
            wrong = {fb: fn(n, d, loss, cutoffs, fit) for fn, fb in WRONG_EXTRAPOLATION}
        for j, part in enumerate(PARTS):  # the mistakes are run only when the answer is wrong
            expect_answer(
                parts[j],
                want[j],
                f"{what}: {part}",
                wrong=None if wrong is None else {fb: w[j] for fb, w in wrong.items()},
                atol=1e-9,
                rtol=1e-7,
            )
        found[name] = want
    dist, err = found["fit_parametric_loss"]
    near, far = err[dist < 0.45], err[dist >= 0.45]
    return (
        f"matches an independent implementation with a toy fit and with the least-squares fit "
        f"at 3 cutoffs; on the sweep the mean error is {near.mean():+.2f} nats within 0.45 "
        f"decades and {far.mean():+.2f} beyond: the fits predict too low a loss, more so the "
        f"farther they extrapolate"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

N_REF = _ref("29.2", "n_opt")
L_REF = _ref("29.2", "frontier_loss")

MISTAKES = {
    "29.1": [
        (guess_ten, "spends all the extra compute on data"),
        (guess_five, "splits as a product"),
        (guess_one, "D_opt must grow"),
        (guess_words, "should return a number"),
    ],
    "29.2": paired_mistakes(
        N_REF,
        L_REF,
        [
            (n_swapped_exponent, "that is D_opt's exponent"),
            (n_without_six, "not N D = C"),
            (n_inverted_g, "G is inverted"),
        ],
        [
            (loss_without_floor, "irreducible loss E is missing"),
            (loss_d_is_c_over_n, "not C / N_opt"),
        ],
    ),
    "29.3": [
        (errors_flipped, "its sign is flipped"),
        (errors_natural_log, "log10(C / cutoff), not ln"),
        (errors_relative, "not relative to the loss"),
        (errors_all_runs, "score only the held-out runs"),
        (errors_strict, "belongs to the fit"),
    ],
}
