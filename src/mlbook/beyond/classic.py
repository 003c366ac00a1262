"""Classic models (chapter 50): XOR, kernels, hidden Markov models, Hopfield networks, RBMs.

Shape legend
    n        data points;  d input width;  D random features
    X        (n, d) inputs, one row per point;  K (n, m) a kernel matrix k(x_i, y_j)
    W_rff    (d, D) random frequencies;  b_rff (D,) random phases
    S        hidden states of an HMM;  V its vocabulary;  T the length of a sequence
    log_pi   (S,) log initial probabilities;  log_A (S, S) log transitions, row i -> column j
    log_B    (S, V) log emissions, row = state;  obs (T,) int64 observed symbols
    N        neurons of a Hopfield network;  P stored patterns
    xi       (P, N) patterns of +-1;  s (..., N) states of +-1;  W (N, N) symmetric weights
    M        (P, d) patterns of a modern Hopfield network, one per row;  q (..., d) queries
    v        (..., n_v) visible units of an RBM;  h (..., n_h) hidden units, both in {0, 1}
    W_rbm    (n_v, n_h);  a (n_v,) visible biases;  c (n_h,) hidden biases
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F

from ..validation import (
    float_array,
    float_tensor,
    index_tensor,
    nonempty,
    positive,
    positive_int,
    shape_is,
)

__all__ = [
    "xor_data",
    "linearly_separable",
    "best_linear_accuracy",
    "rbf_kernel",
    "rbf_kernel_naive",
    "rff_params",
    "random_fourier_features",
    "kernel_ridge_fit",
    "kernel_ridge_predict",
    "hmm_forward",
    "hmm_forward_naive",
    "hmm_likelihood_bruteforce",
    "viterbi",
    "viterbi_bruteforce",
    "hebbian_weights",
    "hopfield_energy",
    "hopfield_async",
    "hopfield_recall",
    "modern_hopfield_update",
    "modern_hopfield_update_naive",
    "rbm_energy",
    "rbm_p_h_given_v",
    "rbm_p_v_given_h",
    "rbm_free_energy",
    "rbm_log_partition",
    "rbm_log_partition_naive",
    "rbm_log_likelihood",
    "rbm_cd_step",
    "rbm_gibbs",
    "bars_and_stripes",
    "binary_states",
]


# --- XOR: no linear separator ---------------------------------------------------------------------


def xor_data(dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """The four points of XOR: X (4, 2) in {0, 1}^2 and labels y (4,) = x_1 XOR x_2."""
    X = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=dtype)
    return X, (X[:, 0] != X[:, 1]).long()


def linearly_separable(X, y) -> bool:
    """Whether some (w, b) has y'_i (w^T x_i + b) >= 1 for all i, y' = 2y - 1 (a linear program).

    X: (n, d); y: (n,) labels in {0, 1}. Feasible exactly when the labels are strictly separable."""
    from scipy.optimize import linprog

    X = float_array(X, "X", ndim=2, all_finite=True, not_empty=True)
    s = 2 * float_array(y, "y", ndim=1) - 1  # (n,) labels as -1, +1
    shape_is(s, "y", (X.shape[0],))
    A = -s[:, None] * np.hstack([X, np.ones((len(X), 1))])  # -(y' [x, 1]) . (w, b) <= -1
    res = linprog(np.zeros(X.shape[1] + 1), A_ub=A, b_ub=-np.ones(len(X)), bounds=(None, None))
    return res.status == 0


def best_linear_accuracy(X, y) -> float:
    """The best training accuracy of any linear classifier sign(w^T x + b), by enumerating the
    2^n labellings and keeping the separable ones (n <= 12). X: (n, d); y: (n,) in {0, 1}."""
    y = np.asarray(y).astype(int)
    n = positive_int(len(y), "len(y)")
    if n > 12:
        raise ValueError(f"len(y) must be at most 12 for the enumeration, got {n}")
    best = 0.0
    for z in itertools.product((0, 1), repeat=n):
        acc = float(np.mean(np.array(z) == y))
        if acc > best and linearly_separable(X, np.array(z)):
            best = acc
    return best


# --- eqs. 50.1-50.2: the RBF kernel and random Fourier features -----------------------------------


def rbf_kernel(X: torch.Tensor, Y: torch.Tensor, sigma: float) -> torch.Tensor:
    """k(x, y) = exp(-||x - y||^2 / (2 sigma^2)) for all pairs. Implements eq. 50.1.

    X: (n, d), Y: (m, d). Returns K (n, m). Uses ||x||^2 + ||y||^2 - 2 x^T y (a matrix product)."""
    positive(sigma, "sigma")
    float_tensor(X, "X", ndim=2)
    shape_is(Y, "Y", (None, X.shape[1]))
    sq = (X * X).sum(1)[:, None] + (Y * Y).sum(1)[None, :] - 2 * X @ Y.T  # (n, m)
    return torch.exp(-sq.clamp_min(0) / (2 * sigma**2))


def rbf_kernel_naive(X: torch.Tensor, Y: torch.Tensor, sigma: float) -> torch.Tensor:
    """eq. 50.1 from the differences x_i - y_j themselves, (n, m, d) at once."""
    diff = X[:, None, :] - Y[None, :, :]  # (n, m, d)
    return torch.exp(-(diff**2).sum(-1) / (2 * sigma**2))


def rff_params(
    d: int, D: int, sigma: float, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random frequencies W (d, D) ~ N(0, I / sigma^2) and phases b (D,) ~ U[0, 2 pi)."""
    positive_int(d, "d")
    positive_int(D, "D")
    positive(sigma, "sigma")
    W = torch.randn(d, D, generator=generator, dtype=dtype) / sigma
    b = 2 * math.pi * torch.rand(D, generator=generator, dtype=dtype)
    return W, b


def random_fourier_features(X: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """z(x) = sqrt(2 / D) cos(W^T x + b), so z(x)^T z(y) ~ k(x, y). Implements eq. 50.2.

    X: (n, d); W: (d, D); b: (D,). Returns Z (n, D)."""
    shape_is(W, "W", (X.shape[-1], None))  # the frequencies must match the input width
    shape_is(b, "b", (W.shape[1],))
    return math.sqrt(2.0 / W.shape[1]) * torch.cos(X @ W + b)


def kernel_ridge_fit(K: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """The dual weights alpha = (K + lam I)^-1 y of kernel ridge regression.

    K: (n, n) kernel of the training points; y: (n,) or (n, k) targets; lam > 0."""
    positive(lam, "lam")
    shape_is(K, "K", (len(y), len(y)))  # one target per training point
    return torch.linalg.solve(K + lam * torch.eye(len(K), dtype=K.dtype), y)


def kernel_ridge_predict(K_test: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """f(x) = sum_i alpha_i k(x, x_i). K_test: (m, n) kernel of test vs training points."""
    return K_test @ alpha


# --- eqs. 50.3-50.4: hidden Markov models --------------------------------------------------------


def _hmm_args(log_pi, log_A, log_B, obs):
    S = float_tensor(log_pi, "log_pi", ndim=1, not_empty=True).shape[0]
    shape_is(log_A, "log_A", (S, S))
    shape_is(log_B, "log_B", (S, None))
    index_tensor(obs, "obs", high=log_B.shape[1], ndim=1)
    nonempty(obs, "obs")  # a sequence of length 0 has no likelihood to compute


def hmm_forward(log_pi, log_A, log_B, obs) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward algorithm in log space. Implements eq. 50.3.

    log alpha_t(j) = log b_j(y_t) + logsumexp_i (log alpha_{t-1}(i) + log a_ij).
    Returns (log p(y_1..y_T), log alpha (T, S))."""
    _hmm_args(log_pi, log_A, log_B, obs)
    la = [log_pi + log_B[:, obs[0]]]  # (S,)
    for t in range(1, len(obs)):
        la.append(torch.logsumexp(la[-1][:, None] + log_A, dim=0) + log_B[:, obs[t]])
    log_alpha = torch.stack(la)  # (T, S)
    return torch.logsumexp(log_alpha[-1], 0), log_alpha


def hmm_forward_naive(pi, A, B, obs) -> torch.Tensor:
    """eq. 50.3 with probabilities, no logs: alpha_t = (alpha_{t-1} A) * b(y_t). Returns p(y).
    Underflows to 0 for long sequences (the reason for log space)."""
    alpha = pi * B[:, obs[0]]  # (S,)
    for t in range(1, len(obs)):
        alpha = (alpha @ A) * B[:, obs[t]]
    return alpha.sum()


def hmm_likelihood_bruteforce(log_pi, log_A, log_B, obs) -> torch.Tensor:
    """log p(y) = log sum over all S^T state paths of p(path, y) (short sequences only)."""
    return torch.logsumexp(_path_scores(log_pi, log_A, log_B, obs)[1], 0)


def _path_scores(log_pi, log_A, log_B, obs) -> tuple[torch.Tensor, torch.Tensor]:
    """All S^T paths (S^T, T) and their scores log p(path, y) = log pi_{z_1} + sum_t
    log a_{z_{t-1} z_t} + sum_t log b_{z_t}(y_t), (S^T,)."""
    S, T = log_pi.shape[0], len(obs)
    if S**T > 10**6:
        raise ValueError(f"enumerating S^T = {S}^{T} paths is too many (at most 10^6)")
    paths = torch.tensor(list(itertools.product(range(S), repeat=T))).reshape(-1, T)  # (S^T, T)
    score = log_pi[paths[:, 0]] + log_B[paths[:, 0], obs[0]]
    for t in range(1, T):
        score = score + log_A[paths[:, t - 1], paths[:, t]] + log_B[paths[:, t], obs[t]]
    return paths, score


def viterbi(log_pi, log_A, log_B, obs) -> tuple[list[int], torch.Tensor]:
    """The most probable state path, by dynamic programming in log space. Implements eq. 50.4.

    log v_t(j) = log b_j(y_t) + max_i (log v_{t-1}(i) + log a_ij), with back-pointers.
    Returns (path as a list of T state indices, log p(path, y))."""
    _hmm_args(log_pi, log_A, log_B, obs)
    lv, back = log_pi + log_B[:, obs[0]], []  # (S,)
    for t in range(1, len(obs)):
        best, arg = (lv[:, None] + log_A).max(dim=0)  # (S,) best predecessor of each state
        lv = best + log_B[:, obs[t]]
        back.append(arg)
    path = [int(lv.argmax())]
    for arg in reversed(back):  # follow the back-pointers from the end
        path.append(int(arg[path[-1]]))
    return path[::-1], lv.max()


def viterbi_bruteforce(log_pi, log_A, log_B, obs) -> tuple[list[int], torch.Tensor]:
    """argmax over all S^T state paths of log p(path, y) (short sequences only)."""
    paths, scores = _path_scores(log_pi, log_A, log_B, obs)
    i = int(scores.argmax())
    return paths[i].tolist(), scores[i]


# --- eq. 50.5: Hopfield networks ------------------------------------------------------------------


def hebbian_weights(xi: torch.Tensor) -> torch.Tensor:
    """W = (1/N) sum_mu xi^mu xi^mu^T with a zero diagonal. xi: (P, N) of +-1. Returns (N, N)."""
    float_tensor(xi, "xi", ndim=2, not_empty=True)
    W = xi.T @ xi / xi.shape[1]  # (N, N)
    return W - torch.diag(torch.diagonal(W))


def hopfield_energy(W: torch.Tensor, s: torch.Tensor, theta: torch.Tensor | None = None):
    """E(s) = -1/2 s^T W s + theta^T s. Implements eq. 50.5. s: (..., N). Returns (...)."""
    shape_is(s, "s", (*s.shape[:-1], W.shape[0]))
    E = -0.5 * ((s @ W) * s).sum(-1)
    return E if theta is None else E + s @ theta


def hopfield_async(
    W: torch.Tensor,
    s: torch.Tensor,
    order: torch.Tensor,
    theta: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Asynchronous updates s_i <- sign(sum_j w_ij s_j - theta_i), one neuron at a time, in
    ``order`` (a sequence of neuron indices). s: (N,) of +-1. A field of exactly 0 keeps s_i.

    Returns the final state (N,) and the energies before and after every update (len(order)+1,)."""
    index_tensor(order, "order", high=W.shape[0], ndim=1)
    s = s.clone()
    th = torch.zeros_like(s) if theta is None else theta
    energies = [hopfield_energy(W, s, theta)]
    for i in order.tolist():
        field = W[i] @ s - th[i]
        if field != 0:
            s[i] = torch.sign(field)
        energies.append(hopfield_energy(W, s, theta))
    return s, torch.stack(energies)


def hopfield_recall(W: torch.Tensor, s: torch.Tensor, sweeps: int = 10) -> torch.Tensor:
    """Asynchronous updates of a batch of states s (B, N), neurons in the order 0..N-1, for at
    most ``sweeps`` sweeps (stops early at a fixed point). Returns the final states (B, N)."""
    positive_int(sweeps, "sweeps")
    s = s.clone()
    for _ in range(sweeps):
        before = s.clone()
        for i in range(W.shape[0]):
            field = s @ W[i]  # (B,)
            s[:, i] = torch.where(field == 0, s[:, i], torch.sign(field))
        if torch.equal(before, s):
            break
    return s


def modern_hopfield_update(M: torch.Tensor, q: torch.Tensor, beta: float) -> torch.Tensor:
    """xi_new = M^T softmax(beta M xi): the modern (continuous) Hopfield update, for stored
    patterns M (P, d) as rows and queries q (..., d). Returns (..., d)."""
    positive(beta, "beta")
    shape_is(q, "q", (*q.shape[:-1], M.shape[1]))
    return torch.softmax(beta * q @ M.T, dim=-1) @ M  # (..., P) weights, then (..., d)


def modern_hopfield_update_naive(M: torch.Tensor, q: torch.Tensor, beta: float) -> torch.Tensor:
    """The same update for one query q (d,), as an explicit weighted sum over the patterns."""
    scores = torch.stack([beta * (M[p] @ q) for p in range(M.shape[0])])
    w = torch.exp(scores - scores.max())
    return sum(w[p] * M[p] for p in range(M.shape[0])) / w.sum()


# --- eq. 50.6: restricted Boltzmann machines ------------------------------------------------------


def rbm_energy(v, h, W, a, c) -> torch.Tensor:
    """E(v, h) = -a^T v - c^T h - v^T W h. v: (..., n_v), h: (..., n_h). Returns (...)."""
    return -(v @ a) - (h @ c) - ((v @ W) * h).sum(-1)


def rbm_p_h_given_v(v, W, c) -> torch.Tensor:
    """p(h_j = 1 | v) = sigmoid(c_j + sum_i v_i w_ij), each j independent. Implements eq. 50.6.
    v: (..., n_v). Returns (..., n_h)."""
    shape_is(v, "v", (*v.shape[:-1], W.shape[0]))
    return torch.sigmoid(c + v @ W)


def rbm_p_v_given_h(h, W, a) -> torch.Tensor:
    """p(v_i = 1 | h) = sigmoid(a_i + sum_j w_ij h_j). h: (..., n_h). Returns (..., n_v)."""
    shape_is(h, "h", (*h.shape[:-1], W.shape[1]))
    return torch.sigmoid(a + h @ W.T)


def rbm_free_energy(v, W, a, c) -> torch.Tensor:
    """F(v) = -log sum_h exp(-E(v, h)) = -a^T v - sum_j softplus(c_j + (v W)_j). Returns (...)."""
    return -(v @ a) - F.softplus(c + v @ W).sum(-1)


def binary_states(n: int, dtype: torch.dtype) -> torch.Tensor:
    """All 2^n binary vectors, (2^n, n)."""
    if n > 20:
        raise ValueError(f"enumerating 2^{n} states is too large (at most 20 units)")
    bits = torch.arange(2**n)[:, None] >> torch.arange(n - 1, -1, -1)[None, :]
    return (bits & 1).to(dtype)


def rbm_log_partition(W, a, c) -> torch.Tensor:
    """log Z = logsumexp_v (-F(v)), summing over the 2^n_v visible states (n_v <= 20)."""
    V = binary_states(W.shape[0], W.dtype)  # (2^n_v, n_v)
    return torch.logsumexp(-rbm_free_energy(V, W, a, c), 0)


def rbm_log_partition_naive(W, a, c) -> torch.Tensor:
    """log Z = logsumexp over all 2^(n_v + n_h) joint states of -E(v, h) (small models only)."""
    V, H = binary_states(W.shape[0], W.dtype), binary_states(W.shape[1], W.dtype)
    E = rbm_energy(V[:, None, :], H[None, :, :], W, a, c)  # (2^n_v, 2^n_h)
    return torch.logsumexp(-E.reshape(-1), 0)


def rbm_log_likelihood(v, W, a, c) -> torch.Tensor:
    """The exact mean log-likelihood (1/n) sum_k log p(v_k) = -F(v_k) - log Z. v: (n, n_v)."""
    return (-rbm_free_energy(v, W, a, c)).mean() - rbm_log_partition(W, a, c)


def rbm_gibbs(v, W, a, c, k: int, generator: torch.Generator) -> torch.Tensor:
    """k steps of block Gibbs sampling v -> h -> v. v: (B, n_v). Returns v after k steps."""
    positive_int(k, "k")
    for _ in range(k):
        ph = rbm_p_h_given_v(v, W, c)
        h = (torch.rand(ph.shape, generator=generator, dtype=ph.dtype) < ph).to(v.dtype)
        pv = rbm_p_v_given_h(h, W, a)
        v = (torch.rand(pv.shape, generator=generator, dtype=pv.dtype) < pv).to(pv.dtype)
    return v


def rbm_cd_step(v0, W, a, c, k: int, lr: float, generator: torch.Generator):
    """One step of contrastive divergence CD-k on a batch v0 (B, n_v).

    The gradient of the mean log-likelihood is E_data[v h^T] - E_model[v h^T]; CD-k replaces the
    model expectation by the statistics of k Gibbs steps started at the data. Returns the new
    (W, a, c)."""
    positive(lr, "lr")
    vk = rbm_gibbs(v0, W, a, c, k, generator)  # (B, n_v)
    ph0, phk = rbm_p_h_given_v(v0, W, c), rbm_p_h_given_v(vk, W, c)  # (B, n_h)
    B = v0.shape[0]
    dW = (v0.T @ ph0 - vk.T @ phk) / B  # (n_v, n_h)
    da, dc = (v0 - vk).mean(0), (ph0 - phk).mean(0)
    return W + lr * dW, a + lr * da, c + lr * dc


def bars_and_stripes(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """All distinct n x n bars-and-stripes images (2^(n+1) - 2 of them), flattened: (m, n^2)."""
    positive_int(n, "n")
    rows = binary_states(n, dtype)  # (2^n, n)
    bars = rows[:, None, :].expand(-1, n, -1)  # each row pattern repeated down: vertical bars
    stripes = rows[:, :, None].expand(-1, -1, n)  # horizontal stripes
    imgs = torch.cat([bars, stripes]).reshape(-1, n * n)  # (2^(n+1), n^2)
    return torch.unique(imgs, dim=0)
