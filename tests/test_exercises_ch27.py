"""Typical wrong answers to the exercises of chapter 27 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import numpy as np
import pytest
import torch
from exercise_support import cases, reference, rejected
from scipy import stats

from mlbook.architectures import moe


def _ref(eid, name):
    return reference(eid)[name]


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


def EXPECTED(T, N, k, capacity_factor):
    return _ref("27.2", "expected_drop_fraction")(T, N, k, capacity_factor)


def DROPPED(idx, N, C):
    return _ref("27.2", "dropped_fraction")(idx, N, C)


# --- 27.3 ----------------------------------------------------------------------------------------


def _counts(cfg):
    return moe.count_parameters(cfg)


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


WRONG = {
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


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
