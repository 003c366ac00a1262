"""Probability theory: the rules every later chapter leans on (chapter 6).

Shape legend
    K      number of outcomes of a discrete variable (categories, vocabulary)
    N      number of samples or data points
    T      sequence length
    (K1, K2, ...)  a joint probability table, one axis per variable

Probability tables are NumPy float64 arrays (exact enumeration); anything differentiated or
sampled in bulk is a torch tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ..validation import (
    distribution,
    float_array,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_entries,
    positive_int,
    same_shape,
    shape_is,
)

__all__ = [
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


# --- eq. 6.1: densities, conditioning, Bayes -------------------------------------------------


def interval_probability(
    pdf: Callable[[np.ndarray], np.ndarray], a: float, b: float, n: int = 2001
) -> float:
    """P(a < X < b) by composite Simpson's rule. Implements eq. 6.1.

    pdf: vectorised density; a < b finite; n: odd number of grid points >= 3."""
    a, b = number(a, "a"), number(b, "b", low=a, open_low=True)
    if integer(n, "n", low=3) % 2 == 0:
        raise ValueError(f"n must be odd for Simpson's rule, got {n}")
    x = np.linspace(a, b, n)
    y = shape_is(np.asarray(pdf(x), dtype=np.float64), "pdf(x)", x.shape)
    if np.any(y < 0):
        raise ValueError("pdf(x) must be non-negative: a density")
    h = (b - a) / (n - 1)
    return float(h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()))


def marginal(joint, keep: int | tuple[int, ...]) -> np.ndarray:
    """Sum a (K1, K2, ...) joint table over every axis except ``keep`` (the sum rule)."""
    p = float_array(joint, "joint")
    distribution(torch.from_numpy(p).flatten(), "joint")
    keep_t = (keep,) if isinstance(keep, int) else tuple(keep)
    keep_t = tuple(integer(k, "keep", -p.ndim, p.ndim - 1) % p.ndim for k in keep_t)
    if len(set(keep_t)) != len(keep_t):
        raise ValueError(f"keep must not repeat an axis, got {keep}")
    drop = tuple(ax for ax in range(p.ndim) if ax not in keep_t)
    m = p.sum(axis=drop)  # axes of m are keep_t in increasing order
    order = np.argsort(np.argsort(keep_t))
    return np.transpose(m, order) if m.ndim > 1 else m


def conditional(joint, given: int) -> np.ndarray:
    """p(y | x) = p(x, y) / p(x). Implements eq. 6.1.

    joint: (Kx, Ky) if ``given == 0``, (Ky, Kx) if ``given == 1``. Returns the same shape."""
    p = float_array(joint, "joint")
    distribution(float_tensor(torch.from_numpy(p), "joint", ndim=2).flatten(), "joint")
    px = p.sum(axis=1 - one_of(given, "given", (0, 1)), keepdims=True)  # (Kx, 1) or (1, Kx)
    if np.any(px == 0):
        raise ValueError("joint has p(x) = 0 for some x: p(y | x) is undefined there")
    return p / px


def bayes_posterior(prior, likelihood) -> np.ndarray:
    """p(h | e) = p(e | h) p(h) / sum_h' p(e | h') p(h') (Bayes' rule, eq. 6.1).

    prior: (H,); likelihood: (H,) p(e | h), need not sum to 1. Returns (H,)."""
    pr = float_array(prior, "prior")
    distribution(float_tensor(torch.from_numpy(pr), "prior", ndim=1), "prior")
    lik = shape_is(float_array(likelihood, "likelihood"), "likelihood", pr.shape)
    if np.any(lik < 0) or not np.all(np.isfinite(lik)):
        raise ValueError("likelihood must be finite and non-negative")
    unnorm = lik * pr
    z = unnorm.sum()
    if z == 0:
        raise ValueError("likelihood: the evidence has probability 0 under every hypothesis")
    return unnorm / z


# --- eq. 6.2: the chain rule -------------------------------------------------------------------


def chain_rule_factors(joint) -> list[np.ndarray]:
    """Factor a (K1, ..., KT) joint into conditionals p(x_t | x_<t). Implements eq. 6.2.

    Returns T arrays, factor t of shape (K1, ..., Kt); zero-probability prefixes: uniform."""
    p = float_array(joint, "joint")
    distribution(torch.from_numpy(p).flatten(), "joint")
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
    """p(x_1..x_T) = prod_t p(x_t | x_<t), from factors t of shape (K1, ..., Kt) (eq. 6.2)."""
    if not factors:
        raise ValueError("factors must not be empty")
    joint = np.ones(())
    for t, f in enumerate(factors):
        f = float_array(f, f"factor {t}")
        shape_is(f, f"factor {t}", joint.shape + (None,))
        distribution(torch.from_numpy(f), f"factor {t}")
        joint = joint[..., None] * f
    return joint


def markov_sequence_log_prob(initial, transition, seq) -> float:
    """log p(x_1..x_T) of a first-order Markov chain (eq. 6.2).

    initial: (K,); transition: (K, K), [i, j] = p(j | i); seq: (T,) states in [0, K)."""
    pi, tr = float_array(initial, "initial"), float_array(transition, "transition")
    distribution(float_tensor(torch.from_numpy(pi), "initial", ndim=1), "initial")
    distribution(shape_is(torch.from_numpy(tr), "transition", (pi.size, pi.size)), "transition")
    s = index_tensor(torch.as_tensor(np.asarray(seq)), "seq", high=pi.size, ndim=1)
    s = nonempty(s, "seq").numpy()
    with np.errstate(divide="ignore"):
        return float(np.log(pi[s[0]]) + np.log(tr[s[:-1], s[1:]]).sum())


# --- eq. 6.3: expectation and variance ----------------------------------------------------------


def expectation(values, probs) -> float:
    """E[X] = sum_x x p(x) by exact enumeration. Implements eq. 6.3. values, probs: (K,)."""
    p = float_array(probs, "probs")
    distribution(torch.from_numpy(p).flatten(), "probs")
    v = float_array(values, "values", all_finite=True)
    same_shape(v, p, ("values", "probs"))
    return float((v * p).sum())


def variance(values, probs) -> float:
    """Var[X] = E[(X - E X)^2] by exact enumeration. Implements eq. 6.3. values, probs: (K,)."""
    mu = expectation(values, probs)
    v = np.asarray(values, dtype=np.float64)
    return float((np.asarray(probs, dtype=np.float64) * (v - mu) ** 2).sum())


# --- eq. 6.4: the score-function gradient ---------------------------------------------------------


def score_function_grad(
    f: Callable[[torch.Tensor], torch.Tensor],
    mu: float,
    sigma: float,
    n: int,
    generator: torch.Generator,
    baseline: float = 0.0,
) -> torch.Tensor:
    """Per-sample REINFORCE estimates of d/d(mu, sigma) E_{N(mu, sigma^2)}[f(x)] (eq. 6.4).

    f: (n,) -> (n,); baseline: b subtracted from f. Returns (n, 2): mu- and sigma-gradients."""
    mu_t = torch.tensor(number(mu, "mu"), dtype=torch.float64)
    sigma_t = torch.tensor(positive(sigma, "sigma"), dtype=torch.float64)
    eps = torch.randn(positive_int(n, "n"), generator=generator, dtype=torch.float64)  # (n,)
    x = mu_t + sigma_t * eps
    fx = f(x)
    same_shape(fx, x, ("f(x)", "x"))
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
    """Per-sample pathwise estimates of d/d(mu, sigma) E[f(x)], x = mu + sigma eps.

    f: (n,) -> (n,), differentiable. Returns (n, 2), as :func:`score_function_grad`."""
    mu_t = torch.tensor(number(mu, "mu"), dtype=torch.float64)
    sigma_t = torch.tensor(positive(sigma, "sigma"), dtype=torch.float64)
    eps = torch.randn(positive_int(n, "n"), generator=generator, dtype=torch.float64)  # (n,)
    x = (mu_t + sigma_t * eps).requires_grad_(True)
    fx = f(x)
    same_shape(fx, x, ("f(x)", "x"))
    (dfdx,) = torch.autograd.grad(fx.sum(), x)  # (n,): samples are independent
    return torch.stack([dfdx, dfdx * eps], dim=1).detach()


# --- eq. 6.5: maximum likelihood ----------------------------------------------------------------


def gaussian_nll(y: torch.Tensor, mean: torch.Tensor, sigma: float | torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of y under N(mean, sigma^2). Implements eq. 6.5.

    y, mean: (N,), N >= 1; sigma > 0, a scalar or (N,). Returns ()."""
    y = float_tensor(y, "y", not_empty=True)  # an empty batch would average to NaN
    mean = float_tensor(mean, "mean")
    same_shape(y, mean, ("y", "mean"))
    s = positive_entries(torch.as_tensor(sigma, dtype=y.dtype), "sigma")
    return (0.5 * ((y - mean) / s) ** 2 + torch.log(s) + 0.5 * math.log(2 * math.pi)).mean()


def categorical_nll(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of labels under softmax(logits). Implements eq. 6.5.

    logits: (N, K), N >= 1; y: (N,) integer labels in [0, K). Returns ()."""
    n, k = float_tensor(logits, "logits", ndim=2, not_empty=True).shape  # empty: NaN mean
    y = shape_is(index_tensor(y, "y", high=k), "y", (n,)).long()  # gather wants int64
    m = logits.amax(dim=1, keepdim=True)  # (N, 1): shift for stability
    lse = m.squeeze(1) + torch.log(torch.exp(logits - m).sum(dim=1))  # (N,)
    return (lse - logits.gather(1, y[:, None]).squeeze(1)).mean()


# --- eq. 6.6: the Gumbel-max trick ----------------------------------------------------------------


def gumbel_noise(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Standard Gumbel noise -log(-log u), u ~ U(tiny, 1), of ``shape``. Implements eq. 6.6."""
    tiny = torch.finfo(dtype).tiny
    u = torch.rand(shape, generator=generator, dtype=dtype).clamp_(min=tiny, max=1 - 1e-16)
    return -torch.log(-torch.log(u))


def gumbel_max_sample(logits: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n samples argmax_k (z_k + g_k), distributed as softmax(z). Implements eq. 6.6.

    logits: (K,) finite. Returns (n,) int64."""
    float_tensor(logits, "logits", ndim=1, all_finite=True)
    g = gumbel_noise((positive_int(n, "n"), logits.numel()), generator, dtype=torch.float64)
    return torch.argmax(logits.double()[None, :] + g, dim=1)  # (n,)
