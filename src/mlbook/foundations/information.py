"""Information theory: surprisal, entropy, cross-entropy, KL, perplexity, mutual information
and Monte Carlo estimators of KL (chapter 7). Everything in nats; 0 log 0 = 0.

Shape legend
    K         number of outcomes of a discrete variable (classes, vocabulary)
    ...       any leading batch axes; functions on distributions reduce over the last axis
    N         number of tokens in a stream, or of Monte Carlo samples
    (Kx, Ky)  a joint probability table p(x, y), x along axis 0 and y along axis 1

Probability tables are NumPy arrays; token streams, log-probabilities and samples are tensors.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..validation import (
    distribution,
    finite_or_neg_inf,
    float_array,
    float_tensor,
    index_tensor,
    nonempty,
    one_of,
    positive_int,
    shape_is,
    unit_interval,
)

__all__ = [
    "to_bits",
    "surprisal",
    "entropy",
    "cross_entropy",
    "kl_divergence",
    "empirical_distribution",
    "sequence_nll",
    "perplexity",
    "stationary_distribution",
    "markov_entropy_rate",
    "conditional_entropy",
    "mutual_information",
    "kl_k1",
    "kl_k3",
    "kl_k3_naive",
]


def _dist(p, name: str) -> np.ndarray:
    """(..., K) probabilities summing to one over the last axis, as float64."""
    arr = float_array(p, name)
    distribution(torch.from_numpy(arr), name)
    return arr


def _scalar_or_array(x: np.ndarray):
    return float(x) if np.ndim(x) == 0 else x


def to_bits(nats):
    """Convert an information quantity from nats to bits: divide by log 2."""
    return _scalar_or_array(np.asarray(nats, dtype=np.float64) / math.log(2))


# --- eq. 7.1: surprisal and entropy ------------------------------------------------------------


def surprisal(p):
    """I(x) = -log p(x), elementwise (+inf at p = 0). Implements eq. 7.1.

    p: any shape, in [0, 1]. Returns the same shape (a float for a scalar)."""
    arr = unit_interval(float_array(p, "p"), "p")
    with np.errstate(divide="ignore"):
        return _scalar_or_array(-np.log(arr))


def entropy(p):
    """H(p) = -sum_x p(x) log p(x) over the last axis. Implements eq. 7.1.

    p: (..., K). Returns (...) (a float for (K,))."""
    arr = _dist(p, "p")
    pos = arr > 0
    terms = np.where(pos, arr * np.log(np.where(pos, arr, 1.0)), 0.0)  # (..., K): p log p
    return _scalar_or_array(-terms.sum(axis=-1))


# --- eq. 7.2: cross-entropy and KL divergence ----------------------------------------------------


def _pair(p, q) -> tuple[np.ndarray, np.ndarray]:
    a, b = _dist(p, "p"), _dist(q, "q")
    if a.shape[-1] != b.shape[-1]:  # K = 1 would broadcast silently
        raise ValueError(f"p and q must have the same K, got shapes {a.shape} and {b.shape}")
    return np.broadcast_arrays(a, b)


def cross_entropy(p, q):
    """H(p, q) = -sum_x p(x) log q(x) over the last axis. Implements eq. 7.2.

    p, q: (..., K), leading axes broadcast. Returns (...), +inf where q = 0 < p."""
    a, b = _pair(p, q)
    pos = a > 0
    with np.errstate(divide="ignore"):
        log_q = np.log(b)  # (..., K), -inf where q = 0
    terms = np.where(pos, -a * np.where(pos, log_q, 0.0), 0.0)
    return _scalar_or_array(terms.sum(axis=-1))


def kl_divergence(p, q):
    """KL(p || q) = sum_x p(x) log(p(x) / q(x)) over the last axis. Implements eq. 7.2.

    p, q: (..., K), leading axes broadcast. Returns (...), +inf where q = 0 < p."""
    a, b = _pair(p, q)
    pos = a > 0
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.where(pos, a, 1.0)) - np.log(b)  # (..., K), +inf where q = 0 < p
    terms = np.where(pos, a * np.where(pos, log_ratio, 0.0), 0.0)
    return _scalar_or_array(terms.sum(axis=-1))


# --- eq. 7.3: cross-entropy of a model on data, perplexity ---------------------------------------


def _tokens(tokens, k: int) -> torch.Tensor:
    t = torch.as_tensor(tokens) if isinstance(tokens, (np.ndarray, list)) else tokens
    return nonempty(index_tensor(t, "tokens", high=k, ndim=1), "tokens").long()


def empirical_distribution(tokens, k: int) -> np.ndarray:
    """p_hat(x) = #{i: x_i = x} / N. Implements eq. 7.3. tokens: (N,) in [0, k). Returns (k,)."""
    t = _tokens(tokens, positive_int(k, "k"))
    counts = np.bincount(t.cpu().numpy(), minlength=k).astype(np.float64)
    return counts / counts.sum()


def sequence_nll(log_probs: torch.Tensor, tokens) -> torch.Tensor:
    """Cross-entropy per token -(1/N) sum_i log q(x_i). Implements eq. 7.3.

    log_probs: (K,) for every position or (N, K), rows log-normalised; tokens: (N,). Returns ()."""
    float_tensor(log_probs, "log_probs", min_ndim=1)
    one_of(log_probs.ndim, "log_probs.ndim", (1, 2))
    t = _tokens(tokens, log_probs.shape[-1]).to(log_probs.device)
    if log_probs.ndim == 2:
        shape_is(log_probs, "log_probs", (t.shape[0], None))
    finite_or_neg_inf(log_probs, "log_probs")
    tol = {torch.float64: 1e-8, torch.float32: 1e-4}.get(log_probs.dtype, 1e-2)
    lse = torch.logsumexp(log_probs.detach(), dim=-1)  # () or (N,): 0 for normalised rows
    if (lse.abs() > tol).any():
        raise ValueError(f"log_probs rows must have logsumexp 0, got up to {lse.abs().max():.3g}")
    if log_probs.ndim == 1:
        picked = log_probs[t]  # (N,): the same distribution at every position
    else:
        picked = log_probs.gather(1, t[:, None]).squeeze(1)  # (N, 1) -> (N,)
    return -picked.mean()


def perplexity(log_probs: torch.Tensor, tokens) -> torch.Tensor:
    """Perplexity exp(cross-entropy per token); arguments as in :func:`sequence_nll` (eq. 7.3)."""
    return torch.exp(sequence_nll(log_probs, tokens))


def stationary_distribution(transition) -> np.ndarray:
    """pi = pi T of an irreducible chain by least squares. transition: (K, K). Returns (K,)."""
    tr = float_array(transition, "transition")
    k = len(tr)
    distribution(shape_is(torch.from_numpy(tr), "transition", (k, k)), "transition")
    system = np.vstack([tr.T - np.eye(k), np.ones((1, k))])  # (K + 1, K)
    rhs = np.concatenate([np.zeros(k), [1.0]])  # (K + 1,)
    if np.linalg.matrix_rank(system) < k:
        raise ValueError("transition has no unique stationary distribution (it is reducible)")
    pi = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return np.clip(pi, 0.0, None) / np.clip(pi, 0.0, None).sum()


def markov_entropy_rate(transition) -> float:
    """Entropy rate sum_i pi_i H(T[i, :]) of a stationary chain. transition: (K, K)."""
    pi = stationary_distribution(transition)
    rows = entropy(np.asarray(transition, dtype=np.float64))  # (K,): H(x_t | x_{t-1} = i)
    return float(pi @ rows)


# --- eq. 7.4: conditional entropy and mutual information -----------------------------------------


def _joint2d(joint) -> np.ndarray:
    p = float_array(joint, "joint")
    distribution(float_tensor(torch.from_numpy(p), "joint", ndim=2).flatten(), "joint")
    return p


def conditional_entropy(joint, given: int = 1) -> float:
    """H(X | Y) = -sum p(x, y) log p(x | y). Implements eq. 7.4.

    joint: (Kx, Ky); given: 1 gives H(X | Y), 0 gives H(Y | X)."""
    p = _joint2d(joint)
    p_given = p.sum(axis=1 - one_of(given, "given", (0, 1)), keepdims=True)  # (1, Ky) or (Kx, 1)
    pos = p > 0  # where p(x, y) > 0, also p(given) > 0
    cond = np.where(pos, p, 1.0) / np.where(pos, p_given, 1.0)  # (Kx, Ky): p(x | y) on the support
    return float(-np.where(pos, p * np.log(cond), 0.0).sum())


def mutual_information(joint) -> float:
    """I(X; Y) = KL(p(x, y) || p(x) p(y)). Implements eq. 7.4. joint: (Kx, Ky)."""
    p = _joint2d(joint)
    product = p.sum(axis=1)[:, None] * p.sum(axis=0)[None, :]  # (Kx, Ky): p(x) p(y)
    return float(kl_divergence(p.reshape(-1), product.reshape(-1)))  # flatten: one distribution


# --- eq. 7.5: Monte Carlo estimators of KL(q || p) from samples of q -----------------------------


def kl_k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per-sample estimator k1 = -log r of KL(q || p), x ~ q. log_ratio: (...) log r."""
    return -finite_or_neg_inf(float_tensor(log_ratio, "log_ratio"), "log_ratio")


def kl_k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per-sample estimator (r - 1) - log r of KL(q || p), stable in u = log r. Implements eq. 7.5.

    log_ratio: (...) u at samples x ~ q; Taylor series for |u| < 0.1. Returns (...) >= 0."""
    u = finite_or_neg_inf(float_tensor(log_ratio, "log_ratio"), "log_ratio")
    small = u.abs() < 0.1
    us = torch.where(small, u, torch.zeros_like(u))  # series branch sees only small values
    ub = torch.where(small, torch.ones_like(u), u)  # expm1 branch never sees the small ones
    series = torch.ones_like(u)
    for n in range(10, 2, -1):  # Horner: 1 + u/3 (1 + u/4 (1 + ... (1 + u/10)))
        series = 1 + us / n * series
    series = us * us / 2 * series
    return torch.where(small, series, torch.expm1(ub) - ub)


def kl_k3_naive(ratio: torch.Tensor) -> torch.Tensor:
    """Naive reference for :func:`kl_k3`: (r - 1) - log r from ratio r (...) >= 0 (eq. 7.5)."""
    float_tensor(ratio, "ratio", all_finite=True)
    if (ratio < 0).any():
        raise ValueError("ratio must be non-negative")
    return (ratio - 1) - torch.log(ratio)
