"""Information theory: surprisal, entropy, cross-entropy, KL divergence, perplexity, mutual
information and a Monte Carlo estimator of KL (formula sheet, chapter 7).

Every quantity is in **nats**: logarithms are natural. Divide by log 2 (:func:`to_bits`) for bits.
Conventions at the edge of the support follow the limits: 0 log 0 = 0, and a term p log(p/0)
with p > 0 is +inf (a model that gives probability 0 to an observed outcome is infinitely
surprised).

Shape legend
    K         number of outcomes of a discrete variable (classes, vocabulary)
    ...       any leading batch axes; functions on distributions reduce over the last axis
    N         number of tokens in a stream, or of Monte Carlo samples
    (Kx, Ky)  a joint probability table p(x, y), x along axis 0 and y along axis 1

Probability tables are NumPy arrays (exact enumeration); token streams, model log-probabilities
and Monte Carlo samples are torch tensors (batched, differentiable). Every public function
validates its input and raises ``ValueError``/``TypeError`` naming the offending shape or value.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .probability import validate_distribution

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


def _table(p, name: str) -> np.ndarray:
    """Validate (..., K) probabilities that sum to one over the last axis; return float64."""
    if np.ndim(p) < 1:
        raise ValueError(f"{name} must have at least one axis (..., K), got a scalar")
    return validate_distribution(p, axis=-1, name=name)


def _scalar_or_array(x: np.ndarray):
    return float(x) if np.ndim(x) == 0 else x


def to_bits(nats):
    """Convert an information quantity from nats to bits: divide by log 2 (1 bit = 0.693 nats)."""
    return _scalar_or_array(np.asarray(nats, dtype=np.float64) / math.log(2))


# --- eq. 7.1: surprisal and entropy ------------------------------------------------------------


def surprisal(p):
    """The information content I(x) = -log p(x) of outcomes with probabilities p (eq. 7.1).

    Args:
        p: probabilities in [0, 1], any shape (they need not sum to one: each is one outcome's).

    Returns:
        -log p elementwise, in nats; +inf where p = 0. A float for a scalar input.
    """
    arr = np.asarray(p.detach().cpu().double() if isinstance(p, torch.Tensor) else p)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"p must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or (arr.size > 0 and (arr.min() < 0 or arr.max() > 1)):
        raise ValueError("probabilities must lie in [0, 1]; got values outside it or non-finite")
    with np.errstate(divide="ignore"):
        return _scalar_or_array(-np.log(arr))


def entropy(p):
    """Shannon entropy H(p) = -sum_x p(x) log p(x) over the last axis, in nats (eq. 7.1).

    Terms with p(x) = 0 contribute 0 (the limit of -t log t as t -> 0). The result lies in
    [0, log K]: 0 for a point mass, log K exactly for the uniform distribution.

    Args:
        p: (..., K) probabilities summing to one over the last axis.

    Returns:
        (...) entropies; a float for a single (K,) distribution.
    """
    arr = _table(p, "p")
    pos = arr > 0
    terms = np.where(pos, arr * np.log(np.where(pos, arr, 1.0)), 0.0)  # (..., K): p log p
    return _scalar_or_array(-terms.sum(axis=-1))


# --- eq. 7.2: cross-entropy and KL divergence ----------------------------------------------------


def _pair(p, q) -> tuple[np.ndarray, np.ndarray]:
    a, b = _table(p, "p"), _table(q, "q")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"p and q must have the same number of outcomes K on the last axis, "
            f"got shapes {a.shape} and {b.shape}"
        )
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"p {a.shape} and q {b.shape} do not broadcast") from None
    return np.broadcast_to(a, shape), np.broadcast_to(b, shape)


def cross_entropy(p, q):
    """Cross-entropy H(p, q) = -sum_x p(x) log q(x) over the last axis, in nats (eq. 7.2).

    The expected surprisal of outcomes drawn from p when they are coded (or predicted) with q.
    Terms with p(x) = 0 contribute 0; a term with p(x) > 0 and q(x) = 0 makes it +inf.

    Args:
        p: (..., K) the distribution the outcomes come from.
        q: (..., K) the model; leading axes broadcast against p's.

    Returns:
        (...) cross-entropies; a float when both are (K,).
    """
    a, b = _pair(p, q)
    pos = a > 0
    with np.errstate(divide="ignore"):
        log_q = np.log(b)  # (..., K), -inf where q = 0
    terms = np.where(pos, -a * np.where(pos, log_q, 0.0), 0.0)
    return _scalar_or_array(terms.sum(axis=-1))


def kl_divergence(p, q):
    """Kullback-Leibler divergence KL(p || q) = sum_x p(x) log(p(x) / q(x)), in nats (eq. 7.2).

    Computed directly from the log-ratio, not as H(p, q) - H(p), so that the identity
    H(p, q) = H(p) + KL(p || q) can be checked. Non-negative, zero exactly when p = q, not
    symmetric; +inf when q(x) = 0 for some x with p(x) > 0.

    Args:
        p, q: (..., K) distributions over the same K outcomes; leading axes broadcast.

    Returns:
        (...) divergences; a float when both are (K,).
    """
    a, b = _pair(p, q)
    pos = a > 0
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.where(pos, a, 1.0)) - np.log(b)  # (..., K), +inf where q = 0 < p
    terms = np.where(pos, a * np.where(pos, log_ratio, 0.0), 0.0)
    return _scalar_or_array(terms.sum(axis=-1))


# --- eq. 7.3: cross-entropy of a model on data, perplexity ---------------------------------------


def _tokens(tokens, k: int | None = None) -> torch.Tensor:
    t = torch.as_tensor(tokens) if isinstance(tokens, (np.ndarray, list)) else tokens
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tokens must be a tensor, array or list, got {type(tokens).__name__}")
    if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"tokens must be integers, got dtype {t.dtype}")
    if t.ndim != 1 or t.numel() == 0:
        raise ValueError(f"tokens must be a non-empty (N,) sequence, got shape {tuple(t.shape)}")
    if k is not None and (int(t.min()) < 0 or int(t.max()) >= k):
        raise ValueError(f"tokens must lie in [0, {k}), got range [{int(t.min())}, {int(t.max())}]")
    return t.long()


def empirical_distribution(tokens, k: int) -> np.ndarray:
    """The empirical distribution p_hat(x) = (number of i with x_i = x) / N (eq. 7.3).

    Args:
        tokens: (N,) integer tokens in [0, k).
        k: the vocabulary size K.

    Returns:
        (K,) float64 frequencies summing to one.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    t = _tokens(tokens, k)
    counts = np.bincount(t.cpu().numpy(), minlength=k).astype(np.float64)
    return counts / counts.sum()


def sequence_nll(log_probs: torch.Tensor, tokens) -> torch.Tensor:
    """Mean negative log-likelihood of a token stream, -(1/N) sum_i log q(x_i) (eq. 7.3).

    This is the cross-entropy per token. For a model without context (one distribution q for
    every position) it equals H(p_hat, q) with p_hat the stream's empirical distribution. For an
    autoregressive model, row i holds q(. | x_<i) and the sum is the chain rule's log-probability
    of the whole stream (eq. 6.2) divided by N.

    Args:
        log_probs: (K,) one log-distribution for every position, or (N, K) one per position;
            each row must be normalised (logsumexp = 0). -inf is allowed (probability 0).
        tokens: (N,) integer tokens in [0, K).

    Returns:
        0-d tensor in log_probs' dtype, in nats per token.
    """
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point():
        raise TypeError("log_probs must be a floating-point torch.Tensor")
    if log_probs.ndim not in (1, 2) or log_probs.shape[-1] < 1:
        raise ValueError(f"log_probs must be (K,) or (N, K), got shape {tuple(log_probs.shape)}")
    k = log_probs.shape[-1]
    t = _tokens(tokens, k).to(log_probs.device)
    if log_probs.ndim == 2 and log_probs.shape[0] != t.shape[0]:
        raise ValueError(f"log_probs has {log_probs.shape[0]} rows for {t.shape[0]} tokens")
    if torch.isnan(log_probs).any() or (log_probs == math.inf).any():
        raise ValueError("log_probs must not contain NaN or +inf")
    tol = (
        1e-8
        if log_probs.dtype == torch.float64
        else 1e-4
        if log_probs.dtype == torch.float32
        else 1e-2
    )
    lse = torch.logsumexp(log_probs.detach(), dim=-1)  # () or (N,): 0 for normalised rows
    if (lse.abs() > tol).any():
        raise ValueError(
            f"rows of log_probs must be log-normalised (logsumexp = 0); "
            f"worst logsumexp {float(lse.abs().max()):.3g}"
        )
    if log_probs.ndim == 1:
        picked = log_probs[t]  # (N,): the same distribution at every position
    else:
        picked = log_probs.gather(1, t[:, None]).squeeze(1)  # (N, 1) -> (N,)
    return -picked.mean()


def perplexity(log_probs: torch.Tensor, tokens) -> torch.Tensor:
    """Perplexity PPL = exp(cross-entropy per token) of a model on a token stream (eq. 7.3).

    The number of equally likely choices that would leave the model as uncertain on average:
    the uniform model over K tokens has perplexity exactly K. Arguments as in
    :func:`sequence_nll`; returns a 0-d tensor.
    """
    return torch.exp(sequence_nll(log_probs, tokens))


def stationary_distribution(transition) -> np.ndarray:
    """The stationary distribution pi = pi T of an irreducible Markov chain.

    Solves the linear system (T^T - I) pi = 0 together with sum(pi) = 1 by least squares.

    Args:
        transition: (K, K) row-stochastic, transition[i, j] = p(x_t = j | x_{t-1} = i).

    Returns:
        (K,) float64 stationary probabilities. Raises if the chain has no unique one.
    """
    tr = validate_distribution(transition, axis=1, name="transition")
    if tr.ndim != 2 or tr.shape[0] != tr.shape[1]:
        raise ValueError(f"transition must be square (K, K), got shape {tr.shape}")
    k = tr.shape[0]
    system = np.vstack([tr.T - np.eye(k), np.ones((1, k))])  # (K + 1, K)
    rhs = np.concatenate([np.zeros(k), [1.0]])  # (K + 1,)
    if np.linalg.matrix_rank(system) < k:
        raise ValueError("the chain has no unique stationary distribution (it is reducible)")
    pi = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return np.clip(pi, 0.0, None) / np.clip(pi, 0.0, None).sum()


def markov_entropy_rate(transition) -> float:
    """Entropy rate of a stationary Markov chain: sum_i pi_i H(T[i, :]), in nats per step.

    By the chain rule of entropy, H(x_1..x_n) = H(pi) + (n - 1) * rate for a chain started in
    its stationary distribution pi, so the rate is the entropy per token in the long run: the
    cross-entropy per token (eq. 7.3) that no model of the stream can beat on average.

    Args:
        transition: (K, K) row-stochastic transition matrix of an irreducible chain.
    """
    pi = stationary_distribution(transition)
    rows = entropy(np.asarray(transition, dtype=np.float64))  # (K,): H(x_t | x_{t-1} = i)
    return float(pi @ rows)


# --- eq. 7.4: conditional entropy and mutual information -----------------------------------------


def _joint2d(joint) -> np.ndarray:
    p = validate_distribution(joint, name="joint")
    if p.ndim != 2:
        raise ValueError(f"joint must be a 2-D table (Kx, Ky), got shape {p.shape}")
    return p


def conditional_entropy(joint, given: int = 1) -> float:
    """Conditional entropy H(X | Y) = -sum_{x,y} p(x, y) log p(x | y), in nats (eq. 7.4).

    The average over y of the entropy of p(x | y). Computed directly from p(x, y) / p(y), not as
    H(X, Y) - H(Y), so the chain rule of entropy can be checked against it.

    Args:
        joint: (Kx, Ky) joint probabilities p(x, y).
        given: the axis of the conditioning variable: 1 gives H(X | Y), 0 gives H(Y | X).
    """
    p = _joint2d(joint)
    if given not in (0, 1):
        raise ValueError(f"given must be 0 or 1, got {given!r}")
    p_given = p.sum(axis=1 - given, keepdims=True)  # (1, Ky) for given=1, (Kx, 1) for given=0
    pos = p > 0  # where p(x, y) > 0, also p(given) > 0
    cond = np.where(pos, p, 1.0) / np.where(pos, p_given, 1.0)  # (Kx, Ky): p(x | y) on the support
    return float(-np.where(pos, p * np.log(cond), 0.0).sum())


def mutual_information(joint) -> float:
    """Mutual information I(X; Y) = KL(p(x, y) || p(x) p(y)), in nats (eq. 7.4).

    How far the joint is from the product of its marginals; zero exactly when X and Y are
    independent. Equals H(X) - H(X | Y) = H(Y) - H(Y | X).

    Args:
        joint: (Kx, Ky) joint probabilities p(x, y).
    """
    p = _joint2d(joint)
    product = p.sum(axis=1)[:, None] * p.sum(axis=0)[None, :]  # (Kx, Ky): p(x) p(y)
    return float(kl_divergence(p.reshape(-1), product.reshape(-1)))  # flatten: one distribution


# --- eq. 7.5: Monte Carlo estimators of KL(q || p) from samples of q -----------------------------


def _log_ratio(log_ratio) -> torch.Tensor:
    if not isinstance(log_ratio, torch.Tensor) or not log_ratio.is_floating_point():
        raise TypeError("log_ratio must be a floating-point torch.Tensor of log(p(x) / q(x))")
    if torch.isnan(log_ratio).any() or (log_ratio == math.inf).any():
        raise ValueError(
            "log_ratio = log p(x) - log q(x) must not be NaN or +inf "
            "(x is drawn from q, so q(x) > 0)"
        )
    return log_ratio


def kl_k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per-sample plain estimator of KL(q || p): k1 = -log r = log(q(x) / p(x)), x ~ q.

    Unbiased, because KL(q || p) = E_q[log(q / p)], but individual samples are negative whenever
    p(x) > q(x), and its variance is large when q and p are close.

    Args:
        log_ratio: (...) log r = log p(x) - log q(x) at samples x ~ q.

    Returns:
        (...) per-sample estimates, same dtype.
    """
    return -_log_ratio(log_ratio)


def kl_k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per-sample estimator (r - 1) - log r of KL(q || p), r = p(x) / q(x), x ~ q (eq. 7.5).

    Unbiased, because E_q[r] = sum_x p(x) = 1 makes r - 1 a zero-mean control variate added to
    k1 = -log r. Never negative, because log r <= r - 1. Computed stably from u = log r as
    expm1(u) - u, and for |u| < 0.1 by the series sum_{n=2..10} u^n / n!, since for small u the
    difference of two numbers close to u cancels almost every digit (see :func:`kl_k3_naive`).
    Differentiable: d k3 / d u = r - 1.

    Args:
        log_ratio: (...) u = log p(x) - log q(x) at samples x ~ q; -inf (p(x) = 0) gives +inf.

    Returns:
        (...) non-negative per-sample estimates, same dtype.
    """
    u = _log_ratio(log_ratio)
    small = u.abs() < 0.1
    us = torch.where(small, u, torch.zeros_like(u))  # series branch sees only small values
    ub = torch.where(small, torch.ones_like(u), u)  # expm1 branch never sees the small ones
    series = torch.ones_like(u)
    for n in range(10, 2, -1):  # Horner: 1 + u/3 (1 + u/4 (1 + ... (1 + u/10)))
        series = 1 + us / n * series
    series = us * us / 2 * series
    return torch.where(small, series, torch.expm1(ub) - ub)


def kl_k3_naive(ratio: torch.Tensor) -> torch.Tensor:
    """The sheet's formula (r - 1) - log r taken literally, from the ratio r itself (eq. 7.5).

    The naive reference for :func:`kl_k3`: correct in exact arithmetic, but for r close to 1 the
    two terms agree in their leading digits and their difference (about (log r)^2 / 2) loses them;
    its relative error is about 2 eps / |log r| (eps the machine epsilon), which in float32
    leaves no correct digit once |log r| nears eps.

    Args:
        ratio: (...) r = p(x) / q(x) > 0 at samples x ~ q.
    """
    if not isinstance(ratio, torch.Tensor) or not ratio.is_floating_point():
        raise TypeError("ratio must be a floating-point torch.Tensor of p(x) / q(x)")
    if torch.isnan(ratio).any() or (ratio < 0).any() or (ratio == math.inf).any():
        raise ValueError("ratio = p(x) / q(x) must be finite and non-negative")
    return (ratio - 1) - torch.log(ratio)
