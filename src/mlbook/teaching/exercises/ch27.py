"""Checks of the exercises of chapter 27 (mixture of experts and mixture of depths).

The references are independent of :mod:`mlbook.architectures.moe` and
:mod:`mlbook.architectures.mixture_of_depths`: the router gradient from its closed form through the
softmax Jacobian with the experts written out with ``torch.nn.functional.silu`` (27.1); the expected
dropped fraction from the binomial probabilities computed with ``torch.lgamma``, dropped counts from
``torch.bincount`` and a Monte Carlo run (27.2); parameter counts summed tensor by tensor over the
shapes of Hugging Face's ``MixtralForCausalLM`` (27.3); mixture-of-depths selection with
``torch.topk`` (27.4); a simulation of the dispatch beside the hypergeometric probability (27.5);
a split with ``torch.chunk`` and the pieces run on random tokens (27.6); and a loop of
``torch.topk`` and sign updates (27.7).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from ...architectures.moe import MoEConfig
from . import (
    Incorrect,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    is_close,
)
from . import reference_answer as _ref

F64 = torch.float64


# --- 27.1 ----------------------------------------------------------------------------------------


def _moe_case(seed: int, T: int, d: int, h: int, N: int):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale):
        return torch.randn(*shape, generator=gen, dtype=F64) * scale

    x = rnd(T, d, scale=1.0)
    params = {
        "W_r": rnd(d, N, scale=2.0 / math.sqrt(d)),
        "W": rnd(N, d, h, scale=d**-0.5),
        "V": rnd(N, d, h, scale=d**-0.5),
        "W2": rnd(N, h, d, scale=h**-0.5),
    }
    return x, params


def _expert_sums(x, params) -> torch.Tensor:
    """s[t, i] = sum of the entries of expert i's SwiGLU output for token t, (T, N)."""
    gate = torch.einsum("td,ndh->tnh", x, params["W"])
    value = torch.einsum("td,ndh->tnh", x, params["V"])
    out = torch.einsum("tnh,nhe->tne", F.silu(gate) * value, params["W2"])  # (T, N, d)
    return out.sum(-1)


def _topk_grad(r, s, k: int, renormalize: bool) -> torch.Tensor:
    """d/dr of sum_t sum_{i in top-k} a_ti s_ti, by the softmax Jacobian."""
    idx = torch.topk(r, k, dim=1).indices  # (T, k)
    sel = torch.zeros_like(r).scatter(1, idx, 1.0)  # (T, N) one-hot of S
    if renormalize:
        a = torch.softmax(r.masked_fill(sel == 0, float("-inf")), dim=1)  # softmax over S
        return a * (s - (a * s).sum(1, keepdim=True))
    p = torch.softmax(r, dim=1)
    w = sel * p * s  # p_i s_i on S
    return w - p * w.sum(1, keepdim=True)


def _closed_grad(x, params, renormalize, k=1):
    """The gradient of y.sum() w.r.t. the logits for top-k routing, in closed form."""
    return _topk_grad(x @ params["W_r"], _expert_sums(x, params), k, renormalize)


def grad_ignores_renormalize(x, params, renormalize):
    return _closed_grad(x, params, True)


def grad_always_raw(x, params, renormalize):
    return _closed_grad(x, params, False)


def grad_of_mean(x, params, renormalize):
    return _closed_grad(x, params, renormalize) / x.numel()


def grad_top2(x, params, renormalize):
    return _closed_grad(x, params, renormalize, k=2)


def grad_through_selected_logit_only(x, params, renormalize):
    """Gates exp(r_i) / Z with Z held fixed: the softmax's coupling of the logits is lost."""
    r = x @ params["W_r"]
    chosen = torch.zeros_like(r).scatter(1, r.argmax(1, keepdim=True), 1.0)
    return chosen * torch.softmax(r, 1) * _expert_sums(x, params)


def grad_flipped(x, params, renormalize):
    return -_closed_grad(x, params, renormalize)


WRONG_RAW_GRAD = {
    "with raw gates (renormalize=False) the gate p_i depends on every logit, so the gradient "
    "is not zero (is `renormalize` passed on to moe.topk_route?)": grad_ignores_renormalize,
    "the sign is flipped: return the gradient of y.sum(), not of -y.sum()": grad_flipped,
    "that is the gradient of y.mean(); backpropagate y.sum()": grad_of_mean,
    "only the chosen logit has a gradient, but the softmax couples all logits: "
    "dp_i/dr_j = p_i (δ_ij - p_j)": grad_through_selected_logit_only,
    "that routes every token to two experts; this exercise uses top-1 (k = 1)": grad_top2,
}
WRONG_RENORMALIZED_GRAD = {
    "with renormalize=True and k = 1 the gate is p_i / p_i = 1 for any logits, so the "
    "gradient must vanish (is `renormalize` passed on to moe.topk_route?)": grad_always_raw,
    "that routes every token to two experts; this exercise uses top-1 (k = 1)": grad_top2,
}


@exercise("27.1", "router_logit_grad")
def router_logit_grad(answer) -> str:
    """dL/dr of y.sum() for top-1 routing: the softmax-Jacobian closed form, or zero."""
    for seed, (T, d, h, N) in ((271, (32, 8, 16, 4)), (272, (16, 6, 8, 8))):
        x, params = _moe_case(seed, T, d, h, N)
        for renormalize in (False, True):
            want = _closed_grad(x, params, renormalize)
            wrongs = WRONG_RENORMALIZED_GRAD if renormalize else WRONG_RAW_GRAD
            p_args = {name: t.clone() for name, t in params.items()}
            expect_answer(
                attempt(answer, x.clone(), p_args, renormalize),
                want,
                f"router_logit_grad(x, params, renormalize={renormalize}) for T = {T}, N = {N}",
                wrong={fb: fn(x, params, renormalize) for fb, fn in wrongs.items()},
                atol=1e-10,
                rtol=1e-8,
            )
    return (
        "matches the closed form s_t p_ti (δ_ij - p_tj) for raw top-1 gates and is zero for "
        "renormalised ones, on 2 token batches"
    )


# --- 27.2 ----------------------------------------------------------------------------------------


def _capacity(T: int, N: int, k: int, c: float) -> int:
    return math.ceil(c * k * T / N)


def _binom_overflow(T: int, N: int, k: int, C: int, p: float | None = None) -> float:
    """N E[max(0, n - C)] / (k T) for n ~ Binomial(T, p), p = k / N by default."""
    p = k / N if p is None else p
    n = torch.arange(T + 1, dtype=F64)
    log_pmf = (
        math.lgamma(T + 1)
        - torch.lgamma(n + 1)
        - torch.lgamma(T - n + 1)
        + n * math.log(p)
        + (T - n) * math.log1p(-p)
    )
    return N * float((log_pmf.exp() * (n - C).clamp(min=0)).sum()) / (k * T)


def _expected(T, N, k, capacity_factor):
    return _binom_overflow(T, N, k, _capacity(T, N, k, capacity_factor))


def expected_count(T, N, k, capacity_factor):
    return _expected(T, N, k, capacity_factor) * k * T


def expected_per_token(T, N, k, capacity_factor):
    return _expected(T, N, k, capacity_factor) * k


def expected_one_expert(T, N, k, capacity_factor):
    return _expected(T, N, k, capacity_factor) / N


def expected_p_one_over_n(T, N, k, capacity_factor):
    return _binom_overflow(T, N, k, _capacity(T, N, k, capacity_factor), p=1 / N)


def expected_jensen(T, N, k, capacity_factor):
    return N * max(0.0, k * T / N - _capacity(T, N, k, capacity_factor)) / (k * T)


def expected_floor(T, N, k, capacity_factor):
    return _binom_overflow(T, N, k, math.floor(capacity_factor * k * T / N))


def _dropped(idx, N, C, extra=0):
    counts = torch.bincount(idx.reshape(-1), minlength=N).to(F64)  # (N,)
    return float((counts - C - extra).clamp(min=0).sum()) / idx.numel()


def kept_fraction(idx, N, C):
    return 1 - _dropped(idx, N, C)


def dropped_per_token(idx, N, C):
    return _dropped(idx, N, C) * idx.shape[1]


def dropped_count(idx, N, C):
    return round(_dropped(idx, N, C) * idx.numel())


def dropped_capacity_plus_one(idx, N, C):
    return _dropped(idx, N, C, extra=1)


EXPECTED = _ref("27.2", "expected_drop_fraction")
DROPPED = _ref("27.2", "dropped_fraction")

WRONG_EXPECTED = {
    "that is the expected number of dropped assignments; divide by the k T "
    "assignments": expected_count,
    "divide by the k T assignments, not by the T tokens": expected_per_token,
    "that is one expert's expected overflow; all N experts overflow alike, so multiply by "
    "N": expected_one_expert,
    "each expert is picked with probability k/N, not 1/N": expected_p_one_over_n,
    "E[max(0, n - C)] is not max(0, E[n] - C): the overflow is convex in the count, and the "
    "fluctuations above the mean are what gets dropped": expected_jensen,
    "the capacity rounds up, C = ceil(c k T / N) (moe.expert_capacity)": expected_floor,
}
WRONG_DROPPED = {
    "that is the fraction kept; return the fraction dropped": kept_fraction,
    "divide by the T k assignments (idx.numel()), not by the T tokens": dropped_per_token,
    "return a fraction of the assignments, not their number": dropped_count,
    "an expert keeps C assignments, not C + 1": dropped_capacity_plus_one,
}


def _float_of(value, what: str) -> float:
    return float(as_tensor(value, what, ()))


@exercise("27.2", "expected_drop_fraction", "dropped_fraction")
def drop_fractions(expected, dropped) -> str:
    """The exact expected drop under uniform routing, one batch's drop, and a simulation."""
    for T, N, k, c in (
        (64, 8, 2, 1.0),
        (2048, 8, 2, 1.0),
        (2048, 8, 2, 1.25),
        (100, 6, 2, 1.0),
        (64, 4, 1, 1.0),
    ):
        expect_answer(
            attempt(expected, T, N, k, c),
            _expected(T, N, k, c),
            f"expected_drop_fraction(T={T}, N={N}, k={k}, capacity_factor={c})",
            wrong={fb: fn(T, N, k, c) for fb, fn in WRONG_EXPECTED.items()},
            atol=1e-12,
            rtol=1e-8,
        )

    gen = torch.Generator().manual_seed(272)
    T, N, k = 256, 8, 2
    logits = torch.randn(T, N, generator=gen, dtype=F64) + torch.tensor(
        [1.5, 0.7, 0, 0, 0, 0, 0, 0], dtype=F64
    )
    idx = torch.topk(logits, k, dim=1).indices  # (T, k), skewed loads
    for C in (64, 40, 0, 512):
        expect_answer(
            attempt(dropped, idx.clone(), N, C),
            _dropped(idx, N, C),
            f"dropped_fraction(idx, N={N}, C={C})",
            wrong={fb: fn(idx, N, C) for fb, fn in WRONG_DROPPED.items()},
            atol=1e-12,
            rtol=1e-10,
        )

    T, N, k, batches = 2048, 8, 2, 200
    C = _capacity(T, N, k, 1.0)
    exact = _binom_overflow(T, N, k, C)
    sims = []
    for _ in range(batches):
        idx = torch.rand(T, N, generator=gen).topk(k, dim=1).indices
        sims.append(_float_of(attempt(dropped, idx, N, C), f"dropped_fraction(idx, N={N}, C={C})"))
    sims = torch.tensor(sims, dtype=F64)
    se = float(sims.std()) / math.sqrt(batches)
    z = abs(float(sims.mean()) - exact) / max(se, 1e-15)
    expect(
        z < 4,
        f"the mean dropped fraction of {batches} simulated batches is {z:.1f} standard "
        f"errors from expected_drop_fraction: do the two functions count the same thing?",
    )
    return (
        "the binomial formula matches for 5 settings (k = 1 and 2, C rounded up), "
        "dropped_fraction matches sum_i max(0, n_i - C) / (k T) for 4 capacities, and 200 "
        "simulated batches agree with the formula within 4 standard errors"
    )


# --- 27.3 ----------------------------------------------------------------------------------------


def _hf_counts(cfg: MoEConfig) -> dict[str, int]:
    """Parameter counts summed over the tensors of MixtralForCausalLM (names as in HF)."""
    d, hd = cfg.d_model, cfg.head_dim
    layer = {
        "self_attn.q_proj": cfg.n_heads * hd * d,
        "self_attn.k_proj": cfg.n_kv_heads * hd * d,
        "self_attn.v_proj": cfg.n_kv_heads * hd * d,
        "self_attn.o_proj": d * cfg.n_heads * hd,
        "block_sparse_moe.gate": cfg.n_experts * d,
        "input_layernorm": d,
        "post_attention_layernorm": d,
    }
    for e in range(cfg.n_experts):
        for w in ("w1", "w2", "w3"):
            layer[f"block_sparse_moe.experts.{e}.{w}"] = cfg.d_ff * d
    per_layer = sum(layer.values())
    experts = cfg.n_layers * sum(v for name, v in layer.items() if ".experts." in name)
    embed = cfg.vocab * d
    head = 0 if cfg.tied_embeddings else cfg.vocab * d
    total = embed + cfg.n_layers * per_layer + d + head
    active = total - experts * (cfg.n_experts - cfg.top_k) // cfg.n_experts
    return {
        "total": total,
        "active": active,
        "experts": experts,
        "embed": embed,
        "head": head,
        "norms": cfg.n_layers * 2 * d + d,
        "router": cfg.n_layers * cfg.n_experts * d,
        "one_matrix": experts // 3,
        "gqa_gap": cfg.n_layers * 2 * d * hd * (cfg.n_heads - cfg.n_kv_heads),
    }


def _summary_with(cfg, extra_total: int = 0, extra_experts: int = 0):
    """(total, active, share) of a count that adds extra_total parameters outside the experts
    and extra_experts inside them (a mistake that forgets or doubles a component)."""
    c = _hf_counts(cfg)
    experts = c["experts"] + extra_experts
    total = c["total"] + extra_total + extra_experts
    active = total - experts * (cfg.n_experts - cfg.top_k) // cfg.n_experts
    return total, active, experts / total


def summary_without_head(cfg):
    return _summary_with(cfg, extra_total=-_hf_counts(cfg)["head"])


def summary_head_counted_twice(cfg):
    return _summary_with(cfg, extra_total=_hf_counts(cfg)["embed"])


def summary_without_gqa(cfg):
    return _summary_with(cfg, extra_total=_hf_counts(cfg)["gqa_gap"])


def summary_two_matrix_experts(cfg):
    return _summary_with(cfg, extra_experts=-_hf_counts(cfg)["one_matrix"])


def summary_without_norms(cfg):
    return _summary_with(cfg, extra_total=-_hf_counts(cfg)["norms"])


def summary_without_router(cfg):
    return _summary_with(cfg, extra_total=-_hf_counts(cfg)["router"])


def summary_all_experts_active(cfg):
    total, _, share = _summary_with(cfg)
    return total, total, share


def summary_scaled_active(cfg):
    total, _, share = _summary_with(cfg)
    return total, total * cfg.top_k / cfg.n_experts, share


def summary_experts_only_active(cfg):
    total, _, share = _summary_with(cfg)
    return total, _hf_counts(cfg)["experts"] * cfg.top_k // cfg.n_experts, share


def summary_active_share(cfg):
    total, active, _ = _summary_with(cfg)
    return total, active, _hf_counts(cfg)["experts"] * cfg.top_k / cfg.n_experts / total


def summary_share_of_active(cfg):
    total, active, _ = _summary_with(cfg)
    return total, active, _hf_counts(cfg)["experts"] / active


def summary_share_outside(cfg):
    total, active, share = _summary_with(cfg)
    return total, active, 1 - share


WRONG_TOTAL = {
    "the output head is a separate vocab x d matrix unless the embeddings are "
    "tied": summary_without_head,
    "the k and v projections have only n_kv_heads heads (grouped-query "
    "attention)": summary_without_gqa,
    "a SwiGLU expert has three d x d_ff matrices (W, V and W2)": summary_two_matrix_experts,
    "the RMSNorm weights are missing: two vectors per layer and a final one": summary_without_norms,
    "the router (a d x N matrix per layer) is missing": summary_without_router,
}
WRONG_TOTAL_TIED = {
    "with tied embeddings the output head is the embedding matrix: count it "
    "once": summary_head_counted_twice,
}
WRONG_ACTIVE = {
    "a token passes through only top_k of the N experts of each layer": summary_all_experts_active,
    "only the experts are shared out: attention, embeddings and norms run for every token, so "
    "the active count is not total * k / N": summary_scaled_active,
    "the active count also includes attention, embeddings, router and norms, which every token "
    "uses": summary_experts_only_active,
}
WRONG_SHARE = {
    "divide the experts' parameters by the total, not by the active count": summary_share_of_active,
    "the share counts all N experts, not only the k active ones": summary_active_share,
    "that is the share outside the experts": summary_share_outside,
}


CONFIGS = {
    "Mixtral 8x7B": MoEConfig(),
    "Mixtral 8x22B": MoEConfig(
        vocab=32768,
        d_model=6144,
        n_layers=56,
        n_heads=48,
        n_kv_heads=8,
        head_dim=128,
        d_ff=16384,
        n_experts=8,
        top_k=2,
    ),
    "a small model with tied embeddings and full multi-head attention": MoEConfig(
        vocab=1000,
        d_model=64,
        n_layers=3,
        n_heads=4,
        n_kv_heads=4,
        head_dim=16,
        d_ff=128,
        n_experts=4,
        top_k=1,
        tied_embeddings=True,
    ),
}


@exercise("27.3", "moe_parameter_summary")
def moe_parameter_summary(answer) -> str:
    """Total, active and expert share against a tensor-by-tensor count of Mixtral's shapes."""
    for name, cfg in CONFIGS.items():
        what = f"moe_parameter_summary(cfg) for {name}"
        got = expect_tuple(attempt(answer, cfg), what, ("total", "active", "expert_share"))
        total, active, share = _summary_with(cfg)
        for j, (part, want, wrongs, tol) in enumerate(
            (
                ("total", total, WRONG_TOTAL_TIED if cfg.tied_embeddings else WRONG_TOTAL, 0.5),
                ("active", active, WRONG_ACTIVE, 0.5),
                ("expert_share", share, WRONG_SHARE, 1e-12),
            )
        ):
            expect_answer(
                got[j],
                want,
                f"{what}: {part}",
                wrong={fb: fn(cfg)[j] for fb, fn in wrongs.items()},
                atol=tol,
                rtol=0 if j < 2 else 1e-9,
            )
    got = attempt(answer, CONFIGS["Mixtral 8x22B"])
    expect(
        round(float(got[0]) / 1e9) == 141 and round(float(got[1]) / 1e9) == 39,
        "Mixtral 8x22B should come out at the quoted 141B total and 39B active",
    )
    return (
        "total, active and expert share match a tensor-by-tensor count for Mixtral 8x7B, "
        "Mixtral 8x22B (the quoted 141B and 39B) and a tied, full-attention model"
    )


# --- 27.4 ----------------------------------------------------------------------------------------


def _scores_and_selection(x, w_r, C):
    scores = x @ w_r
    return scores, set(torch.topk(scores, C).indices.tolist())


def evict_with_earlier_token(x, w_r, C):
    """Raise an unselected token BEFORE the victim: evicts it, but says nothing about causality."""
    scores, sel = _scores_and_selection(x, w_r, C)
    victim = min(sel, key=lambda t: float(scores[t]))
    earlier = next(t for t in range(x.shape[0]) if t not in sel and t != victim)
    x_new = x.clone()
    x_new[earlier] += (scores.max() - scores[earlier] + 1) * w_r / (w_r @ w_r)
    return victim, earlier, x_new


def evict_by_lowering(x, w_r, C):
    victim, later, x_new = _ref("27.4", "evict_by_later_token")(x, w_r, C)
    return victim, later, 2 * x - x_new  # moved the other way: the score falls


def evict_best_token(x, w_r, C):
    scores, sel = _scores_and_selection(x, w_r, C)
    victim = max(sel, key=lambda t: float(scores[t]))
    later = next(t for t in range(victim + 1, x.shape[0]) if t not in sel)
    x_new = x.clone()
    x_new[later] += (scores.max() - scores[later] + 1) * w_r / (w_r @ w_r)
    return victim, later, x_new


def evict_by_lowering_the_victim(x, w_r, C):
    victim, later, x_new = _ref("27.4", "evict_by_later_token")(x, w_r, C)
    x_new = x_new.clone()
    x_new[victim] -= 10 * w_r
    return victim, later, x_new


def _position(value, what: str, T: int) -> int:
    t = as_tensor(value, what, ())
    expect(
        float(t) == int(t) and 0 <= int(t) < T,
        f"{what} should be a token position in 0..{T - 1}, got {float(t):g}",
    )
    return int(t)


@exercise("27.4", "evict_by_later_token")
def evict_by_later_token(answer) -> str:
    """A later token's change evicts an earlier token from the top C (checked with torch.topk)."""
    for seed, (T, d, C) in ((274, (64, 16, 8)), (275, (32, 8, 4)), (276, (12, 4, 6))):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(T, d, generator=gen, dtype=F64)
        w = torch.randn(d, generator=gen, dtype=F64) / math.sqrt(d)
        what = f"evict_by_later_token(x, w_r, C={C}) for T = {T}"
        got = attempt(answer, x.clone(), w.clone(), C)
        expect(
            isinstance(got, (tuple, list)) and len(got) == 3,
            f"{what} should return (victim, later, x_new), got {type(got).__name__}",
        )
        victim = _position(got[0], f"{what}: victim", T)
        later = _position(got[1], f"{what}: later", T)
        x_new = as_tensor(got[2], f"{what}: x_new", (T, d))
        scores = x @ w
        top = set(torch.topk(scores, C).indices.tolist())
        expect(
            victim in top,
            f"{what}: token {victim} is not among the top {C} of x, so there is nothing to evict",
        )
        expect(
            later > victim,
            f"{what}: the changed token {later} comes before the victim "
            f"{victim}; the point is that a LATER token decides about an "
            f"earlier one",
        )
        changed = [int(t) for t in (x_new != x).any(dim=1).nonzero().reshape(-1)]
        others = [t for t in changed if t != later]
        expect(
            not others,
            f"{what}: x_new differs from x in rows {others[:4]}, not only in row "
            f"later = {later}; every other token must stay as it was",
        )
        new_top = set(torch.topk(x_new @ w, C).indices.tolist())
        if victim in new_top:
            lowest = min(top, key=lambda t: float(scores[t]))
            expect(
                victim == lowest,
                f"{what}: only the lowest-scoring selected token (the C-th "
                f"best, here {lowest}) can be pushed out when one token "
                f"enters the top C; token {victim} stays selected",
            )
            raise Incorrect(
                f"{what}: token {victim} is still selected for x_new; raise the "
                f"router score x_new[later] @ w_r of token {later} above the "
                f"victim's score"
            )
    return (
        "for 3 sequences, changing only a later token evicts an earlier one from the top C "
        "(checked with torch.topk)"
    )


# --- 27.5 ----------------------------------------------------------------------------------------

DEDUP_OPTIONS = ("a few percent", "about a third", "about half", "nearly all")


def _dedup_copies(N: int, P: int, k: int) -> tuple[float, float]:
    """Expected copies of a token sent to other devices: once per expert, once per device."""
    none_there = math.comb(N - N // P, k) / math.comb(N, k)  # a device holds none of its k
    return k * (P - 1) / P, (P - 1) * (1 - none_there)


def _dedup_simulated(N: int, P: int, k: int, T: int, gen: torch.Generator) -> float:
    """The saving of sending once per device, for T tokens routed uniformly at random."""
    device = torch.rand(T, N, generator=gen).topk(k, dim=1).indices // (N // P)  # (T, k)
    home = torch.arange(T) % P  # (T,) the device of each token
    per_expert = int((device != home[:, None]).sum())
    reached = torch.zeros(T, P, dtype=torch.bool).scatter(1, device, True)  # (T, P)
    reached[torch.arange(T), home] = False
    return 1 - int(reached.sum()) / per_expert


def _dedup_option(saving: float) -> str:
    bounds = ((0.15, "a few percent"), (0.42, "about a third"), (0.7, "about half"))
    return next((name for bound, name in bounds if saving < bound), "nearly all")


def guess_half():
    return "about half"


def guess_nearly_all():
    return "nearly all"


def guess_a_number():
    return 0.04


@exercise("27.5", "predict_dedup_saving")
def dedup_prediction(answer) -> str:
    """Simulate DeepSeek-V3's layout (top-8 of 256 experts, 64 devices) and reveal the saving."""
    guess = attempt(answer)
    expect(
        isinstance(guess, str) and guess in DEDUP_OPTIONS,
        f"predict_dedup_saving() should return one of {DEDUP_OPTIONS}, got {guess!r}",
    )
    N, P, k, T = 256, 64, 8, 4096
    simulated = _dedup_simulated(N, P, k, T, torch.Generator().manual_seed(275))
    per_expert, per_device = _dedup_copies(N, P, k)
    exact = 1 - per_device / per_expert
    expect(abs(simulated - exact) < 0.01, "internal: the simulation disagrees with the formula")
    few_devices = 1 - _dedup_copies(N, 8, k)[1] / _dedup_copies(N, 8, k)[0]
    seen = (
        f"a simulation of {T} tokens saves {100 * simulated:.1f} % (exactly "
        f"{100 * exact:.2f} %: {per_device:.3f} instead of {per_expert:.3f} copies per token)"
    )
    if guess != _dedup_option(exact):
        raise Incorrect(
            f"you predicted {guess!r}; {seen}. Sending once per device saves only what "
            f"collides: 8 picks among 64 devices of 4 experts rarely share a device. A large "
            f"saving needs many experts per device: on 8 devices of 32 experts it is "
            f"{100 * few_devices:.0f} %"
        )
    return f"right: {seen}; on 8 devices of 32 experts it would be {100 * few_devices:.0f} %"


# --- 27.6 ----------------------------------------------------------------------------------------


def _split_reference(W, V, W2, m):
    """Piece j of expert i: torch.chunk of its hidden axis; the pieces listed expert by expert."""

    def pieces(M, axis):  # axis: the hidden axis of one expert's matrix
        return torch.stack([piece for e in M for piece in torch.chunk(e, m, dim=axis)])

    return pieces(W, 1), pieces(V, 1), pieces(W2, 0)


def split_reshape_only(W, V, W2, m):
    N, d, h = W.shape
    return W.reshape(N * m, d, h // m), V.reshape(N * m, d, h // m), W2.reshape(N * m, h // m, d)


def split_piece_major(W, V, W2, m):
    return tuple(torch.cat(torch.chunk(M, m, dim=a)) for M, a in ((W, 2), (V, 2), (W2, 1)))


def split_strided(W, V, W2, m):
    N, d, h = W.shape

    def every(M):  # piece j = hidden units j, j + m, j + 2m, ...
        return M.reshape(N, d, h // m, m).permute(0, 3, 1, 2).reshape(N * m, d, h // m)

    return (
        every(W),
        every(V),
        W2.reshape(N, h // m, m, d).permute(0, 2, 1, 3).reshape(-1, h // m, d),
    )


def split_w2_strided(W, V, W2, m):
    W_f, V_f, _ = _split_reference(W, V, W2, m)
    return W_f, V_f, split_strided(W, V, W2, m)[2]


WRONG_SPLIT = {  # the W2-only mistake first: its W2 equals the strided one's
    "W.reshape(N m, d, h/m) cuts through the d rows of W instead of its h hidden columns: "
    "reshape to (N, d, m, h/m), move the piece axis next to the expert axis, then merge the "
    "two": split_reshape_only,
    "the pieces are ordered piece-major (fine expert j N + i); fine expert i m + j must be "
    "piece j of expert i, the pieces of one expert next to each other": split_piece_major,
    "W2's rows must be cut like W's columns (the same hidden units in each piece), or the "
    "pieces no longer sum to the expert": split_w2_strided,
    "that takes every m-th hidden unit: those pieces sum to the expert too, but piece j must "
    "be the consecutive units j h/m, ..., (j + 1) h/m - 1": split_strided,
}


def _swiglu(x, W, V, W2):
    return (F.silu(x @ W) * (x @ V)) @ W2


@exercise("27.6", "split_experts")
def split_experts(answer) -> str:
    """The split against torch.chunk, and the m pieces of each expert summed on random tokens."""
    names = ("W_f", "V_f", "W2_f")
    for seed, (N, d, h, m) in ((276, (3, 4, 6, 2)), (277, (2, 5, 12, 4)), (278, (4, 3, 9, 3))):
        gen = torch.Generator().manual_seed(seed)
        W, V = (torch.randn(N, d, h, generator=gen, dtype=F64) for _ in range(2))
        W2 = torch.randn(N, h, d, generator=gen, dtype=F64)
        what = f"split_experts(W, V, W2, m={m}) for N = {N}, d = {d}, h = {h}"
        got = expect_tuple(attempt(answer, W.clone(), V.clone(), W2.clone(), m), what, names)
        want = _split_reference(W, V, W2, m)
        wrong = {fb: fn(W, V, W2, m) for fb, fn in WRONG_SPLIT.items()}
        got = [
            expect_answer(
                got[j],
                want[j],
                f"{what}: {names[j]}",
                wrong={fb: w[j] for fb, w in wrong.items()},
                atol=0,
                rtol=0,
            )
            for j in range(3)
        ]
        x = torch.randn(7, d, generator=gen, dtype=F64)
        for i in range(N):
            pieces = sum(_swiglu(x, *(t[i * m + j] for t in got)) for j in range(m))
            expect(
                torch.allclose(pieces, _swiglu(x, W[i], V[i], W2[i]), atol=1e-12, rtol=0),
                f"{what}: the pieces of expert {i} do not sum to it",
            )
    return (
        "the split matches torch.chunk of the hidden axis for 3 shapes, and the m pieces of "
        "every expert sum to it on random tokens"
    )


# --- 27.7 ----------------------------------------------------------------------------------------


def _bias_run(logits, k, eta, iters, *, sign=1.0, on_logits=False):
    """Loads of the bias loop: max_i |f_i - 1/N| and mean_i |f_i - 1/N| at every iteration."""
    N = logits.shape[1]
    scores = logits if on_logits else torch.softmax(logits, dim=1)  # (T, N)
    b = torch.zeros(N, dtype=logits.dtype)
    worst, mean = [], []
    for _ in range(iters):
        idx = torch.topk(scores + b, k, dim=1).indices  # (T, k)
        f = torch.bincount(idx.reshape(-1), minlength=N).to(logits.dtype) / idx.numel()
        worst.append(float((f - 1 / N).abs().max()))
        mean.append(float((f - 1 / N).abs().mean()))
        b = b - sign * eta * torch.sign(f - 1 / N)
    return worst, mean


def _sweep(logits, k, etas, iters, *, offset=0, jitter_of="worst", **run):
    N = logits.shape[1]
    steps, jitter = [], []
    for eta in etas:
        worst, mean = _bias_run(logits, k, eta, iters, **run)
        hit = next((t for t, e in enumerate(worst) if e <= 0.1 / N), None)
        steps.append(iters if hit is None else hit + offset)
        jitter.append(float(np.mean((worst if jitter_of == "worst" else mean)[-100:])))
    return steps, jitter


def sweep_wrong_sign(logits, k, etas, iters):
    return _sweep(logits, k, etas, iters, sign=-1.0)


def sweep_bias_on_logits(logits, k, etas, iters):
    return _sweep(logits, k, etas, iters, on_logits=True)


def sweep_counting_from_one(logits, k, etas, iters):
    return _sweep(logits, k, etas, iters, offset=1)


def sweep_mean_deviation(logits, k, etas, iters):
    return _sweep(logits, k, etas, iters, jitter_of="mean")


WRONG_SWEEP = {
    "the bias update has the wrong sign: an overloaded expert's bias must go down, "
    "b_i <- b_i - eta sign(f_i - 1/N) (eq. 27.5)": sweep_wrong_sign,
    "the bias is added to the router probabilities p (S = topk(p + b)), not to the logits: "
    "use moe.topk_route(logits, k, bias=b)": sweep_bias_on_logits,
    "steps are counted from 0 (the number of updates made before the balanced "
    "iteration)": sweep_counting_from_one,
    "the jitter is the largest deviation max_i |f_i - 1/N| of each iteration, averaged over "
    "the last 100, not the mean deviation over the experts": sweep_mean_deviation,
}


def _matches(got, want, **tol) -> bool:
    try:
        return is_close(got, want, **tol)
    except Incorrect:
        return False


_BIAS_SWEEP = (2, (3e-4, 1e-3, 3e-3, 1e-2), 300)  # k, step sizes, iterations


@functools.cache
def _bias_logits() -> torch.Tensor:
    gen = torch.Generator().manual_seed(277)
    T, N = 512, 8
    skew = torch.tensor([1.0, 0.5, 0, 0, 0, 0, 0, 0], dtype=F64)
    return (
        torch.randn(T, 16, generator=gen, dtype=F64)
        @ (torch.randn(16, N, generator=gen, dtype=F64) / 4)
        + skew
    )


@functools.cache  # the reference and each typical wrong loop run once per process
def _bias_sweep_results(loop):
    k, etas, iters = _BIAS_SWEEP
    return loop(_bias_logits().clone(), k, list(etas), iters)


@exercise("27.7", "bias_sweep")
def bias_sweep(answer) -> str:
    """Steps to balance and residual jitter for four step sizes, against an independent loop."""
    k, etas, iters = _BIAS_SWEEP[0], list(_BIAS_SWEEP[1]), _BIAS_SWEEP[2]
    what = f"bias_sweep(logits, k={k}, etas={etas}, iters={iters})"
    got = expect_tuple(
        attempt(answer, _bias_logits().clone(), k, list(etas), iters), what, ("s", "j")
    )
    want = _bias_sweep_results(_sweep)
    tols = ({"atol": 0.5, "rtol": 0.0}, {"atol": 1e-12, "rtol": 1e-9})
    for j, part in enumerate(("steps", "jitter")):
        wrong = None
        if not _matches(got[j], want[j], **tols[j]):  # the mistakes are run only when needed
            wrong = {fb: _bias_sweep_results(fn)[j] for fb, fn in WRONG_SWEEP.items()}
        expect_answer(got[j], want[j], f"{what}: {part}", wrong=wrong, **tols[j])
    jit = ", ".join(f"{v:.2g}" for v in want[1])
    return (
        f"steps and jitter match an independent loop for eta = {', '.join(map(str, etas))}: "
        f"steps {want[0]}, jitter {jit}"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

MISTAKES = {
    "27.1": [
        (grad_ignores_renormalize, "is `renormalize` passed on"),
        (grad_always_raw, "the gate is p_i / p_i = 1"),
        (grad_of_mean, "gradient of y.mean()"),
        (grad_top2, "routes every token to two experts"),
        (grad_through_selected_logit_only, "the softmax couples all logits"),
        (grad_flipped, "sign is flipped"),
    ],
    "27.2": [
        ((expected_count, DROPPED), "expected number of dropped"),
        ((expected_per_token, DROPPED), "not by the T tokens"),
        ((expected_one_expert, DROPPED), "one expert's expected overflow"),
        ((expected_p_one_over_n, DROPPED), "probability k/N, not 1/N"),
        ((expected_jensen, DROPPED), "is not max(0, E[n] - C)"),
        ((expected_floor, DROPPED), "capacity rounds up"),
        ((EXPECTED, kept_fraction), "fraction kept"),
        ((EXPECTED, dropped_per_token), "not by the T tokens"),
        ((EXPECTED, dropped_count), "not their number"),
        ((EXPECTED, dropped_capacity_plus_one), "not C + 1"),
    ],
    "27.3": [
        (summary_without_head, "output head is a separate"),
        (summary_without_gqa, "grouped-query attention"),
        (summary_all_experts_active, "only top_k of the N experts"),
        (summary_scaled_active, "not total * k / N"),
        (summary_active_share, "not only the k active ones"),
        (summary_two_matrix_experts, "three d x d_ff matrices"),
    ],
    "27.4": [
        (evict_with_earlier_token, "comes before the victim"),
        (evict_by_lowering, "is still selected for x_new"),
        (evict_best_token, "only the lowest-scoring selected token"),
        (evict_by_lowering_the_victim, "not only in row"),
    ],
    "27.5": [
        (guess_half, "saves only what collides"),
        (guess_nearly_all, "saves only what collides"),
        (guess_a_number, "should return one of"),
    ],
    "27.6": [
        (split_reshape_only, "cuts through the d rows"),
        (split_piece_major, "piece-major"),
        (split_strided, "every m-th hidden unit"),
        (split_w2_strided, "cut like W's columns"),
    ],
    "27.7": [
        (sweep_wrong_sign, "wrong sign"),
        (sweep_bias_on_logits, "not to the logits"),
        (sweep_counting_from_one, "counted from 0"),
        (sweep_mean_deviation, "largest deviation"),
    ],
}
