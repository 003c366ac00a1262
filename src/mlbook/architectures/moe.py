"""Mixture of experts (chapter 27): router, top-k gates, routed and dense layers, balancing,
shared and fine-grained experts, expert parallelism.

Shape legend (tokens flattened: (B, T, d) -> (T, d))
    T tokens;  d model width;  h expert hidden width;  N experts;  k experts per token
    r, p   (T, N) router logits and probabilities p = softmax(r)
    idx    (T, k) selected experts, best first;  gates (T, k) their weights a_i
    G      (T, N) dense gate matrix;  W, V (N, d, h), W2 (N, h, d) the SwiGLU experts
    f, P   (N,) share of the T*k assignments per expert;  mean router probability per expert
    m      fine-grained factor: an expert of width h becomes m experts of width h / m
    N_s    shared experts, on every token;  P devices of expert parallelism, N / P experts each
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..nn.activations import swiglu_ffn
from ..nn.softmax import softmax, z_loss
from ..validation import (
    bool_tensor,
    distinct,
    distribution,
    divides,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    positive,
    positive_int,
    same_shape,
    shape_is,
)

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
    "segment_experts",
    "moe_shared",
    "moe_shared_dense",
    "expert_layer_budget",
    "expert_parallel_moe",
    "MoEConfig",
    "parameter_budget",
    "toy_task",
    "train_toy_moe",
]


# --- eq. 27.1 and 27.2: router, top-k, gates -----------------------------------------------------


class Routing(NamedTuple):
    """The router's decision for a batch: probabilities, selected experts and their gates."""

    probs: torch.Tensor  # (T, N) p = softmax(r)
    idx: torch.Tensor  # (T, k) selected experts, highest score first
    gates: torch.Tensor  # (T, k) gate values a_i of the selected experts


def topk_route(
    logits: torch.Tensor, k: int, *, renormalize: bool = True, bias: torch.Tensor | None = None
) -> Routing:
    """p = softmax(r), S = topk(p + b), gates a_i for i in S. Implements eqs. 27.1-27.2.

    logits: (T, N); k: 1 <= k <= N; bias: (N,) selection-only bias of eq. 27.5, or None.
    renormalize=True (Mixtral): a_i = p_i / sum_{j in S} p_j, the softmax of the k selected
    logits, so each token's k gates sum to exactly 1; renormalize=False (Switch): a_i = p_i,
    gates summing to sum_{j in S} p_j <= 1. The bias changes S only, never a gate.
    Returns Routing(probs, idx, gates).
    """
    float_tensor(logits, "logits", ndim=2)
    n = logits.shape[1]
    integer(k, "k", 1, n)
    p = softmax(logits, dim=-1)  # (T, N)
    scores = p
    if bias is not None:
        shape_is(bias, "bias", (n,))
        scores = p + bias.to(p.dtype)  # selection only
    idx = torch.topk(scores.detach(), k, dim=-1).indices  # (T, k)
    a = p.gather(1, idx)  # (T, k) p_i of the selected experts
    if renormalize:
        a = a / a.sum(dim=-1, keepdim=True)
    return Routing(p, idx, a)


def gate_matrix(idx: torch.Tensor, gates: torch.Tensor, n_experts: int) -> torch.Tensor:
    """The dense gate matrix G[t, idx[t, j]] = gates[t, j], zero elsewhere: (T, k) -> (T, N).

    Each row of idx names k distinct experts (one entry of G per gate).
    """
    index_tensor(idx, "idx", high=n_experts, ndim=2)
    distinct(idx, "idx")  # a repeated expert would keep only one of its gates
    same_shape(gates, idx, ("gates", "idx"))
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
    """Random router and N SwiGLU experts, N(0, 1/fan_in) entries.

    Returns {"W_r": (d, N), "W": (N, d, h), "V": (N, d, h), "W2": (N, h, d)}.
    """
    for name, v in (("n_experts", n_experts), ("d", d), ("h", h)):
        positive_int(v, name)

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
    """y_t = sum_i G[t, i] E_i(x_t), every expert on every token (reference). Implements eq. 27.2.

    x: (T, d); G: (T, N); W, V: (N, d, h); W2: (N, h, d). Returns y: (T, d).
    """
    float_tensor(x, "x", ndim=2)
    n = W.shape[0]
    shape_is(G, "G", (x.shape[0], n))
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
    """y = sum_{i in S} a_i E_i(x), each expert run once on its own tokens. Implements eq. 27.2.

    x: (T, d); idx, gates: (T, k); W, V: (N, d, h); W2: (N, h, d); keep: (T, k) bool mask
    (:func:`capacity_mask`) or None. Returns y: (T, d).
    """
    float_tensor(x, "x", ndim=2)
    n = W.shape[0]
    index_tensor(idx, "idx", high=n, ndim=2)
    shape_is(idx, "idx", (x.shape[0], None))
    same_shape(gates, idx, ("gates", "idx"))
    t, k = idx.shape
    expert = idx.reshape(-1)  # (T*k,)
    token = torch.arange(t, device=x.device).repeat_interleave(k)  # (T*k,)
    gate = gates.reshape(-1)  # (T*k,)
    if keep is not None:
        bool_tensor(keep, "keep")
        same_shape(keep, idx, ("keep", "idx"))
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
    """f_i, the share of the T*k assignments that went to expert i: (T, k) -> (N,) float64."""
    index_tensor(idx, "idx", high=n_experts, ndim=2)
    nonempty(idx, "idx")  # 0 / 0 otherwise
    counts = torch.bincount(idx.reshape(-1), minlength=n_experts)  # (N,)
    return counts.double() / idx.numel()


def mean_router_prob(probs: torch.Tensor) -> torch.Tensor:
    """P_i = (1/T) sum_t p_i(x_t), the mean router probability per expert: (T, N) -> (N,)."""
    float_tensor(probs, "probs", ndim=2, not_empty=True)
    return probs.mean(dim=0)


def load_balancing_loss(probs: torch.Tensor, idx: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """L_lb = alpha N sum_i f_i P_i (Switch Transformer). Implements eq. 27.3.

    probs: (T, N), each row a distribution (the router's softmax, not logits); idx: (T, k);
    alpha >= 0. Returns a scalar; the gradient flows through P only.
    """
    float_tensor(probs, "probs", ndim=2)
    distribution(probs, "probs", dim=1)  # rows >= 0 summing to 1, else the loss is meaningless
    number(alpha, "alpha", 0.0)
    t, n = probs.shape
    index_tensor(idx, "idx", high=n, ndim=2)
    shape_is(idx, "idx", (t, None))
    f = expert_load(idx, n).to(probs.dtype)  # (N,)
    return alpha * n * (f * mean_router_prob(probs)).sum()


def load_balancing_loss_grad(
    logits: torch.Tensor, f: torch.Tensor, alpha: float = 1.0
) -> torch.Tensor:
    """dL_lb/dr_tj = (alpha N / T) p_tj (f_j - sum_i f_i p_ti) for fixed f. Eq. 27.3.

    logits: (T, N); f: (N,) expert loads. Returns (T, N).
    """
    float_tensor(logits, "logits", ndim=2)
    t, n = logits.shape
    shape_is(f, "f", (n,))
    p = softmax(logits, dim=-1)  # (T, N)
    f = f.to(p.dtype)
    return alpha * n / t * p * (f - (p @ f)[:, None])  # (T, N)


# --- capacity ------------------------------------------------------------------------------------


def expert_capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float) -> int:
    """C = ceil(capacity_factor k T / N): the most assignments one expert accepts."""
    for name, v in (("n_tokens", n_tokens), ("n_experts", n_experts), ("k", k)):
        positive_int(v, name)
    cf = positive(capacity_factor, "capacity_factor")
    return math.ceil(cf * k * n_tokens / n_experts)


def capacity_mask(idx: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Each expert keeps its first C assignments, first choices before second ones.

    idx: (T, k); capacity: C >= 0. Returns keep: (T, k) bool.
    """
    index_tensor(idx, "idx", high=n_experts, ndim=2)
    integer(capacity, "capacity", 0)
    t, k = idx.shape
    order = idx.t().reshape(-1)  # (k*T,) slot-major
    onehot = torch.nn.functional.one_hot(order, n_experts)  # (k*T, N)
    position = ((onehot.cumsum(0) - 1) * onehot).sum(1)  # (k*T,) place in queue
    return (position < capacity).reshape(k, t).t()  # (k, T) -> (T, k)


def capacity_mask_naive(idx: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Reference for :func:`capacity_mask`: walk the assignments in priority order, count."""
    index_tensor(idx, "idx", high=n_experts, ndim=2)
    integer(capacity, "capacity", 0)
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
    """b_i <- b_i - eta sign(f_i - 1/N), loss-free balancing. Implements eq. 27.5.

    bias, f: (N,); eta > 0. Returns the new bias, (N,).
    """
    float_tensor(bias, "bias", ndim=1)
    same_shape(f, bias, ("f", "bias"))
    positive(eta, "eta")
    n = bias.shape[0]
    return bias - eta * torch.sign(f.to(bias.dtype) - 1.0 / n)


# --- shared and fine-grained experts (DeepSeekMoE) -----------------------------------------------


def segment_experts(
    W: torch.Tensor, V: torch.Tensor, W2: torch.Tensor, m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split each of N experts of width h into m experts of width h / m (fine-grained experts).

    Fine expert i m + j holds hidden units j h/m, ..., (j + 1) h/m - 1 of expert i, so the m
    pieces of an expert sum to it. W, V: (N, d, h); W2: (N, h, d); m divides h.
    Returns (W, V of shape (N m, d, h / m), W2 of shape (N m, h / m, d)).
    """
    n, d, h = float_tensor(W, "W", ndim=3).shape
    shape_is(V, "V", (n, d, h))
    shape_is(W2, "W2", (n, h, d))
    divides(positive_int(m, "m"), "m", h, "h")

    def columns(M):  # (N, d, h) -> (N, d, m, h/m) -> (N, m, d, h/m) -> (N m, d, h/m)
        return M.reshape(n, d, m, h // m).permute(0, 2, 1, 3).reshape(n * m, d, h // m)

    return columns(W), columns(V), W2.reshape(n * m, h // m, d)  # W2 rows: (N, h) -> (N m, h/m)


def moe_shared(
    x: torch.Tensor,
    shared: dict[str, torch.Tensor],
    idx: torch.Tensor,
    gates: torch.Tensor,
    W: torch.Tensor,
    V: torch.Tensor,
    W2: torch.Tensor,
) -> torch.Tensor:
    """y = sum_s E^shared_s(x) + sum_{i in S} a_i E_i(x): shared experts on every token, with gate
    1, plus the routed layer of :func:`moe_routed` (DeepSeekMoE).

    x: (T, d); shared: {"W", "V": (N_s, d, h), "W2": (N_s, h, d)}; idx, gates: (T, k); W, V:
    (N, d, h) and W2: (N, h, d), the routed experts. Returns y: (T, d).
    """
    float_tensor(x, "x", ndim=2)
    y = moe_routed(x, idx, gates, W, V, W2)  # (T, d)
    for s in range(shared["W"].shape[0]):
        y = y + swiglu_ffn(x, shared["W"][s], shared["V"][s], shared["W2"][s])  # gate 1
    return y


def moe_shared_dense(
    x: torch.Tensor,
    shared: dict[str, torch.Tensor],
    G: torch.Tensor,
    W: torch.Tensor,
    V: torch.Tensor,
    W2: torch.Tensor,
) -> torch.Tensor:
    """Reference for :func:`moe_shared`: one dense loop over all N_s + N experts, the gate matrix
    (T, N_s + N) being 1 for the shared experts and G (T, N) for the routed ones."""
    float_tensor(x, "x", ndim=2)
    ones = G.new_ones(G.shape[0], shared["W"].shape[0])  # (T, N_s)
    return moe_dense(
        x,
        torch.cat([ones, G], dim=1),
        torch.cat([shared["W"], W]),
        torch.cat([shared["V"], V]),
        torch.cat([shared["W2"], W2]),
    )


def expert_layer_budget(
    d: int, h: int, n_routed: int, top_k: int, n_shared: int = 0
) -> dict[str, int]:
    """Parameters and FLOPs of one layer of SwiGLU experts of width h: n_shared on every token,
    top_k of n_routed chosen by a router (a d x n_routed matrix).

    Returns "experts" 3 d h (N_s + N) and "router" d N (the layer's parameters); "active"
    3 d h (N_s + k) + d N (those one token multiplies with); "flops" 2 active (matmul FLOPs per
    token, a multiply-add counted as 2); "combinations" C(N, k) (the sets of routed experts a
    token can choose).
    """
    for name, v in (("d", d), ("h", h), ("n_routed", n_routed)):
        positive_int(v, name)
    integer(top_k, "top_k", 1, n_routed)
    integer(n_shared, "n_shared", 0)
    expert = 3 * d * h  # W, V (d, h) and W2 (h, d)
    out = {
        "experts": expert * (n_shared + n_routed),
        "router": d * n_routed,
        "active": expert * (n_shared + top_k) + d * n_routed,
        "combinations": math.comb(n_routed, top_k),
    }
    out["flops"] = 2 * out["active"]
    return out


# --- expert parallelism: the all-to-all ---------------------------------------------------------


def expert_parallel_moe(
    x: torch.Tensor,
    idx: torch.Tensor,
    gates: torch.Tensor,
    W: torch.Tensor,
    V: torch.Tensor,
    W2: torch.Tensor,
    n_devices: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The routed MoE layer on P simulated devices (expert parallelism), and its traffic.

    Device p holds tokens p T/P, ..., (p + 1) T/P - 1 and experts p N/P, ..., (p + 1) N/P - 1.
    Dispatch (an all-to-all): each assignment (t, i) sends x_t from the token's device to the
    expert's; each device runs its experts on what it received; combine (the reverse all-to-all):
    each a_i E_i(x_t) returns to the token's device and is summed into y_t.

    x: (T, d); idx, gates: (T, k); W, V: (N, d, h); W2: (N, h, d); P divides T and N.
    Returns (y (T, d), sent (P, P) int64: the token vectors device p sends to device q in the
    dispatch; the combine sends as many back, from q to p).
    """
    float_tensor(x, "x", ndim=2)
    t, n = x.shape[0], W.shape[0]
    index_tensor(idx, "idx", high=n, ndim=2)
    shape_is(idx, "idx", (t, None))
    same_shape(gates, idx, ("gates", "idx"))
    n_dev = positive_int(n_devices, "n_devices")
    divides(n_dev, "n_devices", t, "the number of tokens T")
    divides(n_dev, "n_devices", n, "the number of experts N")
    home = torch.arange(t, device=x.device) // (t // n_dev)  # (T,) device of token t
    owner = idx // (n // n_dev)  # (T, k) device of expert idx[t, j]
    sent = torch.zeros(n_dev, n_dev, dtype=torch.int64)
    pairs = (home[:, None].expand_as(idx).reshape(-1).cpu(), owner.reshape(-1).cpu())
    sent.index_put_(pairs, torch.ones(idx.numel(), dtype=torch.int64), accumulate=True)
    y = torch.zeros_like(x)
    for q in range(n_dev):  # each device (in parallel on real hardware)
        tok, slot = (owner == q).nonzero(as_tuple=True)  # (n_q,) assignments sent to device q
        inbox, expert = x[tok], idx[tok, slot]  # dispatch: (n_q, d) token vectors, (n_q,)
        out = torch.zeros_like(inbox)
        for i in range(q * (n // n_dev), (q + 1) * (n // n_dev)):  # its N / P experts
            sel = expert == i
            out[sel] = swiglu_ffn(inbox[sel], W[i], V[i], W2[i])
        y = y.index_add(0, tok, gates[tok, slot, None] * out)  # combine: back to the tokens
    return y, sent


# --- total and active parameters -----------------------------------------------------------------


@dataclass(frozen=True)
class MoEConfig:
    """A decoder with grouped-query attention and SwiGLU MoE blocks (default: Mixtral 8x7B)."""

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
        for name in ("vocab", "d_model", "n_layers", "n_heads", "head_dim", "d_ff", "n_experts"):
            positive_int(getattr(self, name), name)
        integer(self.top_k, "top_k", 1, self.n_experts)
        divides(positive_int(self.n_kv_heads, "n_kv_heads"), "n_kv_heads", self.n_heads, "n_heads")


def parameter_budget(cfg: MoEConfig) -> dict[str, int]:
    """Total and active (per token) parameters of an MoE transformer, by component.

    Embedding and untied head V d each; per layer q, o (d H d_h), k, v (d H_kv d_h), router d N,
    N experts 3 d d_ff each, two RMSNorms 2 d; final RMSNorm d. Active: k of the N experts.
    """
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
    """Tokens x = mu_c + spread eps of Gaussian clusters c, targets y = tanh(x A_c): (n, d) each."""
    for name, v in (("n_tokens", n_tokens), ("d", d), ("n_clusters", n_clusters)):
        positive_int(v, name)
    positive(spread, "spread")
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
    lr: float = 1e-2,
    spread: float = 1.5,
    z_weight: float = 0.0,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Train a one-layer Switch-gated MoE on :func:`toy_task`: MSE + alpha L_lb + z_weight L_z.

    Router and experts start from :func:`init_experts` with no offset (the experts' output
    weights scaled by 0.1, so that they start small against the targets). Returns NumPy arrays:
    "load" (steps, N), "aux" (N sum f P), "task", "z" per step; "final_load" (N,).
    """
    number(alpha, "alpha", 0.0)
    for name, v in (("steps", steps), ("n_tokens", n_tokens)):
        positive_int(v, name)
    integer(batch, "batch", 1, n_tokens)
    x_all, y_all = toy_task(n_tokens, d, spread=spread, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    params = init_experts(n_experts, d, h, generator=g)
    params["W2"] = params["W2"] * 0.1
    for p in params.values():
        p.requires_grad_(True)
    opt = torch.optim.Adam(params.values(), lr=lr)
    hist = {key: [] for key in ("load", "aux", "task", "z")}
    for _ in range(steps):
        rows = torch.randperm(n_tokens, generator=g)[:batch]
        x, y = x_all[rows], y_all[rows]
        logits = x @ params["W_r"]  # (B, N)
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
        final = expert_load(topk_route(x_all @ params["W_r"], k, renormalize=False).idx, n_experts)
    out = {key: np.asarray(v) for key, v in hist.items()}
    out["final_load"] = final.numpy()
    return out
