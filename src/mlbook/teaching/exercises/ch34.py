"""Checks of the exercises of chapter 34 (reinforcement learning foundations).

The references are independent of :mod:`mlbook.posttraining.rl`: the effective sample size of
uniform draws counted directly (34.1); policy values by Bellman backups iterated in NumPy and by
a NumPy solve restricted to the non-terminal states, on random MDPs built here (34.2); GAE as the
explicit sums of eq. 34.5 over each episode of a buffer, in NumPy (34.3); and effective sample
sizes of sequence weights computed in NumPy with a log-sum-exp (34.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
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
)

F64 = torch.float64


# --- 34.1 ----------------------------------------------------------------------------------------


def guess_all_samples():
    return 1000


def guess_actions():
    return 10


def guess_one():
    return 1


@exercise("34.1", "predict_ess")
def predict_ess_check(predict) -> str:
    """The guess against the effective sample size of 1,000 uniform draws over 10 actions."""
    gen = torch.Generator().manual_seed(341)
    draws = torch.randint(0, 10, (1000,), generator=gen)
    w = 10.0 * (draws == 0).to(F64)  # pi / b: 1 / (1/10) on action 0, else 0
    measured = float(w.sum() ** 2 / (w**2).sum())
    hits = int((draws == 0).sum())
    expect_guess(
        attempt(predict),
        100.0,
        "predict_ess()",
        {
            1000.0: f"the 900 or so draws of other actions get weight 0 and do not count: the "
            f"measured effective sample size is {measured:.0f}",
            10.0: "10 is the number of actions, not of samples: the draws that hit action 0 "
            "(about N/K = 100) each count fully",
            1.0: "no single weight dominates: every draw of action 0 gets the same weight 10, so "
            "all of them count",
        },
        rtol=0.25,
    )
    return (
        f"right within 25 %: the measured ESS is {measured:.0f}, exactly the {hits} draws of "
        f"action 0 (expected N/K = 100); the other draws have weight 0"
    )


# --- 34.2 ----------------------------------------------------------------------------------------


def _random_mdp(seed: int, S: int = 6, A: int = 3, n_terminal: int = 2):
    """A random MDP whose last ``n_terminal`` states are absorbing with zero reward; from every
    other state each action ends the episode with probability at least 0.2."""
    rng = np.random.default_rng(seed)
    live = S - n_terminal
    P = np.zeros((S, A, S))
    P[:live, :, :live] = 0.8 * rng.dirichlet(np.ones(live), size=(live, A))
    P[:live, :, live:] = 0.2 * rng.dirichlet(np.ones(n_terminal), size=(live, A))
    for s in range(live, S):
        P[s, :, s] = 1.0
    R = np.zeros((S, A))
    R[:live] = rng.normal(size=(live, A))
    pi = rng.dirichlet(np.ones(A), size=S)
    terminal = np.arange(S) >= live
    return P, R, pi, terminal


def _values_reference(P, R, pi, gamma, terminal) -> np.ndarray:
    """NumPy: a solve on the non-terminal states for gamma = 1, else 2,000 backups."""
    P_pi = np.einsum("sa,sat->st", pi, P)
    r_pi = (pi * R).sum(1)
    keep = ~terminal
    if gamma == 1.0:
        v = np.zeros(len(r_pi))
        v[keep] = np.linalg.solve(np.eye(keep.sum()) - P_pi[np.ix_(keep, keep)], r_pi[keep])
        return v
    v = np.zeros(len(r_pi))
    for _ in range(2000):
        v = np.where(keep, r_pi + gamma * P_pi @ v, 0.0)
    return v


def _chain(P, R, pi, terminal):
    alive = (~terminal).to(P.dtype)
    return alive[:, None] * torch.einsum("sa,sat->st", pi, P), alive * (pi * R).sum(1)


def values_transposed(P, R, pi, gamma, terminal):
    P_pi, r_pi = _chain(P, R, pi, terminal)
    return torch.linalg.solve(torch.eye(P.shape[0], dtype=P.dtype) - gamma * P_pi.T, r_pi)


def values_without_gamma(P, R, pi, gamma, terminal):
    P_pi, r_pi = _chain(P, R, pi, terminal)
    return torch.linalg.solve(torch.eye(P.shape[0], dtype=P.dtype) - P_pi, r_pi)


def values_unweighted_reward(P, R, pi, gamma, terminal):
    P_pi, _ = _chain(P, R, pi, terminal)
    r_mean = (~terminal).to(P.dtype) * R.mean(1)
    return torch.linalg.solve(torch.eye(P.shape[0], dtype=P.dtype) - gamma * P_pi, r_mean)


def values_terminal_self_loops(P, R, pi, gamma, terminal):
    P_pi = torch.einsum("sa,sat->st", pi, P)  # terminal rows keep their self-loops
    return torch.linalg.solve(torch.eye(P.shape[0], dtype=P.dtype) - gamma * P_pi, (pi * R).sum(1))


WRONG_VALUES = {
    "P_pi is transposed: its row s must hold the next-state probabilities from s, "
    "P_pi[s, s'] = sum_a pi(a|s) P(s'|s, a)": values_transposed,
    "γ is missing: v = (I - γ P_pi)^{-1} r_pi": values_without_gamma,
    "the reward must be weighted by the policy, r_pi(s) = sum_a pi(a|s) R(s, a), not averaged "
    "over actions": values_unweighted_reward,
}
TERMINAL_FEEDBACK = (
    "with γ = 1 a terminal state that loops onto itself makes I - γ P_pi singular: give terminal "
    "states a row of zeros in P_pi (nothing follows the end of an episode)"
)


@exercise("34.2", "policy_values")
def policy_values_check(fn) -> str:
    """Random MDPs, gamma = 0.8 and 1, against NumPy backups and a restricted NumPy solve."""
    for seed, gamma in ((342, 0.8), (343, 0.95), (344, 1.0)):
        P, R, pi, terminal = _random_mdp(seed)
        args = [torch.from_numpy(x) for x in (P, R, pi)]
        term = torch.from_numpy(terminal)
        want = _values_reference(P, R, pi, gamma, terminal)
        what = f"policy_values(P, R, pi, gamma={gamma}, terminal)"
        try:
            got = attempt(fn, *[a.clone() for a in args], gamma, term.clone(), name=what)
        except Incorrect as err:
            if gamma == 1.0:
                raise Incorrect(f"{err}; {TERMINAL_FEEDBACK}") from None
            raise
        if gamma == 1.0 and not torch.isfinite(as_tensor(got, what)).all():
            raise Incorrect(f"{what}: {TERMINAL_FEEDBACK}")
        expect_answer(
            got,
            want,
            what,
            wrong={fb: f(*args, gamma, term) for fb, f in WRONG_VALUES.items()},
            atol=1e-9,
            rtol=1e-9,
        )
    return (
        "matches NumPy backups (γ = 0.8, 0.95) and a solve on the non-terminal states (γ = 1) on "
        "random MDPs with 6 states, 3 actions and 2 terminal states"
    )


# --- 34.3 ----------------------------------------------------------------------------------------


def _gae_reference(rewards, values, dones, last_value, gamma, lam) -> np.ndarray:
    """Explicit sums of eq. 34.5 over each episode of the buffer (NumPy)."""
    r, v, d = (np.asarray(x, dtype=float) for x in (rewards, values, dones))
    T = len(r)
    ends = [t for t in range(T) if d[t] == 1.0] + ([T - 1] if d[-1] == 0.0 else [])
    out, start = np.zeros(T), 0
    for end in ends:
        nxt = [
            v[k + 1] if k < end else (0.0 if d[end] else last_value) for k in range(start, end + 1)
        ]
        delta = r[start : end + 1] + gamma * np.array(nxt) - v[start : end + 1]
        for t in range(start, end + 1):
            out[t] = sum((gamma * lam) ** l * delta[l + t - start] for l in range(end - t + 1))
        start = end + 1
    return out


def gae_no_reset(rewards, values, dones, last_value, gamma, lam):
    return torch.from_numpy(_gae_reference(rewards, values, 0 * dones, last_value, gamma, lam))


def gae_value_leak(rewards, values, dones, last_value, gamma, lam):
    """Resets the running advantage but bootstraps an episode's end from the next entry."""
    nxt = torch.cat([values[1:], values.new_tensor([last_value])])
    adv, running = torch.zeros_like(rewards), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * nxt[t] - values[t]
        running = delta + gamma * lam * (1 - dones[t]) * running
        adv[t] = running
    return adv


def gae_ignores_last_value(rewards, values, dones, last_value, gamma, lam):
    return torch.from_numpy(_gae_reference(rewards, values, dones, 0.0, gamma, lam))


def gae_forward(rewards, values, dones, last_value, gamma, lam):
    nxt = torch.cat([values[1:], values.new_tensor([last_value])])
    keep = 1 - dones
    adv, running = torch.zeros_like(rewards), 0.0
    for t in range(len(rewards)):
        running = rewards[t] + gamma * keep[t] * nxt[t] - values[t] + gamma * lam * running
        adv[t] = running
        running = running * keep[t]  # restart after an episode ends
    return adv


WRONG_GAE = {
    "the advantages run across episode boundaries: at an end (dones[t] = 1) the next value is 0 "
    "and the running advantage restarts": gae_no_reset,
    "the TD error at an episode's last step bootstraps from the next episode's first state: "
    "there V(s_{t+1}) = 0": gae_value_leak,
    "last_value is ignored: an unfinished last episode bootstraps from it": gae_ignores_last_value,
    "the recursion runs forward in time: A_t = δ_t + γλ A_{t+1} collects the future, so loop "
    "from the last step backward": gae_forward,
}


@exercise("34.3", "gae_with_dones")
def gae_with_dones_check(fn) -> str:
    """Buffers with two or three episodes, the last finished or not, against explicit sums."""
    gen = torch.Generator().manual_seed(343)
    for T, ends, gamma, lam in (
        (12, (3, 8), 0.9, 0.8),
        (10, (0, 4, 9), 0.99, 0.95),
        (9, (5,), 0.8, 0.5),
    ):
        r = torch.randn(T, generator=gen, dtype=F64)
        v = torch.randn(T, generator=gen, dtype=F64)
        d = torch.zeros(T, dtype=F64)
        d[list(ends)] = 1.0
        last = 1.7
        args = (r, v, d, last, gamma, lam)
        expect_answer(
            attempt(fn, r.clone(), v.clone(), d.clone(), last, gamma, lam),
            _gae_reference(*args),
            f"gae_with_dones(...) for T = {T}, episodes ending at {ends}",
            wrong={fb: f(*args) for fb, f in WRONG_GAE.items()},
            atol=1e-10,
            rtol=1e-10,
        )
    return (
        "matches the explicit sums of eq. 34.5 per episode for buffers of 2 and 3 episodes, with "
        "the last one unfinished (bootstrapped from last_value) or finished"
    )


# --- 34.4 ----------------------------------------------------------------------------------------


def _ess_reference(logw: np.ndarray, lengths) -> list[float]:
    out = []
    for L in lengths:
        lw = logw[:, :L].sum(1)
        w = np.exp(lw - lw.max())
        out.append(float(w.sum() ** 2 / (w**2).sum() / logw.shape[0]))
    return out


def ess_count(logw, lengths):
    return [x * logw.shape[0] for x in _ess_reference(logw.numpy(), lengths)]


def ess_mean_of_token_weights(logw, lengths):
    out = []
    for L in lengths:
        w = logw[:, :L].exp().mean(1)
        out.append(float(w.sum() ** 2 / (w**2).sum()) / logw.shape[0])
    return out


def ess_last_token(logw, lengths):
    out = []
    for L in lengths:
        lw = logw[:, L - 1]
        w = torch.exp(lw - lw.max())
        out.append(float(w.sum() ** 2 / (w**2).sum()) / logw.shape[0])
    return out


WRONG_ESS = {
    "divide the effective sample size by n: return a fraction": ess_count,
    "the weight of a sequence is the product of its token ratios (the exp of the summed "
    "log-weights), not their mean": ess_mean_of_token_weights,
    "the weight of a prefix of length L multiplies the ratios of all its L tokens, not only of "
    "the last one": ess_last_token,
}


@exercise("34.4", "ess_by_length")
def ess_by_length_check(fn) -> str:
    """Sequences of independent tokens, b = softmax(z), pi = softmax(z / 0.7), against NumPy."""
    gen = torch.Generator().manual_seed(344)
    z = torch.randn(5, generator=gen, dtype=F64)
    b, p = torch.softmax(z, 0), torch.softmax(z / 0.7, 0)
    n, T = 4000, 32
    tokens = torch.multinomial(b, n * T, replacement=True, generator=gen).reshape(n, T)
    logw = (p.log() - b.log())[tokens]  # (n, T)
    lengths = [1, 2, 4, 8, 16, 32]
    want = _ess_reference(logw.numpy(), lengths)
    got = attempt(fn, logw.clone(), list(lengths))
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(lengths),
        f"ess_by_length should return a list of {len(lengths)} floats, one per length",
    )
    expect_answer(
        torch.tensor([float(x) for x in got], dtype=F64),
        want,
        f"ess_by_length(logw, {lengths})",
        wrong={fb: f(logw, lengths) for fb, f in WRONG_ESS.items()},
        atol=1e-9,
        rtol=1e-9,
    )
    factor = float((p**2 / b).sum())  # E_b[w^2] of one token
    kl = float((p * (p / b).log()).sum())
    shown = ", ".join(
        f"L = {L}: {x:.3f} (predicted {factor**-L:.3f})" for L, x in zip(lengths, want, strict=True)
    )
    return (
        f"matches the NumPy computation; ESS / n by length: {shown}; per-token factor "
        f"1 / E_b[w²] = {1 / factor:.3f}, bound exp(-KL) = {np.exp(-kl):.3f}"
    )


# --- the typical wrong answers, listed once ------------------------------------------------------

MISTAKES = {
    "34.1": [
        (guess_all_samples, "get weight 0"),
        (guess_actions, "number of actions"),
        (guess_one, "no single weight dominates"),
    ],
    "34.2": [
        (values_transposed, "P_pi is transposed"),
        (values_without_gamma, "γ is missing"),
        (values_unweighted_reward, "weighted by the policy"),
        (values_terminal_self_loops, "loops onto itself"),
    ],
    "34.3": [
        (gae_no_reset, "run across episode boundaries"),
        (gae_value_leak, "next episode's first state"),
        (gae_ignores_last_value, "last_value is ignored"),
        (gae_forward, "runs forward in time"),
    ],
    "34.4": [
        (ess_count, "divide the effective sample size by n"),
        (ess_mean_of_token_weights, "not their mean"),
        (ess_last_token, "not only of the last one"),
    ],
}
