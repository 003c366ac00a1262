"""Checks of the exercises of chapter 39 (decoding and speculative sampling).

The references are independent of :mod:`mlbook.systems.decoding`: a simulation of the accept loop
with Bernoulli draws (39.1); acceptance and residual written elementwise in NumPy, and the identity
q a + (1 - alpha) r = p (39.2); the speedup by brute force over gamma in NumPy (39.3).

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them (the tests
feed each to its check).
"""

from __future__ import annotations

import numpy as np
import torch

from . import (
    Incorrect,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_guess,
    expect_tuple,
    paired_mistakes,
)
from . import reference_answer as _ref

F64 = torch.float64

# --- 39.1 ----------------------------------------------------------------------------------------


def _simulated_tokens(alpha: float, gamma: int, steps: int, seed: int) -> float:
    """Mean tokens per step of the accept loop: keep drafts until the first rejection, plus one."""
    rng = np.random.default_rng(seed)
    ok = rng.random((steps, gamma)) < alpha
    return float((np.cumprod(ok, axis=1).sum(1) + 1).mean())


def guess_gamma_alpha():
    return 8.0


def guess_gamma_plus_one():
    return 11


def guess_limit():
    return 5.0


@exercise("39.1", "predict_tokens_per_call")
def tokens_per_call_prediction(answer) -> str:
    """Simulate 200,000 steps at alpha = 0.8, gamma = 10 and reveal the mean."""
    guess = attempt(answer)
    sim = _simulated_tokens(0.8, 10, 200_000, 391)
    exact = (1 - 0.8**11) / 0.2
    expect(abs(sim - exact) < 0.03, "internal: the simulation disagrees with the closed form")
    expect_guess(
        guess,
        sim,
        "predict_tokens_per_call()",
        {
            8.0: "γα = 8 counts the drafts that would each pass on their own; the first "
            f"rejection ends the step, and the mean is {sim:.2f}",
            11.0: "γ + 1 = 11 happens only when all ten drafts are kept (probability "
            f"0.8^10 = 0.11); the mean is {sim:.2f}",
            5.0: "1/(1 - α) = 5 is the limit for unboundedly many drafts; with ten the mean is "
            f"{sim:.2f}",
        },
    )
    return (
        f"right: 200,000 simulated steps give {sim:.3f} tokens per target call, the closed form "
        f"(1 - 0.8^11)/(1 - 0.8) = {exact:.3f}; not γα = 8, not γ + 1 = 11"
    )


# --- 39.2 ----------------------------------------------------------------------------------------


def _accept_np(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    out = np.ones_like(p)
    pos = q > 0
    out[pos] = np.minimum(1.0, p[pos] / q[pos])
    return out


def _residual_np(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    r = np.maximum(0.0, p - q)
    mass = r.sum(-1, keepdims=True)
    safe = np.where(mass > 0, mass, 1.0)
    return np.where(mass > 0, r / safe, p)


def _cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(392)
    p = torch.softmax(torch.randn(4, 9, generator=gen, dtype=F64) * 2, -1)
    q = torch.softmax(torch.randn(4, 9, generator=gen, dtype=F64) * 2, -1)
    q_zero = q.clone()
    q_zero[:, :3] = 0  # the draft never proposes the first three tokens
    q_zero = q_zero / q_zero.sum(-1, keepdim=True)
    q_same = q.clone()
    q_same[1] = p[1]  # one row where target and draft agree
    hand_p = torch.tensor([[0.5, 0.3, 0.2, 0.0]], dtype=F64)
    hand_q = torch.tensor([[0.25, 0.5, 0.0, 0.25]], dtype=F64)
    return [(hand_p, hand_q), (p, q), (p, q_zero), (p, q_same)]


def accept_unclipped(p, q):
    return torch.where(q > 0, p / q, torch.ones_like(p))


def accept_inverted(p, q):
    return torch.where(p > 0, torch.clamp(q / p, max=1.0), torch.ones_like(p))


def residual_unnormalised(p, q):
    r = torch.clamp(p - q, min=0.0)
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p)


def residual_reversed(p, q):
    r = torch.clamp(q - p, min=0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp(min=1e-300), p)


def residual_is_p(p, q):
    return p.clone()


def _accept_ref(p, q):
    return _ref("39.2", "accept_prob")(p, q)


def _residual_ref(p, q):
    return _ref("39.2", "residual_dist")(p, q)


WRONG_ACCEPT = [
    (accept_unclipped, "a(x) is a probability: clip p/q at 1 (min(1, p/q))"),
    (accept_inverted, "the ratio is p/q (target over draft), not q/p"),
]
WRONG_RESIDUAL = [
    (residual_unnormalised, "the residual must be normalised: divide max(0, p - q) by its sum"),
    (residual_reversed, "the residual is max(0, p - q), the target's excess, not max(0, q - p)"),
    (
        residual_is_p,
        "resampling from p after a rejection over-weights the tokens the draft "
        "over-proposes; the residual is max(0, p - q), normalised",
    ),
]


@exercise("39.2", "accept_prob", "residual_dist")
def speculative_distributions(accept, resid) -> str:
    """Closed forms on random, zero-q and p = q rows, then the identity q a + (1 - alpha) r = p."""
    for p, q in _cases():
        a = attempt(accept, p.clone(), q.clone())
        want_a = torch.from_numpy(_accept_np(p.numpy(), q.numpy()))
        expect_answer(
            a,
            want_a,
            "accept_prob(p, q)",
            wrong={fb: w(p, q) for w, fb in WRONG_ACCEPT},
            atol=1e-12,
        )
        r = attempt(resid, p.clone(), q.clone())
        want_r = torch.from_numpy(_residual_np(p.numpy(), q.numpy()))
        expect_answer(
            r,
            want_r,
            "residual_dist(p, q)",
            wrong={fb: w(p, q) for w, fb in WRONG_RESIDUAL},
            atol=1e-12,
        )
        a, r = as_tensor(a, "accept_prob"), as_tensor(r, "residual_dist")
        alpha = (q * a).sum(-1, keepdim=True)
        if not torch.allclose(q * a + (1 - alpha) * r, p, atol=1e-12):
            raise Incorrect("q a + (1 - α) r differs from p: the output would not be the target")
    return (
        "accept_prob and residual_dist match the closed forms on random rows, rows with q = 0 "
        "and rows with p = q, and q a + (1 - α) r = p holds on every row"
    )


# --- 39.3 ----------------------------------------------------------------------------------------

ALPHAS = [0.5, 0.7, 0.8, 0.9, 0.95]
COSTS = [0.01, 0.05, 0.1, 0.2, 0.5]


def _best_np(alphas, costs, gamma_max):
    best = np.zeros((len(alphas), len(costs)))
    speed = np.zeros_like(best)
    for i, a in enumerate(alphas):
        for j, c in enumerate(costs):
            values = [
                sum(a**k for k in range(g + 1)) / (1 + g * c) for g in range(1, gamma_max + 1)
            ]
            k = int(np.argmax(values))
            best[i, j], speed[i, j] = k + 1, values[k]
    return best, speed


def best_without_bonus(alphas, costs, gamma_max):
    a = torch.tensor(alphas, dtype=F64)[:, None, None]
    c = torch.tensor(costs, dtype=F64)[None, :, None]
    g = torch.arange(1, gamma_max + 1, dtype=F64)
    S = (1 - a**g) / ((1 - a) * (1 + g * c))
    return (S.argmax(-1) + 1).double(), S.max(-1).values


def best_simple(alphas, costs, gamma_max):
    a = torch.tensor(alphas, dtype=F64)[:, None, None]
    c = torch.tensor(costs, dtype=F64)[None, :, None]
    g = torch.arange(1, gamma_max + 1, dtype=F64) + 0 * a
    S = g / (1 + g * c)
    return (S.argmax(-1) + 1).double(), S.max(-1).values


def best_zero_based(alphas, costs, gamma_max):
    a = torch.tensor(alphas, dtype=F64)[:, None, None]
    c = torch.tensor(costs, dtype=F64)[None, :, None]
    g = torch.arange(1, gamma_max + 1, dtype=F64)
    S = (1 - a ** (g + 1)) / ((1 - a) * (1 + g * c))
    return S.argmax(-1).double(), S.max(-1).values


@exercise("39.3", "best_gamma")
def best_gamma_table(answer) -> str:
    """A 5 x 5 grid of (alpha, c) against brute force over gamma = 1..64."""
    out = expect_tuple(attempt(answer, ALPHAS, COSTS, 64), "best_gamma(...)", ("gamma", "S"))
    want_g, want_s = (torch.from_numpy(v) for v in _best_np(ALPHAS, COSTS, 64))
    wrong = {
        "the step also gives one token after the drafts (the residual draw or the free one): "
        "E = (1 - α^(γ+1))/(1 - α), not (1 - α^γ)/(1 - α)": best_without_bonus,
        "γ/(1 + γc) counts every draft as accepted; use the expected tokens "
        "(1 - α^(γ+1))/(1 - α)": best_simple,
        "γ starts at 1: argmax over γ = 1..γ_max is index + 1": best_zero_based,
    }
    values = {fb: f(ALPHAS, COSTS, 64) for fb, f in wrong.items()}
    expect_answer(
        out[1], want_s, "the best speedup S*", wrong={k: v[1] for k, v in values.items()}, atol=1e-9
    )
    expect_answer(out[0], want_g, "the best γ", wrong={k: v[0] for k, v in values.items()}, atol=0)
    row = ", ".join(f"{int(g)}" for g in want_g[:, 0].tolist())
    return (
        f"matches brute force on the 5 x 5 grid; at c = 0.01 the best γ for α = 0.5 ... 0.95 is "
        f"{row}, and at α = 0.5, c = 0.5 the best speedup is {float(want_s[0, -1]):.2f}"
    )


MISTAKES = {
    "39.1": [
        (guess_gamma_alpha, "γα = 8"),
        (guess_gamma_plus_one, "γ + 1 = 11"),
        (guess_limit, "1/(1 - α) = 5"),
    ],
    "39.2": paired_mistakes(_accept_ref, _residual_ref, WRONG_ACCEPT, WRONG_RESIDUAL),
    "39.3": [
        (best_without_bonus, "one token after the drafts"),
        (best_simple, "counts every draft as accepted"),
        (best_zero_based, "index + 1"),
    ],
}
