"""Checks of the exercises of chapter 27 (mixture of experts and mixture of depths).

The references are independent of :mod:`mlbook.architectures.moe` and
:mod:`mlbook.architectures.mixture_of_depths`: the router gradient from its closed form through the
softmax Jacobian with the experts written out with ``torch.nn.functional.silu``; the expected
dropped fraction from the binomial probabilities computed with ``torch.lgamma``, dropped counts from
``torch.bincount`` and a Monte Carlo run; parameter counts summed tensor by tensor over the shapes
of Hugging Face's ``MixtralForCausalLM``; mixture-of-depths selection with ``torch.topk``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from ...architectures import moe
from ...architectures.moe import MoEConfig
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
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


@exercise("27.1", "router_logit_grad")
def router_logit_grad(answer) -> str:
    """dL/dr of y.sum() for top-1 routing: the softmax-Jacobian closed form, or zero."""
    for seed, (T, d, h, N) in ((271, (32, 8, 16, 4)), (272, (16, 6, 8, 8))):
        x, params = _moe_case(seed, T, d, h, N)
        r = x @ params["W_r"]
        s = _expert_sums(x, params)
        raw = _topk_grad(r, s, 1, renormalize=False)
        for renormalize in (False, True):
            want = torch.zeros_like(r) if renormalize else raw
            what = f"router_logit_grad(x, params, renormalize={renormalize}) for T = {T}, N = {N}"
            two = _topk_grad(r, s, 2, renormalize)
            if renormalize:
                wrong = {
                    "with renormalize=True and k = 1 the gate is p_i / p_i = 1 for any "
                    "logits, so the gradient must vanish (is `renormalize` passed on to "
                    "moe.topk_route?)": raw
                }
            else:
                wrong = {
                    "with raw gates (renormalize=False) the gate p_i depends on every logit, "
                    "so the gradient is not zero (is `renormalize` passed on to "
                    "moe.topk_route?)": torch.zeros_like(r),
                    "the sign is flipped: return the gradient of y.sum(), not of -y.sum()": -raw,
                    "that is the gradient of y.mean(); backpropagate y.sum()": raw / (T * d),
                    "only the chosen logit has a gradient, but the softmax couples all "
                    "logits: dp_i/dr_j = p_i (δ_ij - p_j)": torch.zeros_like(r).scatter(
                        1, r.argmax(1, keepdim=True), 1.0
                    )
                    * torch.softmax(r, 1)
                    * s,
                }
            wrong["that routes every token to two experts; this exercise uses top-1 (k = 1)"] = two
            p_args = {name: t.clone() for name, t in params.items()}
            expect_answer(
                attempt(answer, x.clone(), p_args, renormalize),
                want,
                what,
                wrong=wrong,
                atol=1e-10,
                rtol=1e-8,
            )
    return (
        "matches the closed form s_t p_ti (δ_ij - p_tj) for raw top-1 gates and is zero for "
        "renormalised ones, on 2 token batches"
    )


# --- 27.2 ----------------------------------------------------------------------------------------


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
        C = math.ceil(c * k * T / N)
        ref = _binom_overflow(T, N, k, C)
        expect_answer(
            attempt(expected, T, N, k, c),
            ref,
            f"expected_drop_fraction(T={T}, N={N}, k={k}, capacity_factor={c})",
            wrong={
                "that is the expected number of dropped assignments; divide by the k T "
                "assignments": ref * k * T,
                "divide by the k T assignments, not by the T tokens": ref * k,
                "that is one expert's expected overflow; all N experts overflow alike, so "
                "multiply by N": ref / N,
                "each expert is picked with probability k/N, not 1/N": _binom_overflow(
                    T, N, k, C, p=1 / N
                ),
                "E[max(0, n - C)] is not max(0, E[n] - C): the overflow is convex in the "
                "count, and the fluctuations above the mean are what gets dropped": N
                * max(0.0, k * T / N - C)
                / (k * T),
                "the capacity rounds up, C = ceil(c k T / N) "
                "(moe.expert_capacity)": _binom_overflow(T, N, k, math.floor(c * k * T / N)),
            },
            atol=1e-12,
            rtol=1e-8,
        )

    gen = torch.Generator().manual_seed(272)
    T, N, k = 256, 8, 2
    logits = torch.randn(T, N, generator=gen, dtype=F64) + torch.tensor(
        [1.5, 0.7, 0, 0, 0, 0, 0, 0], dtype=F64
    )
    idx = torch.topk(logits, k, dim=1).indices  # (T, k), skewed loads
    counts = torch.bincount(idx.reshape(-1), minlength=N).to(F64)  # (N,)
    for C in (64, 40, 0, 512):
        ref = float((counts - C).clamp(min=0).sum()) / (T * k)
        expect_answer(
            attempt(dropped, idx.clone(), N, C),
            ref,
            f"dropped_fraction(idx, N={N}, C={C})",
            wrong={
                "that is the fraction kept; return the fraction dropped": 1 - ref,
                "divide by the T k assignments (idx.numel()), not by the T tokens": ref * k,
                "return a fraction of the assignments, not their number": ref * T * k,
                "an expert keeps C assignments, not C + 1": float(
                    (counts - C - 1).clamp(min=0).sum()
                )
                / (T * k),
            },
            atol=1e-12,
            rtol=1e-10,
        )

    T, N, k, batches = 2048, 8, 2, 200
    C = math.ceil(k * T / N)
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
    attn_full = cfg.n_layers * 2 * d * hd * (cfg.n_heads - cfg.n_kv_heads)
    return {
        "total": total,
        "active": active,
        "experts": experts,
        "embed": embed,
        "norms": cfg.n_layers * 2 * d + d,
        "router": cfg.n_layers * cfg.n_experts * d,
        "one_matrix": experts // 3,
        "gqa_gap": attn_full,
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
        ref = _hf_counts(cfg)
        what = f"moe_parameter_summary(cfg) for {name}"
        got = attempt(answer, cfg)
        expect(
            isinstance(got, (tuple, list)) and len(got) == 3,
            f"{what} should return (total, active, expert_share), got "
            f"{type(got).__name__}"
            + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""),
        )
        total, active, share = ref["total"], ref["active"], ref["experts"] / ref["total"]
        wrong_total = {
            "the output head is a separate vocab x d matrix unless the embeddings are tied": total
            - ref["embed"],
            "the k and v projections have only n_kv_heads heads (grouped-query attention)": total
            + ref["gqa_gap"],
            "a SwiGLU expert has three d x d_ff matrices (W, V and W2)": total - ref["one_matrix"],
            "the RMSNorm weights are missing: two vectors per layer and a final one": total
            - ref["norms"],
            "the router (a d x N matrix per layer) is missing": total - ref["router"],
        }
        if cfg.tied_embeddings:
            wrong_total = {
                "with tied embeddings the output head is the embedding matrix: count it once": total
                + ref["embed"]
            }
        expect_answer(got[0], total, f"{what}: total", wrong=wrong_total, atol=0.5, rtol=0)
        experts_active = ref["experts"] * cfg.top_k // cfg.n_experts
        expect_answer(
            got[1],
            active,
            f"{what}: active",
            wrong={
                "a token passes through only top_k of the N experts of each layer": total,
                "only the experts are shared out: attention, embeddings and norms run for every "
                "token, so the active count is not total * k / N": total
                * cfg.top_k
                / cfg.n_experts,
                "the active count also includes attention, embeddings, router and norms, which "
                "every token uses": experts_active,
            },
            atol=0.5,
            rtol=0,
        )
        expect_answer(
            got[2],
            share,
            f"{what}: expert_share",
            wrong={
                "divide the experts' parameters by the total, not by the active count": ref[
                    "experts"
                ]
                / active,
                "the share counts all N experts, not only the k active ones": experts_active
                / total,
                "that is the share outside the experts": 1 - share,
            },
            atol=1e-12,
            rtol=1e-9,
        )
    big = CONFIGS["Mixtral 8x22B"]
    got = attempt(answer, big)
    expect(
        round(float(got[0]) / 1e9) == 141 and round(float(got[1]) / 1e9) == 39,
        "Mixtral 8x22B should come out at the quoted 141B total and 39B active",
    )
    return (
        "total, active and expert share match a tensor-by-tensor count for Mixtral 8x7B, "
        "Mixtral 8x22B (the quoted 141B and 39B) and a tied, full-attention model"
    )


# --- 27.4 ----------------------------------------------------------------------------------------


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


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# --- 27.1 ----------------------------------------------------------------------------------------


def grad_ignores_renormalize(x, params, renormalize):
    return _ref("27.1", "router_logit_grad")(x, params, True)


def grad_always_raw(x, params, renormalize):
    return _ref("27.1", "router_logit_grad")(x, params, False)


def _logit_grad(x, params, renormalize, k, reduce):
    """Autograd's gradient of reduce(y) with respect to the router logits, top-k routing."""
    r = (x @ params["W_r"]).requires_grad_(True)
    route = moe.topk_route(r, k, renormalize=renormalize)
    y = moe.moe_routed(x, route.idx, route.gates, params["W"], params["V"], params["W2"])
    reduce(y).backward()
    return r.grad


def grad_of_mean(x, params, renormalize):
    return _logit_grad(x, params, renormalize, 1, torch.mean)


def grad_top2(x, params, renormalize):
    return _logit_grad(x, params, renormalize, 2, torch.sum)


def grad_through_selected_logit_only(x, params, renormalize):
    """Gates exp(r_i) / Z with Z detached: the softmax's coupling of the logits is lost."""
    r = (x @ params["W_r"]).requires_grad_(True)
    idx = r.detach().argmax(1, keepdim=True)
    gates = r.gather(1, idx).exp() / r.detach().exp().sum(1, keepdim=True)
    if renormalize:
        gates = gates / gates.detach()
    moe.moe_routed(x, idx, gates, params["W"], params["V"], params["W2"]).sum().backward()
    return r.grad


def grad_flipped(x, params, renormalize):
    return -_ref("27.1", "router_logit_grad")(x, params, renormalize)


# --- 27.2 ----------------------------------------------------------------------------------------


def _drop_with(T, N, k, C, p):
    n = np.arange(T + 1)
    return N * float((np.maximum(0, n - C) * stats.binom.pmf(n, T, p)).sum()) / (k * T)


def expected_count(T, N, k, capacity_factor):
    return _ref("27.2", "expected_drop_fraction")(T, N, k, capacity_factor) * k * T


def expected_per_token(T, N, k, capacity_factor):
    return _ref("27.2", "expected_drop_fraction")(T, N, k, capacity_factor) * k


def expected_one_expert(T, N, k, capacity_factor):
    return _ref("27.2", "expected_drop_fraction")(T, N, k, capacity_factor) / N


def expected_p_one_over_n(T, N, k, capacity_factor):
    return _drop_with(T, N, k, moe.expert_capacity(T, N, k, capacity_factor), 1 / N)


def expected_jensen(T, N, k, capacity_factor):
    C = moe.expert_capacity(T, N, k, capacity_factor)
    return N * max(0.0, k * T / N - C) / (k * T)


def expected_floor(T, N, k, capacity_factor):
    return _drop_with(T, N, k, math.floor(capacity_factor * k * T / N), k / N)


def kept_fraction(idx, N, C):
    return float(moe.capacity_mask(idx, N, C).sum()) / idx.numel()


def dropped_per_token(idx, N, C):
    return float((~moe.capacity_mask(idx, N, C)).sum()) / idx.shape[0]


def dropped_count(idx, N, C):
    return int((~moe.capacity_mask(idx, N, C)).sum())


def dropped_capacity_plus_one(idx, N, C):
    return float((~moe.capacity_mask(idx, N, C + 1)).sum()) / idx.numel()


EXPECTED = _ref("27.2", "expected_drop_fraction")
DROPPED = _ref("27.2", "dropped_fraction")


# --- 27.3 ----------------------------------------------------------------------------------------


def _counts(cfg):
    return moe.parameter_budget(cfg)


def summary_without_head(cfg):
    c = _counts(cfg)
    head = 0 if cfg.tied_embeddings else cfg.vocab * cfg.d_model
    return c["total"] - head, c["active"] - head, c["experts"] / (c["total"] - head)


def summary_without_gqa(cfg):
    full = moe.MoEConfig(**{**cfg.__dict__, "n_kv_heads": cfg.n_heads})
    c = _counts(full)
    return c["total"], c["active"], c["experts"] / c["total"]


def summary_all_experts_active(cfg):
    c = _counts(cfg)
    return c["total"], c["total"], c["experts"] / c["total"]


def summary_scaled_active(cfg):
    c = _counts(cfg)
    return c["total"], c["total"] * cfg.top_k / cfg.n_experts, c["experts"] / c["total"]


def summary_active_share(cfg):
    c = _counts(cfg)
    return c["total"], c["active"], c["experts_active"] / c["total"]


def summary_two_matrix_experts(cfg):
    c = _counts(cfg)
    one = c["experts"] // 3
    return (
        c["total"] - one,
        c["active"] - one * cfg.top_k // cfg.n_experts,
        (c["experts"] - one) / (c["total"] - one),
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
        ((expected_count, DROPPED), "expected number of dropped assignments"),
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
}
