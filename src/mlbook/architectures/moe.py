"""Mixture of experts: router, top-k gates, routed and dense MoE layers, balancing (chapter 27).

A mixture-of-experts (MoE) layer replaces one feed-forward block by N expert blocks and a
router that sends every token to k of them. The parameters grow N-fold; the work per token grows
only k-fold. Everything here acts on a flat batch of tokens (flatten (B, T, d) to (B*T, d)).

Shape legend
    T      number of tokens in the (flattened) batch
    d      model width
    h      hidden width of one expert (a SwiGLU block, :func:`mlbook.nn.activations.swiglu_ffn`)
    N      number of experts
    k      experts per token (top-k)
    r      router logits, (T, N); p = softmax(r) the router probabilities, (T, N)
    idx    (T, k) the selected experts of every token, best first
    gates  (T, k) the weights a_i of the selected experts
    G      (T, N) the dense gate matrix: gates scattered into zeros
    W, V   (N, d, h) gate and value projections of the N experts; W2 (N, h, d)
    f      (N,) fraction of the T*k token-to-expert assignments that each expert received
    P      (N,) mean router probability of each expert over the batch

Every optimised function sits beside its naive reference: :func:`moe_routed` (gather the
tokens of each expert, run it once, scatter back with ``index_add_``) beside :func:`moe_dense`
(run every expert on every token, weight by the dense gate matrix); :func:`capacity_mask`
(cumulative sums) beside :func:`capacity_mask_naive` (a Python loop); the closed-form gradient
:func:`load_balancing_loss_grad` beside autograd. The router z-loss is
:func:`mlbook.nn.softmax.z_loss` and the expert blocks are :func:`mlbook.nn.activations.swiglu_ffn`;
this module reuses them. Bad input raises ``TypeError`` or ``ValueError`` naming the offending
shapes or values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..nn.activations import swiglu_ffn
from ..nn.softmax import softmax, z_loss
from ..validation import float_tensor as _float_tensor
from ..validation import positive_int as _positive_int

__all__ = [
    "Routing",
    "topk_route",
    "gate_matrix",
    "init_experts",
    "moe_dense",
    "moe_routed",
    "expert_load",
    "mean_router_prob",
    "load_balancing_loss",
    "load_balancing_loss_grad",
    "expert_capacity",
    "capacity_mask",
    "capacity_mask_naive",
    "bias_update",
    "MoEConfig",
    "count_parameters",
    "toy_task",
    "train_toy_moe",
]


# --- validation ----------------------------------------------------------------------------------


def _check_idx(idx, n_experts: int) -> torch.Tensor:
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a torch.Tensor, got {type(idx).__name__}")
    if idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"idx must be an integer tensor (int64), got dtype {idx.dtype}")
    if idx.ndim != 2:
        raise ValueError(f"idx must have shape (T, k), got {tuple(idx.shape)}")
    _positive_int(n_experts, "n_experts")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n_experts):
        raise ValueError(
            f"expert indices must lie in [0, {n_experts}), got range "
            f"[{int(idx.min())}, {int(idx.max())}]"
        )
    return idx


def _check_experts(x, W, V, W2) -> tuple[int, int, int]:
    _float_tensor(x, "x", 2)
    for name, m in (("W", W), ("V", V), ("W2", W2)):
        _float_tensor(m, name, 3)
    n, d, h = W.shape
    if x.shape[1] != d or V.shape != (n, d, h) or W2.shape != (n, h, d):
        raise ValueError(
            f"need x (T, d), W and V (N, d, h), W2 (N, h, d); got x "
            f"{tuple(x.shape)}, W {tuple(W.shape)}, V {tuple(V.shape)}, "
            f"W2 {tuple(W2.shape)}"
        )
    return n, d, h


# --- eq. 27.1 and 27.2: router, top-k, gates -----------------------------------------------------


class Routing(NamedTuple):
    """The router's decision for a batch: probabilities, selected experts and their gates."""

    probs: torch.Tensor  # (T, N) p = softmax(r)
    idx: torch.Tensor  # (T, k) selected experts, highest score first
    gates: torch.Tensor  # (T, k) gate values a_i of the selected experts


def topk_route(
    logits: torch.Tensor, k: int, *, renormalize: bool = True, bias: torch.Tensor | None = None
) -> Routing:
    """p = softmax(r), S = topk(p), a_i = p_i / sum_{j in S} p_j. Implements eqs. 27.1-27.2.

    ``renormalize=True`` is Mixtral's gating (the k gates sum to 1, equal to a softmax over the
    k selected logits); ``renormalize=False`` keeps the raw probabilities a_i = p_i, Switch
    Transformer's gating (for k = 1 renormalising would make every gate 1 and cut the router
    off from the task gradient).

    ``bias`` is DeepSeek-V3's balancing bias (eq. 27.5): it shifts the scores used to *select*
    the experts, topk(p + b), but the gate values are still computed from p alone.

    Args:
        logits: (T, N) router logits r = x W_r.
        k: experts per token, 1 <= k <= N.
        renormalize: renormalise the gates over the selected set (Mixtral) or not (Switch).
        bias: (N,) selection bias, or None.

    Returns:
        Routing(probs (T, N), idx (T, k), gates (T, k)).
    """
    _float_tensor(logits, "logits", 2)
    n = logits.shape[1]
    _positive_int(k, "k")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of experts N={n}")
    p = softmax(logits, dim=-1)  # (T, N)
    scores = p
    if bias is not None:
        _float_tensor(bias, "bias", 1)
        if bias.shape[0] != n:
            raise ValueError(f"bias must have shape ({n},), got {tuple(bias.shape)}")
        scores = p + bias.to(p.dtype)  # selection only
    idx = torch.topk(scores.detach(), k, dim=-1).indices  # (T, k)
    a = p.gather(1, idx)  # (T, k) p_i of the selected experts
    if renormalize:
        a = a / a.sum(dim=-1, keepdim=True)
    return Routing(p, idx, a)


def gate_matrix(idx: torch.Tensor, gates: torch.Tensor, n_experts: int) -> torch.Tensor:
    """The dense (T, N) gate matrix G: G[t, idx[t, j]] = gates[t, j], zero elsewhere.

    Args:
        idx: (T, k) selected experts (distinct within a row).
        gates: (T, k) their gates.
        n_experts: N.
    """
    _check_idx(idx, n_experts)
    _float_tensor(gates, "gates", 2)
    if gates.shape != idx.shape:
        raise ValueError(
            f"gates must have idx's shape {tuple(idx.shape)}, got {tuple(gates.shape)}"
        )
    return gates.new_zeros(idx.shape[0], n_experts).scatter(1, idx, gates)


# --- the MoE layer: dense reference and routed version --------------------------------------------


def init_experts(
    n_experts: int,
    d: int,
    h: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Random parameters of a router and N SwiGLU experts, N(0, 1/fan_in) entries.

    Returns:
        {"W_r": (d, N), "W": (N, d, h), "V": (N, d, h), "W2": (N, h, d)}.
    """
    for name, v in (("n_experts", n_experts), ("d", d), ("h", h)):
        _positive_int(v, name)

    def rnd(*shape, fan_in):
        return torch.randn(*shape, generator=generator, dtype=dtype) / math.sqrt(fan_in)

    return {
        "W_r": rnd(d, n_experts, fan_in=d),
        "W": rnd(n_experts, d, h, fan_in=d),
        "V": rnd(n_experts, d, h, fan_in=d),
        "W2": rnd(n_experts, h, d, fan_in=h),
    }


def moe_dense(
    x: torch.Tensor, G: torch.Tensor, W: torch.Tensor, V: torch.Tensor, W2: torch.Tensor
) -> torch.Tensor:
    """y_t = sum_i G[t, i] E_i(x_t), every expert run on every token (eq. 27.2, naive reference).

    N times the work of the routed layer for k = 1; correct by construction, because the
    experts outside S have G[t, i] = 0.

    Args:
        x: (T, d) tokens.
        G: (T, N) dense gate matrix (see :func:`gate_matrix`).
        W, V: (N, d, h); W2: (N, h, d) expert parameters.

    Returns:
        (T, d).
    """
    n, _, _ = _check_experts(x, W, V, W2)
    _float_tensor(G, "G", 2)
    if G.shape != (x.shape[0], n):
        raise ValueError(f"G must have shape (T, N) = ({x.shape[0]}, {n}), got {tuple(G.shape)}")
    y = torch.zeros_like(x)
    for i in range(n):
        y = y + G[:, i : i + 1] * swiglu_ffn(x, W[i], V[i], W2[i])  # (T, 1) * (T, d)
    return y


def moe_routed(
    x: torch.Tensor,
    idx: torch.Tensor,
    gates: torch.Tensor,
    W: torch.Tensor,
    V: torch.Tensor,
    W2: torch.Tensor,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """y = sum_{i in S} a_i E_i(x), computed expert by expert on its own tokens (eq. 27.2).

    The token-to-expert assignments are flattened to T*k pairs; for every expert the pairs
    that chose it are gathered, the expert runs once on that (n_i, d) block, and its gated
    outputs are scattered back into y with ``index_add_``. Work: sum_i n_i = T*k expert
    evaluations instead of the T*N of :func:`moe_dense`.

    Args:
        x: (T, d) tokens.
        idx: (T, k) selected experts; gates: (T, k) their gates.
        W, V: (N, d, h); W2: (N, h, d) expert parameters.
        keep: optional (T, k) bool mask from :func:`capacity_mask`; dropped assignments
            contribute nothing (the token keeps only its residual path).

    Returns:
        (T, d).
    """
    n, _, _ = _check_experts(x, W, V, W2)
    _check_idx(idx, n)
    _float_tensor(gates, "gates", 2)
    if idx.shape[0] != x.shape[0] or gates.shape != idx.shape:
        raise ValueError(
            f"need idx and gates (T, k) with T = {x.shape[0]}; got idx "
            f"{tuple(idx.shape)}, gates {tuple(gates.shape)}"
        )
    t, k = idx.shape
    expert = idx.reshape(-1)  # (T*k,)
    token = torch.arange(t, device=x.device).repeat_interleave(k)  # (T*k,)
    gate = gates.reshape(-1)  # (T*k,)
    if keep is not None:
        if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool:
            raise TypeError("keep must be a bool tensor")
        if keep.shape != idx.shape:
            raise ValueError(
                f"keep must have idx's shape {tuple(idx.shape)}, got {tuple(keep.shape)}"
            )
        kept = keep.reshape(-1)
        expert, token, gate = expert[kept], token[kept], gate[kept]
    y = torch.zeros_like(x)
    for i in range(n):
        sel = (expert == i).nonzero().squeeze(1)  # (n_i,) assignments to expert i
        if sel.numel() == 0:
            continue
        tok = token[sel]  # (n_i,)
        out = swiglu_ffn(x[tok], W[i], V[i], W2[i]) * gate[sel, None]  # (n_i, d)
        y.index_add_(0, tok, out)
    return y


# --- eq. 27.3: the load-balancing loss -----------------------------------------------------------


def expert_load(idx: torch.Tensor, n_experts: int) -> torch.Tensor:
    """f_i: the fraction of the T*k token-to-expert assignments that went to expert i.

    For k = 1 this is Switch Transformer's f_i, the fraction of tokens dispatched to expert i.
    sum_i f_i = 1; uniform routing gives f_i = 1/N. Counts carry no gradient.

    Returns:
        (N,) float64.
    """
    _check_idx(idx, n_experts)
    if idx.numel() == 0:
        raise ValueError("idx holds no assignments")
    counts = torch.bincount(idx.reshape(-1), minlength=n_experts)  # (N,)
    return counts.double() / idx.numel()


def mean_router_prob(probs: torch.Tensor) -> torch.Tensor:
    """P_i = (1/T) sum_t p_i(x_t): the mean router probability of every expert, (N,)."""
    _float_tensor(probs, "probs", 2)
    if probs.shape[0] == 0:
        raise ValueError("probs holds no tokens")
    return probs.mean(dim=0)


def load_balancing_loss(probs: torch.Tensor, idx: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """L_lb = alpha N sum_i f_i P_i, Switch Transformer's auxiliary loss. Implements eq. 27.3.

    f (from the discrete choices) is a constant; the gradient flows through P. Uniform routing
    (f_i = P_i = 1/N) gives alpha; all tokens on one expert with probability 1 gives alpha N.

    Args:
        probs: (T, N) router probabilities.
        idx: (T, k) selected experts.
        alpha: the coefficient (1e-2 in Switch Transformer); the sheet's form is alpha = 1.

    Returns:
        A scalar tensor with probs' dtype.
    """
    _float_tensor(probs, "probs", 2)
    if not (math.isfinite(float(alpha)) and float(alpha) >= 0):
        raise ValueError(f"alpha must be finite and non-negative, got {alpha!r}")
    n = probs.shape[1]
    _check_idx(idx, n)
    if idx.shape[0] != probs.shape[0]:
        raise ValueError(f"idx has {idx.shape[0]} tokens, probs has {probs.shape[0]}")
    f = expert_load(idx, n).to(probs.dtype)  # (N,)
    return alpha * n * (f * mean_router_prob(probs)).sum()


def load_balancing_loss_grad(
    logits: torch.Tensor, f: torch.Tensor, alpha: float = 1.0
) -> torch.Tensor:
    """dL_lb/dr for fixed counts f: (alpha N / T) p_tj (f_j - sum_i f_i p_ti) (eq. 27.3).

    From dp_i/dr_j = p_i (delta_ij - p_j): the loss lowers the logit of an expert whose load
    f_j exceeds the token's p-weighted average load, and raises it otherwise.

    Args:
        logits: (T, N) router logits.
        f: (N,) expert loads, held fixed.
        alpha: the coefficient.

    Returns:
        (T, N) the gradient.
    """
    _float_tensor(logits, "logits", 2)
    _float_tensor(f, "f", 1)
    t, n = logits.shape
    if f.shape[0] != n:
        raise ValueError(f"f must have shape ({n},), got {tuple(f.shape)}")
    p = softmax(logits, dim=-1)  # (T, N)
    f = f.to(p.dtype)
    return alpha * n / t * p * (f - (p @ f)[:, None])  # (T, N)


# --- capacity ------------------------------------------------------------------------------------


def expert_capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float) -> int:
    """C = ceil(capacity_factor * k * T / N): the most assignments one expert accepts.

    capacity_factor = 1 is exactly the share of perfectly balanced routing.
    """
    for name, v in (("n_tokens", n_tokens), ("n_experts", n_experts), ("k", k)):
        _positive_int(v, name)
    cf = float(capacity_factor)
    if not (math.isfinite(cf) and cf > 0):
        raise ValueError(f"capacity_factor must be positive and finite, got {capacity_factor!r}")
    return math.ceil(cf * k * n_tokens / n_experts)


def capacity_mask(idx: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Which assignments fit: each expert keeps its first ``capacity`` assignments.

    Priority follows GShard: all first choices (slot 0) in token order, then all second
    choices, and so on. The position of an assignment in its expert's queue is a cumulative
    sum of one-hot rows; it is kept when that position is below the capacity.

    Args:
        idx: (T, k) selected experts.
        n_experts: N.
        capacity: C >= 0.

    Returns:
        (T, k) bool, True where the assignment is processed.
    """
    _check_idx(idx, n_experts)
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise ValueError(f"capacity must be a non-negative int, got {capacity!r}")
    t, k = idx.shape
    order = idx.t().reshape(-1)  # (k*T,) slot-major
    onehot = torch.nn.functional.one_hot(order, n_experts)  # (k*T, N)
    position = ((onehot.cumsum(0) - 1) * onehot).sum(1)  # (k*T,) place in queue
    return (position < capacity).reshape(k, t).t()  # (k, T) -> (T, k)


def capacity_mask_naive(idx: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Reference for :func:`capacity_mask`: walk the assignments in priority order, count."""
    _check_idx(idx, n_experts)
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise ValueError(f"capacity must be a non-negative int, got {capacity!r}")
    t, k = idx.shape
    used = [0] * n_experts
    keep = torch.zeros(t, k, dtype=torch.bool)
    for slot in range(k):
        for tok in range(t):
            e = int(idx[tok, slot])
            if used[e] < capacity:
                keep[tok, slot] = True
                used[e] += 1
    return keep


# --- eq. 27.5: balancing by a selection bias -----------------------------------------------------


def bias_update(bias: torch.Tensor, f: torch.Tensor, eta: float) -> torch.Tensor:
    """b_i <- b_i - eta sign(f_i - 1/N): DeepSeek-V3's auxiliary-loss-free balancing. Eq. 27.5.

    An overloaded expert (f_i > 1/N) loses selection score, an underloaded one gains. The bias
    enters only the top-k selection (see :func:`topk_route`), never the gate values, so it
    changes which experts run but not how their outputs are weighted.

    Args:
        bias: (N,) current bias.
        f: (N,) expert loads of the last batch (summing to 1).
        eta: step size > 0.

    Returns:
        (N,) the new bias (a new tensor).
    """
    _float_tensor(bias, "bias", 1)
    _float_tensor(f, "f", 1)
    if f.shape != bias.shape:
        raise ValueError(f"f must have bias's shape {tuple(bias.shape)}, got {tuple(f.shape)}")
    if not (math.isfinite(float(eta)) and float(eta) > 0):
        raise ValueError(f"eta must be positive and finite, got {eta!r}")
    n = bias.shape[0]
    return bias - eta * torch.sign(f.to(bias.dtype) - 1.0 / n)


# --- total and active parameters -----------------------------------------------------------------


@dataclass(frozen=True)
class MoEConfig:
    """A decoder-only transformer with grouped-query attention and SwiGLU MoE blocks.

    Defaults: Mixtral 8x7B's published configuration.
    """

    vocab: int = 32000
    d_model: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int = 128
    d_ff: int = 14336
    n_experts: int = 8
    top_k: int = 2
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in (
            "vocab",
            "d_model",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "d_ff",
            "n_experts",
            "top_k",
        ):
            _positive_int(getattr(self, name), name)
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} exceeds n_experts={self.n_experts}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}"
            )


def count_parameters(cfg: MoEConfig) -> dict[str, int]:
    """Total and active (per token) parameters of an MoE transformer, by component.

    Counted: token embedding (V d) and, unless tied, the output head (V d); per layer the
    attention projections q (d x H d_h), k and v (d x H_kv d_h each), o (H d_h x d), the router
    (d x N), N SwiGLU experts (3 d d_ff each), two RMSNorm weight vectors (2 d); the final
    RMSNorm (d). No biases. Active counts only k of the N experts; everything else runs for
    every token.

    Returns:
        dict with keys embedding, lm_head, attention, router, experts, norms, total,
        experts_active, active.
    """
    if not isinstance(cfg, MoEConfig):
        raise TypeError(f"cfg must be an MoEConfig, got {type(cfg).__name__}")
    d, L = cfg.d_model, cfg.n_layers
    attn = d * cfg.n_heads * cfg.head_dim * 2 + d * cfg.n_kv_heads * cfg.head_dim * 2
    expert = 3 * d * cfg.d_ff
    c = {
        "embedding": cfg.vocab * d,
        "lm_head": 0 if cfg.tied_embeddings else cfg.vocab * d,
        "attention": L * attn,
        "router": L * d * cfg.n_experts,
        "experts": L * cfg.n_experts * expert,
        "norms": L * 2 * d + d,
    }
    c["total"] = sum(c.values())
    c["experts_active"] = L * cfg.top_k * expert
    c["active"] = c["total"] - c["experts"] + c["experts_active"]
    return c


# --- a small training experiment: what the balancing loss does -----------------------------------


def toy_task(
    n_tokens: int,
    d: int,
    n_clusters: int = 1,
    *,
    spread: float = 0.75,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens from ``n_clusters`` Gaussian clusters; the target is a cluster-specific map.

    x = mu_c + spread * eps, y = tanh(x A_c). With one cluster a single expert can fit the
    whole task, so nothing in the task loss stops a router from sending everything to one
    expert.

    Returns:
        x (n_tokens, d), y (n_tokens, d).
    """
    for name, v in (("n_tokens", n_tokens), ("d", d), ("n_clusters", n_clusters)):
        _positive_int(v, name)
    if not (math.isfinite(float(spread)) and float(spread) > 0):
        raise ValueError(f"spread must be positive and finite, got {spread!r}")
    g = torch.Generator().manual_seed(seed)
    mu = 2.0 * torch.randn(n_clusters, d, generator=g, dtype=dtype)  # (C, d)
    A = torch.randn(n_clusters, d, d, generator=g, dtype=dtype) / math.sqrt(d)  # (C, d, d)
    c = torch.randint(0, n_clusters, (n_tokens,), generator=g)  # (n,)
    x = mu[c] + spread * torch.randn(n_tokens, d, generator=g, dtype=dtype)  # (n, d)
    y = torch.tanh(torch.einsum("nd,nde->ne", x, A[c]))  # (n, d)
    return x, y


def train_toy_moe(
    alpha: float,
    *,
    steps: int = 300,
    n_experts: int = 8,
    d: int = 8,
    h: int = 16,
    k: int = 1,
    n_tokens: int = 512,
    batch: int = 128,
    lr: float = 3e-3,
    router_skew: float = 2.0,
    z_weight: float = 0.0,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Train a one-layer MoE regressor on :func:`toy_task` with Adam; record the routing.

    The model is y_hat = MoE(x) with Switch gating (top-k of the raw probabilities, no
    renormalising), trained on MSE + alpha L_lb (+ z_weight L_z). Initialisation sets up the
    collapse: the router weights start at 1/100 of their usual scale with a logit offset
    ``router_skew`` on expert 0, so every token first picks expert 0; the experts' output
    projections start at 1/10 scale, so expert 0 becomes useful before the router can move.
    Without the balancing loss nothing pulls the tokens back to the other experts.

    Returns:
        dict of NumPy arrays over the ``steps`` steps: "load" (steps, N) the fractions f,
        "aux" the balancing loss N sum f P (the alpha = 1 form, recorded also when alpha = 0),
        "task" the MSE, "z" the router z-loss; and "final_load" (N,) on the whole data set.
    """
    if not (math.isfinite(float(alpha)) and float(alpha) >= 0):
        raise ValueError(f"alpha must be finite and non-negative, got {alpha!r}")
    for name, v in (("steps", steps), ("batch", batch), ("n_tokens", n_tokens)):
        _positive_int(v, name)
    if batch > n_tokens:
        raise ValueError(f"batch={batch} exceeds n_tokens={n_tokens}")
    x_all, y_all = toy_task(n_tokens, d, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    params = init_experts(n_experts, d, h, generator=g)
    params["W_r"] = params["W_r"] * 0.01
    params["W2"] = params["W2"] * 0.1
    params["b_r"] = torch.zeros(n_experts)
    params["b_r"][0] = router_skew
    for p in params.values():
        p.requires_grad_(True)
    opt = torch.optim.Adam(params.values(), lr=lr)
    hist = {key: [] for key in ("load", "aux", "task", "z")}
    for _ in range(steps):
        rows = torch.randperm(n_tokens, generator=g)[:batch]
        x, y = x_all[rows], y_all[rows]
        logits = x @ params["W_r"] + params["b_r"]  # (B, N)
        route = topk_route(logits, k, renormalize=False)
        out = moe_routed(x, route.idx, route.gates, params["W"], params["V"], params["W2"])
        task = ((out - y) ** 2).mean()
        aux = load_balancing_loss(route.probs, route.idx)
        zl = z_loss(logits, weight=1.0)
        loss = task + alpha * aux + z_weight * zl
        opt.zero_grad()
        loss.backward()
        opt.step()
        hist["load"].append(expert_load(route.idx, n_experts).numpy())
        hist["aux"].append(aux.item())
        hist["task"].append(task.item())
        hist["z"].append(zl.item())
    with torch.no_grad():
        logits = x_all @ params["W_r"] + params["b_r"]
        final = expert_load(topk_route(logits, k, renormalize=False).idx, n_experts)
    out = {key: np.asarray(v) for key, v in hist.items()}
    out["final_load"] = final.numpy()
    return out
