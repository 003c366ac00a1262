"""Probability theory: the rules every later chapter leans on (formula sheet, chapter 6).

Shape legend
    K      number of outcomes of a discrete variable (categories, vocabulary)
    N      number of samples or data points
    T      sequence length
    (K1, K2, ...)  a joint probability table, one axis per variable

Functions take and return NumPy arrays (probability tables, exact enumeration) or torch tensors
(anything that is differentiated or sampled in bulk). Every public function validates its input
and raises ``ValueError``/``TypeError`` naming the offending shape or value.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

__all__ = [
    "validate_distribution",
    "interval_probability",
    "marginal",
    "conditional",
    "bayes_posterior",
    "chain_rule_factors",
    "chain_rule_joint",
    "markov_sequence_log_prob",
    "expectation",
    "variance",
    "score_function_grad",
    "pathwise_grad",
    "gaussian_nll",
    "categorical_nll",
    "gumbel_noise",
    "gumbel_max_sample",
]

_ATOL = 1e-6  # how far from 1 a probability table may sum (float32 tables pass too)


def validate_distribution(p, axis: int | tuple[int, ...] | None = None, name: str = "p"):
    """Check that ``p`` is a probability table: finite, non-negative, summing to 1 over ``axis``.

    Args:
        p: array of probabilities, any shape.
        axis: the axes that sum to one (``None``: all of them).
        name: how the argument is called in error messages.

    Returns:
        ``p`` as a float64 NumPy array.
    """
    if isinstance(p, torch.Tensor):
        p = p.detach().cpu().double().numpy()
    arr = np.asarray(p)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise ValueError(f"{name} must be finite and non-negative; min is {arr.min()!r}")
    sums = arr.sum(axis=axis)
    if not np.allclose(sums, 1.0, atol=_ATOL, rtol=0):
        worst = float(np.max(np.abs(np.asarray(sums) - 1)))
        raise ValueError(
            f"{name} (shape {arr.shape}) must sum to 1 over axis {axis}; off by up to {worst:.3g}"
        )
    return arr


# --- eq. 6.1: densities, conditioning, Bayes -------------------------------------------------


def interval_probability(
    pdf: Callable[[np.ndarray], np.ndarray], a: float, b: float, n: int = 2001
) -> float:
    """P(a < X < b) = integral of the density from a to b, by composite Simpson's rule.

    Implements the first part of eq. 6.1.

    Args:
        pdf: vectorised density ``p(x)``.
        a, b: the interval, ``a < b``, both finite.
        n: number of grid points (odd, at least 3); Simpson's error is O(((b-a)/n)^4).
    """
    if not (math.isfinite(a) and math.isfinite(b)) or not a < b:
        raise ValueError(f"need finite a < b, got a={a}, b={b}")
    if n < 3 or n % 2 == 0:
        raise ValueError(f"n must be odd and >= 3 for Simpson's rule, got {n}")
    x = np.linspace(a, b, n)
    y = np.asarray(pdf(x), dtype=np.float64)
    if y.shape != x.shape:
        raise ValueError(f"pdf must map shape {x.shape} to the same shape, got {y.shape}")
    if np.any(y < 0):
        raise ValueError("pdf returned negative values: not a density")
    h = (b - a) / (n - 1)
    return float(h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()))


def marginal(joint, keep: int | tuple[int, ...]) -> np.ndarray:
    """Sum a joint table over every axis except ``keep`` (the sum rule).

    Args:
        joint: (K1, K2, ...) joint probabilities.
        keep: the axis or axes to keep, in the order given.
    """
    p = validate_distribution(joint, name="joint")
    keep_t = (keep,) if isinstance(keep, int) else tuple(keep)
    if any(not -p.ndim <= k < p.ndim for k in keep_t):
        raise ValueError(f"keep={keep} is out of range for a table with {p.ndim} axes")
    keep_t = tuple(k % p.ndim for k in keep_t)
    if len(set(keep_t)) != len(keep_t):
        raise ValueError(f"keep={keep} repeats an axis")
    drop = tuple(ax for ax in range(p.ndim) if ax not in keep_t)
    m = p.sum(axis=drop)  # axes of m are keep_t in increasing order
    order = np.argsort(np.argsort(keep_t))
    return np.transpose(m, order) if m.ndim > 1 else m


def conditional(joint, given: int) -> np.ndarray:
    """p(y | x) = p(x, y) / p(x) for a 2-D table whose axis ``given`` is x (eq. 6.1).

    Args:
        joint: (Kx, Ky) if ``given == 0``, (Ky, Kx) if ``given == 1``.
        given: the axis of the conditioning variable.

    Returns:
        A table of the same shape whose slices along the other axis sum to 1. Rows with
        p(x) = 0 have no conditional and raise.
    """
    p = validate_distribution(joint, name="joint")
    if p.ndim != 2:
        raise ValueError(f"conditional expects a 2-D joint table, got shape {p.shape}")
    if given not in (0, 1):
        raise ValueError(f"given must be 0 or 1, got {given}")
    px = p.sum(axis=1 - given, keepdims=True)  # (Kx, 1) or (1, Kx)
    if np.any(px == 0):
        raise ValueError("p(x) = 0 for some x: the conditional p(y | x) is undefined there")
    return p / px


def bayes_posterior(prior, likelihood) -> np.ndarray:
    """p(h | e) proportional to p(e | h) p(h), normalised over h (eq. 6.1, Bayes' rule).

    Args:
        prior: (H,) p(h).
        likelihood: (H,) p(e | h) for the observed evidence e (need not sum to 1).
    """
    pr = validate_distribution(prior, name="prior")
    lik = np.asarray(likelihood, dtype=np.float64)
    if pr.ndim != 1 or lik.shape != pr.shape:
        raise ValueError(f"prior and likelihood must both be (H,), got {pr.shape} and {lik.shape}")
    if np.any(lik < 0) or not np.all(np.isfinite(lik)):
        raise ValueError("likelihood values must be finite and non-negative")
    unnorm = lik * pr
    z = unnorm.sum()
    if z == 0:
        raise ValueError("the evidence has probability 0 under every hypothesis")
    return unnorm / z


# --- eq. 6.2: the chain rule -------------------------------------------------------------------


def chain_rule_factors(joint) -> list[np.ndarray]:
    """Factor a joint table p(x_1, ..., x_T) into conditionals p(x_t | x_<t) (eq. 6.2).

    Args:
        joint: (K1, ..., KT) joint probabilities.

    Returns:
        T arrays; factor t has shape (K1, ..., Kt) and holds p(x_t | x_1..x_{t-1}). Prefixes with
        probability 0 get a uniform conditional (any choice multiplies to the same zero).
    """
    p = validate_distribution(joint, name="joint")
    factors = []
    prefix_prev = np.ones(())  # p(empty prefix) = 1
    for t in range(p.ndim):
        prefix = p.sum(axis=tuple(range(t + 1, p.ndim)))  # (K1..Kt): p(x_1..x_t)
        denom = prefix_prev[..., None]  # (K1..K_{t-1}, 1)
        k = prefix.shape[-1]
        factors.append(
            np.divide(prefix, denom, out=np.full(prefix.shape, 1.0 / k), where=denom > 0)
        )
        prefix_prev = prefix
    return factors


def chain_rule_joint(factors: list) -> np.ndarray:
    """Multiply conditionals back into the joint: p(x_1..x_T) = prod_t p(x_t | x_<t) (eq. 6.2)."""
    if not factors:
        raise ValueError("need at least one factor")
    joint = np.ones(())
    for t, f in enumerate(factors):
        f = np.asarray(f, dtype=np.float64)
        if f.ndim != t + 1 or f.shape[:-1] != joint.shape:
            raise ValueError(f"factor {t} must have shape {joint.shape + ('K',)}, got {f.shape}")
        validate_distribution(f, axis=-1, name=f"factor {t}")
        joint = joint[..., None] * f
    return joint


def markov_sequence_log_prob(initial, transition, seq) -> float:
    """log p(x_1..x_T) = log p(x_1) + sum_t log p(x_t | x_{t-1}) for a first-order Markov chain.

    The chain rule (eq. 6.2) with the Markov assumption p(x_t | x_<t) = p(x_t | x_{t-1}).

    Args:
        initial: (K,) p(x_1).
        transition: (K, K) row-stochastic, transition[i, j] = p(x_t = j | x_{t-1} = i).
        seq: (T,) integer states in [0, K).
    """
    pi = validate_distribution(initial, name="initial")
    tr = validate_distribution(transition, axis=1, name="transition")
    if pi.ndim != 1 or tr.shape != (pi.size, pi.size):
        raise ValueError(f"initial must be (K,) and transition (K, K); got {pi.shape}, {tr.shape}")
    s = np.asarray(seq)
    if s.ndim != 1 or s.size == 0 or not np.issubdtype(s.dtype, np.integer):
        raise ValueError(
            f"seq must be a non-empty 1-D integer array, got shape {s.shape}, dtype {s.dtype}"
        )
    if s.min() < 0 or s.max() >= pi.size:
        raise ValueError(f"states must lie in [0, {pi.size}), got range [{s.min()}, {s.max()}]")
    with np.errstate(divide="ignore"):
        return float(np.log(pi[s[0]]) + np.log(tr[s[:-1], s[1:]]).sum())


# --- eq. 6.3: expectation and variance ----------------------------------------------------------


def expectation(values, probs) -> float:
    """E[X] = sum_x x p(x) by exact enumeration (eq. 6.3). values, probs: (K,)."""
    p = validate_distribution(probs, name="probs")
    v = np.asarray(values, dtype=np.float64)
    if v.shape != p.shape:
        raise ValueError(f"values {v.shape} and probs {p.shape} must have the same shape")
    return float((v * p).sum())


def variance(values, probs) -> float:
    """Var[X] = E[X^2] - E[X]^2 by exact enumeration (eq. 6.3). values, probs: (K,).

    Computed in the numerically safer centred form E[(X - E X)^2], which equals the sheet's
    E[X^2] - E[X]^2 exactly in real arithmetic.
    """
    mu = expectation(values, probs)
    v = np.asarray(values, dtype=np.float64)
    return float((np.asarray(probs, dtype=np.float64) * (v - mu) ** 2).sum())


# --- eq. 6.4: the score-function gradient ---------------------------------------------------------


def _gaussian_params(mu, sigma):
    mu_t = torch.as_tensor(mu, dtype=torch.float64)
    sigma_t = torch.as_tensor(sigma, dtype=torch.float64)
    if mu_t.ndim != 0 or sigma_t.ndim != 0:
        raise ValueError(
            f"mu and sigma must be scalars, got shapes {tuple(mu_t.shape)}, {tuple(sigma_t.shape)}"
        )
    if not float(sigma_t) > 0:
        raise ValueError(f"sigma must be positive, got {float(sigma_t)}")
    return mu_t, sigma_t


def score_function_grad(
    f: Callable[[torch.Tensor], torch.Tensor],
    mu: float,
    sigma: float,
    n: int,
    generator: torch.Generator,
    baseline: float = 0.0,
) -> torch.Tensor:
    """Per-sample score-function (REINFORCE) estimates of d/d(mu, sigma) E_{N(mu, sigma^2)}[f(x)].

    Implements eq. 6.4: grad E[f(x)] = E[f(x) grad log p(x)], with the Gaussian score
    d/dmu log p = (x - mu)/sigma^2 and d/dsigma log p = ((x - mu)^2 - sigma^2)/sigma^3.
    Needs only values of f, never its derivative. Subtracting a constant ``baseline`` b from f
    keeps the estimator unbiased, because E[grad log p] = 0, and can shrink its variance.

    Returns:
        (n, 2) float64 tensor: column 0 estimates the mu-gradient, column 1 the sigma-gradient.
    """
    mu_t, sigma_t = _gaussian_params(mu, sigma)
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    eps = torch.randn(n, generator=generator, dtype=torch.float64)  # (n,)
    x = mu_t + sigma_t * eps
    fx = f(x)
    if fx.shape != x.shape:
        raise ValueError(
            f"f must map shape {tuple(x.shape)} to the same shape, got {tuple(fx.shape)}"
        )
    score = torch.stack(
        [(x - mu_t) / sigma_t**2, ((x - mu_t) ** 2 - sigma_t**2) / sigma_t**3], dim=1
    )  # (n, 2)
    return (fx - baseline)[:, None] * score


def pathwise_grad(
    f: Callable[[torch.Tensor], torch.Tensor],
    mu: float,
    sigma: float,
    n: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Per-sample pathwise (reparameterisation) estimates of d/d(mu, sigma) E[f(x)].

    Writes x = mu + sigma * eps with eps ~ N(0, 1) and differentiates f(x) through x with
    autograd: d/dmu = f'(x), d/dsigma = f'(x) eps. The reference estimator that eq. 6.4 is
    compared with.

    Returns:
        (n, 2) float64 tensor, columns as in :func:`score_function_grad`.
    """
    mu_t, sigma_t = _gaussian_params(mu, sigma)
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    eps = torch.randn(n, generator=generator, dtype=torch.float64)  # (n,)
    x = (mu_t + sigma_t * eps).requires_grad_(True)
    fx = f(x)
    if fx.shape != x.shape:
        raise ValueError(
            f"f must map shape {tuple(x.shape)} to the same shape, got {tuple(fx.shape)}"
        )
    (dfdx,) = torch.autograd.grad(fx.sum(), x)  # (n,): samples are independent
    return torch.stack([dfdx, dfdx * eps], dim=1).detach()


# --- eq. 6.5: maximum likelihood ----------------------------------------------------------------


def gaussian_nll(y: torch.Tensor, mean: torch.Tensor, sigma: float | torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of y under N(mean, sigma^2) (eq. 6.5).

    -(1/N) sum_i log N(y_i; mean_i, sigma^2) = (1/N) sum_i (y_i - mean_i)^2 / (2 sigma^2)
    + log(sigma sqrt(2 pi)). With sigma fixed, minimising it is minimising the MSE.

    Args:
        y, mean: (N,) targets and predicted means.
        sigma: noise scale, positive scalar or (N,).
    """
    if y.shape != mean.shape or y.ndim != 1:
        raise ValueError(f"y and mean must both be (N,), got {tuple(y.shape)}, {tuple(mean.shape)}")
    s = torch.as_tensor(sigma, dtype=y.dtype)
    if torch.any(s <= 0):
        raise ValueError("sigma must be positive")
    return (0.5 * ((y - mean) / s) ** 2 + torch.log(s) + 0.5 * math.log(2 * math.pi)).mean()


def categorical_nll(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of class labels under softmax(logits) (eq. 6.5).

    -(1/N) sum_i log softmax(z_i)[y_i] = (1/N) sum_i (logsumexp(z_i) - z_{i, y_i}),
    which is the cross-entropy loss.

    Args:
        logits: (N, K) unnormalised scores.
        y: (N,) integer labels in [0, K).
    """
    if logits.ndim != 2 or y.ndim != 1 or y.shape[0] != logits.shape[0]:
        raise ValueError(
            f"need logits (N, K) and y (N,), got {tuple(logits.shape)}, {tuple(y.shape)}"
        )
    if y.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"y must hold integer labels, got {y.dtype}")
    if y.numel() and (y.min() < 0 or y.max() >= logits.shape[1]):
        raise ValueError(
            f"labels must lie in [0, {logits.shape[1]}), got [{int(y.min())}, {int(y.max())}]"
        )
    m = logits.max(dim=1, keepdim=True).values  # (N, 1): shift for stability
    lse = m.squeeze(1) + torch.log(torch.exp(logits - m).sum(dim=1))  # (N,)
    return (lse - logits.gather(1, y[:, None]).squeeze(1)).mean()


# --- eq. 6.6: the Gumbel-max trick ----------------------------------------------------------------


def gumbel_noise(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Standard Gumbel noise g = -log(-log u), u ~ Uniform(0, 1) (eq. 6.6).

    u is drawn from the open interval (tiny, 1) so that neither logarithm sees 0.
    """
    tiny = torch.finfo(dtype).tiny
    u = torch.rand(shape, generator=generator, dtype=dtype).clamp_(min=tiny, max=1 - 1e-16)
    return -torch.log(-torch.log(u))


def gumbel_max_sample(logits: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Draw n categorical samples as argmax_k (z_k + g_k) (eq. 6.6).

    Args:
        logits: (K,) unnormalised log-probabilities z.
        n: number of samples.

    Returns:
        (n,) int64 indices distributed as softmax(z).
    """
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.ndim != 1 or logits.numel() < 2:
        raise ValueError(f"logits must be (K,) with K >= 2, got shape {tuple(logits.shape)}")
    if not torch.all(torch.isfinite(logits)):
        raise ValueError("logits must be finite")
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    g = gumbel_noise((n, logits.numel()), generator, dtype=torch.float64)  # (n, K)
    return torch.argmax(logits.double()[None, :] + g, dim=1)
