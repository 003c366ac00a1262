"""Typical wrong answers to the exercises of chapter 25 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.attention import mla


def _ref(eid, name):
    return reference(eid)[name]


# --- 25.1 ---


def merge_transposed(w_uq, w_uk):
    return w_uk @ w_uq.transpose(1, 2)


def merge_summed_heads(w_uq, w_uk):
    return torch.einsum("hcd,hld->cl", w_uq, w_uk)


def costs_one_head(cfg):
    return tuple(v // cfg.n_heads for v in _ref("25.1", "merge_costs")(cfg))


def costs_flops_as_params(cfg):
    merged, factored, _, _ = _ref("25.1", "merge_costs")(cfg)
    return merged, factored, merged, factored


def costs_one_factor(cfg):
    H, d_h, d_c, d_cq = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_q_latent
    return H * d_cq * d_c, H * d_h * d_cq, 2 * H * d_cq * d_c, 2 * H * d_h * d_cq


def costs_pair(cfg):
    return _ref("25.1", "merge_costs")(cfg)[:2]


# --- 25.2 ---


def prefill_causal_half(cfg, T, form, batch=1):
    full = _ref("25.2", "prefill_attention_flops")(cfg, T, form, batch)
    H, d_h, d_c, d_R = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_rope
    per_pair = 2 * H * (2 * d_h + d_R) if form == "naive" else 2 * H * (2 * d_c + d_R)
    return full - batch * per_pair * (T * T - T * (T + 1) // 2)


def prefill_as_decode_steps(cfg, T, form, batch=1):
    return sum(mla.mla_decode_flops(cfg, t, form, batch)["total"] for t in range(1, T + 1))


def prefill_forgets_batch(cfg, T, form, batch=1):
    return _ref("25.2", "prefill_attention_flops")(cfg, T, form)


def prefill_swapped_forms(cfg, T, form, batch=1):
    other = "absorbed" if form == "naive" else "naive"
    return _ref("25.2", "prefill_attention_flops")(cfg, T, other, batch)


def prefill_attention_only(cfg, T, form, batch=1):
    H, d_h, d_c, d_R = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_rope
    if form == "naive":
        return batch * (T * 4 * d_c * H * d_h + T * T * 2 * H * (2 * d_h + d_R))
    return batch * (T * 4 * H * d_h * d_c + T * T * 2 * H * (2 * d_c + d_R))


# --- 25.3 ---


def gqa_keys_only(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return budget // (n_layers * n_kv_heads * d_head * bytes_per_element)


def gqa_rounds_up(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return -(-budget // (2 * n_layers * n_kv_heads * d_head * bytes_per_element))


def gqa_float(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return budget / (2 * n_layers * n_kv_heads * d_head * bytes_per_element)


def mla_without_rope(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // (n_layers * d_latent * bytes_per_element)


def mla_without_layers(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // ((d_latent + d_rope) * bytes_per_element)


def mla_latent_twice(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // (n_layers * (2 * d_latent + d_rope) * bytes_per_element)


# --- 25.4 ---


def as_mla_interleaved(w_k, w_v, H, G):
    d_h = w_k.shape[1] // G
    w_dkv = torch.cat([w_k, w_v], dim=1)
    eye = torch.eye(2 * G * d_h, dtype=w_k.dtype)
    group = [h % G for h in range(H)]
    w_uk = torch.stack([eye[:, g * d_h : (g + 1) * d_h] for g in group])
    w_uv = torch.stack([eye[:, (G + g) * d_h : (G + g + 1) * d_h] for g in group])
    return w_dkv, w_uk, w_uv


def as_mla_swapped(w_k, w_v, H, G):
    w_dkv, w_uk, w_uv = _ref("25.4", "gqa_as_mla")(w_k, w_v, H, G)
    return w_dkv, w_uv, w_uk


def as_mla_integer_groups(w_k, w_v, H, G):
    d_h = w_k.shape[1] // G
    w_dkv = torch.cat([w_k, w_v], dim=1)
    eye = torch.eye(2 * G * d_h, dtype=w_k.dtype)
    group = [h // (H // G) for h in range(H)]  # breaks when G does not divide H
    w_uk = torch.stack([eye[:, g * d_h : (g + 1) * d_h] for g in group])
    w_uv = torch.stack([eye[:, (G + g) * d_h : (G + g + 1) * d_h] for g in group])
    return w_dkv, w_uk, w_uv


def as_mla_float32(w_k, w_v, H, G):
    return tuple(t.float() for t in _ref("25.4", "gqa_as_mla")(w_k, w_v, H, G))


def as_mla_pair(w_k, w_v, H, G):
    return _ref("25.4", "gqa_as_mla")(w_k, w_v, H, G)[1:]


_MERGE, _COSTS = _ref("25.1", "merge_query_key"), _ref("25.1", "merge_costs")
_GQA, _MLA = _ref("25.3", "gqa_max_tokens"), _ref("25.3", "mla_max_tokens")

WRONG = {
    "25.1": [
        ((merge_transposed, _COSTS), "transpose of each head's matrix"),
        ((merge_summed_heads, _COSTS), "heads are summed"),
        ((_MERGE, costs_one_head), "counts of one head"),
        ((_MERGE, costs_flops_as_params), "is two FLOPs"),
        ((_MERGE, costs_one_factor), "only one factor"),
        ((_MERGE, costs_pair), "tuple of 4 ints"),
    ],
    "25.2": [
        (prefill_causal_half, "only the causal half"),
        (prefill_as_decode_steps, "T decoding steps"),
        (prefill_forgets_batch, "multiply by the batch"),
        (prefill_swapped_forms, "other form's count"),
        (prefill_attention_only, "shared projections"),
    ],
    "25.3": [
        ((gqa_keys_only, _MLA), "keys only"),
        ((gqa_rounds_up, _MLA), "rounds up"),
        ((gqa_float, _MLA), "whole number (tokens)"),
        ((_GQA, mla_without_rope), "RoPE key is missing"),
        ((_GQA, mla_without_layers), "layers are missing"),
        ((_GQA, mla_latent_twice), "latent is counted twice"),
    ],
    "25.4": [
        (as_mla_interleaved, "h mod G"),
        (as_mla_swapped, "other projection's"),
        (as_mla_integer_groups, "raised RuntimeError"),
        (as_mla_float32, "float64 tensor"),
        (as_mla_pair, "should return a triple"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
